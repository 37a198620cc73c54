"""``format("lance_partitioned")``: batch reads and writes through Spark's own API."""

from __future__ import annotations

import datetime as dt
import logging
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import ENV
from airflow_provider_lance.spark import FORMAT, register
from airflow_provider_lance.spark.datasource import PUSHDOWN_CONF
from tests.support import EVENTS_SCHEMA, events, sort_rows, tree


@pytest.fixture(scope="module", autouse=True)
def registered(spark: SparkSession) -> Iterator[None]:
    """Spark's filter pushdown on, as a user who wants ``where`` to prune turns it on; the
    session's default (off) again afterwards, for the next module on this worker."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    register(spark)
    yield
    spark.conf.unset(PUSHDOWN_CONF)
    register(spark)


@pytest.fixture
def pushdown_left_off(spark: SparkSession) -> Iterator[None]:
    """The format registered as ``register`` leaves a session that did not set pushdown."""
    spark.conf.unset(PUSHDOWN_CONF)
    register(spark)
    yield
    spark.conf.set(PUSHDOWN_CONF, "true")
    register(spark)


def rows(df) -> list[dict]:  # type: ignore[no-untyped-def]
    return sort_rows(pa.Table.from_pylist([r.asDict() for r in df.collect()]))


@pytest.mark.integration
def test_register_names_the_format_and_leaves_filter_pushdown_as_the_session_set_it(
    spark: SparkSession, pushdown_left_off: None
) -> None:
    assert FORMAT == "lance_partitioned"
    assert spark.conf.get(PUSHDOWN_CONF, None) is None


@pytest.mark.integration
def test_register_warns_that_pushdown_makes_a_reused_dataframe_unsafe(
    spark: SparkSession,
) -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("airflow_provider_lance.spark.datasource")
    logger.addHandler(handler)
    try:
        register(spark)  # the module's fixture turned pushdown on
    finally:
        logger.removeHandler(handler)
    [record] = [r for r in records if r.levelno == logging.WARNING]
    assert "same loaded DataFrame" in record.getMessage()
    assert '.option("filter", ...)' in record.getMessage()


def reuse_one_dataframe(spark: SparkSession, ns: PartitionedNamespace) -> list[tuple[int, int]]:
    """(Spark's count, the core's) for queries of one loaded DataFrame: a pushed filter,
    then no filter, then one Spark cannot push (an OR)."""
    df = spark.read.format(FORMAT).load(ns.uri)
    pushed, unpushable = "id >= 590", "id >= 590 OR id < 5"
    return [
        (df.where(pushed).count(), ns.count_rows(filter=pushed)),
        (df.count(), ns.count_rows()),
        (df.where(unpushable).count(), ns.count_rows(filter=unpushable)),
    ]


@pytest.mark.integration
def test_a_loaded_dataframe_queried_again_reads_what_each_query_asks(
    spark: SparkSession, six_days: PartitionedNamespace, pushdown_left_off: None
) -> None:
    """register's default: no Spark pushdown, so no read planned for one query is reused."""
    counts = reuse_one_dataframe(spark, six_days)
    assert [spark_count for spark_count, _ in counts] == [core for _, core in counts]


