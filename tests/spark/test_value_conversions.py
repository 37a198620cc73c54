"""The Spark writer and ``format("lance_partitioned")`` convert values by the core's one rule
(issue 39): every value kept exactly, or the write refused naming the column and a value,
and nothing written. One test per rule family, each through both Spark paths.

Before, a double ``1e300`` was stored as ``inf`` in a float32 column, ``2`` as ``True`` in a
boolean one, ``'007'`` as ``7``, a Spark ``TIMESTAMP`` (a point in time) as its UTC wall
time in a zone-less column, and a struct's extra field was dropped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.spark import FORMAT, register, write_partitioned
from tests.support import tree

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("f32", pa.float32()),
        pa.field("flag", pa.bool_()),
        pa.field("i32", pa.int32()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tsz", pa.timestamp("us", "UTC")),
        pa.field("st", pa.struct([("a", pa.int64())])),
    ]
)


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    register(spark)


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(pa.table({"id": pa.array([100], pa.int64()), "part": pa.array([1], pa.int32())}))
    return ns


def frame(spark: SparkSession, *columns: str) -> DataFrame:
    """Rows 0..2 of partition 1 with ``columns`` (SQL select expressions)."""
    return spark.range(3).selectExpr("id", "CAST(1 AS INT) AS part", *columns)


def paths(uri: str) -> dict[str, Callable[[DataFrame], object]]:
    return {
        "write_partitioned": lambda df: write_partitioned(df, uri),
        "format": lambda df: df.write.format(FORMAT).mode("append").save(uri),
    }


def refused_everywhere(ns: PartitionedNamespace, root: Path, df: DataFrame, *parts: str) -> None:
    before = tree(root), ns.count_rows()
    for path, write in paths(ns.uri).items():
        with pytest.raises(Exception) as info:  # noqa: PT011 (the format's is Spark's class)
            write(df)
        message = str(info.value)
        assert "DataValidationError" in message or type(info.value).__name__ == (
            "DataValidationError"
        ), (path, message)
        assert all(part in message for part in parts), (path, message)
        assert (tree(root), ns.count_rows()) == before, path


def stored(ns: PartitionedNamespace, column: str) -> list[object]:
    return ns.to_table(columns=[column], filter="id < 100").column(column).to_pylist()


def test_numbers_are_kept_exactly_or_refused(
    spark: SparkSession, ns: PartitionedNamespace, root: Path
) -> None:
    for write in paths(ns.uri).values():  # values the column's type holds exactly
        write(frame(spark, "CAST(0.5 AS DOUBLE) AS f32", "CAST(id * 7 AS BIGINT) AS i32"))
    assert sorted(stored(ns, "f32")) == [0.5] * 6
    assert sorted(stored(ns, "i32")) == [0, 0, 7, 7, 14, 14]
    # checked on the executors, value by value: the error comes back under its class
    refused_everywhere(
        ns, root, frame(spark, "CAST(1e300 AS DOUBLE) AS f32"), "'f32'", "1e+300", "inf"
    )
    refused_everywhere(ns, root, frame(spark, "CAST(id + 3000000000 AS BIGINT) AS i32"), "'i32'")


def test_a_number_is_no_truth_value(
    spark: SparkSession, ns: PartitionedNamespace, root: Path
) -> None:
    refused_everywhere(
        ns, root, frame(spark, "CAST(2 AS BIGINT) AS flag"), "'flag'", "not a truth value"
    )


def test_text_is_no_number(spark: SparkSession, ns: PartitionedNamespace, root: Path) -> None:
    refused_everywhere(ns, root, frame(spark, "'007' AS i32"), "'i32'", "not read as a number")


def test_a_point_in_time_keeps_its_zone_or_is_refused(
    spark: SparkSession, ns: PartitionedNamespace, root: Path
) -> None:
    for write in paths(ns.uri).values():  # TIMESTAMP_NTZ is zone-less, TIMESTAMP a point in time
        write(
            frame(
                spark,
                "TIMESTAMP_NTZ '2025-12-10 12:00:00' AS ts",
                "TIMESTAMP '2025-12-10 12:00:00' AS tsz",
            )
        )
    assert set(stored(ns, "ts")) == {dt.datetime(2025, 12, 10, 12, 0)}
    assert set(stored(ns, "tsz")) == {dt.datetime(2025, 12, 10, 12, 0, tzinfo=dt.timezone.utc)}
    refused_everywhere(
        ns,
        root,
        frame(spark, "TIMESTAMP '2025-12-10 12:00:00' AS ts"),
        "'ts'",
        "zoned timestamp is not written as one without a zone",
    )


def test_a_struct_keeps_its_fields(
    spark: SparkSession, ns: PartitionedNamespace, root: Path
) -> None:
    refused_everywhere(
        ns,
        root,
        frame(spark, "named_struct('a', id, 'b', id) AS st"),
        "'st'",
        "nested values are converted only",
    )
