"""``saveAsTable`` with the format is refused in words that say what to do (issue 39).

Spark constructs a Python data source for a write only in a worker, while it plans the
write, so there is no earlier point to refuse at, and Spark's own log prints the JVM stack
of the refusal ("ERROR Utils: Aborting task"). What the data source decides is the
exception: its message names ``saveAsTable`` and the call to use instead, after one frame
of traceback, and no catalog table is left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from airflow_provider_lance.spark import FORMAT, register


def test_save_as_table_is_refused_saying_what_to_use(spark: SparkSession) -> None:
    register(spark)
    df = spark.createDataFrame([(1, "a")], "id long, country string")
    warehouse = Path(spark.conf.get("spark.sql.warehouse.dir", "").removeprefix("file:"))
    made = not warehouse.exists()
    try:
        with pytest.raises(AnalysisException) as err:
            df.write.format(FORMAT).saveAsTable("events_by_name")
    finally:  # Spark made its default database's directory (in the working directory)
        if made and warehouse.is_dir() and not any(warehouse.iterdir()):
            warehouse.rmdir()
    lines = str(err.value).strip().splitlines()
    assert lines[-2].endswith(
        f"InvalidArgumentError: {FORMAT} writes to a namespace URI, not a catalog table: use "
        f'df.write.format("{FORMAT}").save(uri); saveAsTable and insertInto are not supported'
    ), lines
    assert len(lines) <= 7, lines  # the message, one frame, Spark's SQLSTATE
    assert not spark.catalog.tableExists("events_by_name")
