"""DAGs of the tests of Python writes, audits, upkeep and evolution (``dag.test()``).

Like ``lance_test_dags.py`` they use the ``lance_test`` connection (a fresh directory per
test) and take their inputs from ``params``. ``produce`` plays the user's callable: it
returns the same deterministic events in whatever form ``params.kind`` asks for, and
notes every call in ``params.calls_file`` so tests can count them.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
from collections.abc import Iterator
from typing import Any

from airflow.sdk import DAG, task

from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.operators import (
    LanceAbortOperator,
    LanceAddColumnOperator,
    LanceAuditOperator,
    LanceCommitOperator,
    LanceDropColumnOperator,
    LanceEvolvePartitionSpecOperator,
    LanceMaintainOperator,
    LancePromoteColumnOperator,
    LanceRecoverOperator,
    LanceRenameColumnOperator,
    LanceRepairOperator,
    LanceWriteOperator,
)

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
RETRY_AT_ONCE = {"retries": 1, "retry_delay": dt.timedelta(seconds=0)}
MAPPED_DAYS = ["2025-12-01", "2025-12-02", "2025-12-03"]


def events(n: int, start: str, days: int, first_id: int) -> Any:
    """``n`` events over ``days`` days from ``start`` (the tests' ``events`` schema)."""
    import pyarrow as pa

    day = dt.date.fromisoformat(start)
    countries = ["US", "DE", "FR", None]
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "event_date": pa.array([day + dt.timedelta(days=i % days) for i in range(n)]),
            "country": pa.array([countries[i % 4] for i in range(n)], pa.utf8()),
            "amount": pa.array([float(i) * 1.5 for i in range(n)]),
        }
    )


