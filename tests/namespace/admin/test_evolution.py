"""Partition spec evolution, schema evolution, and the spec's consistency rules."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    DataValidationError,
    PartitionedNamespace,
    PartitionField,
    PartitionSpecError,
    SchemaError,
)
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from tests.support import by_id, events, sort_rows, tree


def spec_json(root: Path, version: int) -> list[dict]:
    return json.loads(
        lance.dataset(str(root / "__manifest")).metadata[f"partition_spec_v{version}"]
    )


# -- partition spec evolution ------------------------------------------------------------------
def test_field_ids_are_reused_only_for_identical_fields(make_ns, root: Path) -> None:
    ns = make_ns([PartitionField("event_date", "event_date"), PartitionField("country", "country")])
    v2 = ns.evolve_partition_spec(
        [
            PartitionField("event_date", "event_date"),  # identical -> same id
            PartitionField("bucket", "id", "abs(hash(col)) % 8"),  # new -> new id
        ]
    )
    v3 = ns.evolve_partition_spec(
        [
            PartitionField("country", "country", "upper(col)"),  # same name, other expression
            PartitionField("bucket", "id", "abs(hash(col)) % 8"),
        ]
    )
    assert (v2, v3) == (2, 3)
    ids = {v: [(f["name"], f["field_id"]) for f in spec_json(root, v)] for v in (1, 2, 3)}
    assert ids[1] == [("event_date", 1), ("country", 2)]
    assert ids[2] == [("event_date", 1), ("bucket", 3)]
    assert ids[3] == [("country", 4), ("bucket", 3)]
    assert [f.field_id for f in ns.partition_spec(3)] == [4, 3]
    assert ns.spec_version == 3


def test_same_name_must_keep_its_result_type(make_ns, root: Path) -> None:
    ns = make_ns([PartitionField("k", "id")])
    before = tree(root)
    with pytest.raises(PartitionSpecError, match="same type"):
        ns.evolve_partition_spec([PartitionField("k", "country")])
    assert tree(root) == before
    assert ns.spec_version == 1


def test_new_spec_adds_manifest_columns_and_new_data_goes_there(
    daily: PartitionedNamespace, root: Path
) -> None:
    daily.write(events(6, days=2))
    daily.evolve_partition_spec(
        [
            PartitionField("event_year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    assert {"event_year", "country"} <= set(lance.dataset(str(root / "__manifest")).schema.names)
    result = daily.write(events(4, first_id=50))
    assert {p.object_id.split("$")[0] for p in result.partitions} == {"v2"}
    versions = {p.spec_version for p in daily.partitions()}
    assert versions == {1, 2}
    assert daily.to_table().num_rows == 10
    # A filter on the source column prunes both versions, each through its own expressions.
    hits = daily.prune("event_date = DATE '2025-12-10' AND country = 'US'")
    by_version = {p.spec_version: p for p in hits}
    assert by_version[1].values == {"event_date": dt.date(2025, 12, 10)}
    assert by_version[2].values == {"event_year": 2025, "country": "US"}
    assert len(hits) == 2
    expected = [
        r
        for r in sort_rows(pa.concat_tables([events(6, days=2), events(4, first_id=50)]))
        if r["event_date"] == dt.date(2025, 12, 10) and r["country"] == "US"
    ]
    assert (
        sort_rows(daily.to_table(filter="event_date = DATE '2025-12-10' AND country = 'US'"))
        == expected
    )


def test_spec_may_not_use_dropped_columns(daily: PartitionedNamespace) -> None:
    daily.drop_column("country")
    with pytest.raises(PartitionSpecError, match=r"dropped|unknown column"):
        daily.evolve_partition_spec([PartitionField("country", "country")])


# -- schema evolution ---------------------------------------------------------------------
def ids(ns: PartitionedNamespace) -> dict[str, int]:
    return {f.name: int(f.metadata[b"lance:field_id"]) for f in ns.stored_schema}


def test_add_column_gets_a_fresh_id_and_old_partitions_read_null(
    daily: PartitionedNamespace,
) -> None:
    daily.write(events(4))
    daily.drop_column("amount")
    daily.add_column(pa.field("channel", pa.utf8()))
    assert ids(daily)["channel"] == 4  # above every id ever assigned, dropped ones included
    daily.add_column(pa.field("amount", pa.float32()))  # a dropped name may come back
    assert [f.name for f in daily.schema] == [
        "id",
        "event_date",
        "country",
        "channel",
        "amount",
    ]
    amounts = [f for f in daily.stored_schema if f.name == "amount"]
    assert [int(f.metadata[b"lance:field_id"]) for f in amounts] == [3, 5]
    table = daily.to_table()
    assert table.column("channel").null_count == 4
    assert table.column("amount").null_count == 4  # the new column, not the old data
    assert table.schema.field("amount").type == pa.float32()


def test_add_column_rules(daily: PartitionedNamespace) -> None:
    with pytest.raises(SchemaError, match="non-nullable"):
        daily.add_column(pa.field("x", pa.int64(), nullable=False))
    with pytest.raises(SchemaError, match="duplicate"):
        daily.add_column(pa.field("country", pa.utf8()))


def test_append_to_a_partition_created_before_add_column(daily: PartitionedNamespace) -> None:
    daily.write(events(3, days=1))
    daily.add_column(pa.field("channel", pa.utf8()))
    more = events(2, days=1, first_id=10).append_column("channel", pa.array(["web", "app"]))
    result = daily.write(more)
    assert [p.created for p in result.partitions] == [False]
    got = by_id(daily.to_table(), "channel")
    assert got == {0: None, 1: None, 2: None, 10: "web", 11: "app"}


def test_drop_column_deprecates_it(daily: PartitionedNamespace) -> None:
    daily.write(events(2))
    daily.drop_column("amount")
    field = daily.stored_schema.field("amount")
    assert field.metadata[b"lance:deprecated"] == b"true"
    assert field.nullable
    assert "amount" not in daily.to_table().column_names
    with pytest.raises(DataValidationError, match="dropped"):
        daily.write(events(1))
    with pytest.raises(PartitionSpecError, match="current partition spec uses it"):
        daily.drop_column("event_date")
    with pytest.raises(SchemaError, match="unknown column 'amount'"):
        daily.to_table(columns=["amount"])


def test_rename_keeps_the_id_and_old_data(daily: PartitionedNamespace) -> None:
    daily.write(events(6, days=2))
    before = ids(daily)
    daily.rename_column("event_date", "day")
    daily.rename_column("country", "nation")
    assert ids(daily)["day"] == before["event_date"]
    assert daily.partition_spec()[0].source == "day"
    daily.write(events(2, days=2, first_id=20).rename_columns(["id", "day", "nation", "amount"]))
    table = daily.to_table(filter="day = DATE '2025-12-10'")
    assert sorted(table.column("id").to_pylist()) == [0, 2, 4, 20]
    assert table.column_names == ["id", "day", "nation", "amount"]
    assert len(daily.prune("day = DATE '2025-12-10'")) == 1
    with pytest.raises(SchemaError, match="duplicate"):
        daily.rename_column("nation", "id")


def test_promote_only_widens(daily: PartitionedNamespace) -> None:
    with pytest.raises(SchemaError, match="only widening"):
        daily.promote_column("id", pa.int32())
    with pytest.raises(SchemaError, match="only widening"):
        daily.promote_column("amount", pa.utf8())
    daily.promote_column("country", pa.large_utf8())
    assert daily.schema.field("country").type == pa.large_utf8()


# -- the consistency rules, case by case ---------------------------------------------------
SMALL = pa.schema(
    [pa.field("id", pa.int32(), False), pa.field("k", pa.utf8()), pa.field("v", pa.float32())]
)


@pytest.fixture
def small(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=SMALL, partition_fields=[PartitionField("k", "k")]
    )
    ns.write(
        pa.table(
            {
                "id": pa.array([1, 2], pa.int32()),
                "k": ["a", "a"],
                "v": pa.array([0.5, 1.5], pa.float32()),
            }
        )
    )
    return ns


def test_read_namespace_column_missing_in_table_is_null(small: PartitionedNamespace) -> None:
    small.add_column(pa.field("extra", pa.int64()))
    assert small.to_table().column("extra").to_pylist() == [None, None]


def test_read_table_column_missing_in_namespace_is_ignored(small: PartitionedNamespace) -> None:
    [p] = small.partitions()
    lance.dataset(p.location).add_columns({"foreign": "id * 10"})  # a foreign writer
    _publish_latest(small, p.object_id)
    assert small.to_table().column_names == ["id", "k", "v"]


def test_read_type_difference_casts_to_namespace_type(small: PartitionedNamespace) -> None:
    small.promote_column("id", pa.int64())
    small.promote_column("v", pa.float64())
    table = small.to_table()
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("v").type == pa.float64()
    assert table.column("v").to_pylist() == [0.5, 1.5]


def test_read_impossible_cast_is_an_error(small: PartitionedNamespace, root: Path) -> None:
    [p] = small.partitions()
    foreign = pa.table({"id": pa.array([1], pa.int32()), "k": ["a"], "v": ["not a number"]})
    lance.write_dataset(foreign, p.location, mode="overwrite")
    _publish_latest(small, p.object_id)
    with pytest.raises(DataValidationError, match=r"column .v.*cannot be read as float"):
        small.to_table()


def test_write_namespace_column_missing_in_table_evolves_the_table(
    small: PartitionedNamespace,
) -> None:
    small.add_column(pa.field("extra", pa.int64()))
    small.write(pa.table({"id": pa.array([3], pa.int32()), "k": ["a"], "extra": pa.array([7])}))
    [p] = small.partitions()
    assert "extra" in lance.dataset(p.location, version=p.read_version).schema.names
    assert by_id(small.to_table(), "extra") == {1: None, 2: None, 3: 7}


def test_write_table_column_missing_in_namespace_gets_null(small: PartitionedNamespace) -> None:
    [p] = small.partitions()
    schema = pa.schema([*SMALL, pa.field("foreign", pa.int64())])
    rows = small.to_table().append_column("foreign", pa.array([1, 2]))
    lance.write_dataset(rows.cast(schema), p.location, mode="overwrite")
    _publish_latest(small, p.object_id)
    small.write(pa.table({"id": pa.array([3], pa.int32()), "k": ["a"]}))
    [p] = small.partitions()
    leaf = lance.dataset(p.location, version=p.read_version).to_table()
    assert by_id(leaf, "foreign") == {1: 1, 2: 2, 3: None}


def test_write_table_column_missing_in_namespace_not_nullable_is_an_error(
    small: PartitionedNamespace, root: Path
) -> None:
    [p] = small.partitions()
    schema = pa.schema([*SMALL, pa.field("foreign", pa.int64(), nullable=False)])
    lance.write_dataset(
        pa.table(
            {
                "id": pa.array([1], pa.int32()),
                "k": ["a"],
                "v": pa.array([1.0], pa.float32()),
                "foreign": pa.array([1]),
            },
            schema=schema,
        ),
        p.location,
        mode="overwrite",
    )
    _publish_latest(small, p.object_id)
    version = small.version
    with pytest.raises(
        DataValidationError, match="'foreign' is not in the namespace schema and is not nullable"
    ):
        small.write(pa.table({"id": pa.array([3], pa.int32()), "k": ["a"]}))
    assert small.version == version
    assert small.to_table().column("id").to_pylist() == [1]


def test_write_type_difference_converts_to_table_type(small: PartitionedNamespace) -> None:
    """A leaf column of another type than the namespace's, not a narrower one (a foreign
    writer's): values are converted to the leaf's type, an error if one does not fit. (A
    leaf narrower than the namespace, one written before a promote_column, is rewritten in
    the promoted type instead: tests/namespace/admin/test_column_lifecycle.py.)"""
    [p] = small.partitions()
    wide = pa.schema([SMALL.field("id"), SMALL.field("k"), pa.field("v", pa.int8())])
    stored = pa.table({"id": pa.array([1], pa.int32()), "k": ["a"], "v": pa.array([5], pa.int8())})
    lance.write_dataset(stored.cast(wide), p.location, mode="overwrite")
    _publish_latest(small, p.object_id)
    small.write(pa.table({"id": pa.array([3], pa.int32()), "k": ["a"], "v": pa.array([7.0])}))
    [p] = small.partitions()
    assert lance.dataset(p.location, version=p.read_version).schema.field("v").type == pa.int8()
    assert by_id(small.to_table(), "v") == {1: 5.0, 3: 7.0}
    version = small.version
    with pytest.raises(DataValidationError, match=r"column .v.*cannot be written as int8"):
        small.write(pa.table({"id": pa.array([4], pa.int32()), "k": ["a"], "v": [2.5]}))
    assert small.version == version
    # A new partition is created with the namespace types, so such values fit there.
    small.write(pa.table({"id": pa.array([4], pa.int32()), "k": ["b"], "v": [2.5]}))
    assert by_id(small.to_table(), "v") == {1: 5.0, 3: 7.0, 4: 2.5}


def _publish_latest(ns: PartitionedNamespace, object_id: str) -> None:
    """Simulate a foreign writer that clears read_version ("read the latest version")."""
    manifest = lance.dataset(ns.uri + "/__manifest")
    rows = manifest.to_table(filter=f"object_id = '{object_id}'")
    rows = rows.set_column(
        rows.schema.get_field_index("read_version"), "read_version", pa.nulls(1, pa.uint64())
    )
    manifest.merge_insert("object_id").when_matched_update_all().execute(rows)


# -- staged data meeting a schema change before its commit -----------------------------------
def test_a_staged_append_never_lands_on_a_leaf_rewritten_under_another_schema(
    daily: PartitionedNamespace,
) -> None:
    """X stages an append to a day's partition; then ``amount`` is dropped, ``score`` (the
    same type) added, and another write rewrites that partition under the new schema,
    where ``score`` takes the Lance field id ``amount`` had. Appending X's files there would
    read X's amounts as scores: the commit refuses before it claims anything, and X staged
    again publishes with NULL scores."""
    daily.write(events(2, days=1))
    daily.begin("append", "X").stage(events(2, days=1, first_id=10))
    daily.drop_column("amount")
    daily.add_column(pa.field("score", pa.float64()))
    later = events(1, days=1, first_id=20).drop_columns(["amount"])
    daily.write(later.append_column("score", pa.array([9.0])))
    with pytest.raises(CommitConflict, match="another schema") as refused:
        daily.commit("X")
    assert refused.value.retryable
    assert by_id(daily.to_table(), "score") == {
        0: None,
        1: None,
        20: 9.0,
    }
    assert daily.transaction("X").info().state == "staged"  # nothing claimed
    daily.abort("X")
    daily.write(events(2, days=1, first_id=10).drop_columns(["amount"]), txn_id="X")
    got = by_id(daily.to_table(), "score")
    assert got == {0: None, 1: None, 10: None, 11: None, 20: 9.0}


def test_a_staged_overwrite_commits_the_schema_it_was_written_with(
    daily: PartitionedNamespace,
) -> None:
    """An overwrite staged before ``add_column`` and committed after it replaces the leaf
    with the schema its files were written with (the new column reads NULL), not the
    namespace's new one, whose field ids its files do not carry."""
    daily.write(events(4, days=1))
    daily.begin("overwrite", "X").stage(events(2, days=1, first_id=10))
    daily.add_column(pa.field("channel", pa.utf8()))
    daily.commit("X")
    got = {i: (r["amount"], r["channel"]) for i, r in by_id(daily.to_table()).items()}
    assert got == {10: (0.0, None), 11: (1.5, None)}


