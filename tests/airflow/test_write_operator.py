"""``LanceWriteOperator`` and ``@task.lance_write`` through ``dag.test()``: writes without
Spark, published or staged for a commit, retried, mapped, with their lineage."""

from __future__ import annotations

import datetime as dt
import glob
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField, TxnState
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events, sort_rows

RunDag = Callable[..., RunResult]
SUCCESS, FAILED = "success", "failed"


def make_namespace(root: Path, name: str = "events") -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / name,
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )


def data_files(root: Path, name: str = "events") -> list[str]:
    return sorted(glob.glob(str(root / name / "*$dataset" / "data" / "*.lance")))


def expected(rows: int = 30, start: dt.date = dt.date(2025, 12, 1), days: int = 3) -> list[dict]:
    return sort_rows(events(rows, start=start, days=days))


def calls(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("kind", ["table", "pandas", "reader", "generator"])
def test_write_publishes_every_kind_of_data_and_commit_reports_it(
    run_dag: RunDag, lance_test_root: Path, kind: str
) -> None:
    ns = make_namespace(lance_test_root)
    run = run_dag("lance_test_write", conf={"kind": kind})
    assert run.state == SUCCESS, run.output[-3000:]
    written = run.xcom("write")
    assert written["txn_id"] == derive_txn_id("lance_test_write", run.run_id, "write")
    assert (written["state"], written["mode"], written["rows"]) == ("published", "append", 30)
    assert written["uri"] == ns.uri
    assert written["manifest_version"] == ns.version
    assert written["partition_count"] == 3
    assert written["files"] == 3
    assert sorted(p["values"]["event_date"] for p in written["partitions"]) == [
        "2025-12-01",
        "2025-12-02",
        "2025-12-03",
    ]
    assert sort_rows(ns.to_table()) == expected()
    # the commit operator takes the write's XCom: published already, reported, not redone
    committed = run.xcom("commit")
    assert committed["sources"] == [written["txn_id"]]
    assert (committed["rows"], committed["manifest_version"]) == (30, ns.version)

    (output,) = run.xcom("write", key="openlineage_outputs")
    assert (output["namespace"], output["name"]) == ("file", f"{lance_test_root}/events")
    assert output["facets"]["version"]["datasetVersion"] == str(ns.version)
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == EVENTS_SCHEMA.names
    assert "lifecycleStateChange" not in output["facets"]  # an append
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 30


@pytest.mark.integration
def test_overwrite_replaces_exactly_the_partitions_it_writes(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(30, start=dt.date(2025, 12, 1), days=3))
    run = run_dag(
        "lance_test_write",
        conf={"mode": "overwrite", "rows": 4, "start": "2025-12-02", "days": 1, "first_id": 500},
    )
    assert run.state == SUCCESS, run.output[-3000:]
    written = run.xcom("write")
    assert (written["mode"], written["rows"], written["partition_count"]) == ("overwrite", 4, 1)
    rows = ns.to_table().to_pylist()
    by_day: dict[dt.date, list[int]] = {}
    for row in rows:
        by_day.setdefault(row["event_date"], []).append(row["id"])
    assert sorted(by_day[dt.date(2025, 12, 2)]) == [500, 501, 502, 503]
    assert len(by_day[dt.date(2025, 12, 1)]) == len(by_day[dt.date(2025, 12, 3)]) == 10

    (output,) = run.xcom("write", key="openlineage_outputs")
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    assert output["facets"]["version"]["datasetVersion"] == str(ns.version)


@pytest.mark.integration
def test_a_retry_after_the_publish_returns_it_without_calling_the_callable_again(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path
) -> None:
    ns = make_namespace(lance_test_root)
    calls_file = tmp_path / "calls"
    run = run_dag(
        "lance_test_write",
        conf={"kind": "generator", "crash_after": True, "calls_file": str(calls_file)},
    )
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["write"] == 2  # the first try died after publishing
    assert "simulated worker crash after the write" in run.output
    assert calls(calls_file) == 1  # the retry found the transaction published
    assert run.xcom("write")["manifest_version"] == ns.version
    assert sort_rows(ns.to_table()) == expected()  # every row exactly once


@pytest.mark.integration
def test_staged_write_retried_replaces_its_stage_then_the_commit_publishes_once(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path
) -> None:
    ns = make_namespace(lance_test_root)
    calls_file = tmp_path / "calls"
    run = run_dag(
        "lance_test_write_staged",
        conf={"kind": "reader", "crash_after": True, "calls_file": str(calls_file)},
    )
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["write"] == 2
    assert calls(calls_file) == 2  # staged, not published: the retry stages again...
    staged = run.xcom("write")
    txn_id = derive_txn_id("lance_test_write_staged", run.run_id, "write")
    assert staged["txn_id"] == txn_id
    assert (staged["state"], staged["rows"], staged["manifest_version"]) == ("staged", 30, None)
    assert staged["files"] == 3
    published = run.xcom("commit")
    assert published["sources"] == [txn_id]
    assert published["rows"] == 30
    assert sort_rows(ns.to_table()) == expected()  # ...replacing the first try's stage
    assert len(data_files(lance_test_root)) == 3  # whose files were deleted
    # a staged write changed nothing readers see: no version, no lifecycle change
    (output,) = run.xcom("write", key="openlineage_outputs")
    assert "version" not in output["facets"]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 30


@pytest.mark.integration
def test_a_source_failing_mid_stream_is_retried_and_leaves_nothing_behind(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    version = ns.version
    run = run_dag("lance_test_write", conf={"kind": "failing_generator"})
    assert run.state == FAILED
    assert run.tries["write"] == 2  # not a project error: the task's retries apply
    assert "the source went away mid-stream" in run.output
    assert ns.count_rows() == 0
    assert data_files(lance_test_root) == []  # staged files of both tries deleted
    txn_id = derive_txn_id("lance_test_write", run.run_id, "write")
    assert ns.transaction(txn_id).state is TxnState.ABORTED
    assert ns.partitions() == []
    assert ns.version > version  # (the aborts are recorded)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"kind": "none"}, "the callable returned None"),
        ({"kind": "bad_pandas"}, "the callable's pandas DataFrame cannot become Arrow data"),
        ({"mode": "upsert"}, "mode must be one of 'append', 'overwrite'; got 'upsert' (str)"),
        ({"namespace": "nowhere"}, "NamespaceNotFoundError"),
    ],
    ids=["returns-none", "untypeable-pandas", "bad-mode", "missing-namespace"],
)
def test_bad_input_fails_at_once_and_publishes_nothing(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path, conf: dict[str, Any], message: str
) -> None:
    ns = make_namespace(lance_test_root)
    calls_file = tmp_path / "calls"
    run = run_dag("lance_test_write", conf={**conf, "calls_file": str(calls_file)})
    assert run.state == FAILED
    assert run.tries["write"] == 1  # no retries burnt
    assert message in run.output
    assert run.states["commit"] == "upstream_failed"
    assert ns.count_rows() == 0
    if "kind" not in conf:
        assert calls(calls_file) == 0  # checked before the callable ran


