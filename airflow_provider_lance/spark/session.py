"""Getting a SparkSession whose Python workers can import this package."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def get_session(
    app_name: str = "airflow-provider-lance", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The active session, or a new one (``local[*]`` unless a master is configured).

    In local mode the Python workers run this interpreter (``PYSPARK_PYTHON`` defaults to
    ``sys.executable``), so they see the same installed packages as the driver; on a
    cluster, set ``spark.pyspark.python`` to the executors' interpreter.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    SparkContext._ensure_initialized()  # attach to spark-submit's JVM (or start one)
    spark_conf = SparkConf()  # now holds spark-submit's settings (--master, --conf ...)
    for key, value in (conf or {}).items():
        spark_conf.set(key, value)
    if not spark_conf.contains("spark.master"):
        spark_conf.setMaster("local[*]")
    if (spark_conf.get("spark.master") or "").startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return SparkSession.builder.appName(app_name).config(conf=spark_conf).getOrCreate()
