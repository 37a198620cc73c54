"""Several Spark writes staged in parallel, published in ONE atomic commit.

One mapped Spark write per region stages its orders (nothing visible yet); the commit task
publishes every partition of every region in one ``__manifest`` commit; a reader then proves
all-or-nothing: at every manifest version it sees either none of this run's rows or all of
them, never a subset.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``), ``spark_default``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, AssetAlias, task

from airflow_provider_lance.example_data import REGIONS, SALES_SCHEMA
from airflow_provider_lance.operators import (
    LanceCommitOperator,
    LanceCreatePartitionOperator,
    LanceSparkWriteOperator,
)

NAMESPACE = "examples/regional_sales"
SPARK_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.log.level": "WARN",
}

with DAG(
    dag_id="lance_atomic_publish",
    description="Stage one Spark write per region, publish all regions atomically",
    schedule=None,
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    default_args={"retries": 2, "retry_delay": dt.timedelta(seconds=30)},
    tags=["lance", "example", "spark"],
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

    @task
    def land_orders(region: str, **context: Any) -> str:
        """Play the upstream system: one region's orders for the run's day, as Parquet."""
        from airflow_provider_lance.example_data import write_regional_sales

        run = context["dag_run"]
        day = (run.logical_date or run.run_after).date()
        return write_regional_sales(region, day, batch_id=run.run_id)

    landed = land_orders.expand(region=list(REGIONS))

    staged = LanceSparkWriteOperator.partial(
        task_id="stage_region",
        namespace=NAMESPACE,
        source_format="parquet",
        mode="append",
        conf=SPARK_CONF,
    ).expand(source=landed)

    publish = LanceCommitOperator(
        task_id="publish_all_regions",
        namespace=NAMESPACE,
        transactions=staged.output,
        outlets=[AssetAlias("lance_regional_sales")],
    )

    @task
    def verify_all_or_nothing(published: dict[str, Any], **context: Any) -> dict[str, Any]:
        """Read every recent manifest version: this run's rows are all there or none are."""
        from airflow_provider_lance.hooks import LancePartitionedHook
        from airflow_provider_lance.namespace import NamespaceNotFoundError

        ns = LancePartitionedHook().open(NAMESPACE)
        batch = context["dag_run"].run_id.replace("'", "''")
        expected = published["rows"]
        final = published["manifest_version"]
        seen: dict[int, int] = {}
        for version in range(max(1, final - 6), ns.version + 1):
            try:
                seen[version] = ns.count_rows(filter=f"batch_id = '{batch}'", version=version)
            except NamespaceNotFoundError:  # versions written while the namespace was created
                continue
            if seen[version] not in (0, expected):
                raise ValueError(f"manifest v{version} shows {seen[version]} of {expected} rows")
        if seen[final] != expected or 0 not in seen.values():
            raise ValueError(f"expected none then all {expected} rows, saw {seen}")
        regions = {p["values"]["region"] for p in published["partitions"]}
        if regions != set(REGIONS) and published["partition_count"] <= len(published["partitions"]):
            raise ValueError(f"published regions {sorted(regions)}, expected {sorted(REGIONS)}")
        return {"rows": expected, "versions_checked": {str(v): n for v, n in seen.items()}}

    ensure_namespace >> landed
    verify_all_or_nothing(publish.output)
