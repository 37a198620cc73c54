"""The write-audit-publish example end to end: a clean batch is published, a bad one is
aborted with nothing of it ever visible."""

from __future__ import annotations

import datetime as dt
import glob
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.example_data import REGIONS
from airflow_provider_lance.namespace import (
    NamespaceNotFoundError,
    PartitionedNamespace,
    TransactionAborted,
    TxnState,
)
from tests.airflow.conftest import LANCE_ROOT, RunResult

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
DAG_ID = "lance_write_audit_publish"
ROOT = LANCE_ROOT / "examples" / "audited_sales"


def snapshot() -> tuple[int, dict[str, int | None], list[str]]:
    """Rows readers see, each partition's read_version, and every leaf data file."""
    files = sorted(glob.glob(str(ROOT / "*$dataset" / "data" / "*.lance")))
    try:
        ns = PartitionedNamespace.open(ROOT)
    except NamespaceNotFoundError:
        return 0, {}, files
    return ns.count_rows(), {p.object_id: p.read_version for p in ns.partitions()}, files


def staged_ids(run: RunResult) -> list[str]:
    return [derive_txn_id(DAG_ID, run.run_id, "stage_region", i) for i in range(len(REGIONS))]


def test_the_audit_gates_the_publish_and_the_abort(dagbag: Any) -> None:
    dag = dagbag.dags[DAG_ID]
    assert dag.get_task("stage_region").is_mapped
    assert dag.get_task("publish").upstream_task_ids == {"stage_region", "audit_staged"}
    abort = dag.get_task("abort_staged")
    assert abort.upstream_task_ids == {"stage_region", "audit_staged"}
    assert abort.trigger_rule == "one_failed"


def test_a_clean_batch_passes_the_audit_and_is_published_atomically(run_dag: RunDag) -> None:
    rows_before, _, _ = snapshot()
    run = run_dag(DAG_ID, logical_date=dt.datetime(2025, 12, 10, tzinfo=dt.timezone.utc))
    assert run.state == "success", run.output[-4000:]
    assert run.states["audit_staged"] == "success"
    assert run.states["publish"] == "success"
    assert run.states["abort_staged"] == "skipped"
    staged = [run.xcom("stage_region", i) for i in range(len(REGIONS))]
    assert [s["txn_id"] for s in staged] == staged_ids(run)
    assert {s["state"] for s in staged} == {"staged"}
    audit = run.xcom("audit_staged")
    assert (audit["passed"], audit["rows"]) == (True, 2_000 * len(REGIONS))
    assert audit["checks"]["range:order_date"]["passed"]
    published = run.xcom("publish")
    assert published["sources"] == staged_ids(run)
    assert published["rows"] == 2_000 * len(REGIONS)
    ns = PartitionedNamespace.open(ROOT)
    batch = run.run_id.replace("'", "''")
    assert ns.count_rows(filter=f"batch_id = '{batch}'") == 2_000 * len(REGIONS)
    assert ns.count_rows() == rows_before + 2_000 * len(REGIONS)


def test_a_bad_batch_fails_the_audit_and_is_aborted_unseen(run_dag: RunDag) -> None:
    rows, versions, files = snapshot()
    run = run_dag(
        DAG_ID,
        logical_date=dt.datetime(2025, 12, 11, tzinfo=dt.timezone.utc),
        conf={"inject_bad_rows": True},
    )
    assert run.state == "failed"
    assert all(run.states[f"stage_region[{i}]"] == "success" for i in range(len(REGIONS)))
    assert run.states["audit_staged"] == "failed"
    assert run.tries["audit_staged"] == 1  # bad data: no retries burnt
    assert run.states["publish"] == "upstream_failed"
    assert run.states["abort_staged"] == "success"
    audit = run.xcom("audit_staged", key="audit")
    assert audit["passed"] is False
    failed = sorted(f.split(":")[0] + ":" + f.split(":")[1] for f in audit["failures"])
    assert failed == ["range:amount", "range:order_date"]
    assert run.xcom("abort_staged")["aborted"] == staged_ids(run)

    assert snapshot() == (rows, versions, files)  # nothing published, staged files deleted
    ns = PartitionedNamespace.open(ROOT)
    for txn_id in staged_ids(run):
        txn = ns.transaction(txn_id)
        assert txn.state is TxnState.ABORTED
        with pytest.raises(TransactionAborted):
            txn.to_table()
