"""The event-driven example end to end, with Airflow's own triggerer process.

``lance_on_publish`` watches ``examples/regional_sales`` through an ``AssetWatcher`` with a
``LanceManifestTrigger``. The real ``airflow triggerer`` runs the trigger; every publish is
reported in an asset event (what one poll found, one event); the watermark lands in the
asset state store; the triggerer is killed (SIGKILL) while publishes go on and started
again: nothing is repeated, nothing is skipped. The scheduler's own step makes the
asset-triggered runs; every event is consumed by a run, and the example's task totals
exactly the partitions its run's events name, also when two publishes land within one poll
and the scheduler looks only after the triggerer has stored what that poll found.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.example_data import SALES_SCHEMA
from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.triggers.manifest import watermark_key
from tests.airflow.metadata_db import (
    consumers_of,
    events_of,
    run_dag_run,
    runs_of,
    sync_dags_folder,
    unpause,
)
from tests.support import batch_totals, publish, reported

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not AIRFLOW_V_3_3_PLUS, reason="the asset state store (the watermark) is Airflow 3.3+"
    ),
]
REPO = Path(__file__).resolve().parents[2]
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
        assert not self.running(), "a triggerer runs already"
        env = {
            **os.environ,
            "LANCE_EXAMPLES_WATCH_INTERVAL": str(INTERVAL),
            # a killed triggerer's watchers are adopted after 3 s, not 30
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "3",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "1",
            # the trigger from this checkout, whatever the installed (editable) one points at
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "triggerer", "--skip-serve-logs"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed host would: no cleanup, no goodbye."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def freeze(self) -> None:
        """SIGSTOP: the trigger polls no more until ``thaw`` (a host or VM paused)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]


@pytest.fixture(scope="module")
def triggerer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Triggerer]:
    """One triggerer for the module: the second test goes on with the one the first left
    running (its start and its stop take about 10 s each)."""
    process = Triggerer(tmp_path_factory.mktemp("triggerer") / "triggerer.log")
    yield process
    process.stop()


def payloads() -> list[dict[str, Any]]:
    return [extra["payload"] for key, extra in events_of(ASSET) if key is None]


def watch_the_example() -> PartitionedNamespace:
    """The example's namespace, and its DAG serialised and unpaused (its watcher's trigger)."""
    hook = LancePartitionedHook()
    ns, _ = hook.create_or_open(
        "examples/regional_sales",
        schema=SALES_SCHEMA,
        partition_fields=[
            {"name": "region", "source": "region"},
            {"name": "order_date", "source": "order_date"},
        ],
    )
    sync_dags_folder()
    unpause(DAG_ID)
    sync_dags_folder()  # watchers of unpaused DAGs only get their trigger rows
    return ns


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


def publishes_seen(n: int) -> Callable[[], bool]:
    """Whether ``n`` publishes were reported, taking the scheduler's step meanwhile."""

    def check() -> bool:
        schedule_asset_runs()
        return len(reported(payloads())) >= n

    return check


