"""DAGs of the table operation and time travel tests (``dag.test()``, ``lance_test``).

Like ``lance_test_dags.py`` they take their inputs from ``params``. The table operations
run as ``...ThenCrashOnce`` subclasses: with ``params.crash_after`` the first try fails
after the operation was published (a worker dying right after its commit), so the retry
runs through Airflow; each try pushes the OpenLineage datasets it reports.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.sdk import DAG, Asset, AssetAlias

from airflow_provider_lance.operators import (
    LanceDeleteOperator,
    LanceDropPartitionsOperator,
    LanceMaintainOperator,
    LanceMergeOperator,
    LanceOptimizeOperator,
    LancePruneOperator,
    LanceSparkWriteOperator,
    LanceTagOperator,
)

CONN = "lance_test"
START = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
RETRY_AT_ONCE = {"retries": 1, "retry_delay": dt.timedelta(seconds=0)}
KEY = ["id", "event_date"]


class CrashOnce:
    """After the real work: push the OpenLineage datasets, then fail the first try when
    ``params.crash_after`` says so."""

    def execute(self, context: Any) -> Any:
        result = super().execute(context)
        lineage = self.get_openlineage_facets_on_complete(context["ti"])
        if lineage is not None:
            from openlineage.client.serde import Serde

            for key, datasets in (("inputs", lineage.inputs), ("outputs", lineage.outputs)):
                context["ti"].xcom_push(
                    key=f"openlineage_{key}", value=[Serde.to_dict(d) for d in datasets]
                )
        if context["params"].get("crash_after") and context["ti"].try_number == 1:
            raise RuntimeError("simulated worker crash after the operation")
        return result


class DeleteThenCrashOnce(CrashOnce, LanceDeleteOperator):
    pass


class DropThenCrashOnce(CrashOnce, LanceDropPartitionsOperator):
    pass


class MergeThenCrashOnce(CrashOnce, LanceMergeOperator):
    pass


class OptimizeThenCrashOnce(CrashOnce, LanceOptimizeOperator):
    pass


def merge_rows(params: dict[str, Any]) -> Any:
    """The rows of a merge: ``params.updates`` ids (amount 1000 + id) of ``params.start``,
    and ``params.inserts`` new ids (from 10 000) on ``params.new_day``. Each call is noted
    in ``params.calls_file``."""
    import pyarrow as pa

    if params.get("calls_file"):
        with open(params["calls_file"], "a") as f:
            f.write("called\n")
    start = dt.date.fromisoformat(params["start"])
    new_day = dt.date.fromisoformat(params["new_day"])
    ids = list(params["updates"])
    inserts = list(range(10_000, 10_000 + params["inserts"]))
    return pa.table(
        {
            "id": pa.array(ids + inserts, pa.int64()),
            "event_date": pa.array([start] * len(ids) + [new_day] * len(inserts), pa.date32()),
            "country": pa.array(["DE"] * (len(ids) + len(inserts)), pa.utf8()),
            "amount": pa.array([1000.0 + i for i in ids] + [1.0] * len(inserts)),
        }
    )


MERGE_PARAMS = {
    "source": "",
    "on": KEY,
    "crash_after": False,
    "calls_file": None,
    "start": "2025-12-10",
    "new_day": "2025-12-20",
    "updates": [0, 3, 6],
    "inserts": 2,
}

with DAG(
    "lance_test_delete",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"filter": "country = 'DE'", "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    DeleteThenCrashOnce(
        task_id="delete",
        lance_conn_id=CONN,
        namespace="events",
        filter="{{ params.filter }}",
        outlets=[Asset("lance_test_deleted")],
        emit_partition_keys=True,
        max_partition_keys=2,
    )

with DAG(
    "lance_test_drop",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"keep_days": 2, "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    DropThenCrashOnce(
        task_id="drop",
        lance_conn_id=CONN,
        namespace="events",
        filter="event_date < DATE '{{ macros.ds_add(ds, -params.keep_days) }}'",
        outlets=[Asset("lance_test_dropped")],
    )

with DAG(
    "lance_test_drop_filter",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"filter": None},
):
    LanceDropPartitionsOperator(
        task_id="drop", lance_conn_id=CONN, namespace="events", filter="{{ params.filter }}"
    )

with DAG(
    "lance_test_merge",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params=MERGE_PARAMS,
    default_args=RETRY_AT_ONCE,
):
    MergeThenCrashOnce(
        task_id="merge",
        lance_conn_id=CONN,
        namespace="events",
        source="{{ params.source }}",
        on="{{ params.on }}",
        outlets=[AssetAlias("lance_test_merged")],
    )

with DAG(
    "lance_test_merge_callable",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params=MERGE_PARAMS,
    default_args=RETRY_AT_ONCE,
):
    MergeThenCrashOnce(
        task_id="merge",
        lance_conn_id=CONN,
        namespace="events",
        python_callable=merge_rows,
        on="{{ params.on }}",
    )

with DAG(
    "lance_test_merge_sync",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params=MERGE_PARAMS,
):
    LanceMergeOperator(
        task_id="merge",
        lance_conn_id=CONN,
        namespace="events",
        python_callable=merge_rows,
        on=KEY,
        when_not_matched_by_source_delete=True,
    )

with DAG(
    "lance_test_optimize",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"filter": None, "crash_after": False},
    default_args=RETRY_AT_ONCE,
):
    OptimizeThenCrashOnce(
        task_id="optimize",
        lance_conn_id=CONN,
        namespace="events",
        filter="{{ params.filter }}",
        target_rows_per_fragment=1024,
    )

with DAG(
    "lance_test_tag",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"tag": None, "action": "create", "as_of": None},
    default_args=RETRY_AT_ONCE,
):
    LanceTagOperator(
        task_id="tag",
        lance_conn_id=CONN,
        namespace="events",
        tag="{{ params.tag or 'eod-' ~ ds }}",
        action="{{ params.action }}",
        as_of="{{ params.as_of }}",
    )

with DAG(
    "lance_test_retag",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"tag": "latest-good"},
):
    LanceTagOperator(
        task_id="tag", lance_conn_id=CONN, namespace="events", tag="{{ params.tag }}", replace=True
    )

with DAG(
    "lance_test_prune_as_of",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"filter": None, "partition_key": "2025-12-10", "as_of": None},
    default_args=RETRY_AT_ONCE,
):
    LancePruneOperator(
        task_id="prune",
        lance_conn_id=CONN,
        namespace="events",
        filter="{{ params.filter }}",
        as_of="{{ params.as_of }}",
    )
    LancePruneOperator(
        task_id="prune_keyed",
        lance_conn_id=CONN,
        namespace="events",
        partition_key="{{ params.partition_key }}",
        as_of="{{ params.as_of }}",
    )

with DAG(
    "lance_test_sweep",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"older_than": None, "orphan_min_age": 0},
    default_args=RETRY_AT_ONCE,
):
    dry_run = LanceMaintainOperator(
        task_id="sweep_dry_run",
        lance_conn_id=CONN,
        namespace="events",
        older_than="{{ params.older_than }}",
        sweep_orphans=True,
        orphan_min_age="{{ params.orphan_min_age }}",
        dry_run=True,
    )
    sweep = LanceMaintainOperator(
        task_id="sweep",
        lance_conn_id=CONN,
        namespace="events",
        older_than="{{ params.older_than }}",
        sweep_orphans=True,
        orphan_min_age="{{ params.orphan_min_age }}",
        enforce_min_age=False,  # the test sweeps at once: no write runs meanwhile
    )
    dry_run >> sweep

with DAG(
    "lance_test_sweep_guarded",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"orphan_min_age": 0},
    default_args=RETRY_AT_ONCE,
):
    # the same tasks as above without enforce_min_age=False: a short age is refused
    guarded_dry_run = LanceMaintainOperator(
        task_id="sweep_dry_run",
        lance_conn_id=CONN,
        namespace="events",
        sweep_orphans=True,
        orphan_min_age="{{ params.orphan_min_age }}",
        dry_run=True,
    )
    guarded_sweep = LanceMaintainOperator(
        task_id="sweep",
        lance_conn_id=CONN,
        namespace="events",
        sweep_orphans=True,
        orphan_min_age="{{ params.orphan_min_age }}",
    )
    guarded_dry_run >> guarded_sweep

with DAG(
    "lance_test_spark_commit_keyed",
    schedule=None,
    start_date=START,
    render_template_as_native_obj=True,
    params={"source": ""},
):
    LanceSparkWriteOperator(
        task_id="write",
        lance_conn_id=CONN,
        namespace="events",
        source="{{ params.source }}",
        commit=True,
        outlets=[Asset("lance_test_spark_published")],
        emit_partition_keys=True,
        conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"},
    )
