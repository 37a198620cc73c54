"""Distributed partitioned writes and pruned reads with PySpark (no Airflow here).

    from airflow_provider_lance.spark import write_partitioned, read_partitioned

    result = write_partitioned(df, "s3://bucket/events", mode="overwrite")
    staged = write_partitioned(df, uri, commit=False)   # nothing visible until committed
    df2 = read_partitioned(spark, uri, filter="event_date = DATE '2025-12-10'")

Executors import only this package and :mod:`airflow_provider_lance.namespace`.
"""

from .reader import read_partitioned
from .writer import StagedWrite, write_partitioned

__all__ = ["StagedWrite", "read_partitioned", "write_partitioned"]
