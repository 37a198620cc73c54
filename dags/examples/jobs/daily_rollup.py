"""A PySpark job of your own over partitioned Lance namespaces, as ``spark-submit`` runs it.

It reads one day of events with ``spark.read.format("lance_partitioned")`` (the day's
``filter`` option prunes: only that day's partition is opened), totals it per country, and
overwrites that day of a rollup namespace with ``df.write.format("lance_partitioned")``:
one atomic publish, and with ``txn_id`` a retried run publishes nothing twice.

    spark-submit daily_rollup.py EVENTS_URI ROLLUP_URI 2025-12-02

Object-store credentials come from the environment variable ``LANCE_STORAGE_OPTIONS`` (a
JSON object), as for the project's own job; a local directory needs none.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_provider_lance.spark import register


def rollup(spark: SparkSession, events_uri: str, rollup_uri: str, day: dt.date) -> DataFrame:
    """Overwrite ``day`` of the rollup namespace with the day's totals per country."""
    register(spark)
    options = {}
    if os.environ.get("LANCE_STORAGE_OPTIONS"):
        options["storage_options"] = os.environ["LANCE_STORAGE_OPTIONS"]
    events = (
        spark.read.format("lance_partitioned")
        .options(**options)
        .option("filter", f"event_date = DATE '{day.isoformat()}'")  # prunes to the day
        .load(events_uri)
    )
    totals = (
        events.groupBy("event_date", "country")
        .agg(F.count("*").alias("events"), F.sum("amount").alias("amount"))
        .cache()  # written, then counted: read once
    )
    (
        totals.repartition("event_date")  # one file per partition
        .write.format("lance_partitioned")
        .options(**options)
        .mode("overwrite")  # replaces exactly the partitions written: this day
        .option("txn_id", f"daily_rollup.{day.isoformat()}")
        .save(rollup_uri)
    )
    return totals


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    events_uri, rollup_uri, text = argv
    try:
        day = dt.date.fromisoformat(text)
    except ValueError:
        print(f"the day must be a date written YYYY-MM-DD, got {text!r}", file=sys.stderr)
        return 2
    spark = SparkSession.builder.appName(f"daily_rollup {day}").getOrCreate()
    written = rollup(spark, events_uri, rollup_uri, day).count()
    print(json.dumps({"day": day.isoformat(), "countries": written}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
