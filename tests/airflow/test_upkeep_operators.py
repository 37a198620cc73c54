"""Audit, upkeep (recover, maintain, repair, abort) and evolution operators on real
namespaces, through ``dag.test()``."""

from __future__ import annotations

import datetime as dt
import glob
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import lance.namespace as ln
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
    TxnState,
)
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events, sort_rows

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
SUCCESS, FAILED = "success", "failed"
DAY = dt.date(2025, 12, 1)


def make_namespace(root: Path, schema: pa.Schema = EVENTS_SCHEMA) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / "events",
        schema=schema,
        partition_fields=[PartitionField("event_date", "event_date")],
    )


def stage(ns: PartitionedNamespace, txn_id: str, data: pa.Table) -> dict[str, Any]:
    """Stage ``data`` as a staging write task would, returning its write result."""
    txn = ns.begin("append", txn_id=txn_id)
    txn.stage(data, stage_id="w")
    return {"txn_id": txn_id, "uri": ns.uri, "state": "staged", "rows": data.num_rows}


def staged_files(root: Path) -> list[str]:
    return sorted(glob.glob(str(root / "events" / "*$dataset" / "data" / "*.lance")))


# -- LanceAuditOperator -----------------------------------------------------------------------
CHECKS = {
    "min_rows": 10,
    "max_rows": 1000,
    "not_null": ["id", "event_date"],
    "ranges": {"amount": {"min": 0}, "event_date": {"min": "2025-12-01", "max": "2025-12-03"}},
    "invalid_when": {"huge": "amount > 1000"},
}


