"""Retention and upkeep: publish the day, merge late corrections, drop expired days,
compact, tag the end of day, and sweep orphans (dry run).

Every run:

1. publishes the day's events as a partition overwrite (``@task.lance_write``);
2. lands the late arrivals of the day before and re-stated amounts of rows published
   yesterday as Parquet, and **merges** them by ``(event_id, event_date)``: stored rows
   are updated, new ones inserted (``LanceMergeOperator``);
3. **drops** every day older than ``retention_days`` (a templated filter: dropping is
   metadata only, in one ``__manifest`` commit), after the merge, so late rows of an
   expired day do not bring it back (``LanceDropPartitionsOperator``);
4. **optimizes** the last week: small fragments merged, deleted rows dropped from files
   (``LanceOptimizeOperator``);
5. **tags** the day's final state ``eod-<day>`` (``LanceTagOperator``; a second run of the
   same day moves the tag to its own final state); the report task
   lists the partitions *as of that tag*, a state no later write changes;
6. **maintains** ``__manifest`` (compaction, versions older than a week removed; tagged
   versions are kept, with all they read) and then runs the orphan sweep as a dry run: it
   reports the files and dropped days' tables it would remove, and removes nothing
   (``dry_run=False`` removes them).

Each table operation runs under a transaction id derived from the task instance: a retried
task returns the first try's result instead of applying the operation twice.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``). No Spark needed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Param, task

from airflow_provider_lance.example_data import EVENTS_SCHEMA
from airflow_provider_lance.operators import (
    LanceCreatePartitionOperator,
    LanceDropPartitionsOperator,
    LanceMaintainOperator,
    LanceMergeOperator,
    LanceOptimizeOperator,
    LancePruneOperator,
    LanceTagOperator,
)

NAMESPACE = "examples/retained_events"
ROWS_PER_DAY = 2_000
#: Rows of yesterday whose amounts are re-stated each day.
CORRECTIONS = 50
#: The business day of a run: its logical date, or when it ran (a manual run has none).
DAY = "(dag_run.logical_date or dag_run.run_after)"
TAG = f"eod-{{{{ {DAY} | ds }}}}"

with DAG(
    dag_id="lance_retention_and_upkeep",
    description="Publish a day, merge late corrections, drop expired days, compact, tag, sweep",
    schedule="@daily",
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    params={"retention_days": Param(30, type="integer", minimum=1, description="Days kept")},
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["lance", "example", "retention", "upkeep"],
) as dag:
    ensure_namespace = LanceCreatePartitionOperator(
        task_id="ensure_namespace",
        namespace=NAMESPACE,
        schema=EVENTS_SCHEMA,
        partition_fields=[{"name": "event_date", "source": "event_date"}],
        values=[],
    )

    @task.lance_write(namespace=NAMESPACE, mode="overwrite")
    def publish_day(dag_run: Any = None) -> Any:
        """The day's events (its late arrivals for the day before go through the merge)."""
        import pyarrow.compute as pc

        from airflow_provider_lance.example_data import daily_events

        day = (dag_run.logical_date or dag_run.run_after).date()
        landed = daily_events(day, rows=ROWS_PER_DAY)
        return landed.filter(pc.equal(landed["event_date"], day))

    @task
    def land_late_events(dag_run: Any = None) -> str:
        """Land yesterday's late arrivals and re-stated amounts as one Parquet file."""
        import os

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        from airflow_provider_lance.example_data import daily_events, landing_dir

        day = (dag_run.logical_date or dag_run.run_after).date()
        yesterday = day - dt.timedelta(days=1)
        landed = daily_events(day, rows=ROWS_PER_DAY)
        late = landed.filter(pc.equal(landed["event_date"], yesterday))
        published = daily_events(yesterday, rows=ROWS_PER_DAY)
        published = published.filter(pc.equal(published["event_date"], yesterday))
        restated = published.slice(0, CORRECTIONS)
        amounts = pc.round(pc.multiply(restated["amount"], 0.9), 2)
        restated = restated.set_column(restated.schema.get_field_index("amount"), "amount", amounts)
        path = os.path.join(landing_dir(), "retention", f"late-{day.isoformat()}.parquet")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pq.write_table(pa.concat_tables([late, restated]), f"{path}.tmp")
        os.replace(f"{path}.tmp", path)  # a retried task never leaves half a file
        return path

    late_events = land_late_events()
    merge = LanceMergeOperator(
        task_id="merge_late_events",
        namespace=NAMESPACE,
        source=late_events,
        on=["event_id", "event_date"],
    )
    drop = LanceDropPartitionsOperator(
        task_id="drop_expired_days",
        namespace=NAMESPACE,
        filter=(f"event_date < DATE '{{{{ macros.ds_add({DAY} | ds, -params.retention_days) }}}}'"),
    )
    optimize = LanceOptimizeOperator(
        task_id="optimize_recent_days",
        namespace=NAMESPACE,
        filter=f"event_date >= DATE '{{{{ macros.ds_add({DAY} | ds, -7) }}}}'",
    )
    # replace=True: a second run of the same day moves the tag to that run's final state
    tag = LanceTagOperator(task_id="tag_end_of_day", namespace=NAMESPACE, tag=TAG, replace=True)
    read_tagged = LancePruneOperator(
        task_id="read_tagged_state", namespace=NAMESPACE, as_of=TAG, max_partitions=None
    )
    maintain = LanceMaintainOperator(
        task_id="maintain", namespace=NAMESPACE, older_than=dt.timedelta(days=7)
    )
    sweep = LanceMaintainOperator(
        task_id="sweep_orphans_dry_run",
        namespace=NAMESPACE,
        compact=False,
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(days=1),
        dry_run=True,
    )

    ensure_namespace >> publish_day() >> late_events
    merge >> drop >> optimize >> tag >> read_tagged >> maintain >> sweep