def produce(params: dict[str, Any]) -> Any:
    """The data of a write, as ``params.kind`` says: table, pandas, reader, generator..."""
    import pyarrow as pa

    if params.get("calls_file"):
        with open(params["calls_file"], "a") as f:
            f.write("called\n")
    table = events(params["rows"], params["start"], params["days"], params["first_id"])
    kind = params["kind"]
    if kind == "table":
        return table
    if kind == "pandas":
        return table.to_pandas().set_index("id", drop=False)  # the index is not written
    if kind == "reader":
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=7))
    if kind == "generator":
        return (batch for batch in table.to_batches(max_chunksize=7))
    if kind == "none":
        return None
    if kind == "bad_pandas":  # a column of numbers and text: Arrow cannot type it
        return table.to_pandas().assign(amount=[1.5, "x"] * (params["rows"] // 2))
    if kind == "failing_generator":

        def failing() -> Iterator[Any]:
            yield from table.to_batches(max_chunksize=7)[:2]
            raise RuntimeError("the source went away mid-stream")

        return failing()
    raise ValueError(f"unknown kind {kind!r}")


class WriteThenCrashOnce(LanceWriteOperator):
    """A write whose first try dies after its real work (params.crash_after); it pushes
    its OpenLineage datasets, as ``CommitThenCrashOnce`` does."""

    def execute(self, context: Any) -> dict[str, Any]:
        result = super().execute(context)
        lineage = self.get_openlineage_facets_on_complete(context["ti"])
        if lineage is not None:
            from openlineage.client.serde import Serde

            context["ti"].xcom_push(
                key="openlineage_outputs", value=[Serde.to_dict(d) for d in lineage.outputs]
            )
        if context["params"].get("crash_after") and context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after the write")
        return result


WRITE_PARAMS = {
    "namespace": "events",
    "mode": "append",
    "kind": "table",
    "rows": 30,
    "start": "2025-12-01",
    "days": 3,
    "first_id": 0,
    "crash_after": False,
    "calls_file": None,
}

for dag_id, stage_only in (("lance_test_write", False), ("lance_test_write_staged", True)):
    with DAG(
        dag_id,
        schedule=None,
        start_date=START,
        render_template_as_native_obj=True,
        params=WRITE_PARAMS,
        default_args=RETRY_AT_ONCE,
    ):
        written = WriteThenCrashOnce(
            task_id="write",
            lance_conn_id=CONN,
            python_callable=produce,
            namespace="{{ params.namespace }}",
            mode="{{ params.mode }}",
            stage_only=stage_only,
        )
        LanceCommitOperator(
            task_id="commit",
            lance_conn_id=CONN,
            namespace="{{ params.namespace }}",
            transactions=written.output,
        )


def _data_files(namespace: str) -> int:
    root = LancePartitionedHook(CONN).namespace_uri(namespace).removeprefix("file://")
    return len(glob.glob(os.path.join(root, "*$dataset", "data", "*.lance")))


with DAG("lance_test_write_mapped", schedule=None, start_date=START):

    @task.lance_write(lance_conn_id=CONN, namespace="events", stage_only=True, flush_bytes=1)
    def day_batches(day: str) -> Iterator[Any]:
        """Three batches of one day; after each, its data files must be on disk already:
        the core consumes the generator batch by batch (with flush_bytes=1 each batch is
        flushed), it never collects it first."""
        first = (dt.date.fromisoformat(day) - dt.date(2025, 12, 1)).days * 100
        table = events(30, day, days=1, first_id=first)
        files = _data_files("events")
        for number, batch in enumerate(table.to_batches(max_chunksize=10)):
            yield batch
            now = _data_files("events")
            if now <= files:
                raise RuntimeError(f"batch {number} of {day} was not written before the next")
            files = now

    staged = day_batches.expand(day=MAPPED_DAYS)
    LanceCommitOperator(
        task_id="commit", lance_conn_id=CONN, namespace="events", transactions=staged
    )

    def one_day(day: str) -> Any:
        first = (dt.date.fromisoformat(day) - dt.date(2025, 12, 1)).days * 100
        return events(10, day, days=1, first_id=first)

    LanceWriteOperator.partial(
        task_id="publish_day", lance_conn_id=CONN, namespace="classic", python_callable=one_day
    ).expand(op_kwargs=[{"day": d} for d in MAPPED_DAYS])


with DAG(
    "lance_test_audit",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "transactions": [], "checks": {}},
):
    LanceAuditOperator(
        task_id="audit",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        transactions="{{ params.transactions }}",
        checks="{{ params.checks }}",
    )

with DAG(
    "lance_test_upkeep",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "older_than": None, "lease_seconds": 3600},
    default_args=RETRY_AT_ONCE,
):
    recover = LanceRecoverOperator(
        task_id="recover",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        lease_seconds="{{ params.lease_seconds }}",
    )
    maintain = LanceMaintainOperator(
        task_id="maintain",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        older_than="{{ params.older_than }}",
    )
    recover >> maintain

with DAG(
    "lance_test_abort",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events", "transactions": []},
    default_args=RETRY_AT_ONCE,
):
    LanceAbortOperator(
        task_id="abort",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        transactions="{{ params.transactions }}",
        reason="checks failed",
    )

with DAG(
    "lance_test_repair",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"namespace": "events"},
):
    LanceRepairOperator(task_id="repair", lance_conn_id=CONN, namespace="{{ params.namespace }}")

with DAG(
    "lance_test_evolution",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={
        "namespace": "events",
        "add": {"name": "channel", "type": "string"},
        "rename": ["country", "country_code"],
        "promote": ["amount_cents", "int64"],
        "drop": "legacy",
        "fields": [{"name": "country_code", "source": "country_code"}],
    },
    default_args=RETRY_AT_ONCE,
):
    add = LanceAddColumnOperator(
        task_id="add",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        column="{{ params.add }}",
    )
    rename = LanceRenameColumnOperator(
        task_id="rename",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        column="{{ params.rename[0] }}",
        new_name="{{ params.rename[1] }}",
    )
    promote = LancePromoteColumnOperator(
        task_id="promote",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        column="{{ params.promote[0] }}",
        type="{{ params.promote[1] }}",
    )
    drop = LanceDropColumnOperator(
        task_id="drop",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        column="{{ params.drop }}",
    )
    evolve = LanceEvolvePartitionSpecOperator(
        task_id="evolve",
        lance_conn_id=CONN,
        namespace="{{ params.namespace }}",
        partition_fields="{{ params.fields }}",
    )
    add >> rename >> promote >> drop >> evolve