def test_audit_passes_staged_data_that_meets_the_checks(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    results = [stage(ns, "a", events(20, start=DAY, days=3)), stage(ns, "b", events(5, start=DAY))]
    run = run_dag("lance_test_audit", conf={"transactions": results, "checks": CHECKS})
    assert run.state == SUCCESS, run.output[-3000:]
    audit = run.xcom("audit")
    assert audit == run.xcom("audit", key="audit")
    assert (audit["passed"], audit["rows"], audit["failures"]) == (True, 25, [])
    assert audit["transactions"] == ["a", "b"]
    assert set(audit["checks"]) == {
        "min_rows",
        "max_rows",
        "not_null:id",
        "not_null:event_date",
        "range:amount",
        "range:event_date",
        "invalid_when:huge",
    }
    assert ns.count_rows() == 0  # an audit publishes nothing
    assert ns.transaction("a").state is TxnState.STAGED


def test_audit_fails_on_violations_and_names_them(run_dag: RunDag, lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    bad = events(12, start=DAY, days=3)
    amounts = bad["amount"].to_pylist()
    amounts[3], amounts[7] = -5.0, 2000.0
    days = bad["event_date"].to_pylist()
    days[5] = dt.date(2026, 1, 1)
    bad = bad.set_column(3, "amount", pa.array(amounts)).set_column(
        1, "event_date", pa.array(days, pa.date32())
    )
    result = stage(ns, "bad", bad)
    run = run_dag("lance_test_audit", conf={"transactions": [result], "checks": CHECKS})
    assert run.state == FAILED
    assert run.tries["audit"] == 1
    audit = run.xcom("audit", key="audit")  # pushed before the task failed
    assert audit["passed"] is False
    assert audit["failures"] == [
        "range:amount: 1 value(s) of 'amount' outside [0, None] (seen -5.0 .. 2000.0)",
        "range:event_date: 1 value(s) of 'event_date' outside [2025-12-01, 2025-12-03] "
        "(seen 2025-12-01 .. 2026-01-01)",
        "invalid_when:huge: 1 row(s) match 'amount > 1000'",
    ]
    assert "audit of ['bad'] failed, nothing was published" in run.output
    assert ns.count_rows() == 0


@pytest.mark.parametrize(
    ("checks", "message"),
    [
        ({"min_row": 1}, "unknown checks 'min_row' (did you mean 'min_rows'?)"),
        ({"not_null": ["nope"]}, "SchemaError"),
        ({"ranges": {"amount": {"low": 1}}}, "the range of 'amount' must be"),
        ({"ranges": {"event_date": {"min": "yesterday"}}}, "is not a date32[day]"),
        ({"invalid_when": {"x": "nope > 1"}}, "FilterError"),
    ],
    ids=["unknown-check", "unknown-column", "bad-range", "bad-bound", "bad-filter"],
)
def test_audit_with_malformed_checks_fails_at_once(
    run_dag: RunDag, lance_test_root: Path, checks: dict[str, Any], message: str
) -> None:
    ns = make_namespace(lance_test_root)
    result = stage(ns, "a", events(5, start=DAY))
    run = run_dag("lance_test_audit", conf={"transactions": [result], "checks": checks})
    assert run.state == FAILED
    assert run.tries["audit"] == 1
    assert message in run.output


# -- LanceRecoverOperator, LanceMaintainOperator ---------------------------------------------
def test_recover_aborts_abandoned_transactions_then_maintain_compacts_and_cleans(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    for i in range(3):
        ns.write(events(5, start=DAY + dt.timedelta(days=i), first_id=10 * i))
    stage(ns, "abandoned", events(5, start=DAY, first_id=100))
    rows = sort_rows(ns.to_table())
    live = run_dag("lance_test_upkeep", conf={"lease_seconds": 3600})
    assert live.state == SUCCESS, live.output[-3000:]
    assert live.xcom("recover")["aborted"] == []  # younger than the lease: left alone
    assert ns.transaction("abandoned").state is TxnState.STAGED

    run = run_dag("lance_test_upkeep", conf={"lease_seconds": 0, "older_than": 0})
    assert run.state == SUCCESS, run.output[-3000:]
    recovered = run.xcom("recover")
    assert (recovered["aborted"], recovered["aborted_count"]) == (["abandoned"], 1)
    assert ns.transaction("abandoned").state is TxnState.ABORTED
    maintained = run.xcom("maintain")
    assert maintained["uri"] == ns.uri
    assert maintained["manifest_fragments_after"] <= maintained["manifest_fragments_before"]
    assert maintained["manifest_versions_removed"] > 0
    latest = ns.version
    assert maintained["manifest_version"] == latest
    assert maintained["retained_manifest_versions"] == [latest, latest]
    assert sort_rows(ns.to_table()) == rows  # nothing readers see changed


def test_maintain_with_a_bad_duration_fails_at_once(run_dag: RunDag, lance_test_root: Path) -> None:
    make_namespace(lance_test_root)
    run = run_dag("lance_test_upkeep", conf={"lease_seconds": "a while"})
    assert run.state == FAILED
    assert run.tries["recover"] == 1
    assert (
        "LanceRecoverOperator(task_id='recover'): lease_seconds must be a number of seconds"
        in run.output
    )
    assert "got 'a while' (str)" in run.output


# -- LanceAbortOperator ------------------------------------------------------------------------
def test_abort_removes_staged_transactions_and_is_idempotent(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    results = [stage(ns, "a", events(6, start=DAY)), stage(ns, "b", events(6, start=DAY))]
    assert len(staged_files(lance_test_root)) == 6  # two stages of three days each
    run = run_dag("lance_test_abort", conf={"transactions": results})
    assert run.state == SUCCESS, run.output[-3000:]
    aborted = run.xcom("abort")
    assert aborted["aborted"] == ["a", "b"]
    assert aborted["reason"].startswith("checks failed (lance_test_abort.abort, run ")
    assert staged_files(lance_test_root) == []
    for txn_id in ("a", "b"):
        txn = ns.transaction(txn_id)
        assert txn.state is TxnState.ABORTED
        with pytest.raises(TransactionAborted):
            txn.to_table()
    again = run_dag("lance_test_abort", conf={"transactions": results})
    assert again.state == SUCCESS
    assert ns.count_rows() == 0


def test_abort_of_a_published_transaction_fails_at_once(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    stage(ns, "done", events(6, start=DAY))
    ns.commit("done")
    run = run_dag("lance_test_abort", conf={"transactions": ["done"]})
    assert run.state == FAILED
    assert run.tries["abort"] == 1
    assert "transaction done is published; it cannot be aborted" in run.output
    assert ns.count_rows() == 6


# -- LanceRepairOperator ---------------------------------------------------------------------
def test_repair_restores_a_clobbered_manifest_then_is_a_no_op(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(12, start=DAY, days=3))
    rows = sort_rows(ns.to_table())
    # pylance's DirectoryNamespace rewrites __manifest without our columns
    dirns = ln.DirectoryNamespace(root=str(lance_test_root / "events"))
    dirns.create_namespace(ln.CreateNamespaceRequest(id=["v1", "scratch"]))
    assert (
        "read_version"
        not in lance.dataset(str(lance_test_root / "events" / "__manifest")).schema.names
    )
    run = run_dag("lance_test_repair")
    assert run.state == SUCCESS, run.output[-3000:]
    repaired = run.xcom("repair")
    assert repaired["repaired"] is True
    assert repaired["uri"] == ns.uri
    assert sort_rows(PartitionedNamespace.open(ns.uri).to_table()) == rows
    again = run_dag("lance_test_repair")
    assert again.state == SUCCESS
    assert again.xcom("repair")["repaired"] is False


# -- evolution -----------------------------------------------------------------------------
EVOLVING = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("amount_cents", pa.int32()),
        pa.field("legacy", pa.utf8()),
    ]
)


def test_schema_and_spec_evolution_apply_once_and_reruns_change_nothing(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root, EVOLVING)
    old = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "event_date": pa.array([DAY, DAY]),
            "country": ["DE", "FR"],
            "amount_cents": pa.array([100, 250], pa.int32()),
            "legacy": ["x", "y"],
        }
    )
    ns.write(old)
    run = run_dag("lance_test_evolution")
    assert run.state == SUCCESS, run.output[-3000:]
    for task_id in ("add", "rename", "promote", "drop"):
        assert run.xcom(task_id)["changed"] is True, task_id
    assert run.xcom("evolve") == {
        "uri": ns.uri,
        "spec_version": 2,
        "changed": True,
        "fields": ["country_code"],
    }
    schema = ns.schema
    assert schema.names == ["id", "event_date", "country_code", "amount_cents", "channel"]
    assert schema.field("amount_cents").type == pa.int64()
    assert [f.name for f in ns.partition_spec()] == ["country_code"]
    assert sort_rows(ns.to_table()) == [
        {"id": 1, "event_date": DAY, "country_code": "DE", "amount_cents": 100, "channel": None},
        {"id": 2, "event_date": DAY, "country_code": "FR", "amount_cents": 250, "channel": None},
    ]
    version = ns.version
    again = run_dag("lance_test_evolution")
    assert again.state == SUCCESS, again.output[-3000:]
    for task_id in ("add", "rename", "promote", "drop", "evolve"):
        assert again.xcom(task_id)["changed"] is False, task_id
    assert ns.version == version


@pytest.mark.parametrize(
    ("conf", "task_id", "message", "unchanged"),
    [
        ({"promote": ["amount_cents", "int16"]}, "promote", "SchemaError", "amount_cents"),
        ({"add": {"name": "channel"}}, "add", "column 'channel' has no 'type'", "country"),
        ({"rename": ["nope", "other"]}, "rename", "nope", "country"),
    ],
    ids=["narrowing", "column-without-type", "unknown-column"],
)
def test_evolution_bad_input_fails_at_once(
    run_dag: RunDag,
    lance_test_root: Path,
    conf: dict[str, Any],
    task_id: str,
    message: str,
    unchanged: str,
) -> None:
    ns = make_namespace(lance_test_root, EVOLVING)
    run = run_dag("lance_test_evolution", conf=conf)
    assert run.state == FAILED
    assert run.states[task_id] == FAILED
    assert run.tries[task_id] == 1
    assert message in run.output
    assert run.states["evolve"] == "upstream_failed"
    assert ns.schema.field(unchanged) == EVOLVING.field(unchanged)
    assert ns.spec_version == 1


@pytest.mark.parametrize(
    ("value", "expected"),
    [(dt.timedelta(minutes=2), 120.0), (90, 90.0), ("1.5", 1.5), (None, None), ("None", None)],
)
def test_durations_are_timedeltas_or_seconds(value: Any, expected: float | None) -> None:
    from airflow_provider_lance.validation import duration_seconds

    assert duration_seconds(value, "older_than", optional=True) == expected


@pytest.mark.parametrize("value", [-1, "soon", True, None])
def test_bad_durations_fail_at_once(value: Any) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from airflow_provider_lance.validation import duration_seconds

    with pytest.raises(AirflowFailException):
        duration_seconds(value, "lease_seconds")
