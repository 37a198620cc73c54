"""Spark writes and reads on an S3-compatible store: storage options must reach executors.

The Python workers of the shared session were started without any AWS environment, so a
task that did not receive the storage options could not reach the loopback moto server.
"""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.spark import read_partitioned, write_partitioned
from tests.conftest import EVENTS_SCHEMA, events, sort_rows
from tests.test_s3 import BUCKET, default_endpoint_trap, storage_options  # noqa: F401

pytestmark = pytest.mark.s3


def test_spark_round_trip_on_s3(spark: SparkSession, storage_options: dict[str, str]) -> None:  # noqa: F811
    uri = f"s3://{BUCKET}/spark-events"
    ns = PartitionedNamespace.create(
        uri,
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("d", "event_date")],
        storage_options=storage_options,
    )
    table = events(900)
    result = write_partitioned(spark.createDataFrame(table), uri, storage_options=storage_options)
    assert result.rows == 900
    assert sort_rows(ns.to_table()) == sort_rows(table)
    df = read_partitioned(
        spark, uri, filter="event_date = DATE '2025-12-11'", storage_options=storage_options
    )
    assert sort_rows(df.toArrow()) == sort_rows(ns.to_table("event_date = DATE '2025-12-11'"))
