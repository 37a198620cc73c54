"""Event-driven: a DAG run for every publish into a namespace, wherever it came from.

``LanceManifestTrigger`` watches ``examples/regional_sales`` (the namespace
``lance_atomic_publish`` publishes into, but any writer counts: Spark jobs, the CLI, another
Airflow) from the triggerer, as an ``AssetWatcher`` of the ``lance_regional_sales_published``
asset. Each publish becomes one asset event whose payload names the ``__manifest`` version
and the partitions it published; this DAG then reads exactly those partitions as of that
version and totals them per region.

The watcher runs while this DAG is unpaused; it polls every 30 seconds
(``$LANCE_EXAMPLES_WATCH_INTERVAL`` to change it: the watermark is kept by namespace, so a
changed interval carries on where the old one stopped). Its watermark (the last version reported) is
kept in the asset's state store (Airflow 3.3+), so a triggerer restart neither skips a
publish nor, outside a window of one poll interval, repeats one.

Connections: ``lance_default`` (undefined: ``$AIRFLOW_HOME/lance``).
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_provider_lance.triggers import LanceManifestTrigger

NAMESPACE = "examples/regional_sales"
PUBLISHED = Asset(
    "lance_regional_sales_published",
    watchers=[
        AssetWatcher(
            name="lance_regional_sales_manifest",
            trigger=LanceManifestTrigger(
                namespace=NAMESPACE,
                poll_interval=float(os.environ.get("LANCE_EXAMPLES_WATCH_INTERVAL", "30")),
            ),
        )
    ],
)


def _manifest_version(publish: dict[str, Any]) -> int:
    return int(publish["manifest_version"])


def _equals(column: str, text: str | None) -> str:
    """``column = <value>`` for a partition value in its string form (region, date)."""
    if text is None:
        return f"{column} IS NULL"
    literal = "'" + text.replace("'", "''") + "'"
    return f"{column} = DATE {literal}" if column.endswith("_date") else f"{column} = {literal}"


with DAG(
    dag_id="lance_on_publish",
    description="Total the partitions each publish into examples/regional_sales published",
    schedule=[PUBLISHED],
    start_date=dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["lance", "example", "event-driven"],
) as dag:

    @task
    def total_published(**context: Any) -> list[dict[str, Any]]:
        """Per publish: the rows and amount per region of exactly what it published."""
        from airflow_provider_lance.hooks import LancePartitionedHook

        ns = LancePartitionedHook().open(NAMESPACE)
        totals = []
        events = context["triggering_asset_events"][PUBLISHED]
        # one run may consume several events (in no particular order): take them in the
        # order the namespace published them
        for publish in sorted((e.extra["payload"] for e in events), key=_manifest_version):
            if publish.get("history_lost") or publish.get("truncated"):
                where = None  # not every partition is named: read the whole version
            else:
                where = " OR ".join(
                    "(" + " AND ".join(_equals(k, v) for k, v in p["values"].items()) + ")"
                    for p in publish["partitions"]
                )
            rows = ns.to_table(
                columns=["region", "amount"], filter=where, version=publish["manifest_version"]
            )
            per_region = rows.group_by("region").aggregate([("amount", "sum"), ("amount", "count")])
            totals.append(
                {
                    "manifest_version": publish["manifest_version"],
                    "partitions": publish["partition_count"],
                    "regions": {
                        r: {"rows": n, "amount": round(a, 2)}
                        for r, a, n in zip(
                            per_region["region"].to_pylist(),
                            per_region["amount_sum"].to_pylist(),
                            per_region["amount_count"].to_pylist(),
                            strict=True,
                        )
                    },
                }
            )
        return totals

    total_published()
