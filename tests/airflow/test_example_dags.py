"""The example DAGs: they import cleanly, and two of them run end to end on local Spark."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from airflow_provider_lance.assets import asset_uri
from airflow_provider_lance.example_data import REGIONS, daily_events
from airflow_provider_lance.namespace import PartitionedNamespace
from tests.airflow.conftest import DAGS, LANCE_ROOT, RunResult

EXAMPLES = (
    "lance_daily_backfill",
    "lance_atomic_publish",
    "lance_partition_evolution",
    "lance_write_audit_publish",
    "lance_partitioned_daily",
    "lance_partitioned_report",
    "lance_on_publish",
    "lance_retention_and_upkeep",
)
RunDag = Callable[..., RunResult]


def test_example_dags_import_without_errors_or_network(airflow_db: Path) -> None:
    """A fresh process parses the DAG folder the way the dag-processor does, offline."""
    code = (
        "import json, socket\n"
        "def _no_network(*a, **k): raise OSError('network access while parsing DAGs')\n"
        "socket.socket.connect = _no_network\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(DAGS)!r})\n"
        "print(json.dumps({'errors': {k: str(v) for k, v in bag.import_errors.items()},\n"
        "                  'dags': sorted(bag.dags)}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == {}
    assert set(EXAMPLES) <= set(result["dags"])


def test_example_dag_shapes(dagbag: Any) -> None:
    backfill = dagbag.dags["lance_daily_backfill"]
    assert backfill.catchup is True
    assert backfill.start_date < backfill.end_date  # a bounded catchup
    assert (backfill.end_date - backfill.start_date).days <= 7
    assert set(backfill.task_ids) == {
        "ensure_partition",
        "land_events",
        "spark_overwrite_day",
        "publish_day",
        "ensure_rollup_partition",
        "rollup_arguments",
        "spark_rollup_day",
        "declare_index",
        "index_day",
    }
    assert backfill.get_task("declare_index").upstream_task_ids == {"ensure_partition"}
    assert backfill.get_task("index_day").upstream_task_ids == {"publish_day", "declare_index"}
    assert backfill.get_task("spark_rollup_day").upstream_task_ids == {
        "publish_day",
        "ensure_rollup_partition",
        "rollup_arguments",
    }
    atomic = dagbag.dags["lance_atomic_publish"]
    assert atomic.get_task("stage_region").is_mapped
    assert atomic.get_task("publish_all_regions").upstream_task_ids == {"stage_region"}
    evolution = dagbag.dags["lance_partition_evolution"]
    assert evolution.get_task("read_partition").is_mapped
    for dag_id in EXAMPLES:
        for task in dagbag.dags[dag_id].tasks:
            if hasattr(task, "lance_conn_id"):
                assert task.lance_conn_id == "lance_default"


@pytest.mark.slow
def test_daily_backfill_runs_end_to_end_with_spark_submit(run_dag: RunDag) -> None:
    day = dt.datetime(2025, 12, 2, tzinfo=dt.timezone.utc)
    run = run_dag("lance_daily_backfill", logical_date=day)
    assert run.state == "success", run.output[-4000:]
    ns = PartitionedNamespace.open(LANCE_ROOT / "examples" / "daily_events")
    expected = daily_events(day.date())
    on_day = expected.filter(pc.equal(expected["event_date"], day.date())).num_rows
    assert on_day < expected.num_rows  # the landed file has late events of the day before
    partitions = ns.partitions()
    assert [p.values["event_date"] for p in partitions] == [day.date()]  # not clobbered
    assert ns.count_rows() == on_day
    summary = run.xcom("publish_day")
    assert (summary["rows"], summary["partition_count"]) == (on_day, 1)
    # the published version, then the version index_day committed on it
    assert summary["partitions"][0]["read_version"] == partitions[0].read_version - 1
    assert run.xcom("spark_overwrite_day")["mode"] == "overwrite"

    # the index declared once covers the published day: index_day indexed it after the publish
    assert run.xcom("declare_index")["existed"] is False  # declared by this (the first) run
    indexed = run.xcom("index_day")
    assert (indexed["rows_indexed"], indexed["partition_count"]) == (on_day, 1)
    assert indexed["partitions"][0]["read_version"] == partitions[0].read_version
    [index] = ns.list_indices()
    assert (index.name, index.column, index.index_type) == ("user_id_idx", "user_id", "BTREE")
    assert (index.partitions, index.partitions_indexed) == (len(partitions), len(partitions))
    assert (index.rows_indexed, index.rows_unindexed) == (on_day, 0)
    user = ns.to_table(columns=["user_id"]).column("user_id")[0].as_py()
    looked_up = ns.to_table(filter=f"user_id = {user}")  # a lookup the index serves
    assert looked_up.num_rows == pc.sum(pc.equal(ns.to_table()["user_id"], user)).as_py() > 0

    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        extras = [
            e.extra
            for e in session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == asset_uri(ns.uri))
        ]
    assert extras
    assert extras[-1]["partitions"][0]["values"] == {"event_date": "2025-12-02"}

    # the user's own PySpark job (jobs/daily_rollup.py) read the published day with
    # format("lance_partitioned") and wrote its totals per country with it
    day_rows = ns.to_table()
    totals = PartitionedNamespace.open(LANCE_ROOT / "examples" / "daily_totals")
    [partition] = totals.partitions()
    assert partition.values == {"event_date": day.date()}
    assert partition.read_version is not None  # published
    got = {
        r["country"]: (r["events"], round(r["amount"], 6)) for r in totals.to_table().to_pylist()
    }
    want: dict[str, tuple[int, float]] = {}
    for r in day_rows.to_pylist():
        n, total = want.get(r["country"], (0, 0.0))
        want[r["country"]] = (n + 1, total + r["amount"])
    assert got == {c: (n, round(total, 6)) for c, (n, total) in want.items()}


@pytest.mark.slow
def test_atomic_publish_runs_end_to_end_and_reader_sees_all_or_nothing(run_dag: RunDag) -> None:
    run = run_dag("lance_atomic_publish", logical_date=dt.datetime(2025, 12, 9, tzinfo=dt.UTC))
    assert run.state == "success", run.output[-4000:]
    staged = [run.xcom("stage_region", i) for i in range(len(REGIONS))]
    assert all(s["state"] == "staged" for s in staged)
    assert len({s["txn_id"] for s in staged}) == len(REGIONS)
    published = run.xcom("publish_all_regions")
    assert published["sources"] == [s["txn_id"] for s in staged]
    assert published["rows"] == sum(s["rows"] for s in staged) == 2_000 * len(REGIONS)
    assert published["partition_count"] == 2 * len(REGIONS)  # each region: the day + late ones
    check = run.xcom("verify_all_or_nothing")
    assert check["rows"] == published["rows"]
    assert sorted(set(check["versions_checked"].values())) == [0, published["rows"]]
    ns = PartitionedNamespace.open(LANCE_ROOT / "examples" / "regional_sales")
    assert {p.read_version is not None for p in ns.partitions()} == {True}
