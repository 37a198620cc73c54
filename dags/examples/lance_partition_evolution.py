"""Partition evolution: write by day, evolve to (month, country), write, prune across both.

Spec v1 partitions events by day; the spec then evolves to ``date_trunc('month', ...)`` and
``country``. Data written before stays readable under v1, new data lands under v2, and one
filter prunes across both spec versions. The pruned partitions feed a mapped task
(``.expand()``) that reads each one. Every run uses its own namespace, so the example can be
run again and again from a clean start.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``), ``spark_default``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_lance.example_data import EVENTS_SCHEMA
from airflow_provider_lance.operators import (
    LanceCommitOperator,
    LanceCreatePartitionOperator,
    LancePruneOperator,
    LanceSparkWriteOperator,
)

NAMESPACE = "examples/evolving_events/{{ run_id | replace(':', '') | replace('+', '') }}"
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
}
V1_DAYS = ["2025-11-28", "2025-11-29", "2025-11-30"]
V2_DAYS = ["2025-12-01", "2025-12-02"]
V2_FIELDS = [
    {
        "name": "event_month",
        "source": "event_date",
        "expression": "date_trunc('month', col)",
        "result_type": "date32",
    },
    {"name": "country", "source": "country"},
]


def _dates(days: list[str]) -> str:
    return ", ".join(f"DATE '{d}'" for d in days)


WHERE = "event_date BETWEEN DATE '2025-11-29' AND DATE '2025-12-01' AND country = 'DE'"

with DAG(
    dag_id="lance_partition_evolution",
    description="Evolve a partition spec between two Spark writes and prune across both",
    schedule=None,
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["lance", "example", "spark"],
) as dag:
    create = LanceCreatePartitionOperator(
        task_id="create_namespace_by_day",
        namespace=NAMESPACE,
        schema=EVENTS_SCHEMA,
        partition_fields=[{"name": "event_date", "source": "event_date"}],
        values=[{"event_date": d} for d in V1_DAYS],
    )

    @task
    def land(days: list[str], name: str) -> str:
        """Land several days of events in one Parquet directory (the Spark source)."""
        import os

        from airflow_provider_lance.example_data import write_daily_events

        paths = [write_daily_events(d, rows=2_000, subdir=f"evolution/{name}") for d in days]
        return os.path.dirname(paths[0])

    v1_source = land.override(task_id="land_v1_days")(V1_DAYS, "v1")
    write_v1 = LanceSparkWriteOperator(
        task_id="spark_write_v1",
        namespace=NAMESPACE,
        source=v1_source,
        sql=f"SELECT * FROM source WHERE event_date IN ({_dates(V1_DAYS)})",
        mode="overwrite",
        commit=True,
        conf=SPARK_CONF,
    )

    @task
    def evolve_spec(namespace: str) -> int:
        """Make (month, country) the current spec; a retry does not add another version."""
        from airflow_provider_lance.hooks import LancePartitionedHook

        return LancePartitionedHook().evolve_partition_spec(V2_FIELDS, namespace)

    evolved = evolve_spec(NAMESPACE)

    v2_source = land.override(task_id="land_v2_days")(V2_DAYS, "v2")
    write_v2 = LanceSparkWriteOperator(
        task_id="spark_stage_v2",
        namespace=NAMESPACE,
        source=v2_source,
        sql=f"SELECT * FROM source WHERE event_date IN ({_dates(V2_DAYS)})",
        mode="append",
        conf=SPARK_CONF,
    )
    publish_v2 = LanceCommitOperator(
        task_id="publish_v2", namespace=NAMESPACE, transactions=write_v2.output
    )

    prune = LancePruneOperator(task_id="prune_across_specs", namespace=NAMESPACE, filter=WHERE)

    @task
    def read_partition(partition: dict[str, Any], namespace: str) -> dict[str, Any]:
        """One mapped task per pruned partition: count its rows at its read_version."""
        from airflow_provider_lance.hooks import LancePartitionedHook

        ns = LancePartitionedHook().open(namespace)
        match = next(p for p in ns.partitions() if p.object_id == partition["object_id"])
        rows = ns.count_rows_of(match)
        return {
            "spec_version": partition["spec_version"],
            "values": partition["values"],
            "rows": rows,
        }

    @task
    def check_both_specs(results: list[dict[str, Any]]) -> dict[str, Any]:
        versions = sorted({r["spec_version"] for r in results})
        if versions != [1, 2]:
            raise ValueError(f"expected partitions of spec v1 and v2, got {versions}")
        return {"partitions": len(results), "spec_versions": versions}

    read = read_partition.partial(namespace=NAMESPACE).expand(partition=prune.output)
    create >> v1_source
    write_v1 >> evolved >> v2_source
    publish_v2 >> prune
    check_both_specs(read)
