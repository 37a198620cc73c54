"""pandas DataFrames as a write's data (issue 39): an unnamed index is row labels, not data;
a named one is the column it names, as pyarrow converts it.

Before, a filtered or sorted DataFrame (``df[df.id > 5]``) was refused with "column
'__index_level_0__' is not in the namespace schema ... add it with add_column first", and an
object column of mixed str and int raised a raw ``pyarrow.ArrowTypeError``.
"""

from __future__ import annotations

from pathlib import Path

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
        pa.field("s", pa.utf8()),
    ]
)


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("part", "part")]
    )


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame(
        {"id": range(10), "part": [i % 2 for i in range(10)], "s": list("abcdefghij")}
    )


def stored(ns: PartitionedNamespace) -> list[dict]:
    return ns.to_table().sort_by("id").to_pylist()


def test_a_filtered_or_sorted_frame_writes_its_columns_only(
    ns: PartitionedNamespace, frame: pd.DataFrame
) -> None:
    ns.write(frame[frame.id > 5])  # index 6..9: row labels
    assert stored(ns) == frame[frame.id > 5].to_dict("records")
    ns.write(frame[frame.id <= 5].sort_values("id", ascending=False))
    assert stored(ns) == frame.to_dict("records")
    assert ns.schema.names == ["id", "part", "s"]


def test_every_path_leaves_the_index_out(ns: PartitionedNamespace, frame: pd.DataFrame) -> None:
    txn = ns.begin("append", txn_id="load")
    assert txn.stage(frame[frame.id > 7], stage_id="task").rows == 2
    ns.commit(txn)
    ns.merge(frame[frame.id < 2], on=["id", "part"])
    ns.write([frame.iloc[2:4], frame.iloc[4:6]])  # an iterable of chunks, as read_csv's
    assert [r["id"] for r in stored(ns)] == [0, 1, 2, 3, 4, 5, 8, 9]


@pytest.mark.parametrize(
    "index",
    [
        pytest.param(lambda f: f.set_index("s"), id="named"),
        pytest.param(lambda f: f.set_index(["s", "part"]), id="multi"),
        pytest.param(lambda f: f.set_index("s", drop=False), id="also-a-column"),
        pytest.param(lambda f: f.rename_axis("row"), id="a-named-range"),
    ],
)
def test_a_named_index_is_the_column_it_names(
    ns: PartitionedNamespace, frame: pd.DataFrame, index: object
) -> None:
    """A named index is data its user named (pyarrow's convention): written as a column."""
    ns.write(index(frame))  # type: ignore[operator]
    assert stored(ns) == frame.to_dict("records")


def test_a_named_index_that_is_no_column_is_refused_saying_so(
    ns: PartitionedNamespace, root: Path, frame: pd.DataFrame
) -> None:
    with pytest.raises(DataValidationError, match=r"index 'row'.*df\.reset_index\(drop=True\)"):
        ns.write(frame.assign(row=range(10)).set_index("row"))
    assert leaf_files(root) == []


def test_a_column_of_mixed_types_is_named_with_a_value(
    ns: PartitionedNamespace, root: Path
) -> None:
    frame = pd.DataFrame({"id": [1, 2, 3], "part": [0, 0, 0], "s": ["a", 1, "c"]})
    with pytest.raises(DataValidationError) as info:
        ns.write(frame)
    message = str(info.value)
    assert "column 's'" in message
    assert "str, int" in message
    assert "1 at index 1" in message
    assert leaf_files(root) == []


def test_duplicate_column_names_are_refused(ns: PartitionedNamespace) -> None:
    frame = pd.DataFrame([[1, 0, "a", "b"]], columns=["id", "part", "s", "s"])
    with pytest.raises(DataValidationError, match="duplicate column names: s"):
        ns.write(frame)


def test_a_categorical_column_is_written_as_its_values(ns: PartitionedNamespace) -> None:
    frame = pd.DataFrame({"id": [1, 2], "part": [0, 0], "s": pd.Categorical(["x", "y"])})
    ns.write(frame)
    assert [r["s"] for r in stored(ns)] == ["x", "y"]
