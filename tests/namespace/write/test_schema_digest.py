"""``leaf_commit.schema_digest`` decides whether staged files may join a leaf (their columns are
named by field id). It remembers digests by Lance's rendering of the schema; these tests
check that the rendering tells apart every difference the digest itself does, so a
remembered digest is never one of another schema."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from lance.schema import LanceSchema

from airflow_provider_lance.namespace.write import leaf_commit as leaves
from airflow_provider_lance.namespace.write.leaf_commit import schema_digest


def one(field: pa.Field) -> pa.Schema:
    return pa.schema([field])


PAIRS = {
    "timezone": (pa.timestamp("us", "UTC"), pa.timestamp("us", "Europe/Paris")),
    "decimal scale": (pa.decimal128(10, 2), pa.decimal128(10, 3)),
    "list item type": (pa.list_(pa.int32()), pa.list_(pa.int64())),
    "fixed-size list size": (pa.list_(pa.int32(), 3), pa.list_(pa.int32(), 4)),
    "struct child name": (pa.struct([("x", pa.int32())]), pa.struct([("y", pa.int32())])),
    "dictionary index type": (
        pa.dictionary(pa.int32(), pa.string()),
        pa.dictionary(pa.int8(), pa.string()),
    ),
    "time unit": (pa.time64("us"), pa.time64("ns")),
}


@pytest.mark.parametrize("case", sorted(PAIRS))
def test_types_that_differ_have_different_digests(case: str) -> None:
    a, b = PAIRS[case]
    assert schema_digest(one(pa.field("c", a))) != schema_digest(one(pa.field("c", b)))


def test_metadata_nullability_names_and_order_change_the_digest() -> None:
    base = pa.schema([pa.field("a", pa.int64(), metadata={"k": "1"}), pa.field("b", pa.string())])
    variants = [
        pa.schema([pa.field("a", pa.int64(), metadata={"k": "2"}), pa.field("b", pa.string())]),
        pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.string())]),
        pa.schema([pa.field("a", pa.int64(), False, {"k": "1"}), pa.field("b", pa.string())]),
        pa.schema([pa.field("a", pa.int64(), metadata={"k": "1"}), pa.field("c", pa.string())]),
        pa.schema([pa.field("b", pa.string()), pa.field("a", pa.int64(), metadata={"k": "1"})]),
    ]
    digests = {schema_digest(s) for s in [base, *variants]}
    assert len(digests) == 1 + len(variants)


def test_a_remembered_digest_is_the_one_computed_afresh(monkeypatch) -> None:
    schemas = [one(pa.field("c", t)) for pair in PAIRS.values() for t in pair]
    first = [schema_digest(s) for s in schemas]
    monkeypatch.setattr(leaves, "_DIGESTS", {})  # forget them all
    afresh = [leaves._digest(LanceSchema.from_pyarrow(s)) for s in schemas]
    assert first == afresh == [schema_digest(s) for s in schemas]


def test_tables_created_from_one_arrow_schema_have_its_digest(tmp_path) -> None:
    """What ``Stager._created_digest`` relies on: Lance numbers a new table's fields from the
    Arrow schema alone, whatever the rows (count, NULLs, chunks), so one table's digest is
    every such table's."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), False, {"partitioned-namespace:field_id": "7"}),
            pa.field("s", pa.struct([("x", pa.int32()), ("y", pa.list_(pa.string()))])),
            pa.field(
                "t", pa.timestamp("us", "UTC"), metadata={"partitioned-namespace:field_id": "3"}
            ),
        ]
    )
    tables = [
        pa.table({"id": [1], "s": [{"x": 1, "y": ["a"]}], "t": [0]}, schema=schema),
        pa.table({"id": [1, 2, 3], "s": [None, None, None], "t": [None, 1, None]}, schema=schema),
        pa.concat_tables(
            [pa.table({"id": [i], "s": [None], "t": [i]}, schema=schema) for i in range(4)]
        ),
    ]
    made = [lance.write_dataset(t, str(tmp_path / f"t{i}.lance")) for i, t in enumerate(tables)]
    assert {schema_digest(m.lance_schema) for m in made} == {schema_digest(schema)}
