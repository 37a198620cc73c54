"""One local SparkSession shared by every in-process Spark test (starting one takes ~7 s)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The JVM heap of the test session (in local mode the executor lives in the driver JVM);
#: the large-write test writes more data than this.
DRIVER_MEMORY_MB = 512


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from airflow_provider_lance.spark.session import get_session

    session = get_session(
        "airflow-provider-lance-tests",
        {
            # 2 task slots; a failed task is retried once (as on a cluster)
            "spark.master": "local[2,2]",
            "spark.driver.memory": f"{DRIVER_MEMORY_MB}m",
            "spark.sql.shuffle.partitions": "4",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
