"""Deterministic source data for the example DAGs (``dags/examples``), written as Parquet.

The example pipelines land raw files first and let Spark load them, as production
pipelines do; these helpers play the upstream system. The landing directory is
``$LANCE_EXAMPLES_LANDING`` or ``$AIRFLOW_HOME/lance-landing``: with a Spark cluster it must
be visible to the Spark workers too (a shared volume in ``docker-compose.yaml``).

The DAG files import the schemas at parse time, so NumPy, PyArrow and the demo data load
only when a task calls a function.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

#: The events namespace schema, as the operators take it (JSON-able, templatable).
EVENTS_SCHEMA: list[dict[str, Any]] = [
    {"name": "event_id", "type": "int64", "nullable": False},
    {"name": "event_date", "type": "date32"},
    {"name": "event_time", "type": "timestamp[us, tz=UTC]"},
    {"name": "user_id", "type": "int64"},
    {"name": "country", "type": "utf8"},
    {"name": "channel", "type": "utf8"},
    {"name": "amount", "type": "float64"},
]
SALES_SCHEMA: list[dict[str, Any]] = [
    {"name": "order_id", "type": "int64", "nullable": False},
    {"name": "region", "type": "utf8"},
    {"name": "order_date", "type": "date32"},
    {"name": "amount", "type": "float64"},
    {"name": "batch_id", "type": "utf8"},
]
REGIONS = ("emea", "amer", "apac")
_EPOCH = dt.date(2025, 1, 1)


def landing_dir() -> str:
    home = os.environ.get("AIRFLOW_HOME") or os.path.expanduser(os.path.join("~", "airflow"))
    return os.environ.get("LANCE_EXAMPLES_LANDING") or os.path.join(home, "lance-landing")


def _write(table: pa.Table, *parts: str) -> str:
    import pyarrow.parquet as pq

    path = os.path.join(landing_dir(), *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, path)  # a retried task never leaves a half-written file behind
    return path


def daily_events(day: dt.date, rows: int = 5_000, late_share: float = 0.02) -> pa.Table:
    """One day of purchase events plus a few late arrivals stamped with the day before."""
    import pyarrow as pa

    from airflow_provider_lance.cli import demo_events

    offset = (day - _EPOCH).days
    table = demo_events(day, rows, seed=offset, first_id=offset * 1_000_000)
    late = max(1, int(rows * late_share))
    previous = demo_events(
        day - dt.timedelta(days=1), late, seed=10_000 + offset, first_id=offset * 1_000_000 + rows
    )
    return pa.concat_tables([table, previous])


def write_daily_events(day: dt.date | str, rows: int = 5_000, subdir: str = "events") -> str:
    """Land one day of events as Parquet; returns the file's path (the Spark source)."""
    day = dt.date.fromisoformat(day) if isinstance(day, str) else day
    return _write(daily_events(day, rows), subdir, f"{day.isoformat()}.parquet")


def regional_sales(region: str, day: dt.date, batch_id: str, rows: int = 2_000) -> pa.Table:
    """One region's orders for ``day`` (and late ones for the day before), tagged by batch."""
    import numpy as np
    import pyarrow as pa

    seed = (day - _EPOCH).days * 10 + REGIONS.index(region) if region in REGIONS else 99
    rng = np.random.default_rng(seed)
    late = rng.random(rows) < 0.1
    dates = [day - dt.timedelta(days=1) if is_late else day for is_late in late.tolist()]
    first = (
        (day - _EPOCH).days * 10 + (REGIONS.index(region) if region in REGIONS else 9)
    ) * 100_000
    return pa.table(
        {
            "order_id": pa.array(np.arange(first, first + rows), pa.int64()),
            "region": pa.array([region] * rows, pa.utf8()),
            "order_date": pa.array(dates, pa.date32()),
            "amount": pa.array(np.round(rng.lognormal(3.5, 0.8, rows), 2)),
            "batch_id": pa.array([batch_id] * rows, pa.utf8()),
        }
    )


def write_regional_sales(region: str, day: dt.date | str, batch_id: str, rows: int = 2_000) -> str:
    day = dt.date.fromisoformat(day) if isinstance(day, str) else day
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in batch_id)
    return _write(regional_sales(region, day, batch_id, rows), "sales", safe, f"{region}.parquet")
