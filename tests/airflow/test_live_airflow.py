"""The event-driven example in a live Airflow: real scheduler, triggerer, DAG processor and
API server processes (what ``airflow standalone`` starts: SQLite, LocalExecutor).

Proven: two publishes into the watched namespace within one poll interval of
``LanceManifestTrigger``, while the scheduler is busy (SIGSTOP: it looks next only once the
triggerer has stored what it found; the triggerer is frozen too while both land, so its
next poll finds both), are consumed, both, by the asset-triggered run(s) the real scheduler
makes; the example's task runs on the LocalExecutor (through the API server's Execution
API) and succeeds, and its XComs total exactly the partitions, rows and amounts of both
publishes; no asset event is left unconsumed and nothing is left in
``asset_dag_run_queue``. Why it can fail: Airflow 3.3 queues one run per asset and DAG with
the time of the first event queued, and that run consumes only the events up to it, so a
trigger that yields one event per publish (as it did before) leaves the second publish's
event unconsumed, waiting for a later publish.

Nothing of Airflow is patched: the processes are the ``airflow`` CLI's, in a private
``AIRFLOW_HOME`` whose DAGs folder holds only ``lance_on_publish``, on loopback only; the
test unpauses the DAG through the API server and reads the metadata DB with ``sqlite3``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.example_data import SALES_SCHEMA
from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.triggers.manifest import watermark_key
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
NAMESPACE = "examples/regional_sales"
#: the watcher's poll interval (seconds): the example reads it from the environment
INTERVAL = 2.0
#: every wait of the test together (startup included)
BUDGET = 180.0
COMPONENTS = {
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveAirflow:
    """Airflow's components as separate processes, each in its own process group, in a
    private ``AIRFLOW_HOME``; every wait is bounded by one deadline."""

    def __init__(self, home: Path, lance_root: Path) -> None:
        self.home = home
        self.db = home / "airflow.db"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.password = secrets.token_urlsafe(16)
        self.deadline = time.monotonic() + BUDGET
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        dags = home / "dags"
        dags.mkdir(parents=True)
        shutil.copy(REPO / "dags" / "examples" / f"{DAG_ID}.py", dags)
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({"admin": self.password}))
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.db}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            # one secret for the scheduler (signs the tasks' tokens) and the API server
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(32),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
            "AIRFLOW_CONN_LANCE_DEFAULT": json.dumps(
                {"conn_type": "lance", "extra": {"root": str(lance_root)}}
            ),
            "LANCE_EXAMPLES_WATCH_INTERVAL": str(INTERVAL),
            # the provider from this checkout, whatever the installed (editable) one points at
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            "NO_PROXY": "127.0.0.1,localhost",
        }
        for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            self.env.pop(proxy, None)

    # -- processes -------------------------------------------------------------------------
    def migrate(self) -> None:
        out = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=self.left(),
        )
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]

    def start(self) -> None:
        commands = {
            **COMPONENTS,
            "api-server": ["api-server", "--host", "127.0.0.1", "--port", str(self.port)],
        }
        for name, args in commands.items():
            with (self.home / f"{name}.log").open("ab") as out:
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *args],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    start_new_session=True,
                )

    def freeze(self, name: str) -> None:
        """SIGSTOP the component's process group, and wait until all of it is stopped."""
        pid = self.processes[name].pid
        os.killpg(pid, signal.SIGSTOP)
        self.wait_for(f"{name} stopped", lambda: all(s == "T" for s in group_states(pid)))

    def freeze_between_transactions(self, name: str) -> None:
        """``freeze``, at a moment the component holds no write lock of the metadata DB
        (SQLite: the others could not write until it is thawed)."""

        def frozen_unlocked() -> bool:
            self.freeze(name)
            if self.writable():
                return True
            self.thaw(name)
            return False

        self.wait_for(f"{name} stopped between two transactions", frozen_unlocked, poll=0.05)

    def thaw(self, name: str) -> None:
        os.killpg(self.processes[name].pid, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM every component's process group (SIGCONT first), then SIGKILL every
        process group of their sessions (task runners have groups of their own) after 20 s."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                os.killpg(process.pid, signal.SIGTERM)
        end = time.monotonic() + 20
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, end - time.monotonic()))
        for process in self.processes.values():
            for pgid in {process.pid, *session_groups(process.pid)}:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
            process.wait(timeout=30)

    def output(self) -> str:
        """The tail of every component's log."""
        return "\n".join(
            f"--- {log.name}\n" + log.read_text(errors="replace")[-3000:]
            for log in sorted(self.home.glob("*.log"))
        )

    # -- waiting ---------------------------------------------------------------------------
    def left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def wait_for(self, what: str, check: Callable[[], Any], poll: float = 0.2) -> Any:
        while True:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited ({process.returncode})\n{self.output()}")
            if value := check():
                return value
            if not self.left():
                raise AssertionError(f"timed out waiting for {what}\n{self.output()}")
            time.sleep(poll)

    # -- the API server --------------------------------------------------------------------
    def api(self, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
        request = urllib.request.Request(
            self.url + path,
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers={"Content-Type": "application/json"}
            | ({"Authorization": f"Bearer {token}"} if token else {}),
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read()
            return json.loads(text) if text else None

    def token(self) -> str | None:
        """An access token of the API server, once it answers."""
        try:
            body = {"username": "admin", "password": self.password}
            return str(self.api("POST", "/auth/token", body)["access_token"])
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    # -- the metadata DB -------------------------------------------------------------------
    def writable(self) -> bool:
        """Whether no process holds the metadata DB's write lock (taken and given back)."""
        connection = sqlite3.connect(self.db, timeout=0.2, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.execute("ROLLBACK")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            return False
        finally:
            connection.close()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of the metadata DB (read only; [] while Airflow has not created the table)."""
        if not self.db.exists():
            return []
        connection = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return connection.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        finally:
            connection.close()


def _stats() -> Iterator[list[str]]:
    """``[state, ppid, pgrp, session, ...]`` of every process (``/proc/<pid>/stat``)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            yield stat.read_text().rsplit(")", 1)[1].split()


def group_states(pgid: int) -> list[str]:
    """The state letters (``ps``'s) of the processes of a process group."""
    return [fields[0] for fields in _stats() if int(fields[2]) == pgid]


def session_groups(sid: int) -> set[int]:
    """The process groups of a session (task runners get groups of their own)."""
    return {int(fields[2]) for fields in _stats() if int(fields[3]) == sid}


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveAirflow]:
    lance_root = tmp_path / "lance"
    monkeypatch.setenv(  # this process publishes into the namespace the processes watch
        "AIRFLOW_CONN_LANCE_DEFAULT",
        json.dumps({"conn_type": "lance", "extra": {"root": str(lance_root)}}),
    )
    airflow = LiveAirflow(tmp_path / "airflow", lance_root)
    try:
        yield airflow
    finally:
        airflow.stop()


def events(live: LiveAirflow) -> dict[int, tuple[dict[str, Any], list[str]]]:
    """Every event of the watched asset by id: its payload and the runs that consumed it."""
    rows = live.query(
        "SELECT e.id, e.extra, r.run_id FROM asset_event e JOIN asset a ON a.id = e.asset_id "
        "LEFT JOIN dagrun_asset_event c ON c.event_id = e.id "
        "LEFT JOIN dag_run r ON r.id = c.dag_run_id WHERE a.name = ? ORDER BY e.id",
        ASSET,
    )
    out: dict[int, tuple[dict[str, Any], list[str]]] = {}
    for event_id, extra, run_id in rows:
        out.setdefault(event_id, (json.loads(extra)["payload"], []))
        if run_id is not None:
            out[event_id][1].append(run_id)
    return out


def stored_watermark(live: LiveAirflow, uri: str) -> int | None:
    rows = live.query(
        "SELECT s.value FROM asset_state_store s JOIN asset a ON a.id = s.asset_id "
        "WHERE a.name = ? AND s.key = ?",
        ASSET,
        watermark_key(uri),
    )
    return int(json.loads(rows[0][0])) if rows else None


def test_a_live_scheduler_runs_the_example_for_two_publishes_within_one_poll(
    live: LiveAirflow,
) -> None:
    ns: PartitionedNamespace
    ns, _ = LancePartitionedHook().create_or_open(
        NAMESPACE,
        schema=SALES_SCHEMA,
        partition_fields=[
            {"name": "region", "source": "region"},
            {"name": "order_date", "source": "order_date"},
        ],
    )
    publish(ns, 0)  # before the watch: not reported
    live.migrate()
    live.start()

    token = live.wait_for("the API server", live.token, poll=0.5)
    live.wait_for(
        "the DAG processor's parse",
        lambda: live.query("SELECT 1 FROM serialized_dag WHERE dag_id = ?", DAG_ID),
    )
    unpaused = live.api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False}, token)
    assert unpaused["is_paused"] is False
    # watchers of unpaused DAGs only get their trigger: have the file parsed again now
    file_token = live.api("GET", f"/api/v2/dags/{DAG_ID}/details", token=token)["file_token"]
    live.api("PUT", f"/api/v2/parseDagFile/{file_token}", token=token)
    live.wait_for("the watcher's first look", lambda: stored_watermark(live, ns.uri) == ns.version)

    # A busy scheduler: it looks next only once the triggerer has stored what it found.
    # Two publishes within one poll: the triggerer is frozen between two polls (whatever it
    # was doing) while both land, so the poll after them finds both.
    live.freeze_between_transactions("scheduler")
    live.freeze("triggerer")
    both = [publish(ns, n) for n in (1, 2)]
    versions = [r.manifest_version for r in both]
    live.thaw("triggerer")

    def both_reported() -> bool:
        return sorted(reported([p for p, _ in events(live).values()])) == versions

    live.wait_for("both publishes reported", both_reported)
    live.thaw("scheduler")

    def settled() -> bool:
        """The scheduler's runs over, and nothing queued."""
        states = live.query("SELECT state FROM dag_run WHERE dag_id = ?", DAG_ID)
        queued = live.query("SELECT 1 FROM asset_dag_run_queue WHERE target_dag_id = ?", DAG_ID)
        return bool(states) and not queued and all(s in ("success", "failed") for (s,) in states)

    live.wait_for("the runs of both publishes over", settled)
    time.sleep(3)  # a few more scheduler loops: whatever were queued would get a run
    seen = events(live)
    runs = live.query(
        "SELECT run_id, run_type, state FROM dag_run WHERE dag_id = ? ORDER BY id", DAG_ID
    )
    tis = live.query("SELECT run_id, task_id, state FROM task_instance WHERE dag_id = ?", DAG_ID)
    xcoms = {
        run_id: json.loads(value)
        for run_id, value in live.query(
            "SELECT run_id, value FROM xcom WHERE dag_id = ? AND task_id = 'total_published' "
            "AND key = 'return_value'",
            DAG_ID,
        )
    }
    story = f"runs {runs}; task instances {tis}; events {seen}; xcoms {xcoms}"

    assert {run_type for _, run_type, _ in runs} == {"asset_triggered"}, story
    assert [state for _, _, state in runs] == ["success"] * len(runs), story + live.output()
    assert sorted(state for _, _, state in tis) == ["success"] * len(runs), story
    unconsumed = [payload for payload, consumers in seen.values() if not consumers]
    assert unconsumed == [], f"events no run consumed: {unconsumed}; {story}"
    assert not live.query("SELECT * FROM asset_dag_run_queue"), story
    # each run totals exactly the partitions its events name: together, both publishes
    totals = [xcoms[run_id] for run_id, _, _ in runs]
    assert [v for t in totals for v in t["publishes"]] == versions, story
    assert sum(t["partitions"] for t in totals) == len(
        {p.object_id for r in both for p in r.partitions}
    ), story
    assert {r: v for t in totals for r, v in t["regions"].items()} == batch_totals(ns, [1, 2])
