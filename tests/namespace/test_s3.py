"""The partitioned namespace on S3: a moto server started by this module, options on every call.

Everything runs on loopback. Lance fills any S3 setting missing from ``storage_options`` from
``AWS_*`` environment variables, and without an endpoint it would ask real AWS for the bucket
region and credentials. So, for this module, the environment is cleaned and its default S3
endpoint points at a "trap": a loopback HTTP server that denies every request and records it.
A Lance call made without the storage options therefore fails fast on loopback, and the trap
proves no such call happened (checked after every test).

Lance 14 needs no extra commit setting on ``s3://``: it commits ``_versions/*.manifest`` with a
conditional PUT (``If-None-Match: *``), which moto honours (see
``test_moto_honours_conditional_put``); ``s3+ddb://`` is not needed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import botocore.exceptions
import lance
import lance.namespace
import pyarrow as pa
import pytest
from lance_namespace import (
    DescribeNamespaceRequest,
    DescribeTableRequest,
    ListNamespacesRequest,
    ListTablesRequest,
)

from airflow_provider_lance.namespace import (
    CommitResult,
    DataValidationError,
    LanceNamespaceError,
    Partition,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace.format.manifest import MANIFEST_BLOCK_SIZE, Manifest
from airflow_provider_lance.namespace.io.storage import Storage
from tests.support import BUCKET, TrapServer

pytestmark = pytest.mark.s3

D = dt.date
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
    ]
)
BY_DAY = [PartitionField("event_date", "event_date")]
BY_YEAR = [PartitionField("event_year", "event_date", "date_part('year', col)")]
#: A leaf table directory, relative to the namespace root: ``<8 hex>_v<N>$<16 base36>$dataset/``.
LEAF_DIR = re.compile(r"^[0-9a-f]{8}_v1\$[0-9a-z]{16}\$dataset/")
ANY_SPEC_LEAF_DIR = re.compile(r"^[0-9a-f]{8}_v[0-9]+\$[0-9a-z]{16}\$dataset/")


# -- servers -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _every_call_carries_storage_options(default_endpoint_trap: TrapServer) -> Iterator[None]:
    before = default_endpoint_trap.count()
    yield
    stray = default_endpoint_trap.requests[before:]
    assert not stray, f"S3 requests made without the storage options: {stray[:5]}"


# -- helpers -----------------------------------------------------------------------------------
def uri(prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}"


def keys(s3: Any, prefix: str) -> list[str]:
    """Every object key under ``prefix/``, relative to it."""
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{prefix}/"):
        out += [o["Key"][len(prefix) + 1 :] for o in page.get("Contents", [])]
    return sorted(out)


def leaf_dirs(s3: Any, prefix: str) -> set[str]:
    found = (ANY_SPEC_LEAF_DIR.match(k) for k in keys(s3, prefix))
    return {m.group(0).rstrip("/") for m in found if m}


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def events(*records: tuple[int, dt.date, str | None]) -> pa.Table:
    ids, dates, countries = zip(*records, strict=True)
    return pa.table(
        {"id": list(ids), "event_date": list(dates), "country": list(countries)}, schema=SCHEMA
    )


def by_values(partitions: list[Partition]) -> dict[tuple[int, tuple[Any, ...]], Partition]:
    return {(p.spec_version, tuple(p.values.values())): p for p in partitions}


# -- the "events" namespace: create, create_partition, append, dynamic overwrite ----------------
FIRST = events(
    (1, D(2025, 12, 10), "US"),
    (2, D(2025, 12, 10), "DE"),
    (3, D(2025, 12, 11), "US"),
    (4, D(2025, 12, 11), "FR"),
    (5, D(2025, 12, 12), "US"),
    (6, D(2025, 12, 12), None),
)
SECOND = events(
    (30, D(2025, 12, 11), "JP"),
    (31, D(2025, 12, 11), "US"),
    (40, D(2025, 12, 13), "US"),
)
#: What the namespace holds after FIRST (append) then SECOND (overwrite).
EXPECTED = [r for r in FIRST.to_pylist() if r["event_date"] != D(2025, 12, 11)]
EXPECTED = sorted(EXPECTED + SECOND.to_pylist(), key=lambda r: r["id"])


@dataclass
class Events:
    ns: PartitionedNamespace
    created: Partition
    appended: CommitResult
    before_overwrite: list[Partition]
    overwritten: CommitResult


@pytest.fixture(scope="module")
def events_ns(storage_options: dict[str, str]) -> Events:
    ns = PartitionedNamespace.create(
        uri("events"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    created = ns.create_partition({"event_date": "2025-12-10"})
    appended = ns.write(FIRST, mode="append")
    before = ns.partitions()
    overwritten = ns.write(SECOND, mode="overwrite")
    return Events(ns, created, appended, before, overwritten)


def test_namespace_carries_the_storage_options(
    events_ns: Events, storage_options: dict[str, str]
) -> None:
    assert events_ns.ns.uri == uri("events")
    assert events_ns.ns.storage_options == storage_options


def test_create_partition_makes_an_empty_leaf_on_s3(
    events_ns: Events, storage_options: dict[str, str]
) -> None:
    p = events_ns.created
    assert p.location.startswith(f"s3://{BUCKET}/events/")
    assert LEAF_DIR.match(p.directory + "/")
    assert (p.spec_version, dict(p.values), p.read_version) == (
        1,
        {"event_date": D(2025, 12, 10)},
        1,
    )
    leaf = lance.dataset(p.location, version=1, storage_options=storage_options)
    assert leaf.count_rows() == 0


def test_append_reports_what_it_did(events_ns: Events) -> None:
    result = events_ns.appended
    assert result.mode == "append"
    assert result.rows == FIRST.num_rows
    got = {c.values["event_date"]: (c.rows, c.created) for c in result.partitions}
    assert got == {
        D(2025, 12, 10): (2, False),  # made by create_partition
        D(2025, 12, 11): (2, True),
        D(2025, 12, 12): (2, True),
    }
    assert result.partitions[0].object_id.startswith("v1$")


def test_rows_read_back_equal_what_was_written(events_ns: Events) -> None:
    ns = events_ns.ns
    assert rows(ns.to_table()) == EXPECTED
    assert ns.count_rows() == len(EXPECTED)
    assert [(f.name, f.type) for f in ns.to_table().schema] == [(f.name, f.type) for f in SCHEMA]


def test_dynamic_overwrite_replaces_only_the_touched_partitions(events_ns: Events) -> None:
    ns, result = events_ns.ns, events_ns.overwritten
    assert result.mode == "overwrite"
    assert result.rows == SECOND.num_rows
    assert {c.values["event_date"]: c.created for c in result.partitions} == {
        D(2025, 12, 11): False,
        D(2025, 12, 13): True,
    }
    assert result.manifest_version == ns.version
    before = {p.object_id: p for p in events_ns.before_overwrite}
    after = {p.object_id: p for p in ns.partitions()}
    touched = {c.object_id for c in result.partitions}
    for object_id, p in before.items():
        if object_id in touched:
            assert (after[object_id].read_version or 0) > (p.read_version or 0)
        else:  # untouched partitions keep their published version, location and rows
            assert after[object_id] == p
    day = {p.values["event_date"]: p for p in after.values()}
    assert day[D(2025, 12, 11)].location == before[day[D(2025, 12, 11)].object_id].location
    dec11 = ns.to_table(filter="event_date = DATE '2025-12-11'")
    assert sorted(dec11.column("id").to_pylist()) == [30, 31]
    untouched = ns.to_table(filter="event_date IN (DATE '2025-12-10', DATE '2025-12-12')")
    assert sorted(untouched.column("id").to_pylist()) == [1, 2, 5, 6]


def test_partitions_and_prune(events_ns: Events) -> None:
    ns = events_ns.ns
    partitions = ns.partitions()
    assert sorted(p.values["event_date"] for p in partitions) == [
        D(2025, 12, 10),
        D(2025, 12, 11),
        D(2025, 12, 12),
        D(2025, 12, 13),
    ]
    assert all(p.location.startswith(f"s3://{BUCKET}/events/") for p in partitions)
    assert all(p.spec_version == 1 and p.read_version is not None for p in partitions)

    def pruned(filter: str) -> list[dt.date]:
        return sorted(p.values["event_date"] for p in ns.prune(filter))

    assert pruned("event_date = DATE '2025-12-10'") == [D(2025, 12, 10)]
    assert pruned("event_date >= DATE '2025-12-12'") == [D(2025, 12, 12), D(2025, 12, 13)]
    assert pruned("event_date = DATE '2024-01-01'") == []
    assert len(ns.prune("country = 'US'")) == 4  # not a partition column: nothing pruned
    [p] = ns.prune("event_date = DATE '2025-12-10'")
    assert p == ns.partition({"event_date": D(2025, 12, 10)})


def test_filtered_projected_read(events_ns: Events) -> None:
    table = events_ns.ns.to_table(
        filter="country = 'US' AND event_date > DATE '2025-12-10'", columns=["id", "country"]
    )
    assert table.column_names == ["id", "country"]
    expected = [
        {"id": r["id"], "country": r["country"]}
        for r in EXPECTED
        if r["country"] == "US" and r["event_date"] > D(2025, 12, 10)
    ]
    assert [r["id"] for r in expected] == [5, 31, 40]
    assert rows(table) == expected


def test_reopen_with_storage_options(events_ns: Events, storage_options: dict[str, str]) -> None:
    again = PartitionedNamespace.open(uri("events"), storage_options=storage_options)
    assert again.version == events_ns.ns.version
    assert again.partitions() == events_ns.ns.partitions()
    assert again.partition_spec() == events_ns.ns.partition_spec()
    assert rows(again.to_table()) == EXPECTED
    assert PartitionedNamespace.exists(uri("events"), storage_options=storage_options)


def test_objects_really_are_in_the_bucket(events_ns: Events, s3: Any) -> None:
    names = keys(s3, "events")
    manifest = [k for k in names if k.startswith("__manifest/")]
    assert any(k.startswith("__manifest/_versions/") for k in manifest)
    assert any(k.startswith("__manifest/data/") for k in manifest)
    assert any(LEAF_DIR.match(k) for k in names)
    assert all(k.startswith("__manifest/") or LEAF_DIR.match(k) for k in names), names
    # Exactly the published leaves exist (nothing orphaned), each with versions and data files.
    partitions = events_ns.ns.partitions()
    assert leaf_dirs(s3, "events") == {p.directory for p in partitions}
    for p in partitions:
        assert p.location == f"s3://{BUCKET}/events/{p.directory}"
        assert any(k.startswith(f"{p.directory}/_versions/") for k in names)
        assert any(k.startswith(f"{p.directory}/data/") for k in names)


def test_opening_without_storage_options_fails(
    events_ns: Events, default_endpoint_trap: TrapServer
) -> None:
    before = default_endpoint_trap.count()
    with pytest.raises(LanceNamespaceError):
        PartitionedNamespace.open(uri("events"))
    # The failed call went to the default (trap) endpoint, not to moto.
    assert default_endpoint_trap.count() > before
    with default_endpoint_trap.lock:
        del default_endpoint_trap.requests[before:]


def test_pylance_directory_namespace_reads_it(
    events_ns: Events, storage_options: dict[str, str]
) -> None:
    """pylance's own DirectoryNamespace, with ``storage.``-prefixed properties, is a reader."""
    dirns = lance.namespace.DirectoryNamespace(
        root=uri("events"), **{f"storage.{k}": v for k, v in storage_options.items()}
    )
    specs = dirns.list_namespaces(ListNamespacesRequest(id=[])).namespaces
    assert sorted(specs) == ["v1"]
    partitions = {p.object_id.split("$")[1]: p for p in events_ns.ns.partitions()}
    names = dirns.list_namespaces(ListNamespacesRequest(id=["v1"])).namespaces
    assert sorted(names) == sorted(partitions)
    for name, p in partitions.items():
        described = dirns.describe_namespace(DescribeNamespaceRequest(id=["v1", name]))
        assert described.properties == {"partition.event_date": p.values["event_date"].isoformat()}
        tables = dirns.list_tables(ListTablesRequest(id=["v1", name])).tables
        assert tables == ["dataset"]
        table = dirns.describe_table(DescribeTableRequest(id=["v1", name, "dataset"]))
        assert table.location == p.location
        leaf = lance.dataset(
            table.location, version=p.read_version, storage_options=storage_options
        )
        assert all(
            d == p.values["event_date"] for d in leaf.to_table().column("event_date").to_pylist()
        )


