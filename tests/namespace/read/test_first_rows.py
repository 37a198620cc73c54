"""The first n rows of a read, one function (``read/scan.py``'s ``first_rows``) behind
``to_table(limit=)``, ``to_reader(limit=)``, ``to_batches(limit=)`` and the pyarrow
dataset's ``head``: it stops reading once it has its rows and closes what it reads from,
also when its reader is closed early."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import InvalidArgumentError, PartitionedNamespace
from airflow_provider_lance.namespace.read.scan import first_rows
from tests.support import tagged_rows


class Source:
    """Batches of 3 rows (ids from 0), counting those taken and whether it was closed."""

    def __init__(self, batches: int) -> None:
        self.taken = 0
        self.closed = False
        self._batches = self._make(batches)

    def _make(self, n: int) -> Iterator[pa.RecordBatch]:
        try:
            for i in range(n):
                self.taken += 1
                yield pa.record_batch({"id": list(range(3 * i, 3 * i + 3))})
        finally:
            self.closed = True

    def __iter__(self) -> Source:
        return self

    def __next__(self) -> pa.RecordBatch:
        return next(self._batches)

    def close(self) -> None:
        self._batches.close()
        self.closed = True  # (a generator never started runs no finally)


def rows(batches: Iterator[pa.RecordBatch]) -> list[int]:
    return [i for b in batches for i in b.column("id").to_pylist()]


@pytest.mark.parametrize(
    ("limit", "expected", "taken"),
    [
        (None, list(range(12)), 4),
        (0, [], 0),
        (1, [0], 1),
        (5, [0, 1, 2, 3, 4], 2),
        (6, list(range(6)), 2),  # ends on a batch: the next is never asked for
        (100, list(range(12)), 4),
    ],
)
def test_the_first_rows_and_no_batch_more(limit: int | None, expected: list, taken: int) -> None:
    source = Source(4)
    assert rows(first_rows(source, limit)) == expected
    assert source.taken == taken
    assert source.closed


def test_closing_early_closes_the_source() -> None:
    source = Source(4)
    batches = first_rows(source, 10)
    assert next(batches).num_rows == 3
    batches.close()
    assert source.closed
    assert source.taken == 1


@pytest.mark.parametrize("limit", [-1, 2.5, True, "3"])
def test_a_count_that_is_no_whole_number_is_refused(limit: object) -> None:
    with pytest.raises(InvalidArgumentError, match="whole number"):
        first_rows(Source(1), limit)  # type: ignore[arg-type]


@pytest.fixture
def four_parts(tagged: PartitionedNamespace) -> PartitionedNamespace:
    tagged.write(tagged_rows("seed", [1, 2, 3, 4], 5, first_id=0))
    return tagged


def test_head_of_the_pyarrow_dataset(four_parts: PartitionedNamespace) -> None:
    dataset = four_parts.to_pyarrow_dataset()
    empty = dataset.head(0)
    assert empty.num_rows == 0
    assert empty.schema == dataset.schema
    assert dataset.head(7).num_rows == 7
    assert dataset.head(100).num_rows == 20
    assert dataset.scanner(columns=["id"]).head(0).schema.names == ["id"]
    with pytest.raises(InvalidArgumentError, match="whole number"):
        dataset.head(-1)


def test_limited_readers_and_one_closed_early(four_parts: PartitionedNamespace) -> None:
    assert four_parts.to_table(limit=7).num_rows == 7
    assert [b.num_rows for b in four_parts.to_batches(limit=7, batch_size=3)] == [3, 2, 2]
    reader = four_parts.to_reader(limit=15, batch_size=2)
    assert reader.read_next_batch().num_rows == 2
    reader.close()
    assert four_parts.to_table(limit=20).num_rows == 20


def test_a_read_of_no_rows_is_empty_with_the_schema_as_head_and_pylance_answer_it(
    four_parts: PartitionedNamespace,
) -> None:
    empty = four_parts.to_table(limit=0)
    assert empty.num_rows == 0
    assert empty.schema == four_parts.to_pyarrow_dataset().head(0).schema
    assert four_parts.to_table(columns=["id"], limit=0).schema.names == ["id"]
    assert list(four_parts.to_batches(limit=0)) == []
    assert four_parts.to_reader(limit=0).read_all().num_rows == 0
    with pytest.raises(InvalidArgumentError, match="whole number"):
        four_parts.to_table(limit=-1)