@pytest.mark.integration
def test_spark_fact_with_pushdown_a_reused_dataframe_returns_its_first_querys_rows(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    """Why register leaves pushdown off: Spark 4.2.1 and 4.3.0 keep the read the pushdown
    planned on the source. When this fails, Spark scopes it to the scan (as its master
    does): turn pushdown on in register again."""
    [first, unfiltered, unpushable] = reuse_one_dataframe(spark, six_days)
    assert first[0] == first[1]
    assert unfiltered[0] == first[1] != unfiltered[1]
    assert unpushable[0] != unpushable[1]


def test_read_has_the_namespace_schema_and_rows(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    df = spark.read.format(FORMAT).load(six_days.uri)
    assert df.columns == EVENTS_SCHEMA.names
    assert df.schema["id"].nullable is False
    assert rows(df) == sort_rows(six_days.to_table())


@pytest.mark.integration
@pytest.mark.parametrize(
    "where",
    [
        "event_date = DATE '2025-12-11'",
        "event_date >= DATE '2025-12-13' AND country = 'DE'",
        # under a NOT, a null-safe equality keeps the NULLs
        "event_date IN (DATE '2025-12-10', DATE '2025-12-15') AND NOT country <=> 'US'",
        "NOT (country <=> NULL) AND NOT event_date IN (DATE '2025-12-10')",
        "country IS NULL OR amount > 800",  # an OR: Spark keeps it (nothing is pushed)
        "amount > 100.5 AND id < 300",  # a float: Spark evaluates it, the id is pushed
        "country LIKE 'D%'",
    ],
)
def test_spark_filters_match_the_core(
    spark: SparkSession, six_days: PartitionedNamespace, where: str
) -> None:
    df = spark.read.format(FORMAT).load(six_days.uri).where(where)
    sql = where.replace("NOT country <=> 'US'", "country IS DISTINCT FROM 'US'")
    assert rows(df) == sort_rows(six_days.to_table(filter=sql))


@pytest.mark.integration
def test_a_pushed_filter_never_opens_a_pruned_leaf(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    """The leaf of 2025-12-12 has no data files any more: a read that touched it would fail."""
    [gone] = six_days.prune("event_date = DATE '2025-12-12'")
    shutil.rmtree(Path(gone.location.removeprefix("file://")) / "data")
    one_day = spark.read.format(FORMAT).load(six_days.uri).where("event_date = DATE '2025-12-11'")
    assert one_day.count() == six_days.count_rows(filter="event_date = DATE '2025-12-11'") == 130
    others = spark.read.format(FORMAT).load(six_days.uri).where("event_date <> DATE '2025-12-12'")
    assert others.count() == 660 - 100
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        spark.read.format(FORMAT).load(six_days.uri).count()


@pytest.mark.integration
def test_the_filter_option_prunes_also_without_spark_filter_pushdown(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    [gone] = six_days.prune("event_date = DATE '2025-12-12'")
    shutil.rmtree(Path(gone.location.removeprefix("file://")) / "data")
    one = "event_date = DATE '2025-12-11'"
    df = spark.read.format(FORMAT).option("filter", one).load(six_days.uri)
    assert df.count() == 130
    assert rows(df.where("country = 'DE'")) == sort_rows(
        six_days.to_table(filter=f"{one} AND country = 'DE'")
    )


@pytest.mark.integration
def test_tasks_are_planned_from_the_pruned_leaves_and_fragments(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    load = spark.read.format(FORMAT).option("parallelism", "2")
    # one partition with two fragments (fewer partitions than 2): a task per fragment
    one = load.load(six_days.uri).where("event_date = DATE '2025-12-10'")
    assert one.rdd.getNumPartitions() == 2
    assert load.load(six_days.uri).rdd.getNumPartitions() == 6  # a task per partition
    projected = load.option("columns", "amount, id").load(six_days.uri)
    assert projected.columns == ["amount", "id"]
    assert projected.count() == 660


@pytest.mark.integration
def test_as_of_a_version_a_moment_and_a_tag(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    before, expected = six_days.version, sort_rows(six_days.to_table())
    six_days.tag("before-the-change")
    time.sleep(0.02)
    moment = dt.datetime.now(dt.timezone.utc)
    six_days.add_column(pa.field("channel", pa.utf8()))
    six_days.write(events(30, days=1, first_id=5000), mode="overwrite")
    for as_of in ("before-the-change", moment.isoformat(), str(before)):
        df = spark.read.format(FORMAT).option("as_of", as_of).load(six_days.uri)
        assert df.columns == EVENTS_SCHEMA.names  # the schema of then
        assert rows(df) == expected
    now = spark.read.format(FORMAT).load(six_days.uri)
    assert now.columns == [*EVENTS_SCHEMA.names, "channel"]
    assert now.where("event_date = DATE '2025-12-10'").count() == 30


def test_append_then_overwrite_is_a_dynamic_partition_overwrite(
    spark: SparkSession, root: Path
) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    before = ns.version
    spark.createDataFrame(events(300, days=3)).write.format(FORMAT).mode("append").save(ns.uri)
    assert ns.version == before + 2  # claim + publish: one atomic publish
    assert sort_rows(ns.to_table()) == sort_rows(events(300, days=3))
    replacement = events(50, start=dt.date(2025, 12, 11), days=1, first_id=10_000)
    spark.createDataFrame(replacement).write.format(FORMAT).mode("overwrite").save(ns.uri)
    assert ns.count_rows(filter="event_date = DATE '2025-12-11'") == 50
    assert ns.count_rows() == 250


@pytest.mark.integration
def test_txn_id_makes_a_rerun_publish_once(spark: SparkSession, root: Path) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    df = spark.createDataFrame(events(90))
    for _ in range(2):
        df.write.format(FORMAT).mode("append").option("txn_id", "load.1").save(ns.uri)
    assert ns.count_rows() == 90
    assert ns.transaction("load.1").info().rows == 90


@pytest.mark.integration
def test_a_failed_first_task_attempt_publishes_rows_exactly_once(
    spark: SparkSession, root: Path
) -> None:
    """Every task's first attempt stages its files, then fails; Spark retries it
    (``local[2,2]``): ``commit`` gets the retried attempts' messages only."""
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    env = spark.sparkContext.environment
    env[ENV] = "spark.task.staged.attempt0=raise"
    register(spark)  # a data source's tasks get the environment of its registration
    try:
        df = spark.createDataFrame(events(600)).repartition(3)
        df.write.format(FORMAT).mode("append").option("txn_id", "flaky").save(ns.uri)
    finally:
        del env[ENV]
        register(spark)
    assert sort_rows(ns.to_table()) == sort_rows(events(600))
    stages = ns.transaction("flaky").stages()
    assert len(stages) == 3
    assert all(s.endswith("-1") for s in stages)  # only the retried attempts' stages


@pytest.mark.integration
def test_a_failed_job_is_aborted_and_leaves_nothing(spark: SparkSession, root: Path) -> None:
    """A NULL in a non-nullable column fails a task on every attempt: ``abort`` runs and
    removes what the other tasks staged."""
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    ns.write(events(10, days=1))
    before = tree(root)
    df = spark.createDataFrame(events(300)).repartition(3)
    bad = df.selectExpr(
        "CASE WHEN id = 3 THEN NULL ELSE id END AS id", "event_date", "country", "amount"
    )
    with pytest.raises(Exception, match="id"):
        bad.write.format(FORMAT).mode("append").save(ns.uri)
    assert ns.count_rows() == 10
    assert [f for f in tree(root) if "/data/" in f] == [f for f in before if "/data/" in f]
    assert ns.transactions() == []


@pytest.mark.integration
def test_bad_input_is_refused_before_any_task(spark: SparkSession, root: Path) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    unknown = spark.createDataFrame(events(10)).selectExpr("*", "1 AS nope")
    with pytest.raises(Exception, match="'nope' is not in the namespace schema"):
        unknown.write.format(FORMAT).mode("append").save(ns.uri)
    with pytest.raises(Exception, match="FilterError"):
        spark.read.format(FORMAT).option("filter", "event_date >").load(ns.uri).collect()


@pytest.mark.integration
def test_options_it_does_not_take_or_cannot_parse_are_refused(
    spark: SparkSession, six_days: PartitionedNamespace
) -> None:
    """Ignored, Delta's ``versionAsOf`` would read the latest rows instead of version 1."""
    for option, value, message in [
        (
            "versionAsOf",
            "1",
            "no option 'versionasof' (for 'versionasof', this format has 'as_of')",
        ),
        ("txn_id", "t1", "a lance_partitioned read takes no option 'txn_id'"),  # a write's
        ("parallelism", "many", "parallelism option must be a whole number of at least 1"),
        ("parallelism", "0", "parallelism option must be a whole number of at least 1, not '0'"),
        ("storage_options", "{x", "the storage_options option is not valid JSON"),
        ("storage_options", "[1]", "the storage_options option must be a JSON object"),
    ]:
        reader = spark.read.format(FORMAT).option(option, value)  # (a reader keeps options)
        with pytest.raises(Exception, match=re.escape(message)) as caught:
            reader.load(six_days.uri).count()
        assert "InvalidArgumentError" in str(caught.value)
    frame = spark.createDataFrame(events(10))
    for option, value, message in [
        ("mergeSchema", "true", "a lance_partitioned write takes no option 'mergeschema'"),
        ("flush_bytes", "-1", "flush_bytes option must be a whole number of at least 1"),
    ]:
        with pytest.raises(Exception, match=re.escape(message)):
            frame.write.format(FORMAT).mode("append").option(option, value).save(six_days.uri)
    assert six_days.count_rows() == 660  # nothing was written
