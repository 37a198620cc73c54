"""Getting a SparkSession whose Python workers can import this package."""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_provider_lance.namespace.errors import InstallationError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def get_session(
    app_name: str = "airflow-provider-lance", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The active session, or a new one (``local[*]`` unless a master is configured).

    In local mode the Python workers run this interpreter (``PYSPARK_PYTHON`` defaults to
    ``sys.executable``), so they see the same installed packages as the driver; on a
    cluster, set ``spark.pyspark.python`` to the executors' interpreter.

    Starting the JVM forks this process (PySpark's ``Popen`` with a ``preexec_fn``), and
    the child at once becomes ``spark-submit``: Lance's "lance is not fork-safe" warning,
    which that fork would print once pylance is imported, is about children that go on
    using Lance, so it is silenced for that start only.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
        SparkContext._ensure_initialized()  # attach to spark-submit's JVM (or start one)
    spark_conf = SparkConf()  # now holds spark-submit's settings (--master, --conf ...)
    for key, value in (conf or {}).items():
        spark_conf.set(key, value)
    if not spark_conf.contains("spark.master"):
        spark_conf.setMaster("local[*]")
    if (spark_conf.get("spark.master") or "").startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = SparkSession.builder.appName(app_name).config(conf=spark_conf).getOrCreate()
    check_pyspark(session)
    return session


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect session (``sc://``): no ``sparkContext`` there."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def check_pyspark(spark: SparkSession) -> None:
    """Refuse a PySpark whose Python files and JVM come from different Spark releases.

    ``pyspark-client`` (which the Spark provider requires) installs into the same
    ``pyspark/`` package as ``pyspark``; installed last, its files replace pyspark's and
    the Python side then calls the JVM of another release, which fails deep inside Py4J
    (``Py4JError ... UserDefinedPythonFunction``). Spark Connect sessions talk a versioned
    protocol to their server instead, so they are not checked.
    """
    if is_connect(spark):
        return
    import pyspark

    _check_releases(pyspark.__version__, spark.version)


@functools.cache
def _check_releases(python_side: str, jvm_side: str) -> None:
    """Compare once per pair: a patch difference only warns (one minor line keeps the
    Python-JVM protocol), a minor difference is refused."""
    if python_side == jvm_side:
        return
    if python_side.split(".")[:2] == jvm_side.split(".")[:2]:
        log.warning("PySpark's Python files are %s and its JVM is %s", python_side, jvm_side)
        return
    raise InstallationError(
        f"PySpark's Python files are release {python_side} but the Spark JVM is {jvm_side}. "
        "pyspark-client and pyspark share the pyspark/ package, so installing one over the "
        "other mixes releases; reinstall them at one release, e.g. pip install "
        f"--force-reinstall 'pyspark=={jvm_side}' 'pyspark-client=={jvm_side}' (or install "
        "airflow-provider-lance[spark], which holds both to one line)"
    )
