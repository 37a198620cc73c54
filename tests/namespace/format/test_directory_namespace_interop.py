"""pylance's own DirectoryNamespace, an independent reader, sees everything we write."""

from __future__ import annotations

from pathlib import Path

import lance
import lance.namespace as ln
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import ManifestError, PartitionedNamespace, PartitionField
from tests.support import events, sort_rows


def walk(
    dirns: ln.DirectoryNamespace, parent: list[str]
) -> tuple[list[list[str]], list[list[str]]]:
    """Every namespace and table id below ``parent``, as pylance lists them."""
    namespaces, tables = [], []
    for name in dirns.list_namespaces(ln.ListNamespacesRequest(id=parent)).namespaces:
        child = [*parent, name]
        namespaces.append(child)
        sub_ns, sub_tables = walk(dirns, child)
        namespaces += sub_ns
        tables += sub_tables
    for name in dirns.list_tables(ln.ListTablesRequest(id=parent)).tables:
        tables.append([*parent, name])
    return namespaces, tables


def test_directory_namespace_lists_describes_and_reads_everything(make_ns, root: Path) -> None:
    ns: PartitionedNamespace = make_ns([PartitionField("event_date", "event_date")])
    ns.write(events(12, days=3))
    ns.evolve_partition_spec(
        [
            PartitionField("event_year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    ns.write(events(8, first_id=100))
    dirns = ln.DirectoryNamespace(root=str(root))

    namespaces, tables = walk(dirns, [])
    assert ["v1"] in namespaces
    assert ["v2"] in namespaces
    ours = {p.object_id: p for p in ns.partitions()}
    assert {"$".join(t) for t in tables} == set(ours)

    for ident in namespaces:
        if len(ident) == 1:
            continue
        props = dirns.describe_namespace(ln.DescribeNamespaceRequest(id=ident)).properties or {}
        leaf = next(p for oid, p in ours.items() if oid.startswith("$".join(ident) + "$"))
        depth = len(ident) - 1
        expected = {
            f"partition.{k}": str(v) for k, v in list(leaf.values.items())[:depth] if v is not None
        }
        assert props == expected

    total = []
    for ident in tables:
        described = dirns.describe_table(ln.DescribeTableRequest(id=ident))
        partition = ours["$".join(ident)]
        assert described.location.rstrip("/") == partition.location
        table = lance.dataset(described.location, version=partition.read_version)
        total.append(table.to_table())
    assert sort_rows(pa.concat_tables(total, promote_options="default")) == sort_rows(ns.to_table())


def test_tables_registered_elsewhere_by_other_tools_are_ignored(
    daily: PartitionedNamespace, root: Path
) -> None:
    """A table another tool put next to the spec namespaces is not a partition."""
    ns = daily
    ns.write(events(3, days=1))
    # (DirectoryNamespace itself would rewrite __manifest without our columns, so register
    # the rows the way a column-preserving tool would.)
    manifest = lance.dataset(str(root / "__manifest"))
    namespace = manifest.to_table(filter="object_id = 'v1'").to_pylist()[0]
    namespace.update(object_id="scratch")
    table = dict(namespace, object_id="scratch$notes", object_type="table", location="ab_notes")
    manifest.merge_insert("object_id").when_not_matched_insert_all().execute(
        pa.Table.from_pylist([namespace, table], schema=manifest.schema)
    )
    assert [p.object_id.startswith("v1$") for p in ns.partitions()] == [True]
    assert ns.to_table().num_rows == 3


def test_foreign_clobber_is_detected_and_repaired_with_nothing_lost(make_ns, root: Path) -> None:
    ns: PartitionedNamespace = make_ns(
        [
            PartitionField("event_year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    ns.write(events(20, days=3))
    ns.write(events(4, first_id=100), mode="overwrite")
    before = {p.object_id: p for p in ns.partitions()}
    rows_before = sort_rows(ns.to_table())
    # pylance's DirectoryNamespace adds a partition namespace (mirroring its value) and a table
    dirns = ln.DirectoryNamespace(root=str(root))
    level1 = next(iter(before)).split("$")[1]
    dirns.create_namespace(
        ln.CreateNamespaceRequest(
            id=["v1", level1, "zzzzzzzzzzzzzzzz"],
            properties={"partition.event_year": "2025", "partition.country": "NL"},
        )
    )
    clobbered = lance.dataset(str(root / "__manifest"))
    assert "read_version" not in clobbered.schema.names
    with pytest.raises(ManifestError, match=r"repair\(\)"):
        ns.to_table()
    with pytest.raises(ManifestError, match=r"repair\(\)"):
        ns.write(events(1, first_id=500))
    report = ns.repair()
    assert report.repaired
    assert report.rows_from_properties == 1
    after = {p.object_id: p for p in ns.partitions()}
    assert after == before  # every read_version and partition value is back
    assert sort_rows(ns.to_table()) == rows_before
    restored = (
        lance.dataset(str(root / "__manifest"))
        .to_table(filter=f"object_id = 'v1${level1}$zzzzzzzzzzzzzzzz'")
        .to_pylist()[0]
    )
    assert (restored["event_year"], restored["country"]) == (2025, "NL")
    assert ns.repair().repaired is False  # nothing left to do
    ns.write(events(2, first_id=900))
    assert ns.count_rows() == len(rows_before) + 2
