"""``writeStream.format("lance_partitioned")``: every micro-batch published exactly once."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import ENV
from airflow_provider_lance.spark import FORMAT, register
from tests.support import EVENTS_SCHEMA, events, sort_rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> None:
    register(spark)


class Landing:
    """A directory of Parquet files, one file per micro-batch (``maxFilesPerTrigger=1``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir()
        self.files = 0

    def add(self, n: int) -> None:
        table = events(n, first_id=self.files * 1000)
        path = self.path / f"{self.files:04}.parquet"
        pq.write_table(table, path)
        # Spark's file source takes files in modification-time order: files written within
        # one tick of the clock would come in any order, so each gets its own second.
        moment = 1_700_000_000 + 10 * self.files
        os.utime(path, (moment, moment))
        self.files += 1

    def expected(self) -> list[dict]:
        return sort_rows(pq.read_table(self.path, schema=EVENTS_SCHEMA))


def start(
    spark: SparkSession, landing: Landing, uri: str, checkpoint: Path, **options: str
) -> StreamingQuery:
    stream = (
        spark.readStream.schema("id long, event_date date, country string, amount double")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(landing.path))
    )
    writer = stream.writeStream.format(FORMAT).option("checkpointLocation", str(checkpoint))
    return writer.options(**options).start(uri)


def batch_txns(ns: PartitionedNamespace) -> list[str]:
    return sorted(t.txn_id for t in ns.transactions() if t.txn_id.startswith("stream-"))


def test_each_micro_batch_is_one_publish_keyed_by_query_and_batch(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    landing = Landing(tmp_path / "landing")
    for n in (60, 90, 30):
        landing.add(n)
    query = start(spark, landing, by_day.uri, tmp_path / "cp")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sort_rows(by_day.to_table()) == landing.expected()
    assert batch_txns(by_day) == [f"stream-{query.id}-{b}" for b in range(3)]
    assert [by_day.commit(t).rows for t in batch_txns(by_day)] == [60, 90, 30]  # the published ones


def test_a_query_killed_between_its_publish_and_its_commit_log_publishes_nothing_twice(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    """The commit of batch 1 publishes, then its Python worker is killed (SIGKILL) before
    Spark writes the batch to the checkpoint's commit log: the query dies. Restarted from
    the checkpoint (the same query id), Spark replays batch 1; its commit finds the batch
    published and publishes nothing; batch 2 goes on as usual."""
    landing = Landing(tmp_path / "landing")
    checkpoint = tmp_path / "cp"
    landing.add(50)
    query = start(spark, landing, by_day.uri, checkpoint)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    env = spark.sparkContext.environment
    env[ENV] = "commit.after_publish=kill"
    register(spark)  # the data source's workers get the environment of its registration
    try:
        landing.add(70)
        crashed = start(spark, landing, by_day.uri, checkpoint)
        with pytest.raises(Exception):  # noqa: B017, PT011 (the worker died)
            crashed.processAllAvailable()
        crashed.stop()
    finally:
        del env[ENV]
        register(spark)
    assert by_day.count_rows() == 120  # batch 1 is published ...
    assert not (checkpoint / "commits" / "1").exists()  # ... but Spark did not record it
    assert (checkpoint / "offsets" / "1").exists()  # and will run it again
    landing.add(40)
    restarted = start(spark, landing, by_day.uri, checkpoint)
    try:
        restarted.processAllAvailable()
    finally:
        restarted.stop()
    assert restarted.id == query.id == crashed.id  # the id is kept in the checkpoint
    assert (checkpoint / "commits" / "1").exists()
    assert sort_rows(by_day.to_table()) == landing.expected()  # each row once
    assert batch_txns(by_day) == [f"stream-{query.id}-{b}" for b in range(3)]


def test_two_queries_on_one_namespace_do_not_collide(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    """Both run batches 0 and 1: their transactions differ by the query id."""
    first, second = Landing(tmp_path / "a"), Landing(tmp_path / "b")
    for landing in (first, second):
        landing.add(20)
        landing.add(30)
    second.files = 0  # the same ids would collide in sort_rows: shift the second source
    second.path.joinpath("0000.parquet").unlink()
    second.path.joinpath("0001.parquet").unlink()
    pq.write_table(events(20, first_id=50_000), second.path / "0000.parquet")
    pq.write_table(events(30, first_id=60_000), second.path / "0001.parquet")
    queries = [
        start(spark, first, by_day.uri, tmp_path / "cp-a"),
        start(spark, second, by_day.uri, tmp_path / "cp-b"),
    ]
    try:
        for query in queries:
            query.processAllAvailable()
    finally:
        for query in queries:
            query.stop()
    assert sort_rows(by_day.to_table()) == sorted(
        first.expected() + second.expected(), key=lambda r: r["id"]
    )
    assert len(batch_txns(by_day)) == 4


def test_the_query_id_option_keys_batches_instead_of_the_query(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    landing = Landing(tmp_path / "landing")
    landing.add(10)
    query = start(spark, landing, by_day.uri, tmp_path / "cp", query_id="events-ingest")
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert batch_txns(by_day) == ["stream-events-ingest-0"]
    assert by_day.count_rows() == 10


def test_only_the_append_output_mode_is_supported(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    landing = Landing(tmp_path / "landing")
    landing.add(10)
    counts = (
        spark.readStream.schema("id long, event_date date, country string, amount double")
        .parquet(str(landing.path))
        .groupBy("event_date")
        .count()
        .selectExpr("count AS id", "event_date")
    )
    for mode in ("complete", "update"):
        query = (
            counts.writeStream.format(FORMAT)
            .outputMode(mode)
            .option("checkpointLocation", str(tmp_path / f"cp-{mode}"))
            .start(by_day.uri)
        )
        try:
            with pytest.raises(Exception, match="append"):
                query.processAllAvailable()
        finally:
            query.stop()
    assert by_day.count_rows() == 0
