"""DAGs of the partition key tests (``dag.test()``, the ``lance_test`` connection).

The commit publishes into a namespace each test creates and keys the events of a plain
``Asset`` outlet; the sensor and the prune operator name partitions by key.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Asset

from airflow_provider_lance.operators import (
    LanceCommitOperator,
    LanceCreatePartitionOperator,
    LancePruneOperator,
)
from airflow_provider_lance.sensors import LancePartitionSensor

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
KEYED_ASSET = Asset("lance_test_keyed_events")

with DAG(
    "lance_test_keyed_commit",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"transactions": []},
):
    LanceCommitOperator(
        task_id="commit",
        lance_conn_id=CONN,
        namespace="events",
        transactions="{{ params.transactions }}",
        outlets=[KEYED_ASSET],
        emit_partition_keys=True,
        max_partition_keys=3,
    )

with DAG(
    "lance_test_keyed_create",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"partition_values": []},
):
    LanceCreatePartitionOperator(
        task_id="create",
        lance_conn_id=CONN,
        namespace="events",
        values="{{ params.partition_values }}",
        outlets=[Asset("lance_test_keyed_created")],
        emit_partition_keys=True,
    )

with DAG(
    "lance_test_unkeyed_commit",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"transactions": []},
):
    LanceCommitOperator(
        task_id="commit",
        lance_conn_id=CONN,
        namespace="events",
        transactions="{{ params.transactions }}",
        outlets=[KEYED_ASSET],
    )

with DAG(
    "lance_test_keyed_wait",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"partition_key": "2025-12-01"},
):
    wait = LancePartitionSensor(
        task_id="wait",
        lance_conn_id=CONN,
        namespace="events",
        partition_key="{{ params.partition_key }}",
        poke_interval=0.5,
        timeout=60,
    )
    wait_deferred = LancePartitionSensor(
        task_id="wait_deferred",
        lance_conn_id=CONN,
        namespace="events",
        partition_key="{{ params.partition_key }}",
        deferrable=True,
        poke_interval=0.5,
        timeout=60,
    )
    prune = LancePruneOperator(
        task_id="prune",
        lance_conn_id=CONN,
        namespace="events",
        partition_key="{{ params.partition_key }}",
    )
    wait >> wait_deferred >> prune