def test_stages_written_under_different_schemas_are_not_committed_together(
    daily: PartitionedNamespace,
) -> None:
    """Two stages of one transaction (two Spark tasks, say) on either side of an
    ``add_column``: their new leaves would need different schemas. Refused before any
    claim; nothing published. Committing again cannot help, so it is not retryable, and the
    error names the stage to stage again (the one written before the change)."""
    txn = daily.begin("append", "X")
    txn.stage(events(2, days=1), stage_id="a")
    daily.add_column(pa.field("channel", pa.utf8()))
    more = events(2, start=dt.date(2026, 1, 1), days=1, first_id=10)
    txn.stage(more.append_column("channel", pa.array(["web", "app"])), stage_id="b")
    with pytest.raises(CommitConflict, match="different namespace schemas") as info:
        daily.commit("X")
    assert not info.value.retryable
    assert "ns.transaction('X').discard(['a'])" in str(info.value)
    assert daily.to_table().num_rows == 0


@pytest.mark.parametrize("change", ["drop", "rename"])
def test_rows_in_an_old_leafs_schema_are_shaped_by_the_namespaces_rules(change: str) -> None:
    """Found by review: a table already in a leaf's schema passes through the shaper, but
    only when every leaf column is the namespace column of its name. A leaf made before a
    column was dropped or renamed has a column the namespace no longer knows by that name:
    data naming it is refused, as before the shortcut."""
    schema = NamespaceSchema.from_user_schema(pa.schema([("id", pa.int64()), ("v", pa.utf8())]))
    old_leaf = schema.leaf_schema()
    changed = schema.drop_column("v") if change == "drop" else schema.rename_column("v", "w")
    rows = pa.Table.from_arrays([pa.array([1]), pa.array(["secret"])], schema=old_leaf)
    with pytest.raises(DataValidationError, match="must be evolved first"):
        changed.to_leaf(rows, old_leaf)
