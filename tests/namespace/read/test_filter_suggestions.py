"""A filter naming no column suggests namespace columns only (issue 39).

Before, DataFusion's own suggestion came through with the name of the table it planned the
filter against: ``Did you mean 'cde590d6...e.name'?`` (an internal alias, new every time).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    ExpressionError,
    FilterError,
    PartitionedNamespace,
    PartitionField,
)

SCHEMA = pa.schema(
    [pa.field("id", pa.int64()), pa.field("Name", pa.utf8()), pa.field("country", pa.utf8())]
)
INTERNAL = re.compile(r"\b(?:c[0-9a-f]{32}|__input_\d+)\.")


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("country", "country")]
    )
    ns.write(pa.table({"id": [1], "Name": ["x"], "country": ["DE"]}))
    return ns


@pytest.mark.parametrize(
    ("sql", "named", "suggested"),
    [
        ("countr = 'DE'", "countr", "'country'"),
        ("id + idd > 1", "idd", "'id'"),
        ("zzz = 1", "zzz", None),
    ],
)
def test_an_unknown_column_is_named_with_namespace_columns_only(
    ns: PartitionedNamespace, sql: str, named: str, suggested: str | None
) -> None:
    for read in (ns.prune, lambda f: ns.to_table(filter=f), lambda f: ns.count_rows(filter=f)):
        with pytest.raises(FilterError) as info:
            read(sql)
        message = str(info.value)
        assert not INTERNAL.search(message), message
        assert f"names no column {named!r}" in message
        assert "(the columns are id, Name, country)" in message
        if suggested is None:
            assert "did you mean" not in message.lower()
        else:
            assert f"did you mean {suggested}?" in message


def test_a_name_in_other_case_is_told_to_be_quoted(ns: PartitionedNamespace) -> None:
    """SQL reads ``Name`` without quotes as ``name``."""
    with pytest.raises(FilterError, match=r"did you mean 'Name'\?.*double quotes, \"Name\""):
        ns.count_rows(filter="Name = 'x'")
    assert ns.count_rows(filter="\"Name\" = 'x'") == 1


def test_a_partition_expression_naming_no_column_shows_no_internal_alias(root: Path) -> None:
    with pytest.raises(ExpressionError) as info:
        PartitionedNamespace.create(
            root, schema=SCHEMA, partition_fields=[PartitionField("m", "id", "coll + 1")]
        )
    message = str(info.value)
    assert not INTERNAL.search(message), message
    assert "Did you mean 'col'?" in message


@pytest.mark.parametrize("sql", ["id = 'abc'", "id + 1 = 'abc'", "country = 'DE' AND id = 'x'"])
def test_a_literal_that_cannot_be_cast_is_shown_in_the_users_terms(
    ns: PartitionedNamespace, sql: str
) -> None:
    """The literal and the comparison around it, as written, without the internal alias."""
    with pytest.raises(FilterError) as info:
        ns.to_table(filter=sql)
    message = str(info.value)
    assert not INTERNAL.search(message), message
    assert "Cannot cast string" in message, message
    assert " in id " in message, message
