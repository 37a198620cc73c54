"""Distributed partitioned writes and pruned reads with PySpark (no Airflow here).

    from airflow_provider_lance.spark import read_partitioned, register, write_partitioned

    register(spark)  # spark.read.format("lance_partitioned"), df.write/writeStream.format(...)

    result = write_partitioned(df, "s3://bucket/events", mode="overwrite")
    staged = stage_partitioned(df, uri, txn_id="load.1")  # nothing visible until committed
    df2 = read_partitioned(spark, uri, filter="event_date = DATE '2025-12-10'")

Executors import only this package and :mod:`airflow_provider_lance.namespace`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports

if TYPE_CHECKING:
    from .datasource import FORMAT, register
    from .reader import read_partitioned
    from .writer import StagedWrite, stage_partitioned, write_partitioned

__all__ = [
    "FORMAT",
    "StagedWrite",
    "read_partitioned",
    "register",
    "stage_partitioned",
    "write_partitioned",
]

#: Imported on first use: ``spark.jobs`` (what Airflow workers need to submit a job) must
#: not load PySpark, pylance or PyArrow.
_EXPORTS = {
    "FORMAT": "datasource",
    "register": "datasource",
    "read_partitioned": "reader",
    "StagedWrite": "writer",
    "stage_partitioned": "writer",
    "write_partitioned": "writer",
}

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
