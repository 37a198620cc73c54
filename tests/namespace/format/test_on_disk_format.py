"""The on-disk format: __manifest metadata, columns, rows, names and leaf tables."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.format import manifest as manifest_module
from tests.support import EVENTS_SCHEMA, events, sort_rows

NAME = r"[0-9a-z]{16}"


def manifest(root: Path) -> lance.LanceDataset:
    return lance.dataset(str(root / "__manifest"))


def rows_by_id(root: Path) -> dict[str, dict]:
    return {r["object_id"]: r for r in manifest(root).to_table().to_pylist()}


def test_manifest_metadata_holds_schema_and_spec(daily: PartitionedNamespace, root: Path) -> None:
    meta = manifest(root).metadata
    assert set(meta) == {"schema", "partition_spec_v1"}
    spec = json.loads(meta["partition_spec_v1"])
    assert spec == [
        {
            "field_id": 1,
            "name": "event_date",
            "source_id": 1,
            "expression": "col",
            "result_type": {"type": "date32"},
        }
    ]
    schema = json.loads(meta["schema"])
    assert [f["name"] for f in schema["fields"]] == EVENTS_SCHEMA.names
    assert [f["metadata"]["lance:field_id"] for f in schema["fields"]] == ["0", "1", "2", "3"]
    assert schema["fields"][0] == {
        "name": "id",
        "nullable": False,
        "type": {"type": "int64"},
        "metadata": {"lance:field_id": "0"},
    }
    assert all(f.metadata[b"lance:field_id"] for f in daily.schema)


def test_manifest_columns(daily: PartitionedNamespace, root: Path) -> None:
    schema = manifest(root).schema
    assert schema.names == [
        "object_id",
        "object_type",
        "location",
        "metadata",
        "base_objects",
        "read_version",
        "__txn_id",
        "event_date",
    ]
    assert schema.field("__txn_id").type == pa.utf8()  # bookkeeping: the commit claim
    assert schema.field("object_id").metadata == {
        b"lance-schema:unenforced-primary-key:position": b"0"
    }
    assert not schema.field("object_id").nullable
    assert schema.field("read_version").type == pa.uint64()
    assert schema.field("event_date").type == pa.date32()
    assert schema.field("event_date").nullable
    assert schema.field("base_objects").type == pa.list_(pa.field("object_id", pa.utf8()))
    indices = {tuple(i.field_names): i.index_type for i in manifest(root).describe_indices()}
    # no BTREE on object_id: it breaks merge_insert's conflict detection (pylance 14.0.2);
    # one on each partition column answers a prune's pushed-down predicate
    assert indices == {
        ("object_type",): "Bitmap",
        ("object_id",): "BloomFilter",
        ("event_date",): "BTree",
    }


def test_rows_names_and_leaf_tables(daily: PartitionedNamespace, root: Path) -> None:
    result = daily.write(events(6, days=2))
    rows = rows_by_id(root)
    assert rows["v1"]["object_type"] == "namespace"
    leaves = [r for r in rows.values() if r["object_type"] == "table"]
    assert len(leaves) == 2
    for leaf in leaves:
        assert re.fullmatch(rf"v1\${NAME}\$dataset", leaf["object_id"])
        parent = rows[leaf["object_id"].rsplit("$", 1)[0]]
        assert parent["object_type"] == "namespace"
        assert parent["event_date"] == leaf["event_date"]
        assert json.loads(parent["metadata"]) == {
            "partition.event_date": leaf["event_date"].isoformat()
        }
        assert re.fullmatch(rf"[0-9a-f]{{8}}_{re.escape(leaf['object_id'])}", leaf["location"])
        table = lance.dataset(str(root / leaf["location"]), version=leaf["read_version"])
        assert leaf["read_version"] == table.version
        assert set(table.to_table().column("event_date").to_pylist()) == {leaf["event_date"]}
    assert {p.read_version for p in result.partitions} == {r["read_version"] for r in leaves}


def test_multi_level_spec_rows_inherit_values(make_ns, root: Path) -> None:
    ns = make_ns(
        [
            PartitionField("event_year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    ns.write(events(8, days=2))
    rows = rows_by_id(root)
    level1 = [r for i, r in rows.items() if re.fullmatch(rf"v1\${NAME}", i)]
    level2 = [r for i, r in rows.items() if re.fullmatch(rf"v1\${NAME}\${NAME}", i)]
    leaves = [r for i, r in rows.items() if re.fullmatch(rf"v1\${NAME}\${NAME}\$dataset", i)]
    assert len(level1) == 1
    assert level1[0]["event_year"] == 2025
    assert level1[0]["country"] is None
    assert json.loads(level1[0]["metadata"]) == {"partition.event_year": "2025"}
    assert {r["country"] for r in level2} == {"US", "DE", "FR", None}
    assert all(r["event_year"] == 2025 for r in level2 + leaves)
    assert {(r["object_id"].rsplit("$", 1)[0], r["country"]) for r in leaves} == {
        (r["object_id"], r["country"]) for r in level2
    }
    null_country = next(r for r in level2 if r["country"] is None)
    assert json.loads(null_country["metadata"]) == {"partition.event_year": "2025"}
    assert {tuple(p.values.values()) for p in ns.partitions()} == {
        (2025, "US"),
        (2025, "DE"),
        (2025, "FR"),
        (2025, None),
    }


def test_null_partition_values_are_a_partition(daily: PartitionedNamespace) -> None:
    data = events(4).set_column(
        1, "event_date", pa.array([None, None, dt.date(2025, 1, 1), None], pa.date32())
    )
    daily.write(data)
    by_value = {p.values["event_date"]: p for p in daily.partitions()}
    assert set(by_value) == {None, dt.date(2025, 1, 1)}
    assert len(daily.prune("event_date IS NULL")) == 1
    assert sort_rows(daily.to_table(filter="event_date IS NULL")) == sort_rows(
        data.filter(pa.compute.is_null(data["event_date"]))
    )


def test_values_with_special_characters_are_just_data(make_ns, root: Path) -> None:
    ns = make_ns([PartitionField("country", "country")])
    weird = ["a$b", "x/y/../z", "k=v", 'it\'s "quoted"', "日本語 ünïcødé 🚀", "", " "]
    data = pa.table(
        {
            "id": pa.array(range(len(weird)), pa.int64()),
            "event_date": pa.array([dt.date(2025, 1, 1)] * len(weird)),
            "country": weird,
            "amount": pa.array([1.0] * len(weird)),
        }
    )
    ns.write(data)
    assert {p.values["country"] for p in ns.partitions()} == set(weird)
    for p in ns.partitions():
        assert re.fullmatch(rf"v1\${NAME}\$dataset", p.object_id)
        assert p.location.startswith(root.as_uri())
    for value in weird:
        escaped = value.replace("'", "''")
        [p] = ns.prune(f"country = '{escaped}'")
        assert p.values["country"] == value
        assert ns.to_table(filter=f"country = '{escaped}'").column("country").to_pylist() == [value]


def test_partition_names_are_stable_for_equal_values(tmp_path: Path) -> None:
    """Concurrent creators of one partition must converge on one object id."""
    ids = []
    for name in ("a", "b"):
        ns = PartitionedNamespace.create(
            tmp_path / name,
            schema=EVENTS_SCHEMA,
            partition_fields=[PartitionField("event_date", "event_date")],
        )
        ids.append(ns.create_partition({"event_date": dt.date(2025, 1, 1)}).object_id)
    assert ids[0] == ids[1]
    assert ids[0] != ns.create_partition({"event_date": dt.date(2025, 1, 2)}).object_id


def test_create_partition_is_idempotent_and_creates_an_empty_table(
    daily: PartitionedNamespace,
) -> None:
    first = daily.create_partition({"event_date": "2025-12-10"})
    version = daily.version
    again = daily.create_partition({"event_date": dt.date(2025, 12, 10)})
    assert again == first
    assert daily.version == version
    assert first.read_version == 1
    assert first.values == {"event_date": dt.date(2025, 12, 10)}
    assert lance.dataset(first.location, version=1).count_rows() == 0
    assert daily.to_table().num_rows == 0


def test_namespace_row_properties_are_exactly_the_json_of_their_values(make_ns, root: Path) -> None:
    """The ``partition.<name>`` properties of a namespace row are the compact JSON
    ``json.dumps`` writes (non-ASCII kept, quotes and control characters escaped), the
    values of the row and its ancestors in spec order, NULLs left out."""
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("a", pa.utf8()), pa.field("b", pa.utf8())]
    )
    ns = make_ns([PartitionField("a", "a"), PartitionField("b", "b")], schema=schema)
    values = [('é "q" \\', "日本\n"), (None, "x\x01"), ("tab\t", None), ("\u2028", "/")]
    ns.write(
        pa.table(
            {
                "id": pa.array(range(len(values)), pa.int64()),
                "a": [a for a, _ in values],
                "b": [b for _, b in values],
            },
            schema=schema,
        )
    )
    rows = [r for r in rows_by_id(root).values() if r["object_type"] == "namespace"]
    by_values = {(r["a"], r["b"]): r["metadata"] for r in rows if r["object_id"] != "v1"}
    for a, b in values:
        first = {"partition.a": a} if a is not None else {}
        both = {**first, **({"partition.b": b} if b is not None else {})}
        assert by_values[(a, None)] == json.dumps(first, separators=(",", ":"), ensure_ascii=False)
        assert by_values[(a, b)] == json.dumps(both, separators=(",", ":"), ensure_ascii=False)


def test_a_lookup_by_partition_values_finds_what_a_lookup_by_id_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write looks its partitions (and their parent namespaces) up through the first
    partition column's index, not the ids: it must find exactly the rows the ids do,
    NULL values and the spec's own namespace row included. (The ``__manifest`` rows are
    planned by the format and appended directly, enough of them that a lookup does not
    read the whole table instead, and no version is small enough to be read whole.)"""
    monkeypatch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", 0)
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        schema=EVENTS_SCHEMA,
        partition_fields=[
            PartitionField("d", "event_date"),
            PartitionField("c", "country"),
        ],
    )
    start = dt.date(2025, 1, 1)
    tuples = [
        (start + dt.timedelta(days=i) if i % 7 else None, c)
        for i in range(40)
        for c in ("US", "DE", "FR", None, *(f"x{k}" for k in range(26)))
    ]
    state = ns.state()
    rows = state.plan_partitions(tuples, read_version=1).rows
    lance.write_dataset(state.rows_table(rows), ns.uri + "/__manifest", mode="append")
    probes = [
        *tuples[::97],  # existing, some with NULLs
        (start + dt.timedelta(days=3), "NEW"),  # a new leaf under an existing namespace
        (dt.date(2030, 1, 1), "US"),  # a new date
        (None, "NEW"),
    ]
    for probe in probes:
        fresh = [PartitionedNamespace.open(ns.uri).state() for _ in range(2)]
        ids = [fresh[0].leaf_id(probe)]
        assert fresh[0].view.scan_is_cheaper(3) is False  # the lookup reads by index
        by_values = fresh[0].find(ids, [probe])
        assert by_values == fresh[1].find(ids), probe
        assert fresh[0].existing(ids) == fresh[1].existing(ids)
        parents = fresh[0].plan_partitions([probe], read_version=1).rows
        again = fresh[1].plan_partitions([probe], read_version=1).rows
        assert [r["object_id"] for r in parents] == [r["object_id"] for r in again], probe
    assert len(ns.partitions()) == len(set(tuples))
