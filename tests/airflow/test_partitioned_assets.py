"""The partitioned-assets example end to end: a partitioned backfill, keyed asset events,
Airflow queuing one report run per key, and each report reading exactly its partition.

``dag.test()`` cannot give a run a partition key, so the runs are made the way Airflow
makes them: the backfill's runs by Airflow's backfill (``_create_backfill``, what ``airflow
backfill create`` and the REST API call), the report runs by the scheduler's own step that
turns keyed asset events into partitioned runs. Each run's tasks are then executed exactly
as ``dag.test()`` executes them (the same loop and in-process task runner).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow.compute as pc
import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.example_data import daily_events
from airflow_provider_lance.namespace import PartitionedNamespace
from tests.airflow.conftest import LANCE_ROOT
from tests.airflow.metadata_db import events_of, run_dag_run, runs_of, sync_dags_folder, unpause

pytestmark = [
    pytest.mark.skipif(
        not AIRFLOW_V_3_3_PLUS,
        reason="partition keys on asset events (outlet_events[...].add_partitions): Airflow 3.3+",
    ),
    pytest.mark.integration,
]
DAILY, REPORT = "lance_partitioned_daily", "lance_partitioned_report"
ROWS_PER_DAY = 2_000


def rows_of_day(day: dt.date) -> int:
    landed = daily_events(day, rows=ROWS_PER_DAY)
    return landed.filter(pc.equal(landed["event_date"], day)).num_rows


def test_partitioned_backfill_publishes_keyed_partitions_and_reports_read_exactly_them(
    dagbag: Any,
) -> None:
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.backfill import _create_backfill
    from airflow.utils.session import create_session

    sync_dags_folder()
    unpause(REPORT)  # Airflow queues runs of unpaused DAGs only

    # -- the backfill: one run per day, each with its partition key ---------------------------
    backfill = _create_backfill(
        dag_id=DAILY,
        from_date=dt.datetime(2025, 12, 2, tzinfo=dt.UTC),
        to_date=dt.datetime(2025, 12, 3, tzinfo=dt.UTC),
        max_active_runs=2,
        reverse=False,
        dag_run_conf=None,
        triggering_user_name="test",
    )
    assert backfill.id is not None
    runs = [r for r in runs_of(DAILY) if r[2] == "backfill"]
    assert [key for _, key, _ in runs] == ["2025-12-02", "2025-12-03"]
    for run_id, _, _ in runs:
        run = run_dag_run(dagbag.dags[DAILY], run_id)
        assert run.state == "success", run.output[-4000:]

    ns = PartitionedNamespace.open(LANCE_ROOT / "examples" / "daily_partitions")
    days = [dt.date(2025, 12, 2), dt.date(2025, 12, 3)]
    partitions = sorted(ns.partitions(), key=lambda p: p.values["event_date"])
    assert [p.values["event_date"] for p in partitions] == days  # each run: its day, no other
    for p, day in zip(partitions, days, strict=True):
        assert ns.count_rows_of(p) == rows_of_day(day)

    events = events_of("lance_daily_partitions")
    assert [key for key, _ in events] == ["2025-12-02", "2025-12-03"]
    for (key, extra), p in zip(events, partitions, strict=True):
        assert extra["partitions"] == [
            {"values": {"event_date": key}, "read_version": p.read_version, "key": key}
        ]
        assert extra["keys_truncated"] is False

    # -- Airflow turns the keyed events into one partitioned report run per key -------------
    scheduler = SchedulerJobRunner(job=Job())
    with create_session() as session:
        created = scheduler._create_dagruns_for_partitioned_asset_dags(session)
    assert created == {REPORT}
    reports = runs_of(REPORT)
    assert sorted(key for _, key, _ in reports) == ["2025-12-02", "2025-12-03"]
    for run_id, key, _ in reports:
        assert key is not None
        run = run_dag_run(dagbag.dags[REPORT], run_id)
        assert run.state == "success", run.output[-4000:]
        report = run.xcom("report_partition")
        day = dt.date.fromisoformat(key)
        assert report["partition_key"] == key
        assert report["days"] == [key]  # exactly the partition the run was started for
        assert report["rows"] == rows_of_day(day)
        event_version = next(e["manifest_version"] for k, e in events if k == key)
        assert report["manifest_version"] == event_version
        assert sum(report["revenue"].values()) == pytest.approx(
            sum(
                ns.to_table(columns=["amount"], filter=f"event_date = DATE '{key}'")[
                    "amount"
                ].to_pylist()
            ),
            abs=0.5,
        )


def test_a_manual_run_without_a_partition_key_fails_clearly(run_dag: Any) -> None:
    run = run_dag(DAILY)
    assert run.state == "failed"
    assert run.tries["stage_partition"] == 1  # AirflowFailException: no retry burnt
    assert "this DAG writes the partition its run is for" in run.output
