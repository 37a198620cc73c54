"""Create a namespace, write it with Spark, read it back; print what happened as JSON.

Twice: with ``write_partitioned``/``read_partitioned`` at URI, and with
``format("lance_partitioned")`` at URI-format (the Python data source: on Spark Connect its
planning, tasks and commit run in the server's Python workers).

Run as a script in an interpreter of its own (a plain-pip venv, a Spark Connect client), so it
imports nothing from the tests:

    python spark_round_trip.py URI [--remote sc://host:port | --master local[2]]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json

import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.spark import FORMAT, read_partitioned, register, write_partitioned

DAYS = 3
ROWS = 600
SCHEMA = pa.schema([("id", pa.int64()), ("event_date", pa.date32()), ("country", pa.string())])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("uri")
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--remote", help="a Spark Connect URL")
    target.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    if args.remote:
        spark = SparkSession.builder.remote(args.remote).getOrCreate()
    else:
        from airflow_provider_lance.spark.session import get_session

        spark = get_session(
            "round-trip", {"spark.master": args.master, "spark.ui.enabled": "false"}
        )
    PartitionedNamespace.create(args.uri, SCHEMA, [PartitionField("d", "event_date")])
    first = dt.date(2025, 12, 1)
    rows = [(i, first + dt.timedelta(days=i % DAYS), ["de", "fr"][i % 2]) for i in range(ROWS)]
    df = spark.createDataFrame(rows, "id long, event_date date, country string")
    result = write_partitioned(df, args.uri)
    day = read_partitioned(spark, args.uri, filter=f"event_date = DATE '{first.isoformat()}'")
    register(spark)
    formatted = f"{args.uri}-format"
    PartitionedNamespace.create(formatted, SCHEMA, [PartitionField("d", "event_date")])
    df.write.format(FORMAT).mode("append").option("txn_id", "round-trip").save(formatted)
    df.write.format(FORMAT).mode("append").option("txn_id", "round-trip").save(formatted)
    loaded = spark.read.format(FORMAT).load(formatted)
    format_day = loaded.where(f"event_date = DATE '{first.isoformat()}'")
    print(
        json.dumps(
            {
                "published_rows": result.rows,
                "published_partitions": len(result.partitions),
                "read_rows": day.count(),
                "read_ids": sorted(r["id"] for r in day.select("id").collect()),
                "format_rows": loaded.count(),
                "format_read_ids": sorted(r["id"] for r in format_day.select("id").collect()),
                "session": type(spark).__module__,
                "spark_version": spark.version,
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
