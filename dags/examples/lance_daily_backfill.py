"""Daily events into a namespace partitioned by day, with a bounded catchup backfill.

Each run lands its day's raw events as Parquet (including a few late events stamped with
the day before), then Spark overwrites exactly that day's partition (the SQL keeps the
day's rows only, so yesterday's partition is never clobbered by late arrivals), and the
commit publishes it atomically. Re-running a day replaces it; retrying a task never
duplicates rows (the transaction id is derived from dag/run/task).

The namespace declares a BTREE index on ``user_id`` once (``declare_index``: a run that
finds it declared changes nothing), and each run indexes the day it published
(``index_day``: ``optimize_indices`` on that day's partition), so a user's events are
looked up through the index on every published day.

Once published, a PySpark job of your own (``jobs/daily_rollup.py``, submitted with
Airflow's SparkSubmitOperator) reads the day with ``spark.read.format("lance_partitioned")``
and overwrites the day's totals per country in a rollup namespace with
``df.write.format("lance_partitioned")``, once per day however often it is retried.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``), ``spark_default``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, AssetAlias, task

from airflow_provider_lance.example_data import EVENTS_SCHEMA
from airflow_provider_lance.operators import (
    LanceCommitOperator,
    LanceCreateIndexOperator,
    LanceCreatePartitionOperator,
    LanceOptimizeIndicesOperator,
    LanceSparkWriteOperator,
)

NAMESPACE = "examples/daily_events"
ROLLUP = "examples/daily_totals"
ROLLUP_SCHEMA = [
    {"name": "event_date", "type": "date32"},
    {"name": "country", "type": "utf8"},
    {"name": "events", "type": "int64"},
    {"name": "amount", "type": "float64"},
]
ROLLUP_JOB = str(Path(__file__).parent / "jobs" / "daily_rollup.py")
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
}

with DAG(
    dag_id="lance_daily_backfill",
    description="Land, Spark-overwrite and publish one day of events per run",
    schedule="@daily",
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    end_date=dt.datetime(2025, 12, 3, tzinfo=dt.timezone.utc),
    catchup=True,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["lance", "example", "spark"],
) as dag:
    ensure_partition = LanceCreatePartitionOperator(
        task_id="ensure_partition",
        namespace=NAMESPACE,
        schema=EVENTS_SCHEMA,
        partition_fields=[{"name": "event_date", "source": "event_date"}],
        values={"event_date": "{{ ds }}"},
    )

    @task
    def land_events(ds: str | None = None) -> str:
        """Play the upstream system: write the day's raw events as Parquet."""
        from airflow_provider_lance.example_data import write_daily_events

        assert ds is not None
        return write_daily_events(ds)

    landed = land_events()

    overwrite_day = LanceSparkWriteOperator(
        task_id="spark_overwrite_day",
        namespace=NAMESPACE,
        source=landed,
        source_format="parquet",
        sql="SELECT * FROM source WHERE event_date = DATE '{{ ds }}'",
        mode="overwrite",
        conf=SPARK_CONF,
    )

    publish = LanceCommitOperator(
        task_id="publish_day",
        namespace=NAMESPACE,
        transactions=overwrite_day.output,
        outlets=[AssetAlias("lance_daily_events")],
    )

    # declared once on the namespace (every later run finds it declared alike: a no-op)
    declare_index = LanceCreateIndexOperator(
        task_id="declare_index",
        namespace=NAMESPACE,
        column="user_id",
        index_type="BTREE",
        name="user_id_idx",
    )

    index_day = LanceOptimizeIndicesOperator(
        task_id="index_day",
        namespace=NAMESPACE,
        filter="event_date = DATE '{{ ds }}'",
    )

    ensure_rollup = LanceCreatePartitionOperator(
        task_id="ensure_rollup_partition",
        namespace=ROLLUP,
        schema=ROLLUP_SCHEMA,
        partition_fields=[{"name": "event_date", "source": "event_date"}],
        values={"event_date": "{{ ds }}"},
    )

    @task
    def rollup_arguments(ds: str | None = None) -> list[str]:
        """The job's arguments: both namespaces' URIs, as the Lance connection resolves
        them, and the day."""
        from airflow_provider_lance.hooks import LancePartitionedHook

        assert ds is not None
        hook = LancePartitionedHook()
        return [hook.namespace_uri(NAMESPACE), hook.namespace_uri(ROLLUP), ds]

    rollup_day = SparkSubmitOperator(
        task_id="spark_rollup_day",
        application=ROLLUP_JOB,
        application_args=rollup_arguments(),
        conf=SPARK_CONF,
    )

    ensure_partition >> [landed, declare_index]
    [publish, declare_index] >> index_day
    [publish, ensure_rollup] >> rollup_day
