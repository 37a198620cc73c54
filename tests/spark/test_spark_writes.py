"""write_partitioned: distributed staging, one atomic publish, retries without duplicates."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.cli import DEMO_SCHEMA, demo_events
from airflow_provider_lance.namespace import (
    CommitResult,
    DataValidationError,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.errors import LanceNamespaceError, StorageError, is_retryable
from airflow_provider_lance.namespace.read.scan import open_leaf
from airflow_provider_lance.namespace.testing import ENV
from airflow_provider_lance.spark import StagedWrite, stage_partitioned, write_partitioned
from airflow_provider_lance.spark.writer import _project_error
from tests.spark.conftest import DRIVER_MEMORY_MB
from tests.support import EVENTS_SCHEMA, events, sort_rows, tree


def create(root: Path, *fields: PartitionField, schema: pa.Schema = EVENTS_SCHEMA):
    return PartitionedNamespace.create(
        root, schema=schema, partition_fields=list(fields) or [PartitionField("d", "event_date")]
    )


def data_files(root: Path) -> list[str]:
    return [f for f in tree(root) if "/data/" in f and not f.startswith("__manifest/")]


@pytest.mark.parametrize("distribution", ["hash", "none"])
def test_append_round_trip_creates_partitions_in_one_publish(
    spark: SparkSession, root: Path, distribution: str
) -> None:
    ns = create(root, PartitionField("d", "event_date"), PartitionField("c", "country"))
    table = events(2000)
    before = ns.version
    result = write_partitioned(spark.createDataFrame(table), str(root), distribution=distribution)
    assert isinstance(result, CommitResult)
    assert ns.version == before + 2  # claim + publish, whatever the partition count
    assert result.rows == 2000
    assert len(result.created) == 12  # 3 days x 4 countries (one of them NULL)
    assert sort_rows(ns.to_table()) == sort_rows(table)
    nulls = ns.prune("country IS NULL")
    assert len(nulls) == 3
    assert all(p.values["c"] is None for p in nulls)
    if distribution == "hash":  # each partition written by one task: one data file each
        assert len(data_files(root)) == 12


@pytest.mark.integration
def test_overwrite_replaces_exactly_the_touched_partitions(spark: SparkSession, root: Path) -> None:
    ns = create(root)
    ns.write(events(300, days=3))
    replacement = events(50, start=dt.date(2025, 12, 11), days=1, first_id=10_000)
    result = write_partitioned(spark.createDataFrame(replacement), str(root), mode="overwrite")
    assert [p.values["d"] for p in result.partitions] == [dt.date(2025, 12, 11)]
    assert ns.count_rows(filter="event_date = DATE '2025-12-11'") == 50
    assert ns.count_rows() == 250


@pytest.mark.integration
def test_bucket_and_multi_level_specs_match_the_core(spark: SparkSession, root: Path) -> None:
    fields = [
        PartitionField("month", "event_date", "date_part('month', col)"),
        PartitionField("bucket", "id", "abs(hash(col)) % 8"),
    ]
    ns = create(root, *fields)
    table = events(1000, days=40)
    write_partitioned(spark.createDataFrame(table), str(root))
    core = create(root.parent / "core", *fields)
    core.write(table)
    spark_parts = {tuple(p.values.values()): ns.count_rows_of(p) for p in ns.partitions()}
    core_parts = {tuple(p.values.values()): core.count_rows_of(p) for p in core.partitions()}
    assert spark_parts == core_parts
    assert len(spark_parts) == 16


@pytest.mark.integration
def test_timestamps_unicode_and_nulls_survive(spark: SparkSession, root: Path) -> None:
    ns = create(root, PartitionField("day", "event_date"), schema=DEMO_SCHEMA)
    table = demo_events(dt.date(2025, 12, 3), 3000, seed=7, first_id=0)
    write_partitioned(spark.createDataFrame(table), str(root))
    assert sort_rows(ns.to_table(), "event_id") == sort_rows(table, "event_id")


@pytest.mark.integration
def test_schema_evolution_then_spark_write(spark: SparkSession, root: Path) -> None:
    ns = create(root)
    ns.write(events(30, days=1))
    ns.add_column(pa.field("channel", pa.utf8()))
    ns.rename_column("country", "country_code")
    new = spark.createDataFrame(events(30, start=dt.date(2025, 12, 11), days=1, first_id=100))
    new = new.withColumnRenamed("country", "country_code").selectExpr("*", "'web' AS channel")
    write_partitioned(new, str(root))
    rows = ns.to_table(columns=["id", "country_code", "channel"]).to_pylist()
    assert len(rows) == 60
    assert {r["channel"] for r in rows if r["id"] < 100} == {None}
    assert {r["channel"] for r in rows if r["id"] >= 100} == {"web"}
    assert {r["country_code"] for r in rows} == {"US", "DE", "FR", None}


@pytest.mark.integration
def test_staged_write_is_invisible_until_committed_and_idempotent(
    spark: SparkSession, root: Path
) -> None:
    ns = create(root)
    ns.write(events(10, days=1))
    df = spark.createDataFrame(events(90, first_id=1000))
    staged = stage_partitioned(df, str(root), txn_id="load.1")
    assert isinstance(staged, StagedWrite)
    assert (staged.state, staged.rows, len(staged.partitions)) == ("staged", 90, 3)
    assert staged.record_uri.endswith("/_transactions/load.1/1")  # incarnation 1
    assert ns.count_rows() == 10  # nothing visible
    again = stage_partitioned(df, str(root), txn_id="load.1")  # a retried job
    assert again.rows == 90
    assert ns.transaction("load.1").info().rows == 90  # replaced, not added
    result = ns.commit("load.1")
    assert ns.count_rows() == 100
    # the job retried after its commit: the published result, no new rows
    assert write_partitioned(df, str(root), txn_id="load.1") == result
    assert ns.count_rows() == 100


@pytest.mark.integration
def test_a_failed_first_task_attempt_leaves_no_duplicates(spark: SparkSession, root: Path) -> None:
    """The first attempt of every task writes its data files, then fails; Spark retries it."""
    ns = create(root)
    env = spark.sparkContext.environment
    env[ENV] = "spark.task.staged.attempt0=raise"
    try:
        df = spark.createDataFrame(events(600)).repartition(3)
        result = write_partitioned(df, str(root), distribution="none", txn_id="flaky")
    finally:
        del env[ENV]
    assert result.rows == 600
    assert sort_rows(ns.to_table()) == sort_rows(events(600))
    stages = ns.transaction("flaky").stages()
    assert stages
    assert all(s.endswith("-1") for s in stages)  # only the retried attempts' stages
    live = {
        Path(f.path).name
        for p in ns.partitions()
        for fragment in open_leaf(ns.storage, p).get_fragments()
        for f in fragment.data_files()
    }
    assert {Path(f).name for f in data_files(root)} == live  # failed attempts' files are gone


@pytest.mark.integration
def test_bad_input_fails_fast_with_a_project_error_and_changes_nothing(
    spark: SparkSession, root: Path
) -> None:
    ns = create(root)
    ns.write(events(10, days=1))
    before = tree(root)
    unknown = spark.createDataFrame(events(10)).selectExpr("*", "1 AS nope")
    with pytest.raises(DataValidationError, match="'nope' is not in the namespace schema"):
        write_partitioned(unknown, str(root))
    # a NULL in a non-nullable column is only seen by a task: still a DataValidationError
    nulls = spark.createDataFrame(events(10)).selectExpr(
        "CASE WHEN id = 3 THEN NULL ELSE id END AS id", "event_date", "country", "amount"
    )
    with pytest.raises(DataValidationError, match="id"):
        write_partitioned(nulls, str(root))
    assert tree(root) == before
    assert ns.transactions() == []


def _raise_on_the_executor(name: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[Any]]:
    def fail(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from airflow_provider_lance.namespace import errors as executor_errors

        raise getattr(executor_errors, name)(f"{name} raised on an executor")
        yield from batches  # a generator, as mapInArrow wants

    return fail


@pytest.mark.integration
@pytest.mark.parametrize(
    "cls",
    [project_errors.TransactionAborted, project_errors.TransactionClosed, StorageError],
    ids=lambda cls: cls.__name__,
)
def test_a_project_error_on_an_executor_comes_back_under_its_own_class(
    spark: SparkSession, cls: type[LanceNamespaceError]
) -> None:
    """So the driver (and the job's exit code, and the Airflow task) see its ``retryable``."""
    df = spark.range(4).mapInArrow(_raise_on_the_executor(cls.__name__), "id long")
    with pytest.raises(Exception) as info:  # noqa: PT011 (Spark's own wrapper class)
        df.collect()
    assert not isinstance(info.value, LanceNamespaceError)
    error = _project_error(info.value)
    assert type(error) is cls
    assert str(error) == f"a Spark task failed: {cls.__name__} raised on an executor"
    assert is_retryable(error) is cls.retryable


@pytest.mark.integration
def test_a_write_larger_than_executor_memory(spark: SparkSession, root: Path) -> None:
    """~1.5x the JVM heap of the session goes through 4 MiB worker buffers."""
    ns = create(root, schema=EVENTS_SCHEMA.append(pa.field("payload", pa.utf8())))
    rows = 1_600_000
    df = spark.range(rows).selectExpr(
        "id",
        "date_add(DATE '2025-12-01', CAST(id % 8 AS INT)) AS event_date",
        "CAST(NULL AS STRING) AS country",
        "CAST(id AS DOUBLE) AS amount",
        "concat(repeat('x', 480), CAST(id AS STRING)) AS payload",
    )
    staged = stage_partitioned(df, str(root), flush_bytes=4 * 2**20)
    data_bytes = rows * 500
    assert data_bytes > 1.4 * DRIVER_MEMORY_MB * 2**20
    # every Python worker stayed far below the data size (its baseline is ~300 MiB)
    assert 0 < staged.peak_worker_rss_bytes < 0.6 * data_bytes
    result = ns.commit(staged.txn_id)
    assert result.rows == rows
    assert ns.count_rows() == rows
    assert len(result.partitions) == 8


@pytest.mark.integration
def test_a_write_to_a_path_without_a_namespace_says_how_to_create_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    df = spark.createDataFrame(events(3).to_pandas())
    with pytest.raises(project_errors.NamespaceNotFoundError) as info:
        write_partitioned(df, str(tmp_path / "nothing-here"))
    assert "PartitionedNamespace.create(" in str(info.value)
    assert not is_retryable(info.value)
    assert not (tmp_path / "nothing-here").exists()
