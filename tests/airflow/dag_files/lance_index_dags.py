"""DAGs of the index operator tests (``dag.test()``, ``lance_test``), inputs from ``params``.

The operators run as ``...ThenCrashOnce`` subclasses (see ``lance_table_operation_dags.py``):
with ``params.crash_after`` the first try fails after the operation was published.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG

from airflow_provider_lance.operators import (
    LanceCreateIndexOperator,
    LanceDropIndexOperator,
    LanceMaintainOperator,
    LanceOptimizeIndicesOperator,
)

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
RETRY_AT_ONCE = {"retries": 1, "retry_delay": dt.timedelta(seconds=0)}


class CrashOnce:
    """Fail the first try after the real work when ``params.crash_after`` says so."""

    def execute(self, context: Any) -> Any:
        result = super().execute(context)  # type: ignore[misc]
        if context["params"].get("crash_after") and context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after the operation")
        return result


class CreateIndexThenCrashOnce(CrashOnce, LanceCreateIndexOperator):
    pass


class OptimizeIndicesThenCrashOnce(CrashOnce, LanceOptimizeIndicesOperator):
    pass


with DAG(
    "lance_test_create_index",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"index_type": "BTREE", "filter": None, "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    CreateIndexThenCrashOnce(
        task_id="create_index",
        lance_conn_id=CONN,
        namespace="events",
        column="id",
        index_type="{{ params.index_type }}",
        name="by_id",
        filter="{{ params.filter }}",
    )

with DAG(
    "lance_test_vector_index",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"num_partitions": 2},
):
    LanceCreateIndexOperator(
        task_id="create_index",
        lance_conn_id=CONN,
        namespace="docs",
        column="embedding",
        index_type="IVF_FLAT",
        index_params={"num_partitions": "{{ params.num_partitions }}", "metric": "l2"},
    )

with DAG(
    "lance_test_optimize_indices",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"day": "2025-12-20", "names": None, "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    OptimizeIndicesThenCrashOnce(
        task_id="optimize_indices",
        lance_conn_id=CONN,
        namespace="events",
        filter="event_date = DATE '{{ params.day }}'",
        names="{{ params.names }}",
    )

with DAG(
    "lance_test_drop_index",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"name": "by_id"},
):
    LanceDropIndexOperator(
        task_id="drop_index", lance_conn_id=CONN, namespace="events", name="{{ params.name }}"
    )

with DAG(
    "lance_test_maintain_indices",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
):
    LanceMaintainOperator(task_id="maintain", lance_conn_id=CONN, namespace="events")

with DAG(
    "lance_test_index_param_typo",
    schedule=None,
    start_date=START,
    default_args=RETRY_AT_ONCE,
):
    LanceCreateIndexOperator(
        task_id="create_index",
        lance_conn_id=CONN,
        namespace="docs",
        column="embedding",
        index_type="IVF_FLAT",
        index_params={"num_partition": 2},  # a typo pylance would ignore
    )
