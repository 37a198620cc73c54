"""The event-driven example end to end, with Airflow's own triggerer process.

``lance_on_publish`` watches ``examples/regional_sales`` through an ``AssetWatcher`` with a
``LanceManifestTrigger``. The real ``airflow triggerer`` runs the trigger; every publish
becomes one asset event; the watermark lands in the asset state store; the triggerer is
killed (SIGKILL) while publishes go on and started again: nothing is repeated, nothing is
skipped. Finally the scheduler's own step makes the asset-triggered run, and the example's
task totals exactly the partitions each event names.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.example_data import SALES_SCHEMA, regional_sales
from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.namespace import CommitResult, PartitionedNamespace
from airflow_provider_lance.triggers.manifest import watermark_key
from tests.airflow.metadata_db import events_of, run_dag_run, runs_of, sync_dags_folder, unpause

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not AIRFLOW_V_3_3_PLUS, reason="the asset state store (the watermark) is Airflow 3.3+"
    ),
]
DAG_ID = "lance_on_publish"
ASSET = "lance_regional_sales_published"
INTERVAL = 0.5


def wait_for(what: str, check: Callable[[], Any], timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stored_watermark(uri: str) -> int | None:
    """The watermark as the triggerer stored it (the asset state store row)."""
    import json

    from airflow.models.asset import AssetModel
    from airflow.models.asset_state_store import AssetStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(AssetStateStoreModel)
            .join(AssetModel, AssetModel.id == AssetStateStoreModel.asset_id)
            .filter(AssetModel.name == ASSET, AssetStateStoreModel.key == watermark_key(uri))
            .one_or_none()
        )
        return None if row is None else int(json.loads(row.value))


class Triggerer:
    """``airflow triggerer`` in its own process group, logging to a file."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {
            **os.environ,
            "LANCE_EXAMPLES_WATCH_INTERVAL": str(INTERVAL),
            # a killed triggerer's watchers are adopted after 3 s, not 30
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "3",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
        }
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "triggerer", "--skip-serve-logs"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL, as a crashed host would: no cleanup, no goodbye."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture
def triggerer(tmp_path: Path) -> Iterator[Triggerer]:
    process = Triggerer(tmp_path / "triggerer.log")
    yield process
    process.stop()


def publish(ns: PartitionedNamespace, n: int) -> CommitResult:
    """One region's orders of one day (and late ones of the day before): two partitions."""
    from airflow_provider_lance.example_data import REGIONS

    day = dt.date(2025, 12, 1) + dt.timedelta(days=n)
    return ns.write(regional_sales(REGIONS[n % len(REGIONS)], day, batch_id=f"watch-{n}", rows=50))


def payloads() -> list[dict[str, Any]]:
    return [extra["payload"] for key, extra in events_of(ASSET) if key is None]


def schedule_asset_runs() -> None:
    """The scheduler's step that makes asset-triggered runs of what is queued (a running
    scheduler takes it every loop, so each event lands in a run)."""
    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        SchedulerJobRunner(job=Job())._create_dag_runs_asset_triggered(
            dag_models=[session.get(DagModel, DAG_ID)], session=session
        )


def events_seen(n: int) -> Callable[[], bool]:
    def check() -> bool:
        schedule_asset_runs()
        return len(payloads()) >= n

    return check


def test_triggerer_fires_once_per_publish_across_a_killed_triggerer_and_the_dag_reads_them(
    monkeypatch: pytest.MonkeyPatch, triggerer: Triggerer, dagbag: Any
) -> None:
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    monkeypatch.setenv("LANCE_EXAMPLES_WATCH_INTERVAL", str(INTERVAL))
    hook = LancePartitionedHook()
    ns, _ = hook.create_or_open(
        "examples/regional_sales",
        schema=SALES_SCHEMA,
        partition_fields=[
            {"name": "region", "source": "region"},
            {"name": "order_date", "source": "order_date"},
        ],
    )
    publish(ns, 0)  # before the watch: not reported
    sync_dags_folder()
    unpause(DAG_ID)
    sync_dags_folder()  # watchers of unpaused DAGs only get their trigger rows
    with create_session() as session:
        classpaths = [t.classpath for t in session.query(Trigger).all()]
    assert "airflow_provider_lance.triggers.manifest.LanceManifestTrigger" in classpaths

    triggerer.start()
    started = wait_for("the watcher's first look", lambda: stored_watermark(ns.uri), timeout=120)
    assert started == ns.version, triggerer.output()

    first = [publish(ns, n) for n in (1, 2, 3)]
    wait_for("three events", events_seen(3))
    wait_for(
        "the watermark of the third",
        lambda: stored_watermark(ns.uri) == first[-1].manifest_version,
    )

    triggerer.kill()
    down = [publish(ns, n) for n in (4, 5)]  # while no triggerer runs
    triggerer.start()
    wait_for("the publishes made while it was down", events_seen(5), timeout=120)
    last = [publish(ns, 6)]
    wait_for("six events", events_seen(6))
    time.sleep(8 * INTERVAL)  # nothing more comes
    schedule_asset_runs()

    published = [*first, *down, *last]
    seen = payloads()
    assert [p["manifest_version"] for p in seen] == [r.manifest_version for r in published], (
        triggerer.output()
    )
    for payload, result in zip(seen, published, strict=True):
        assert {(p["object_id"], p["read_version"]) for p in payload["partitions"]} == {
            (p.object_id, p.read_version) for p in result.partitions
        }
        assert payload["namespace"] == ns.uri
    assert seen[3]["previous_version"] == first[-1].manifest_version  # resumed, not restarted

    # the asset-triggered runs: the example totals exactly what each of their events names
    runs = runs_of(DAG_ID)
    assert runs
    assert {run_type for _, _, run_type in runs} == {"asset_triggered"}
    totals = []
    for run_id, _, _ in runs:
        run = run_dag_run(dagbag.dags[DAG_ID], run_id)
        assert run.state == "success", run.output[-4000:]
        totals += run.xcom("total_published")
    assert [t["manifest_version"] for t in totals] == [r.manifest_version for r in published]
    for total, n in zip(totals, (1, 2, 3, 4, 5, 6), strict=True):
        batch = ns.to_table(filter=f"batch_id = 'watch-{n}'")
        (region,) = set(batch["region"].to_pylist())
        assert total["regions"] == {
            region: {"rows": batch.num_rows, "amount": round(pc.sum(batch["amount"]).as_py(), 2)}
        }
