"""Partitioned assets: a daily partition per run, and a report run per published partition.

``lance_partitioned_daily`` runs on a ``CronPartitionTimetable``: every run (scheduled, or
one run per day of ``airflow backfill create --dag-id lance_partitioned_daily --from-date
2025-12-01 --to-date 2025-12-07``) carries a partition key, the day (``2025-12-10``). It
decodes the key with the namespace's partition spec, stages exactly that day's events as a
partition overwrite (late arrivals of the day before are left out, so they never clobber
yesterday), and publishes it with ``LanceCommitOperator``, whose asset event carries the
published partition's key.

``lance_partitioned_report`` runs on a ``PartitionedAssetTimetable``: Airflow starts one run
per partition key of ``lance_daily_partitions``, with that key. It reads exactly that
partition, as of the ``__manifest`` version the triggering event names (a later rewrite of
the day does not change what this run reports).

Partition keys: ``airflow_provider_lance.partition_keys`` (one date field: the ISO date, as
the timetable's ``key_format`` below spells it). Airflow 3.3+ (keys on asset events).

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``); no Spark needed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Asset, CronPartitionTimetable, PartitionedAssetTimetable, task

from airflow_provider_lance.example_data import EVENTS_SCHEMA
from airflow_provider_lance.operators import LanceCommitOperator

NAMESPACE = "examples/daily_partitions"
BY_DAY = [{"name": "event_date", "source": "event_date"}]
ROWS_PER_DAY = 2_000
DAILY_PARTITIONS = Asset("lance_daily_partitions")

with DAG(
    dag_id="lance_partitioned_daily",
    description="Write exactly the run's partition key (a day) and publish it as a keyed event",
    schedule=CronPartitionTimetable("0 0 * * *", timezone="UTC", key_format="%Y-%m-%d"),
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=2,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["lance", "example", "partitioned-assets"],
) as daily:

    @task
    def stage_partition(partition_key: str | None = None, **context: Any) -> str:
        """Stage the day the run's partition key names, as a partition overwrite."""
        import pyarrow.compute as pc
        from airflow.providers.common.compat.sdk import AirflowFailException

        from airflow_provider_lance.common import txn_id_from_context
        from airflow_provider_lance.example_data import daily_events
        from airflow_provider_lance.hooks import LancePartitionedHook
        from airflow_provider_lance.namespace import TxnState
        from airflow_provider_lance.partition_keys import fields_of, partition_values

        if not partition_key:
            raise AirflowFailException(
                "this DAG writes the partition its run is for: let the timetable or "
                "`airflow backfill create` start it, or trigger it with a partition key"
            )
        ns, _ = LancePartitionedHook().create_or_open(
            NAMESPACE, schema=EVENTS_SCHEMA, partition_fields=BY_DAY
        )
        day = partition_values(partition_key, fields_of(ns.state()))["event_date"]
        landed = daily_events(day, rows=ROWS_PER_DAY)  # the day's file, with late events
        rows = landed.filter(pc.equal(landed["event_date"], day))
        txn = ns.begin("overwrite", txn_id=txn_id_from_context(context))
        if txn.state is TxnState.STAGED:  # a retry after the commit published finds it sealed
            txn.stage(rows, stage_id="events")
        return txn.txn_id

    LanceCommitOperator(
        task_id="publish_partition",
        namespace=NAMESPACE,
        transactions=stage_partition(),
        outlets=[DAILY_PARTITIONS],  # a concrete Asset: alias events cannot carry keys
    )


with DAG(
    dag_id="lance_partitioned_report",
    description="Read exactly the partition a keyed asset event names",
    schedule=PartitionedAssetTimetable(assets=DAILY_PARTITIONS),
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["lance", "example", "partitioned-assets"],
) as report:

    @task
    def report_partition(partition_key: str | None = None, **context: Any) -> dict[str, Any]:
        """Revenue per country of the partition this run is for, at the published version."""
        import pyarrow.compute as pc

        from airflow_provider_lance.hooks import LancePartitionedHook
        from airflow_provider_lance.partition_keys import fields_of, partition_values

        assert partition_key is not None, "Airflow starts this DAG with a partition key"
        ns = LancePartitionedHook().open(NAMESPACE)
        versions = [
            event.extra["manifest_version"]
            for event in context["triggering_asset_events"][DAILY_PARTITIONS]
            if event.partition_key == partition_key and "manifest_version" in event.extra
        ]
        version = max(versions) if versions else None  # None: the latest
        values = partition_values(partition_key, fields_of(ns.state(version)))
        day = values["event_date"]
        rows = ns.to_table(
            columns=["event_date", "country", "amount"],
            filter=f"event_date = DATE '{day.isoformat()}'",
            version=version,
        )
        by_country = rows.group_by("country").aggregate([("amount", "sum")])
        return {
            "partition_key": partition_key,
            "manifest_version": version if version is not None else ns.version,
            "rows": rows.num_rows,
            "days": sorted(d.isoformat() for d in pc.unique(rows["event_date"]).to_pylist()),
            "revenue": {
                c: round(a, 2)
                for c, a in zip(
                    by_country["country"].to_pylist(),
                    by_country["amount_sum"].to_pylist(),
                    strict=True,
                )
            },
        }

    report_partition()