# -- evolution, on its own namespace --------------------------------------------------------------
def test_schema_and_partition_spec_evolution(storage_options: dict[str, str], s3: Any) -> None:
    ns = PartitionedNamespace.create(
        uri("evolution"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    ns.write(events((1, D(2025, 12, 10), "US"), (2, D(2025, 12, 10), "DE")))
    [old] = ns.partitions()

    ns.add_column(pa.field("amount", pa.float64()))
    assert ns.schema.names == ["id", "event_date", "country", "amount"]
    # Appending to a leaf made before add_column first adds the column to that leaf.
    ns.write(pa.table({"id": [3], "event_date": [D(2025, 12, 10)], "amount": [2.5]}))
    leaf = lance.dataset(old.location, storage_options=storage_options)
    assert "amount" in leaf.schema.names

    assert ns.evolve_partition_spec(BY_YEAR) == 2
    assert ns.spec_version == 2
    new = pa.table(
        {
            "id": [20, 21],
            "event_date": [D(2026, 1, 5), D(2025, 12, 31)],
            "country": ["US", "FR"],
            "amount": [1.0, 4.0],
        }
    )
    result = ns.write(new)
    assert {c.values["event_year"]: c.created for c in result.partitions} == {
        2026: True,
        2025: True,
    }

    parts = by_values(ns.partitions())
    assert sorted(parts) == [(1, (D(2025, 12, 10),)), (2, (2025,)), (2, (2026,))]
    assert parts[(1, (D(2025, 12, 10),))].location == old.location
    assert all(p.location.startswith(f"s3://{BUCKET}/evolution/") for p in parts.values())
    assert leaf_dirs(s3, "evolution") == {p.directory for p in parts.values()}

    reopened = PartitionedNamespace.open(uri("evolution"), storage_options=storage_options)
    assert [f.name for f in reopened.partition_spec()] == ["event_year"]
    assert [f.name for f in reopened.partition_spec(1)] == ["event_date"]
    assert rows(reopened.to_table()) == [
        {"id": 1, "event_date": D(2025, 12, 10), "country": "US", "amount": None},
        {"id": 2, "event_date": D(2025, 12, 10), "country": "DE", "amount": None},
        {"id": 3, "event_date": D(2025, 12, 10), "country": None, "amount": 2.5},
        {"id": 20, "event_date": D(2026, 1, 5), "country": "US", "amount": 1.0},
        {"id": 21, "event_date": D(2025, 12, 31), "country": "FR", "amount": 4.0},
    ]
    # Pruning works across both spec versions.
    assert sorted(by_values(reopened.prune("event_date >= DATE '2026-01-01'"))) == [(2, (2026,))]
    assert sorted(by_values(reopened.prune("event_date = DATE '2025-12-10'"))) == [
        (1, (D(2025, 12, 10),)),
        (2, (2025,)),
    ]
    got = reopened.to_table(filter="amount > 2.0", columns=["id", "amount"])
    assert rows(got) == [{"id": 3, "amount": 2.5}, {"id": 21, "amount": 4.0}]


# -- failures and races -------------------------------------------------------------------------
def test_abandoned_write_leaves_no_objects(storage_options: dict[str, str], s3: Any) -> None:
    ns = PartitionedNamespace.create(
        uri("abandoned"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    ns.write(events((1, D(2025, 12, 10), "US")))
    objects, version = keys(s3, "abandoned"), ns.version
    bad = pa.table({"id": pa.array([None], pa.int64()), "event_date": [D(2030, 1, 2)]})
    # The first batch creates a new partition's leaf on S3; the second is invalid.
    with pytest.raises(DataValidationError, match="not nullable"):
        ns.write([events((2, D(2030, 1, 1), "DE")), bad])
    assert keys(s3, "abandoned") == objects
    assert ns.version == version
    assert [p.values["event_date"] for p in ns.partitions()] == [D(2025, 12, 10)]


def _publish_interleaved(monkeypatch: pytest.MonkeyPatch, other_write: Any) -> list[Any]:
    """Run ``other_write()`` just before the next ``__manifest`` publish (deterministic race)."""
    original = Manifest.commit
    done: list[Any] = []

    def commit(self: Manifest, swap: Any) -> int:
        if not done:  # only the first publish; not the nested write's own one
            done.append(None)
            done[0] = other_write()
        return original(self, swap)

    monkeypatch.setattr(Manifest, "commit", commit)
    return done


def test_racing_appends_to_one_partition_both_publish(
    storage_options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = PartitionedNamespace.create(
        uri("race-append"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    ns.create_partition({"event_date": D(2025, 12, 10)})
    other = PartitionedNamespace.open(uri("race-append"), storage_options=storage_options)
    done = _publish_interleaved(
        monkeypatch, lambda: other.write(events((2, D(2025, 12, 10), "DE")))
    )
    result = ns.write(events((1, D(2025, 12, 10), "US")))  # its first publish loses: rebased
    assert len(done) == 1
    assert isinstance(done[0], CommitResult)
    assert sorted(ns.to_table().column("id").to_pylist()) == [1, 2]
    [p] = ns.partitions()
    # The loser committed its leaf again on top of the winner's published version.
    assert p.read_version == result.partitions[0].read_version
    assert p.read_version > done[0].partitions[0].read_version


def test_racing_creates_of_one_partition_both_publish(
    storage_options: dict[str, str], monkeypatch: pytest.MonkeyPatch, s3: Any
) -> None:
    """Two writers create the same new partition: one creates it, the other appends to it."""
    ns = PartitionedNamespace.create(
        uri("race-create"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    other = PartitionedNamespace.open(uri("race-create"), storage_options=storage_options)
    done = _publish_interleaved(
        monkeypatch, lambda: other.write(events((2, D(2025, 12, 10), "DE")))
    )
    result = ns.write(events((1, D(2025, 12, 10), "US")))
    assert isinstance(done[0], CommitResult)
    assert [p.created for p in done[0].partitions] == [True]
    assert [p.created for p in result.partitions] == [False]
    [p] = ns.partitions()
    assert sorted(ns.to_table().column("id").to_pylist()) == [1, 2]
    assert p.read_version == result.partitions[0].read_version
    assert p.read_version > done[0].partitions[0].read_version
    assert leaf_dirs(s3, "race-create") == {p.directory}


def test_moto_honours_conditional_put(s3: Any) -> None:
    """Lance's S3 commits rely on ``If-None-Match: *``; the server must refuse an overwrite."""
    s3.put_object(Bucket=BUCKET, Key="cond/x", Body=b"1", IfNoneMatch="*")
    with pytest.raises(botocore.exceptions.ClientError, match="PreconditionFailed"):
        s3.put_object(Bucket=BUCKET, Key="cond/x", Body=b"2", IfNoneMatch="*")
    assert s3.get_object(Bucket=BUCKET, Key="cond/x")["Body"].read() == b"1"


def test_table_operations_and_the_orphan_sweep_on_s3(
    storage_options: dict[str, str], s3: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delete, merge, drop_partitions, optimize and the sweep (which lists objects with
    their ages through pyarrow's S3 filesystem, the options translated) on S3."""
    import datetime as dt_

    from airflow_provider_lance.namespace.testing import ENV, FailpointError

    ns = PartitionedNamespace.create(
        uri("table-ops"), schema=SCHEMA, partition_fields=BY_DAY, storage_options=storage_options
    )
    ns.write(FIRST)
    ns.write(SECOND)
    assert ns.delete("country = 'US' AND id > 1").rows_removed == 4  # 3, 5, 31, 40
    merged = ns.merge(
        events((2, D(2025, 12, 10), "XX"), (40, D(2025, 12, 13), "NL")), ["id", "event_date"]
    )
    assert (merged.rows_updated, merged.rows_inserted) == (1, 1)
    assert ns.drop_partitions("event_date = '2025-12-12'").rows_removed == 1
    assert ns.optimize().manifest_version is not None
    assert [r["id"] for r in rows(ns.to_table())] == [1, 2, 4, 30, 40]
    monkeypatch.setenv(ENV, "stage.written=raise")  # a stager killed before recording
    with pytest.raises(FailpointError):
        ns.begin("append", "killed").stage(events((50, D(2025, 12, 10), "US")))
    monkeypatch.delenv(ENV)
    zero = dt_.timedelta(0)
    dry = ns.maintain(sweep_orphans=True, orphan_min_age=zero, dry_run=True).orphans
    assert dry is not None
    assert dry["files_removed"] == 1
    before = keys(s3, "table-ops")
    report = ns.maintain(
        older_than=zero, sweep_orphans=True, orphan_min_age=zero, enforce_min_age=False
    ).orphans
    assert report is not None
    assert report["files_removed"] >= 2  # the orphan, and the dropped date's leaf table
    assert report["leaf_tables_removed"] == 1
    assert len(keys(s3, "table-ops")) < len(before)
    assert [r["id"] for r in rows(ns.to_table())] == [1, 2, 4, 30, 40]


class _CountingProxy:
    """A loopback TCP proxy to the moto server that records the request line of every
    HTTP request it forwards (one connection is served by one thread, in order)."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.requests: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.upstream)

        def back() -> None:
            with contextlib.suppress(OSError):
                while data := upstream.recv(1 << 16):
                    client.sendall(data)
            client.close()

        threading.Thread(target=back, daemon=True).start()
        with contextlib.suppress(OSError):
            while data := client.recv(1 << 16):
                line = data.split(b"\r\n", 1)[0]
                if re.match(rb"^(GET|PUT|HEAD|POST|DELETE) ", line):
                    self.requests.append(line.decode("latin-1"))
                upstream.sendall(data)
        upstream.close()


@pytest.fixture(scope="module")
def big_manifest(storage_options: dict[str, str]) -> pa.Table:
    """A ``__manifest``-like table of 20,000 rows in one data file of 64 KiB to 1 MiB, at
    ``big-manifest/__manifest``; returns its rows."""
    rows_ = 20_000
    table = pa.table(
        {
            "object_id": [f"object-{i:08d}-{i * 7919 % 100_003:06d}" for i in range(rows_)],
            "read_version": pa.array(range(rows_), pa.uint64()),
        }
    )
    lance.write_dataset(table, uri("big-manifest/__manifest"), storage_options=storage_options)
    return table


def test_a_manifest_file_is_read_in_one_request(
    storage_options: dict[str, str], big_manifest: pa.Table, s3: Any
) -> None:
    """On an object store a ``__manifest`` data file up to 1 MiB is read whole, in one GET
    (Lance's default block size, 64 KiB, reads a larger file in three sequential rounds:
    its tail, its column metadata, its pages), and the read still returns every row."""
    table = big_manifest
    proxy = _CountingProxy(storage_options["aws_endpoint"])
    try:
        options = dict(storage_options, aws_endpoint=proxy.endpoint)
        ds = Manifest(Storage(uri("big-manifest"), options)).open()
        [fragment] = ds.get_fragments()
        [data_file] = fragment.data_files()
        key = f"big-manifest/__manifest/data/{data_file.path}"
        size = int(s3.head_object(Bucket=BUCKET, Key=key)["ContentLength"])
        assert 64 * 1024 < size <= MANIFEST_BLOCK_SIZE
        before = len(proxy.requests)
        assert ds.to_table().equals(table)
        reads = [r for r in proxy.requests[before:] if "/data/" in r]
        assert len(reads) == 1, reads
    finally:
        proxy.server.close()


def test_planning_a_small_namespace_reads_each_manifest_file_once_and_no_index(
    events_ns: Events, storage_options: dict[str, str]
) -> None:
    """A ``__manifest`` no bigger than one I/O block is scanned whole for a prune: one GET
    per data file, all of them at once, and none of its indices (which would add a round
    trip: the index, then the rows), with every column read together (Lance's late
    materialization would read the file of the rows found again)."""
    proxy = _CountingProxy(storage_options["aws_endpoint"])
    try:
        options = dict(storage_options, aws_endpoint=proxy.endpoint)
        ns = PartitionedNamespace.open(uri("events"), storage_options=options)
        before = len(proxy.requests)
        kept = ns.prune("event_date = DATE '2025-12-11'")
        requests = proxy.requests[before:]
    finally:
        proxy.server.close()
    assert [p.values["event_date"] for p in kept] == [D(2025, 12, 11)]
    assert not [r for r in requests if "/__manifest/_indices/" in r], requests
    reads = [r.split("?")[0] for r in requests if "/__manifest/data/" in r]
    assert reads
    assert len(reads) == len(set(reads)), reads


def test_ids_are_looked_up_in_a_manifest_of_one_block_by_reading_it_whole(
    storage_options: dict[str, str], big_manifest: pa.Table, tmp_path: Any
) -> None:
    """A lookup of a few ids (a write finding its partitions) in a ``__manifest`` of
    20,000 rows reads it whole on an object store, where it is one block (one round,
    against three through an index); locally (no round trips) the same table is looked up
    through its index, as a scan of 20,000 rows costs more than the lookup."""
    on_s3 = Manifest(Storage(uri("big-manifest"), storage_options)).latest()
    lance.write_dataset(big_manifest, str(tmp_path / "local" / "__manifest"))
    local = Manifest(Storage(str(tmp_path / "local"))).latest()
    assert on_s3.scan_is_cheaper(1)
    assert not local.scan_is_cheaper(1)
    wanted = ["object-00000007-055433", "missing"]
    assert set(on_s3.rows_by_id(wanted)) == set(local.rows_by_id(wanted)) == {wanted[0]}
