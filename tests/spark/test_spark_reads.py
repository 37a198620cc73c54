"""read_partitioned: pruned on the driver, per-fragment tasks, the namespace schema's rules."""

from __future__ import annotations

import datetime as dt
import time

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace import (
    FilterError,
    InvalidArgumentError,
    PartitionedNamespace,
    VersionNotFoundError,
)
from airflow_provider_lance.namespace.errors import SchemaError
from airflow_provider_lance.namespace.format import manifest as manifest_module
from airflow_provider_lance.namespace.format.manifest import ManifestView
from airflow_provider_lance.spark import read_partitioned
from airflow_provider_lance.spark.reader import LeafScan
from tests.support import EVENTS_SCHEMA, events, sort_rows


def spark_rows(df) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r.asDict() for r in df.collect()]


@pytest.mark.parametrize(
    "sql",
    [
        None,
        "event_date = DATE '2025-12-11'",
        "event_date >= DATE '2025-12-13' AND country = 'DE'",
        "country IS NULL OR amount > 800",
        "abs(hash(id)) % 3 = 1",  # not pushable to Lance: evaluated by the core
    ],
)
def test_reads_match_the_core(
    spark: SparkSession, six_days: PartitionedNamespace, sql: str
) -> None:
    df = read_partitioned(spark, six_days.uri, filter=sql)
    assert sort_rows(pa.Table.from_pylist(spark_rows(df))) == sort_rows(
        six_days.to_table(filter=sql)
    )


@pytest.mark.integration
def test_tasks_split_by_fragment_and_projection(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    one = "event_date = DATE '2025-12-10'"
    df = read_partitioned(spark, six_days.uri, filter=one, columns=["amount", "id"])
    assert df.columns == ["amount", "id"]
    # one partition (fewer than the 2 task slots) with two fragments: a task per fragment
    assert df.rdd.getNumPartitions() == 2
    assert len(df.collect()) == six_days.count_rows(filter=one) == 130
    # as many partitions as slots: a task per partition
    two = "event_date <= DATE '2025-12-11'"
    assert read_partitioned(spark, six_days.uri, filter=two).rdd.getNumPartitions() == 2


@pytest.mark.integration
def test_planning_a_pruned_read_reads_only_the_manifest_rows_its_filter_selects(
    six_days: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: planning logged how many partitions the namespace has, which read
    every ``__manifest`` row (and built a Partition for each: seconds at a million) to
    plan a read of one date. The prune's scan of the filtered rows is all it reads (of a
    ``__manifest`` too big to read whole: a small one is read whole once, by design)."""
    monkeypatch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", 0)
    one = "event_date = DATE '2025-12-10'"
    scan, _ = LeafScan.resolve(six_days.uri, None, filter=one)
    scans: list[object] = []
    leaf_rows = ManifestView.leaf_rows

    def recorded(view: ManifestView, columns: list[str], where: object = None) -> pa.Table:
        scans.append(where)
        return leaf_rows(view, columns, where)  # type: ignore[arg-type]

    monkeypatch.setattr(ManifestView, "leaf_rows", recorded)
    tasks = scan.plan(slots=1)
    assert len(tasks) == 1
    assert scans
    assert all(where is not None for where in scans)  # no scan of every row


@pytest.mark.integration
def test_one_manifest_version_and_older_versions(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    before = six_days.version
    df = read_partitioned(spark, six_days.uri)  # planned now: later writes are not seen
    six_days.write(events(30, days=1, first_id=5000))
    assert df.count() == 660
    assert read_partitioned(spark, six_days.uri).count() == 690
    assert read_partitioned(spark, six_days.uri, version=before).count() == 660


@pytest.mark.integration
def test_as_of_a_tag_a_moment_and_a_version(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    """The driver resolves ``as_of`` to one manifest version; every task reads that one,
    in the schema it had (a column added later is not there)."""
    before, expected = six_days.version, sort_rows(six_days.to_table())
    six_days.tag("before-the-change")
    time.sleep(0.02)
    moment = dt.datetime.now(dt.timezone.utc)
    six_days.add_column(pa.field("channel", pa.utf8()))
    six_days.write(events(30, days=1, first_id=5000), mode="overwrite")
    for as_of in ("before-the-change", moment, before):
        df = read_partitioned(spark, six_days.uri, as_of=as_of)
        assert df.columns == ["id", "event_date", "country", "amount"]
        assert sort_rows(pa.Table.from_pylist(spark_rows(df))) == expected
    one = "event_date = DATE '2025-12-10'"
    old = read_partitioned(spark, six_days.uri, filter=one, as_of="before-the-change").count()
    assert old == six_days.count_rows(filter=one, as_of=before) == 130
    assert read_partitioned(spark, six_days.uri, filter=one).count() == 30
    with pytest.raises(VersionNotFoundError, match="no tag 'nope'"):
        read_partitioned(spark, six_days.uri, as_of="nope")
    with pytest.raises(InvalidArgumentError, match="not both"):
        read_partitioned(spark, six_days.uri, as_of=before, version=before)


@pytest.mark.integration
def test_evolved_schema_reads_old_partitions(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    six_days.add_column(pa.field("channel", pa.utf8()))
    six_days.rename_column("country", "cc")
    six_days.promote_column("amount", pa.float64())
    df = read_partitioned(spark, six_days.uri, filter="cc = 'FR'", columns=["id", "cc", "channel"])
    rows = spark_rows(df)
    assert rows
    assert {r["cc"] for r in rows} == {"FR"}
    assert {r["channel"] for r in rows} == {None}
    assert len(rows) == six_days.count_rows(filter="cc = 'FR'")


@pytest.mark.integration
def test_bad_reads_fail_on_the_driver(spark: SparkSession, six_days: PartitionedNamespace) -> None:
    with pytest.raises(FilterError):
        read_partitioned(spark, six_days.uri, filter="event_date >")
    with pytest.raises(SchemaError, match="nope"):
        read_partitioned(spark, six_days.uri, columns=["id", "nope"])


@pytest.mark.integration
def test_nothing_matches(spark: SparkSession, six_days: PartitionedNamespace) -> None:
    df = read_partitioned(spark, six_days.uri, filter=f"event_date = DATE '{dt.date(1999, 1, 1)}'")
    assert df.count() == 0
    assert df.columns == EVENTS_SCHEMA.names
