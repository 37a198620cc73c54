"""Writes (append, dynamic overwrite, one publish) and isolated, projected, filtered reads."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_lance.namespace import CommitResult, PartitionedNamespace, PartitionField
from tests.support import events, sort_rows


def test_append_round_trip(daily: PartitionedNamespace) -> None:
    data = events(30)
    result = daily.write(data)
    assert isinstance(result, CommitResult)
    assert result.rows == 30
    assert len(result.partitions) == 3
    assert all(p.created for p in result.partitions)
    assert sort_rows(daily.to_table()) == sort_rows(data)
    more = events(9, first_id=100)
    second = daily.write(more)
    assert not any(p.created for p in second.partitions)
    assert sort_rows(daily.to_table()) == sort_rows(pa.concat_tables([data, more]))
    assert daily.count_rows() == 39
    assert daily.count_rows(filter="amount > 10") == len(
        [r for r in sort_rows(daily.to_table()) if r["amount"] > 10]
    )


def test_manifest_commits_per_write_do_not_grow_with_partitions(
    daily: PartitionedNamespace,
) -> None:
    """A write is one publish (it is nobody else's: no claims), create_partitions a claim
    and a publish, whether they touch 1 partition or 50."""
    commits = []
    for n_days in (1, 50):
        before = daily.version
        result = daily.write(events(200, start=dt.date(2020 + n_days, 1, 1), days=n_days))
        assert len(result.partitions) == n_days
        assert result.manifest_version == daily.version
        commits.append(daily.version - before)
    before = daily.version
    daily.create_partitions(
        [{"event_date": dt.date(2030, 1, 1) + dt.timedelta(days=i)} for i in range(40)]
    )
    commits.append(daily.version - before)
    assert commits == [1, 1, 2]


def test_dynamic_overwrite_replaces_exactly_the_touched_partitions(
    daily: PartitionedNamespace,
) -> None:
    daily.write(events(30))  # days 10, 11, 12
    replacement = events(4, start=dt.date(2025, 12, 11), days=1, first_id=1000)
    result = daily.write(replacement, mode="overwrite")
    assert [p.values["event_date"] for p in result.partitions] == [dt.date(2025, 12, 11)]
    table = daily.to_table()
    by_day: dict[dt.date, set[int]] = {}
    for r in table.to_pylist():
        by_day.setdefault(r["event_date"], set()).add(r["id"])
    assert by_day[dt.date(2025, 12, 11)] == {1000, 1001, 1002, 1003}
    assert by_day[dt.date(2025, 12, 10)] == set(range(0, 30, 3))
    assert by_day[dt.date(2025, 12, 12)] == set(range(2, 30, 3))
    # overwrite also creates partitions that did not exist
    new = daily.write(events(2, start=dt.date(2026, 1, 1), days=1, first_id=5000), mode="overwrite")
    assert [p.created for p in new.partitions] == [True]


def test_reads_are_isolated_to_one_manifest_version(daily: PartitionedNamespace) -> None:
    first = daily.write(events(6))
    daily.write(events(6, first_id=100))
    daily.write(events(3, days=1, first_id=200), mode="overwrite")
    old = daily.to_table(version=first.manifest_version)
    assert sort_rows(old) == sort_rows(events(6))
    assert {p.read_version for p in daily.prune(version=first.manifest_version)} == {1}
    # the leaf tables moved on, but readers of the old manifest version do not see it
    for p in daily.partitions():
        assert lance.dataset(p.location).version >= (p.read_version or 0)


def test_a_handle_sees_what_another_process_published_before_it_reads(
    daily: PartitionedNamespace,
) -> None:
    """A handle is opened; right after, another process (a Spark task's commit, another
    Airflow task) publishes; the handle then reads: it sees the rows, however soon after
    its open. (A handle that took the state its open loaded as the latest for a second
    returned no rows here, as a Spark format write read back through the driver's handle
    did.) The writer imports first and writes on a signal, so the write falls well inside
    that second."""
    script = (
        "import sys; from tests.support import events; "
        "from airflow_provider_lance.namespace import PartitionedNamespace; "
        "print('ready', flush=True); sys.stdin.readline(); "
        "PartitionedNamespace.open(sys.argv[1]).write(events(30)); print('done', flush=True)"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script, daily.uri],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path.cwd(),
    )
    assert writer.stdin is not None
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "ready"
    ns = PartitionedNamespace.open(daily.uri)
    started = ns.version
    writer.stdin.write("go\n")
    writer.stdin.flush()
    assert writer.stdout.readline().strip() == "done"
    assert writer.wait(timeout=60) == 0
    assert ns.count_rows() == 30
    assert ns.version > started


def test_unpublished_leaf_versions_are_invisible(daily: PartitionedNamespace) -> None:
    daily.write(events(3, days=1))
    [p] = daily.partitions()
    lance.write_dataset(
        events(5, days=1, first_id=50).select(daily.schema.names), p.location, mode="append"
    )
    assert daily.to_table().num_rows == 3  # read_version pins what is visible


def test_projection_and_filter(daily: PartitionedNamespace) -> None:
    data = events(40)
    daily.write(data)
    got = daily.to_table(filter="country = 'US' AND amount >= 15", columns=["id", "amount"])
    assert got.column_names == ["id", "amount"]
    mask = pc.and_(pc.equal(data["country"], "US"), pc.greater_equal(data["amount"], 15))
    assert sorted(got.column("id").to_pylist()) == sorted(
        data.filter(mask).column("id").to_pylist()
    )
    # columns used only by the filter are not returned; an empty projection counts rows
    assert (
        daily.to_table(filter="event_date = DATE '2025-12-10'", columns=["country"]).num_rows == 14
    )


def test_streaming_reader(daily: PartitionedNamespace) -> None:
    daily.write(events(3000, days=2))
    reader = daily.to_reader(filter="amount < 100", batch_size=256)
    assert isinstance(reader, pa.RecordBatchReader)
    batches = list(reader)
    assert len(batches) > 1
    assert all(b.num_rows <= 256 for b in batches)
    assert sum(b.num_rows for b in batches) == 67


class _CapsuleOnly:
    """An Arrow producer that is not pyarrow: only the PyCapsule protocol (as polars,
    DuckDB or nanoarrow objects offer it)."""

    def __init__(self, data: pa.Table | pa.RecordBatch, protocol: str) -> None:
        self._data, self._protocol = data, protocol

    def __getattr__(self, name: str) -> Any:
        if name == self._protocol:
            return getattr(self._data, name)
        raise AttributeError(name)


@pytest.mark.parametrize(
    "shape",
    [
        "table",
        "batch",
        "reader",
        "list_of_batches",
        "list_of_tables",
        "c_stream",
        "c_array",
    ],
)
def test_write_accepts_arrow_shapes(daily: PartitionedNamespace, shape: str) -> None:
    data = events(10)
    batch = data.combine_chunks().to_batches()[0]
    payload = {
        "table": data,
        "batch": batch,
        "reader": pa.RecordBatchReader.from_batches(data.schema, data.to_batches(max_chunksize=3)),
        "list_of_batches": data.to_batches(max_chunksize=4),
        "list_of_tables": [data.slice(0, 5), data.slice(5)],
        "c_stream": _CapsuleOnly(data, "__arrow_c_stream__"),
        "c_array": _CapsuleOnly(batch, "__arrow_c_array__"),
    }[shape]
    daily.write(payload)
    assert sort_rows(daily.to_table()) == sort_rows(data)


def test_read_arguments_are_keyword_only_in_pylance_order(daily: PartitionedNamespace) -> None:
    daily.write(events(10))
    with pytest.raises(TypeError):
        daily.to_table("amount > 10")  # type: ignore[misc]
    with pytest.raises(TypeError):
        daily.count_rows("amount > 10")  # type: ignore[misc]
    assert daily.to_table(columns=["id"], filter="amount > 10").column_names == ["id"]


def test_input_conformance(daily: PartitionedNamespace) -> None:
    data = pa.table(
        {
            "event_date": pa.array(["2025-12-10"]).cast(pa.date32()),
            "id": pa.array([7], pa.int32()),  # cast to int64; columns in any order
        }
    )
    daily.write(data)
    [row] = daily.to_table().to_pylist()
    assert row == {"id": 7, "event_date": dt.date(2025, 12, 10), "country": None, "amount": None}


def test_partition_lookup(daily: PartitionedNamespace) -> None:
    daily.write(events(3))
    p = daily.partition({"event_date": "2025-12-11"})
    assert p.values == {"event_date": dt.date(2025, 12, 11)}
    assert p.to_dict()["values"] == {"event_date": "2025-12-11"}


def test_bucket_and_multi_level_round_trip(make_ns, root: Path) -> None:
    ns = make_ns(
        [PartitionField("bucket", "id", "abs(hash(col)) % 4"), PartitionField("country", "country")]
    )
    data = events(100)
    ns.write(data)
    assert len(ns.partitions()) == 16
    assert sort_rows(ns.to_table()) == sort_rows(data)
    assert len(ns.prune("id = 42")) == 4  # one bucket, every country
    assert len(ns.prune("id = 42 AND country = 'DE'")) == 1
    assert ns.to_table(filter="id = 42").column("id").to_pylist() == [42]
