"""DAGs of the argument checks (``tests/airflow/test_operator_arguments.py``).

Every templated argument under test comes from ``params`` (rendered as native objects), so
one run renders good values and another bad ones. The tasks stand alone (no upstream task),
so one run reports every task's refusal, and each has a retry (``RETRY_AT_ONCE``) that a
refused argument must not use. They use the ``lance_test`` connection and the namespace
``events`` the test creates.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_lance.operators import (
    LanceAbortOperator,
    LanceAddColumnOperator,
    LanceAuditOperator,
    LanceCommitOperator,
    LanceCreatePartitionOperator,
    LanceDeleteOperator,
    LanceEvolvePartitionSpecOperator,
    LanceMaintainOperator,
    LanceMergeOperator,
    LanceOptimizeOperator,
    LancePromoteColumnOperator,
    LancePruneOperator,
    LanceRecoverOperator,
    LanceRenameColumnOperator,
    LanceRepairOperator,
    LanceSparkWriteOperator,
    LanceTagOperator,
    LanceWriteOperator,
)
from airflow_provider_lance.sensors import LancePartitionSensor

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
RETRY_AT_ONCE = {"retries": 1, "retry_delay": dt.timedelta(seconds=0)}
ON_NAMESPACE = {"lance_conn_id": CONN, "namespace": "events"}

#: Values every task accepts (the run succeeds or skips every task).
GOOD: dict[str, Any] = {
    "namespace": "events",
    "partition_values": {"event_date": "2025-12-02"},
    "filter": "event_date >= DATE '2025-12-01'",
    "transactions": [],
    "min_rows": 1,
    "reason": "no longer wanted",
    "older_than": 3600,
    "lease": 21600,
    "repair_namespace": "events",
    "column": {"name": "country", "type": "string"},  # there already: a no-op
    "new_name": "country",
    "type": "int64",
    "partition_fields": [{"name": "event_date", "source": "event_date"}],
    "action": "create",
    "claim_timeout": 30,
    "optimize_filter": "event_date > DATE '2025-12-01'",
    "on": ["id", "event_date"],
    "mode": "append",
    "sensor_filter": "event_date = DATE '2025-12-01'",
}


def rows() -> Any:
    """Two events of 2025-12-01 (the tests' ``events`` schema)."""
    import pyarrow as pa

    day = dt.date(2025, 12, 1)
    return pa.table(
        {
            "id": pa.array([1000, 1001], pa.int64()),
            "event_date": pa.array([day, day]),
            "country": pa.array(["DE", "FR"], pa.utf8()),
            "amount": pa.array([1.0, 2.0]),
        }
    )


with DAG(
    "lance_test_rendered_arguments",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params=GOOD,
    default_args=RETRY_AT_ONCE,
):
    LanceCreatePartitionOperator(
        task_id="create",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        values="{{ params.partition_values }}",
    )
    LancePruneOperator(task_id="prune", filter="{{ params.filter }}", **ON_NAMESPACE)
    LanceCommitOperator(task_id="commit", transactions="{{ params.transactions }}", **ON_NAMESPACE)
    LanceAuditOperator(
        task_id="audit",
        transactions=[],
        checks={"min_rows": "{{ params.min_rows }}", "not_null": ["id"]},
        **ON_NAMESPACE,
    )
    LanceAbortOperator(
        task_id="abort", transactions=[], reason="{{ params.reason }}", **ON_NAMESPACE
    )
    LanceMaintainOperator(task_id="maintain", older_than="{{ params.older_than }}", **ON_NAMESPACE)
    LanceRecoverOperator(task_id="recover", lease_seconds="{{ params.lease }}", **ON_NAMESPACE)
    LanceRepairOperator(
        task_id="repair", lance_conn_id=CONN, namespace="{{ params.repair_namespace }}"
    )
    LanceAddColumnOperator(task_id="add_column", column="{{ params.column }}", **ON_NAMESPACE)
    LanceRenameColumnOperator(  # ghost -> country: already so, a no-op with good values
        task_id="rename", column="ghost", new_name="{{ params.new_name }}", **ON_NAMESPACE
    )
    LancePromoteColumnOperator(
        task_id="promote", column="id", type="{{ params.type }}", **ON_NAMESPACE
    )
    LanceEvolvePartitionSpecOperator(
        task_id="evolve", partition_fields="{{ params.partition_fields }}", **ON_NAMESPACE
    )
    LanceTagOperator(task_id="tag", tag="checked", action="{{ params.action }}", **ON_NAMESPACE)
    LanceDeleteOperator(
        task_id="delete",
        filter="event_date = DATE '1999-01-01'",
        claim_timeout="{{ params.claim_timeout }}",
        **ON_NAMESPACE,
    )
    LanceOptimizeOperator(task_id="optimize", filter="{{ params.optimize_filter }}", **ON_NAMESPACE)
    LanceMergeOperator(task_id="merge", on="{{ params.on }}", python_callable=rows, **ON_NAMESPACE)
    LanceWriteOperator(
        task_id="write", python_callable=rows, mode="{{ params.mode }}", **ON_NAMESPACE
    )
    LancePartitionSensor(
        task_id="sensor",
        filter="{{ params.sensor_filter }}",
        poke_interval=1,
        timeout=60,
        **ON_NAMESPACE,
    )


with DAG(
    "lance_test_mapped_and_spark_arguments",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"modes": ["append"], "source_format": "parquet"},
    default_args=RETRY_AT_ONCE,
):

    @task
    def modes(params: dict[str, Any]) -> list[str]:
        return list(params["modes"])

    LanceWriteOperator.partial(task_id="mapped_write", python_callable=rows, **ON_NAMESPACE).expand(
        mode=modes()
    )
    LanceSparkWriteOperator(  # refused before spark-submit: runs only with a bad format
        task_id="spark",
        source="/nowhere/events.parquet",
        source_format="{{ params.source_format }}",
        **ON_NAMESPACE,
    )


with DAG(
    "lance_test_txn_id_param",
    schedule=None,
    start_date=START,
    params={"txn_id": None},  # rendered as text: None becomes 'None'
):
    LanceWriteOperator(
        task_id="write", python_callable=rows, txn_id="{{ params.txn_id }}", **ON_NAMESPACE
    )
