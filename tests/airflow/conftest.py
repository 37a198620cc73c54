"""Airflow test environment: a private AIRFLOW_HOME on SQLite with the DAG files in it.

Set up at import, before anything imports Airflow (Airflow reads its configuration once).
The DAGs folder holds the example DAGs and ``dag_files/`` (DAGs only tests use): ``dag.test``
needs a DAG that lives in the configured DAGs folder, so tests load DAGs from there.
"""

from __future__ import annotations

import atexit
import copy
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import UNREACHABLE_OPTIONS

REPO = Path(__file__).resolve().parents[2]
HOME = Path(tempfile.mkdtemp(prefix="airflow-provider-lance-tests-"))
DAGS = HOME / "dags"
LANCE_ROOT = HOME / "lance"
LANDING = HOME / "landing"
atexit.register(shutil.rmtree, HOME, ignore_errors=True)

DAGS.mkdir()
for source in [
    *sorted((REPO / "dags" / "examples").glob("*.py")),
    *sorted((Path(__file__).parent / "dag_files").glob("*.py")),
]:
    shutil.copy(source, DAGS / source.name)
shutil.copytree(REPO / "dags" / "examples" / "jobs", DAGS / "jobs")  # PySpark jobs they submit
shutil.copy(REPO / "dags" / "examples" / ".airflowignore", DAGS / ".airflowignore")

os.environ.update(
    {
        "AIRFLOW_HOME": str(HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{HOME / 'airflow.db'}",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW_CONN_LANCE_DEFAULT": json.dumps(
            {"conn_type": "lance", "extra": {"root": str(LANCE_ROOT)}}
        ),
        "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
        "LANCE_EXAMPLES_LANDING": str(LANDING),
        # spark-submit must be on PATH (the operator points local executors at this Python)
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """``airflow db migrate`` once per session (in a child: the real CLI, fresh config)."""
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return HOME


_DEFAULT_PARAMS: dict[str, dict[str, Any]] = {}


def _reuse_the_in_process_execution_api() -> None:
    """One in-process Execution API for all the task runs of the session, as Airflow 3.3 has it.

    ``dag.test()`` sends each task's calls (start, XCom, state) through an in-process copy of
    Airflow's Execution API. Airflow 3.2 builds that FastAPI app anew for every task instance
    (Cadwyn generating its versioned routes: about 1.5 s a task, most of the Airflow 3.2 run);
    Airflow 3.3 builds it once (``functools.lru_cache`` on ``in_process_api_server``,
    apache/airflow#65235). The same cache here on 3.2: every call still goes through the real
    Execution API, only its construction is not repeated.
    """
    from airflow.sdk.execution_time import supervisor

    if not hasattr(supervisor.in_process_api_server, "cache_clear"):  # Airflow before 3.3
        supervisor.in_process_api_server = functools.lru_cache(maxsize=1)(
            supervisor.in_process_api_server
        )


@pytest.fixture(scope="session")
def dagbag(airflow_db: Path) -> Any:
    from airflow.dag_processing.dagbag import DagBag

    _reuse_the_in_process_execution_api()
    bag = DagBag(dag_folder=str(DAGS))
    for dag_id, dag in bag.dags.items():
        _DEFAULT_PARAMS[dag_id] = copy.deepcopy(dag.params.dump())
    return bag


@dataclass
class RunResult:
    """What a ``dag.test()`` run left behind: states, XComs and the process output."""

    state: str
    run_id: str
    states: dict[str, str] = field(default_factory=dict)
    tries: dict[str, int] = field(default_factory=dict)
    xcoms: dict[str, Any] = field(default_factory=dict)
    output: str = ""

    def xcom(self, task_id: str, map_index: int = -1, key: str = "return_value") -> Any:
        name = task_id if map_index < 0 else f"{task_id}[{map_index}]"
        return self.xcoms[name if key == "return_value" else f"{name}:{key}"]


def _collect(dr: Any) -> RunResult:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    result = RunResult(state=str(dr.state), run_id=dr.run_id)
    with create_session() as session:
        for ti in dr.get_task_instances(session=session):
            key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
            result.states[key] = str(ti.state)
            result.tries[key] = ti.try_number
        rows = (
            session.query(XComModel)
            .filter(XComModel.dag_id == dr.dag_id, XComModel.run_id == dr.run_id)
            .all()
        )
        for row in rows:
            key = row.task_id if row.map_index < 0 else f"{row.task_id}[{row.map_index}]"
            result.xcoms[key if row.key == "return_value" else f"{key}:{row.key}"] = row.value
    return result


@pytest.fixture
def run_dag(dagbag: Any) -> Callable[..., RunResult]:
    """Run one DAG of the DAGs folder with ``dag.test()``; returns its :class:`RunResult`.

    The run's log (task logs included, masked as Airflow masks them) is captured by
    pointing Airflow's logging at a buffer for the run.
    """
    from airflow.sdk.log import configure_logging

    def run(
        dag_id: str,
        *,
        logical_date: Any = None,
        conf: dict[str, Any] | None = None,
        meanwhile: Callable[[Callable[[], str]], None] | None = None,
    ) -> RunResult:
        """``meanwhile(output)`` runs in a thread during the run (``output()``: the log so far)."""
        dag = dagbag.dags[dag_id]
        # dag.test() merges a run's conf into the DAG's params for good: start from defaults
        full_conf = {**copy.deepcopy(_DEFAULT_PARAMS[dag_id]), **(conf or {})}
        buffer = io.StringIO()
        configure_logging(output=buffer, cache_logger_on_first_use=False, colored_console_log=False)
        errors: list[BaseException] = []

        def background() -> None:
            try:
                assert meanwhile is not None
                meanwhile(buffer.getvalue)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=background, daemon=True) if meanwhile else None
        try:
            if thread:
                thread.start()
            dr = dag.test(logical_date=logical_date, run_conf=full_conf)
        finally:
            if thread:
                thread.join(timeout=120)
            configure_logging(cache_logger_on_first_use=False, colored_console_log=False)
        if errors:
            raise errors[0]
        result = _collect(dr)
        result.output = buffer.getvalue()
        return result

    return run


@pytest.fixture
def lance_test_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The ``lance_test`` connection (the test DAGs use it), rooted in a fresh directory."""
    root = tmp_path / "lance"
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_TEST",
        json.dumps({"conn_type": "lance", "extra": {"root": str(root)}}),
    )
    return root


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS settings or proxies from the environment (only the given options count)."""
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def unreachable_lance_test(monkeypatch: pytest.MonkeyPatch, no_aws_environment: None) -> None:
    """The ``lance_test`` connection pointed at an S3 store nobody answers (loopback)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_TEST",
        json.dumps(
            {
                "conn_type": "lance",
                "extra": {"root": "s3://bucket/wh", "storage_options": UNREACHABLE_OPTIONS},
            }
        ),
    )


SECRET = "Sup3r-Secret-Value-9f8e7d"
TOKEN = "session-token-abc123456"


@pytest.fixture
def secret_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``lance_secret``: a local root whose storage options carry secrets in the JSON text."""
    root = tmp_path / "lance"
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_SECRET",
        json.dumps(
            {
                "conn_type": "lance",
                "extra": {
                    "root": str(root),
                    "storage_options": json.dumps(
                        {"aws_secret_access_key": SECRET, "aws_session_token": TOKEN}
                    ),
                },
            }
        ),
    )
    return root
