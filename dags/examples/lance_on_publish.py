"""Event-driven: a DAG run for every publish into a namespace, wherever it came from.

``LanceManifestTrigger`` watches ``examples/regional_sales`` (the namespace
``lance_atomic_publish`` publishes into, but any writer counts: Spark jobs, the CLI, another
Airflow) from the triggerer, as an ``AssetWatcher`` of the ``lance_regional_sales_published``
asset. What one poll finds is one asset event: the ``__manifest`` versions of its publishes
and every partition they published (once, at its latest ``read_version``). A run may consume
several events (the scheduler was busy): this DAG reads every partition its events name, as
of the last version they name, and totals them per region, so each run totals exactly what
was published since the run before.

The watcher runs while this DAG is unpaused; it polls every 30 seconds
(``$LANCE_EXAMPLES_WATCH_INTERVAL`` to change it: the watermark is kept by namespace, so a
changed interval carries on where the old one stopped). Its watermark (the last version
reported) is kept in the asset's state store (Airflow 3.3+), so a triggerer restart never
skips a publish; a trigger stopped (crashed or stopped gracefully) within a poll interval
of an event reports that event's publishes again, which a consumer keeping the last
``manifest_version`` it processed can tell.

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
    def total_published(**context: Any) -> dict[str, Any]:
        """The rows and amount per region of exactly the partitions this run's events name."""
        from airflow_provider_lance.hooks import LancePartitionedHook

        events = [e.extra["payload"] for e in context["triggering_asset_events"][PUBLISHED]]
        # one run may consume several events (in no particular order), an event several
        # publishes: every partition once, read as of the last version any event names
        events.sort(key=lambda e: int(e["manifest_version"]))
        partitions = {p["object_id"]: p for e in events for p in e["partitions"]}
        if any(e["history_lost"] or e["truncated"] for e in events):
            where = None  # not every partition is named: read the whole version
        else:
            where = " OR ".join(
                "(" + " AND ".join(_equals(k, v) for k, v in p["values"].items()) + ")"
                for p in partitions.values()
            )
        version = int(events[-1]["manifest_version"])
        rows = (
            LancePartitionedHook()
            .open(NAMESPACE)
            .to_table(columns=["region", "amount"], filter=where, version=version)
        )
        per_region = rows.group_by("region").aggregate([("amount", "sum"), ("amount", "count")])
        return {
            "previous_version": min(int(e["previous_version"]) for e in events),
            "manifest_version": version,
            # (events before the trigger listed its publishes were one publish each)
            "publishes": sorted(
                {p["manifest_version"] for e in events for p in e.get("publishes", [e])}
            ),
            "partitions": len(partitions),
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

    total_published()
