"""One local SparkSession shared by every in-process Spark test (starting one takes ~7 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.support import EVENTS_SCHEMA, events

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


@pytest.fixture
def by_day(root: Path) -> PartitionedNamespace:
    """An empty namespace of events partitioned by day (field ``d``, identity on
    ``event_date``)."""
    return PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )


@pytest.fixture
def six_days(by_day: PartitionedNamespace) -> PartitionedNamespace:
    """Six days of events, partitioned by day, written in two writes (so two partitions
    hold a second fragment): what the read tests read."""
    ns = by_day
    ns.write(events(600, days=6))
    ns.write(events(60, days=2, first_id=1000))  # a second fragment in two partitions
    return ns
