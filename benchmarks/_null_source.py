"""A Python data source that does no work: the floor PySpark's Data Source API costs any
Python data source, measured beside ``format("lance_partitioned")`` by ``bench_spark.py``.

Its writer's tasks consume the rows Spark sends them (as Arrow batches, as the format's
do) and write nothing; its commit publishes nothing; its reader has one input partition
and no rows. It imports nothing but PySpark, and ``bench_spark`` registers the module with
cloudpickle by value, so Spark's Python planner workers never import this file.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

NAME = "null_source"


class NullWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        pass


class NullReader(DataSourceReader):
    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return iter(())


class NullSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "id long"

    def writer(self, schema: Any, overwrite: bool) -> NullWriter:
        return NullWriter()

    def reader(self, schema: Any) -> NullReader:
        return NullReader()
