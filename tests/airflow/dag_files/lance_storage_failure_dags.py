"""A DAG of the permanent storage failure tests (``dag.test()``, ``lance_read_only``).

Every task writes into a namespace its connection may only read: each must fail at its
first try, without burning the retry it has.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from airflow.sdk import DAG

from airflow_provider_lance.operators import (
    LanceDeleteOperator,
    LanceMaintainOperator,
    LanceRecoverOperator,
    LanceTagOperator,
    LanceWriteOperator,
)

CONN = "lance_read_only"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)


def one_row() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([99], pa.int64()),
            "event_date": pa.array([dt.date(2025, 12, 10)]),
            "country": pa.array(["DE"]),
        }
    )


with DAG(
    "lance_test_read_only_store",
    schedule=None,
    start_date=START,
    default_args={"retries": 1, "retry_delay": dt.timedelta(seconds=0)},
):
    LanceWriteOperator(task_id="write", lance_conn_id=CONN, namespace="ns", python_callable=one_row)
    LanceDeleteOperator(task_id="delete", lance_conn_id=CONN, namespace="ns", filter="id = 1")
    LanceMaintainOperator(task_id="maintain", lance_conn_id=CONN, namespace="ns")
    LanceMaintainOperator(
        task_id="clean_up", lance_conn_id=CONN, namespace="ns", older_than=0, compact=False
    )
    LanceTagOperator(task_id="tag", lance_conn_id=CONN, namespace="ns", tag="eod")
    LanceRecoverOperator(task_id="recover", lance_conn_id=CONN, namespace="ns", lease_seconds=0)
