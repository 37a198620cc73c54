"""Data a new user hands to a write that is no table, or whose error did not say which value
or column is wrong (issue 39, the bad inputs nobody listed).

Before: a ``pyarrow.ChunkedArray`` raised a raw ``ArrowInvalid``; a pandas Series, a numpy
array, a dict of columns and a list of row dicts were refused without saying how to make a
table of them ("got an iterable of int"); a decimal that does not fit did not name the value;
a column named ``ID`` for ``id`` was not pointed to ``id``; a NULL in a non-nullable column
did not say where it was.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    DataValidationError,
    PartitionedNamespace,
    PartitionField,
)
from tests.support import leaf_files

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int64()),
        pa.field("dec", pa.decimal128(5, 2)),
    ]
)


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("part", "part")]
    )


@pytest.mark.parametrize(
    ("data", "advice"),
    [
        pytest.param({"id": [1], "part": [0]}, "pyarrow.table(data)", id="dict-of-columns"),
        pytest.param([{"id": 1, "part": 0}], "pyarrow.Table.from_pylist(rows)", id="row-dicts"),
        pytest.param(pd.Series([1, 2], name="id"), "series.to_frame()", id="pandas-series"),
        pytest.param(np.array([1, 2]), "pyarrow.table({'name': values})", id="numpy-array"),
        pytest.param(pa.chunked_array([[1, 2]]), "pyarrow.table({'id': values})", id="chunked"),
    ],
)
def test_data_that_is_no_table_says_how_to_make_one(
    ns: PartitionedNamespace, root: Path, data: object, advice: str
) -> None:
    with pytest.raises(DataValidationError) as info:
        ns.write(data)  # type: ignore[arg-type]
    assert advice in str(info.value)
    assert leaf_files(root) == []


def test_a_value_arrow_refuses_to_convert_is_named(ns: PartitionedNamespace) -> None:
    values = pa.array([Decimal("1.5"), Decimal("12345.6")], pa.decimal128(6, 1))
    with pytest.raises(
        DataValidationError, match=r"'dec'.*precision 5 \(e\.g\. Decimal\('12345\.6'\)\)"
    ):
        ns.write(pa.table({"id": [1, 2], "part": [0, 0], "dec": values}))


def test_a_column_in_another_case_is_pointed_to_the_namespace_column(
    ns: PartitionedNamespace,
) -> None:
    with pytest.raises(DataValidationError, match=r"column 'ID' .*did you mean 'id'\?"):
        ns.write(pa.table({"ID": [1], "part": [0]}))


def test_a_null_in_a_non_nullable_column_is_located(ns: PartitionedNamespace) -> None:
    with pytest.raises(DataValidationError, match=r"'id' is not nullable.*first at row 2"):
        ns.write(pa.table({"id": [1, 2, None], "part": [0, 0, 0]}))
