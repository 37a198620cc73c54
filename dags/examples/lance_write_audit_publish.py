"""Write-audit-publish: stage the writes, check the staged data, then publish or abort.

Each region's orders are written by ``@task.lance_write(stage_only=True)`` (no Spark: the
task streams them in batches into a staged transaction, invisible to readers). The audit
then reads the staged, unpublished transactions (their staged data files; nothing is
committed to do so) and checks them: row counts, NULLs, value ranges, rows no order may
look like. Only if every check passes does the commit publish all regions, in one atomic
``__manifest`` commit. If any fails, the commit never runs and the abort task deletes what
was staged: readers never see a row of a bad batch.

Trigger it with ``{"inject_bad_rows": true}`` to see the abort path: one region's batch
then carries negative amounts and an order dated a year ahead.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``). No Spark needed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

from airflow.sdk import DAG, AssetAlias, Param, TriggerRule, task

from airflow_provider_lance.example_data import REGIONS, SALES_SCHEMA
from airflow_provider_lance.operators import (
    LanceAbortOperator,
    LanceAuditOperator,
    LanceCommitOperator,
    LanceCreatePartitionOperator,
)

NAMESPACE = "examples/audited_sales"
#: The business day of a run: its logical date, or when it ran (a manual run has none).
DAY = "(dag_run.logical_date or dag_run.run_after)"

with DAG(
    dag_id="lance_write_audit_publish",
    description="Stage regional orders, audit the staged data, publish it or abort it",
    schedule=None,
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={
        "inject_bad_rows": Param(
            False, type="boolean", description="Corrupt one region's batch: the audit fails"
        )
    },
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["lance", "example", "write-audit-publish"],
) as dag:
    ensure_namespace = LanceCreatePartitionOperator(
        task_id="ensure_namespace",
        namespace=NAMESPACE,
        schema=SALES_SCHEMA,
        partition_fields=[
            {"name": "region", "source": "region"},
            {"name": "order_date", "source": "order_date"},
        ],
        values=[],
    )

    @task.lance_write(namespace=NAMESPACE, stage_only=True)
    def stage_region(
        region: str, params: dict[str, Any] | None = None, dag_run: Any = None
    ) -> Iterator[Any]:
        """Play the upstream system: one region's orders of the day, streamed in batches."""
        import pyarrow as pa

        from airflow_provider_lance.example_data import regional_sales

        day = (dag_run.logical_date or dag_run.run_after).date()
        orders = regional_sales(region, day, batch_id=dag_run.run_id)
        if params and params["inject_bad_rows"] and region == REGIONS[-1]:
            amounts = orders["amount"].to_pylist()
            dates = orders["order_date"].to_pylist()
            for i in range(0, len(amounts), 400):
                amounts[i] = -amounts[i]  # refunds booked as orders
            dates[7] = day + dt.timedelta(days=365)  # a typo in the year
            orders = orders.set_column(
                orders.schema.get_field_index("amount"), "amount", pa.array(amounts)
            ).set_column(
                orders.schema.get_field_index("order_date"),
                "order_date",
                pa.array(dates, pa.date32()),
            )
        yield from orders.to_batches(max_chunksize=500)

    staged = stage_region.expand(region=list(REGIONS))

    audit = LanceAuditOperator(
        task_id="audit_staged",
        namespace=NAMESPACE,
        transactions=staged,
        checks={
            "min_rows": 1_000 * len(REGIONS),
            "not_null": ["order_id", "region", "order_date", "amount"],
            "ranges": {
                "amount": {"min": 0},
                # the day's orders and the late ones of the day before
                "order_date": {
                    "min": f"{{{{ macros.ds_add({DAY} | ds, -1) }}}}",
                    "max": f"{{{{ {DAY} | ds }}}}",
                },
            },
            "invalid_when": {
                "unknown region": f"region NOT IN ({', '.join(repr(r) for r in REGIONS)})",
            },
        },
    )

    publish = LanceCommitOperator(
        task_id="publish",
        namespace=NAMESPACE,
        transactions=staged,
        outlets=[AssetAlias("lance_audited_sales")],
    )

    abort = LanceAbortOperator(
        task_id="abort_staged",
        namespace=NAMESPACE,
        transactions=staged,
        reason="the audit of the staged orders failed",
        trigger_rule=TriggerRule.ONE_FAILED,
    )

    ensure_namespace >> staged
    audit >> [publish, abort]