def test_triggerer_reports_each_publish_once_across_a_killed_triggerer_and_the_dag_reads_them(
    monkeypatch: pytest.MonkeyPatch, triggerer: Triggerer, dagbag: Any
) -> None:
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    monkeypatch.setenv("LANCE_EXAMPLES_WATCH_INTERVAL", str(INTERVAL))
    ns = watch_the_example()
    publish(ns, 0)  # before the watch: not reported
    with create_session() as session:
        classpaths = [t.classpath for t in session.query(Trigger).all()]
    assert "airflow_provider_lance.triggers.manifest.LanceManifestTrigger" in classpaths

    triggerer.start()
    started = wait_for("the watcher's first look", lambda: stored_watermark(ns.uri), timeout=120)
    assert started == ns.version, triggerer.output()

    first = [publish(ns, n) for n in (1, 2, 3)]
    wait_for("three publishes", publishes_seen(3))
    wait_for(
        "the watermark of the third",
        lambda: stored_watermark(ns.uri) == first[-1].manifest_version,
    )

    triggerer.kill()
    down = [publish(ns, n) for n in (4, 5)]  # while no triggerer runs
    triggerer.start()
    wait_for("the publishes made while it was down", publishes_seen(5), timeout=120)
    last = [publish(ns, 6)]
    wait_for("six publishes", publishes_seen(6))
    # its watermark stored: nothing more comes (and the next test starts from here)
    wait_for("the last watermark", lambda: stored_watermark(ns.uri) == ns.version)
    schedule_asset_runs()

    published = [*first, *down, *last]
    seen = payloads()
    assert reported(seen) == [r.manifest_version for r in published], triggerer.output()
    by_version = {r.manifest_version: r for r in published}
    for payload in seen:  # each event names every partition its publishes published
        results = [by_version[p["manifest_version"]] for p in payload["publishes"]]
        assert {(p["object_id"], p["read_version"]) for p in payload["partitions"]} == {
            (p.object_id, p.read_version) for r in results for p in r.partitions
        }
        assert payload["namespace"] == ns.uri
    # the restart resumed where the watermark was, and found both made while down in one poll
    (resumed,) = [e for e in seen if e["previous_version"] == first[-1].manifest_version]
    assert reported([resumed]) == [r.manifest_version for r in down]

    # the asset-triggered runs: every event consumed, and the example totals exactly the
    # partitions their events name
    assert all(runs for _, runs in consumers_of(ASSET).values())
    runs = runs_of(DAG_ID)
    assert {run_type for _, _, run_type in runs} == {"asset_triggered"}
    totals = []
    for run_id, _, _ in runs:
        run = run_dag_run(dagbag.dags[DAG_ID], run_id)
        assert run.state == "success", run.output[-4000:]
        totals.append(run.xcom("total_published"))
    assert [v for t in totals for v in t["publishes"]] == [r.manifest_version for r in published]
    batch_of = {r.manifest_version: n for n, r in enumerate(published, start=1)}
    for total in totals:
        assert total["regions"] == batch_totals(ns, [batch_of[v] for v in total["publishes"]])


def test_two_publishes_within_one_poll_are_consumed_by_the_run_they_start(
    monkeypatch: pytest.MonkeyPatch, triggerer: Triggerer, dagbag: Any
) -> None:
    """Two publishes land while the trigger sleeps between two polls, and the scheduler's
    step runs only once the triggerer has stored what that poll found (its supervisor
    stores the events of one sync together): Airflow 3.3 queues one run per asset and DAG
    with the time of the first event queued, and that run consumes only the events up to
    it. The run must consume both publishes, and the example total the partitions of both."""
    monkeypatch.setenv("LANCE_EXAMPLES_WATCH_INTERVAL", str(INTERVAL))
    ns = watch_the_example()
    if not triggerer.running():  # the test before leaves it running
        triggerer.start()
    # the watcher has looked (or a test before left its watermark at the latest version)
    watermark = wait_for(
        "the watermark", lambda: stored_watermark(ns.uri) == ns.version and ns.version, timeout=120
    )
    schedule_asset_runs()  # whatever a test before left queued has its run
    events_before = set(consumers_of(ASSET))
    runs_before = {run_id for run_id, _, _ in runs_of(DAG_ID)}

    triggerer.freeze()  # between two polls, whatever it was doing
    both = [publish(ns, n) for n in (10, 11)]
    triggerer.thaw()
    versions = [r.manifest_version for r in both]

    def new_events() -> dict[int, tuple[dict[str, Any], list[str]]]:
        return {i: e for i, e in consumers_of(ASSET).items() if i not in events_before}

    def both_reported() -> bool:
        return reported([e["payload"] for e, _ in new_events().values()]) == versions

    wait_for("both publishes reported", both_reported, timeout=60)
    wait_for("the watermark of both", lambda: stored_watermark(ns.uri) == versions[-1])
    for _ in range(3):  # the scheduler's step, as its loop takes it again and again
        schedule_asset_runs()
        time.sleep(INTERVAL)

    runs = [run_id for run_id, _, _ in runs_of(DAG_ID) if run_id not in runs_before]
    unconsumed = [e["payload"] for e, consumers in new_events().values() if not consumers]
    assert unconsumed == [], f"events no run consumed: {unconsumed}; runs: {runs}"
    totals = []
    for run_id in runs:
        run = run_dag_run(dagbag.dags[DAG_ID], run_id)
        assert run.state == "success", run.output[-4000:]
        totals.append(run.xcom("total_published"))
    assert [v for t in totals for v in t["publishes"]] == versions
    assert sum(t["partitions"] for t in totals) == len(
        {p.object_id for r in both for p in r.partitions}
    )
    regions = {r: v for t in totals for r, v in t["regions"].items()}
    assert regions == batch_totals(ns, [10, 11])
    # (one poll found both: one event)
    (event,) = [e["payload"] for e, _ in new_events().values()]
    assert (event["publish_count"], event["previous_version"]) == (2, watermark)
