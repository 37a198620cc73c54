"""Arrow types and schemas <-> JsonArrowDataType / JsonArrowSchema."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import SchemaError
from airflow_provider_lance.namespace.format.arrow_json import (
    schema_from_json,
    schema_to_json,
    type_from_json,
    type_to_json,
)

ROUND_TRIP = [
    pa.bool_(),
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
    pa.date32(),
    pa.date64(),
    pa.utf8(),
    pa.large_utf8(),
    pa.binary(),
    pa.large_binary(),
    pa.binary(16),
    pa.decimal128(38, 10),
    pa.decimal128(10, -2),
    pa.decimal256(50, 4),
    pa.timestamp("us"),
    pa.timestamp("ns", tz="UTC"),
    pa.timestamp("s", tz="Europe/Paris"),
    pa.timestamp("ms"),
    pa.time64("ns"),
    pa.duration("ms"),
    pa.list_(pa.field("item", pa.int32())),
    pa.large_list(pa.field("item", pa.utf8(), nullable=False)),
    pa.list_(pa.field("item", pa.float32()), 3),
    pa.struct([pa.field("a", pa.int64()), pa.field("b", pa.list_(pa.utf8()))]),
    pa.map_(pa.utf8(), pa.int64()),
]


@pytest.mark.parametrize("dtype", ROUND_TRIP, ids=str)
def test_types_round_trip(dtype: pa.DataType) -> None:
    encoded = json.loads(json.dumps(type_to_json(dtype)))
    assert type_from_json(encoded) == dtype


def test_names_follow_the_reference_converter() -> None:
    assert type_to_json(pa.int64()) == {"type": "int64"}
    assert type_to_json(pa.utf8()) == {"type": "utf8"}
    assert type_to_json(pa.bool_()) == {"type": "bool"}
    assert type_to_json(pa.date32()) == {"type": "date32"}
    assert type_to_json(pa.decimal128(12, 3)) == {"type": "decimal128", "length": 12003}
    assert type_to_json(pa.list_(pa.int32()))["type"] == "list"


def test_timestamp_keeps_unit_and_zone_readable_by_reference_readers() -> None:
    encoded = type_to_json(pa.timestamp("ns", tz="UTC"))
    assert encoded == {"type": "timestamp", "unit": "ns", "timezone": "UTC"}
    # A reference-converter document has neither key: microseconds, no zone.
    assert type_from_json({"type": "timestamp"}) == pa.timestamp("us")


def test_view_and_dictionary_types_are_stored_as_plain_types() -> None:
    assert type_to_json(pa.string_view()) == {"type": "utf8"}
    assert type_to_json(pa.dictionary(pa.int32(), pa.utf8())) == {"type": "utf8"}


def test_schema_round_trip_keeps_field_metadata() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), False, metadata={"lance:field_id": "0"}),
            pa.field(
                "d", pa.date32(), metadata={"lance:field_id": "1", "lance:deprecated": "true"}
            ),
        ]
    )
    back = schema_from_json(schema_to_json(schema))
    assert back.equals(schema, check_metadata=True)
    doc = json.loads(schema_to_json(schema))
    assert doc["fields"][0] == {
        "name": "id",
        "nullable": False,
        "type": {"type": "int64"},
        "metadata": {"lance:field_id": "0"},
    }


def test_spec_appendix_a_schema_parses() -> None:
    doc = {
        "fields": [
            {
                "name": "id",
                "nullable": False,
                "type": {"type": "int64"},
                "metadata": {"lance:field_id": "0"},
            },
            {
                "name": "event_date",
                "nullable": True,
                "type": {"type": "date32"},
                "metadata": {"lance:field_id": "1"},
            },
            {
                "name": "country",
                "nullable": True,
                "type": {"type": "utf8"},
                "metadata": {"lance:field_id": "2"},
            },
        ]
    }
    schema = schema_from_json(json.dumps(doc))
    assert schema.names == ["id", "event_date", "country"]
    assert schema.field("country").type == pa.utf8()


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        "[]",
        '{"fields": 3}',
        '{"fields": [{"name": "a", "type": {"type": "complex128"}}]}',
        '{"fields": [{"type": {"type": "int64"}}]}',
        '{"fields": [{"name": "a", "type": "int64"}]}',
        '{"fields": [{"name": "a", "type": {"type": "list", "fields": []}}]}',
    ],
)
def test_bad_schema_json_is_a_schema_error(bad: str) -> None:
    with pytest.raises(SchemaError):
        schema_from_json(bad)


def test_unsupported_arrow_type_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="cannot be stored"):
        type_to_json(pa.dense_union([pa.field("a", pa.int32())]))
