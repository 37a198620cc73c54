"""``repair()`` never guesses: it refuses a ``__manifest`` of another dialect of the format,
and foreign leaf tables whose partition values nothing on record determines.

The other dialect is the lance repository's own partitioned namespace: its partition specs
live in the Arrow *schema* metadata of ``__manifest`` as ``{"id": N, "fields": [...]}`` JSON
(the ``PartitionSpec`` model of the lance-namespace client), and its partition value columns
are named ``partition_field_<field id>``. pylance 14.0.2 does not ship that implementation,
so these tests write its shape with plain ``lance.write_dataset``.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import lance.namespace as ln
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import ManifestError, PartitionedNamespace, PartitionField
from tests.support import events, tree

MakeNs = Callable[..., PartitionedNamespace]
BASE_COLUMNS = ["object_id", "object_type", "location", "metadata", "base_objects"]
FIELDS = [PartitionField("event_date", "event_date"), PartitionField("country", "country")]


def manifest(root: Path) -> lance.LanceDataset:
    return lance.dataset(str(root / "__manifest"))


def upstream_spec(ours: list[dict[str, Any]]) -> dict[str, Any]:
    """Our ``partition_spec_v1`` as the lance-namespace ``PartitionSpec`` model has it."""
    return {
        "id": 1,
        "fields": [
            {
                "field_id": str(f["field_id"]),
                "source_ids": [f["source_id"]],
                "transform": {"type": "identity"},
                "result_type": f["result_type"],
            }
            for f in ours
        ],
    }


def rewrite_manifest(
    root: Path,
    *,
    foreign_columns: bool,
    spec_in_schema: bool,
    keep_ours: bool = False,
) -> None:
    """Overwrite ``__manifest`` with its own rows in another shape (table metadata stays).

    ``foreign_columns``: partition values under ``partition_field_<id>``; ``spec_in_schema``:
    the spec as ``{"id", "fields"}`` JSON in the Arrow schema metadata; ``keep_ours``: keep
    our columns too (a hybrid that still looks restorable); neither marker and not
    ``keep_ours`` is a plain DirectoryNamespace-style clobber to the five base columns.
    """
    current = manifest(root)
    ours = json.loads(current.metadata["partition_spec_v1"])
    table = current.to_table()
    kept = table.column_names if keep_ours else BASE_COLUMNS
    if not foreign_columns and spec_in_schema:
        kept = [*BASE_COLUMNS, *(f["name"] for f in ours)]  # named columns, no read_version
    out = table.select(kept).replace_schema_metadata(None)
    if foreign_columns:
        for f in ours:
            out = out.append_column(f"partition_field_{f['field_id']}", table.column(f["name"]))
    if spec_in_schema:
        out = out.replace_schema_metadata(
            {"partition_spec_v1": json.dumps(upstream_spec(ours), separators=(",", ":"))}
        )
    lance.write_dataset(out, str(root / "__manifest"), mode="overwrite")


def create_foreign_table(dirns: ln.DirectoryNamespace, ident: list[str], data: pa.Table) -> None:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_table(data)
    dirns.create_table(ln.CreateTableRequest(id=ident), sink.getvalue())


def one_day(day: dt.date, country: str, first_id: int) -> pa.Table:
    rows = events(2, start=day, days=1, first_id=first_id)
    return rows.set_column(2, "country", pa.array([country] * rows.num_rows, pa.utf8()))


@pytest.mark.parametrize(
    ("foreign_columns", "spec_in_schema", "marker"),
    [
        (True, True, "'partition_field_1'"),
        (True, False, "'partition_field_2'"),
        (False, True, "schema metadata key 'partition_spec_v1'"),
    ],
    ids=["both-markers", "partition-field-columns", "spec-in-schema-metadata"],
)
def test_upstream_dialect_manifest_is_refused_and_left_untouched(
    make_ns: MakeNs, root: Path, foreign_columns: bool, spec_in_schema: bool, marker: str
) -> None:
    ns = make_ns(FIELDS)
    ns.write(events(8, days=2))
    rewrite_manifest(root, foreign_columns=foreign_columns, spec_in_schema=spec_in_schema)
    version, files = manifest(root).version, tree(root)

    for attempt in (ns.repair, PartitionedNamespace.open(root).repair):
        with pytest.raises(ManifestError, match="another implementation of the format") as err:
            attempt()
        assert marker in str(err.value)
        assert "cannot be repaired automatically" in str(err.value)
        assert manifest(root).version == version
        assert tree(root) == files


def test_restoring_from_a_version_of_the_upstream_dialect_is_refused(
    make_ns: MakeNs, root: Path
) -> None:
    """The clobbered manifest looks innocent, but the version repair would restore from is
    a hybrid another implementation wrote: its named columns are not to be trusted."""
    ns = make_ns(FIELDS)
    ns.write(events(8, days=2))
    rewrite_manifest(root, foreign_columns=True, spec_in_schema=True, keep_ours=True)
    rewrite_manifest(root, foreign_columns=False, spec_in_schema=False)  # plain clobber
    clobbered = manifest(root)
    assert clobbered.schema.names == BASE_COLUMNS
    assert not clobbered.schema.metadata
    version, files = clobbered.version, tree(root)

    with pytest.raises(ManifestError, match="another implementation of the format") as err:
        ns.repair()
    assert f"version {version - 1} " in str(err.value)
    assert "'partition_field_1'" in str(err.value)
    assert manifest(root).version == version
    assert tree(root) == files


def test_foreign_leaf_tables_without_recoverable_values_are_refused(
    make_ns: MakeNs, root: Path
) -> None:
    ns = make_ns(FIELDS)
    ns.write(events(8, days=2))
    level1 = next(p.object_id for p in ns.partitions()).split("$")[1]
    dirns = ln.DirectoryNamespace(root=str(root))
    # Under an existing day: the day is known, the (unmirrored) country is not.
    dirns.create_namespace(ln.CreateNamespaceRequest(id=["v1", level1, "zzzzzzzzzzzzzzzz"]))
    create_foreign_table(
        dirns, ["v1", level1, "zzzzzzzzzzzzzzzz", "dataset"], events(2, first_id=100)
    )
    # A whole new branch with no properties at all.
    dirns.create_namespace(ln.CreateNamespaceRequest(id=["v1", "yyyyyyyyyyyyyyyy"]))
    dirns.create_namespace(
        ln.CreateNamespaceRequest(id=["v1", "yyyyyyyyyyyyyyyy", "xxxxxxxxxxxxxxxx"])
    )
    create_foreign_table(
        dirns, ["v1", "yyyyyyyyyyyyyyyy", "xxxxxxxxxxxxxxxx", "dataset"], events(2, first_id=200)
    )
    version, files = manifest(root).version, tree(root)

    with pytest.raises(ManifestError, match="without guessing") as err:
        PartitionedNamespace.open(root).repair()
    message = str(err.value)
    assert f"v1${level1}$zzzzzzzzzzzzzzzz$dataset (no country)" in message
    assert "v1$yyyyyyyyyyyyyyyy$xxxxxxxxxxxxxxxx$dataset (no event_date, country)" in message
    assert manifest(root).version == version
    assert tree(root) == files


def test_refusal_lists_at_most_ten_foreign_leaves(make_ns: MakeNs, root: Path) -> None:
    ns = make_ns(FIELDS)
    ns.write(events(4, days=1))
    current = manifest(root).to_table().select(BASE_COLUMNS).to_pylist()
    added = [f"v1${i:016d}${i:016d}$dataset" for i in range(12)]
    current += [
        {"object_id": oid, "object_type": "table", "location": f"ab_{oid}", "metadata": None}
        for oid in added
    ]
    schema = manifest(root).schema
    lance.write_dataset(
        pa.Table.from_pylist(current, schema=pa.schema([schema.field(c) for c in BASE_COLUMNS])),
        str(root / "__manifest"),
        mode="overwrite",
    )
    version = manifest(root).version

    with pytest.raises(ManifestError, match="12 leaf table") as err:
        ns.repair()
    message = str(err.value)
    assert sum(oid in message for oid in added) == 10
    assert "and 2 more" in message
    assert manifest(root).version == version


def test_directory_namespace_clobber_repairs_foreign_leaves_from_their_ancestors(
    make_ns: MakeNs, root: Path
) -> None:
    """The ordinary pylance DirectoryNamespace clobber still repairs; a foreign leaf takes
    each value from the nearest ancestor that proves it: a restorable namespace row or a
    mirrored ``partition.<name>`` property, on any level above it."""
    ns = make_ns(FIELDS)
    ns.write(events(8, days=2))
    before = {p.object_id: p for p in ns.partitions()}
    some = next(iter(before.values()))
    level1 = some.object_id.split("$")[1]
    day = some.values["event_date"]
    dirns = ln.DirectoryNamespace(root=str(root))
    # The day comes from the restored v1$<level1> row, the country from the new namespace.
    dirns.create_namespace(
        ln.CreateNamespaceRequest(
            id=["v1", level1, "zzzzzzzzzzzzzzzz"], properties={"partition.country": "NL"}
        )
    )
    create_foreign_table(
        dirns, ["v1", level1, "zzzzzzzzzzzzzzzz", "dataset"], one_day(day, "NL", 100)
    )
    # A new branch: each level mirrors only its own value.
    new_day = dt.date(2025, 12, 24)
    dirns.create_namespace(
        ln.CreateNamespaceRequest(
            id=["v1", "yyyyyyyyyyyyyyyy"], properties={"partition.event_date": str(new_day)}
        )
    )
    dirns.create_namespace(
        ln.CreateNamespaceRequest(
            id=["v1", "yyyyyyyyyyyyyyyy", "xxxxxxxxxxxxxxxx"],
            properties={"partition.country": "SE"},
        )
    )
    create_foreign_table(
        dirns,
        ["v1", "yyyyyyyyyyyyyyyy", "xxxxxxxxxxxxxxxx", "dataset"],
        one_day(new_day, "SE", 200),
    )
    assert "read_version" not in manifest(root).schema.names
    with pytest.raises(ManifestError, match=r"repair\(\)"):
        ns.to_table()

    report = ns.repair()
    assert report.repaired
    assert report.rows_from_properties == 5  # 3 namespaces, 2 tables
    after = {p.object_id: p for p in ns.partitions()}
    assert {k: after[k] for k in before} == before  # every read_version and value is back
    foreign = {k: (v.values, v.read_version) for k, v in after.items() if k not in before}
    assert foreign == {
        f"v1${level1}$zzzzzzzzzzzzzzzz$dataset": ({"event_date": day, "country": "NL"}, None),
        "v1$yyyyyyyyyyyyyyyy$xxxxxxxxxxxxxxxx$dataset": (
            {"event_date": new_day, "country": "SE"},
            None,
        ),
    }
    assert ns.repair().repaired is False  # nothing left to do


def test_our_own_field_named_like_the_other_dialect_is_no_marker(
    make_ns: MakeNs, root: Path
) -> None:
    """A user may name a partition field ``partition_field_1``: declared in our spec, it is
    ours (a guard against false refusals; this one passes before and after the change)."""
    ns = make_ns([PartitionField("partition_field_1", "country")])
    ns.write(events(8, days=2))
    before = {p.object_id: p for p in ns.partitions()}
    dirns = ln.DirectoryNamespace(root=str(root))
    dirns.create_namespace(
        ln.CreateNamespaceRequest(
            id=["v1", "zzzzzzzzzzzzzzzz"], properties={"partition.partition_field_1": "NL"}
        )
    )
    assert "read_version" not in manifest(root).schema.names

    report = PartitionedNamespace.open(root).repair()
    assert report.repaired
    assert {p.object_id: p for p in ns.partitions()} == before