@pytest.mark.integration
def test_data_the_namespace_cannot_take_fails_at_once(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    PartitionedNamespace.create(
        lance_test_root / "events",
        schema=EVENTS_SCHEMA.remove(EVENTS_SCHEMA.get_field_index("country")),
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    run = run_dag("lance_test_write")
    assert run.state == FAILED
    assert run.tries["write"] == 1
    assert "DataValidationError" in run.output
    assert "country" in run.output
    assert data_files(lance_test_root) == []


@pytest.mark.integration
def test_decorated_and_classic_writes_map_one_transaction_per_index(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """``@task.lance_write`` mapped over days stages; the commit publishes all at once. The
    decorated generator checks, after every batch, that the core wrote it to disk before
    asking for the next: the iterator is consumed batch by batch, never collected."""
    ns = make_namespace(lance_test_root)
    classic = make_namespace(lance_test_root, "classic")
    run = run_dag("lance_test_write_mapped")
    assert run.state == SUCCESS, run.output[-4000:]
    staged = [run.xcom("day_batches", i) for i in range(3)]
    ids = [derive_txn_id("lance_test_write_mapped", run.run_id, "day_batches", i) for i in range(3)]
    assert [s["txn_id"] for s in staged] == ids
    assert all((s["state"], s["rows"], s["partition_count"]) == ("staged", 30, 1) for s in staged)
    assert all(s["files"] == 3 for s in staged)  # flush_bytes=1: a data file per batch
    committed = run.xcom("commit")
    assert committed["sources"] == ids
    assert (committed["rows"], committed["partition_count"]) == (90, 3)
    assert ns.count_rows() == 90
    assert {p.read_version for p in ns.partitions()} == {
        p["read_version"] for p in committed["partitions"]
    }
    published = [run.xcom("publish_day", i) for i in range(3)]
    assert [p["txn_id"] for p in published] == [
        derive_txn_id("lance_test_write_mapped", run.run_id, "publish_day", i) for i in range(3)
    ]
    assert all((p["state"], p["rows"]) == ("published", 10) for p in published)
    assert classic.count_rows() == 30


@pytest.mark.integration
def test_the_decorator_is_registered_with_airflow() -> None:
    from airflow.sdk import task
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    from airflow_provider_lance.decorators.lance_write import lance_write_task

    assert ProvidersManagerTaskRuntime().taskflow_decorators["lance_write"] is lance_write_task
    assert task.lance_write is lance_write_task
    with pytest.raises(TypeError, match="multiple_outputs"):
        task.lance_write(namespace="x", multiple_outputs=True)
