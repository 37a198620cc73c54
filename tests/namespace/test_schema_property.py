"""``ns.schema`` is the current columns, as pyiceberg's ``Table.schema()`` (issue 39); the
schema the format stores, dropped columns included, is ``ns.stored_schema``.

Before, after ``drop_column("c")`` and ``add_column(pa.field("c", ...))``, ``ns.schema``
listed ``c`` twice (the stored superset), unlike what a read returns.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import events


def field_ids(schema: pa.Schema, name: str) -> list[int]:
    return [int(f.metadata[b"lance:field_id"]) for f in schema if f.name == name]


def test_schema_is_the_current_columns_after_a_drop_and_an_add(
    daily: PartitionedNamespace,
) -> None:
    daily.write(events(3))
    daily.drop_column("amount")
    daily.add_column(pa.field("amount", pa.utf8()))
    assert daily.schema.names == ["id", "event_date", "country", "amount"]
    assert daily.schema.names == daily.to_table().column_names
    assert daily.schema.field("amount").type == pa.utf8()
    assert field_ids(daily.schema, "amount") == [4]  # the new column's id


def test_stored_schema_keeps_the_dropped_columns(daily: PartitionedNamespace) -> None:
    daily.drop_column("amount")
    daily.add_column(pa.field("amount", pa.utf8()))
    stored = daily.stored_schema
    assert stored.names == ["id", "event_date", "country", "amount", "amount"]
    assert field_ids(stored, "amount") == [3, 4]
    assert stored.field(3).metadata[b"lance:deprecated"] == b"true"


def test_active_schema_is_a_deprecated_name_of_schema(daily: PartitionedNamespace) -> None:
    daily.drop_column("amount")
    with pytest.warns(DeprecationWarning, match=r"use \.schema"):
        active = daily.active_schema
    assert active == daily.schema
