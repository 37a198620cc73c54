"""DAGs the Airflow tests run with ``dag.test()`` (copied into the test DAGs folder).

They use the ``lance_test`` connection, which each test points at a fresh directory, and
take their inputs from ``params`` (rendered as native objects), so one DAG serves the good
and the bad inputs alike. ``crash_after`` makes a task fail after its real work on the first
try, the way a worker dying after a commit would, so the retry runs through Airflow.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from airflow.sdk import DAG, AssetAlias, task

from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.operators import (
    LanceCommitOperator,
    LanceCreatePartitionOperator,
    LancePruneOperator,
    LanceSparkWriteOperator,
)
from airflow_provider_lance.sensors import LancePartitionSensor

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
SCHEMA = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "event_date", "type": "date32"},
    {"name": "country", "type": "string"},
    {"name": "amount", "type": "double"},
]
BY_DAY = [{"name": "event_date", "source": "event_date"}]
RETRY_AT_ONCE = {"retries": 1, "retry_delay": dt.timedelta(seconds=0)}


def push_lineage(operator: Any, context: Any) -> None:
    """Push what the operator's OpenLineage method reports (the listener would call it on
    this same instance after ``execute``), so tests can check the datasets and facets."""
    lineage = operator.get_openlineage_facets_on_complete(context["ti"])
    if lineage is not None:
        from openlineage.client.serde import Serde

        for key, datasets in (("inputs", lineage.inputs), ("outputs", lineage.outputs)):
            context["ti"].xcom_push(
                key=f"openlineage_{key}", value=[Serde.to_dict(d) for d in datasets]
            )


class CommitThenCrashOnce(LanceCommitOperator):
    """A commit whose first try dies right after publishing (params.crash_after); it
    pushes its OpenLineage datasets (:func:`push_lineage`)."""

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        push_lineage(self, context)
        if context["params"].get("crash_after") and context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after the commit")
        return result


class SparkWriteThenCrashOnce(LanceSparkWriteOperator):
    """A Spark write whose first try dies after the job staged its data; it pushes its
    OpenLineage datasets (:func:`push_lineage`)."""

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        push_lineage(self, context)
        if context["params"].get("crash_after") and context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after the Spark job")
        return result


with DAG(
    "lance_test_create",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "schema": None, "fields": None, "partition_values": []},
):
    LanceCreatePartitionOperator(
        task_id="create",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        schema="{{ params.schema }}",
        partition_fields="{{ params.fields }}",
        values="{{ params.partition_values }}",
    )

with DAG("lance_test_templated", schedule="@daily", start_date=START, catchup=False):
    create_day = LanceCreatePartitionOperator(
        task_id="create_day",
        lance_conn_id=CONN,
        namespace="events",
        schema=SCHEMA,
        partition_fields=BY_DAY,
        values={"event_date": "{{ ds }}"},
    )
    create_next = LanceCreatePartitionOperator(
        task_id="create_next",
        lance_conn_id=CONN,
        namespace="events",
        values=[{"event_date": "{{ macros.ds_add(ds, 1) }}"}],
    )
    prune = LancePruneOperator(
        task_id="prune",
        lance_conn_id=CONN,
        namespace="events",
        filter="event_date >= DATE '{{ ds }}'",
    )
    wait = LancePartitionSensor(
        task_id="wait_day",
        lance_conn_id=CONN,
        namespace="events",
        values={"event_date": "{{ ds }}"},
        poke_interval=1,
        timeout=30,
    )

    @task
    def partition_values(partition: dict[str, Any]) -> dict[str, Any]:
        return dict(partition["values"])

    create_day >> create_next >> prune >> wait
    partition_values.expand(partition=prune.output)

with DAG(
    "lance_test_prune",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "filter": None, "max_partitions": 1024},
):
    LancePruneOperator(
        task_id="prune",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        filter="{{ params.filter }}",
    )

with DAG(
    "lance_test_sensor",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "filter": "country = 'DE'"},
):
    LancePartitionSensor(
        task_id="wait",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        filter="{{ params.filter }}",
        require_rows=True,
        deferrable=True,
        poke_interval=0.5,
        timeout=120,
    )

with DAG(
    "lance_test_commit",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "transactions": [], "txn_id": None, "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    CommitThenCrashOnce(
        task_id="commit",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        transactions="{{ params.transactions }}",
        txn_id="{{ params.txn_id }}",
        outlets=[AssetAlias("lance_test_published")],
    )

with DAG(
    "lance_test_spark",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={
        "namespace": "events",
        "source": "",
        "sql": None,
        "mode": "append",
        "crash_after": False,
    },
    default_args=RETRY_AT_ONCE,
):
    write = SparkWriteThenCrashOnce(
        task_id="write",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        source="{{ params.source }}",
        sql="{{ params.sql }}",
        mode="{{ params.mode }}",
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
    LanceCommitOperator(
        task_id="commit",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        transactions=write.output,
    )

with DAG("lance_test_masking", schedule=None, start_date=START):
    masked_create = LanceCreatePartitionOperator(
        task_id="create",
        lance_conn_id="lance_secret",
        namespace="events",
        schema=SCHEMA,
        partition_fields=BY_DAY,
        values={"event_date": "2025-12-10"},
    )
    masked_prune = LancePruneOperator(
        task_id="prune",
        lance_conn_id="lance_secret",
        namespace="events",
        filter="event_date = DATE '2025-12-10'",
    )

    @task
    def careless_logging() -> str:
        """A task that logs the storage options it was given (it should not, but might)."""
        options = LancePartitionedHook("lance_secret").storage_options
        # as flat text: only the values the hook registered can be masked, not key names
        logging.getLogger(__name__).info("storage options in use: %s", " ".join(options.values()))
        return "logged"

    masked_create >> masked_prune >> careless_logging()

with DAG(
    "lance_test_spark_cluster",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"source": "", "result_path": None, "storage_options_from": None},
    default_args=RETRY_AT_ONCE,
):
    LanceSparkWriteOperator(
        task_id="write",
        lance_conn_id="lance_secret",
        namespace="events",
        source="{{ params.source }}",
        result_path="{{ params.result_path }}",
        storage_options_from="{{ params.storage_options_from }}",
        deploy_mode="cluster",
    )

with DAG("lance_test_spark_remote", schedule=None, start_date=START, default_args=RETRY_AT_ONCE):
    LanceSparkWriteOperator(
        task_id="write", source="/landing/x.parquet", spark_conn_id="spark_remote"
    )
