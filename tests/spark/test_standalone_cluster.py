"""The spark-submit write job on a real standalone cluster: a master and a worker JVM on
loopback, started from the pyspark install, so executors run in processes and working
directories of their own (nothing shared with the driver but the namespace URI)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.spark.jobs import WRITE_JOB
from tests.support import EVENTS_SCHEMA, events, sort_rows

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
STARTUP_SECONDS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def executor_java_options() -> list[str]:
    """The drivers' JVM options (tests/conftest.py: the C1 compiler alone) for the
    executors too: a worker starts them with ``spark.executor.extraJavaOptions``, not from
    its own environment (22 of 110 CPU-s of this file, measured)."""
    return ["--conf", f"spark.executor.extraJavaOptions={os.environ['SPARK_SUBMIT_OPTS']}"]


def start(args: list[str], log_path: Path, ready: str) -> subprocess.Popen[bytes]:
    """Start a daemon JVM and wait for ``ready`` in its log."""
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(BIN / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cluster_env(),
        )
    deadline = time.monotonic() + STARTUP_SECONDS
    while ready not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{args[0]} did not start:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)
    return process


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``spark://127.0.0.1:<port>`` with one worker (2 cores); yields it and the worker's
    working directory."""
    home = tmp_path_factory.mktemp("standalone")
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    work_dir = home / "work"
    daemons = []
    try:
        daemons.append(
            start(
                ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(free_port())],
                home / "master.log",
                "I have been elected leader",
            )
        )  # fmt: skip
        daemons.append(
            start(
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", "2", "--memory", "1g", "--work-dir", str(work_dir),
                 "--webui-port", str(free_port()), master_url],
                home / "worker.log",
                "Successfully registered with master",
            )
        )  # fmt: skip
        yield master_url, work_dir
    finally:
        for daemon in reversed(daemons):
            daemon.terminate()
            daemon.wait(timeout=60)


def test_spark_submit_write_job_on_a_standalone_cluster(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    master_url, work_dir = cluster
    root = tmp_path / "lake" / "events"
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    source = tmp_path / "landing" / "events.parquet"
    source.parent.mkdir()
    table = events(3000)
    pq.write_table(table, source)
    result_path = tmp_path / "results" / "result.json"
    driver_dir = tmp_path / "driver"
    driver_dir.mkdir()
    done = subprocess.run(
        [
            str(BIN / "spark-submit"),
            "--master", master_url,
            "--deploy-mode", "client",
            "--executor-memory", "512m",
            "--driver-memory", "512m",
            "--conf", f"spark.pyspark.python={sys.executable}",
            "--conf", "spark.ui.enabled=false",
            *executor_java_options(),
            WRITE_JOB,
            "--uri", ns.uri,
            "--source", str(source),
            "--format", "parquet",
            "--mode", "overwrite",
            "--txn-id", "cluster.2025-12-10",
            "--commit",
            "--result-path", str(result_path),
        ],
        env=cluster_env(),
        cwd=driver_dir,
        capture_output=True,
        text=True,
        timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(result_path.read_text())
    assert (result["state"], result["rows"], result["partition_count"]) == ("published", 3000, 3)
    assert sort_rows(ns.to_table()) == sort_rows(table)
    # the tasks ran in the worker's executors, each in the application's own directory
    [app] = [d for d in work_dir.iterdir() if d.name.startswith("app-")]
    executor_logs = [p.read_text() for p in app.glob("*/stderr")]
    assert executor_logs
    assert any("Finished task" in text for text in executor_logs)


def test_a_pyspark_job_using_the_format_on_a_standalone_cluster(
    cluster: tuple[str, Path], tmp_path: Path
) -> None:
    """``format("lance_partitioned")`` where executors share nothing with the driver: the
    example DAGs' own PySpark job (``dags/examples/jobs/daily_rollup.py``) reads one day of
    a namespace (pushed down: the other days' leaves are made unreadable first) and
    overwrites that day of another, its tasks staging in the worker's executors and the
    driver publishing; submitted again, it publishes nothing twice."""
    master_url, _ = cluster
    root = tmp_path / "lake"
    day = dt.date(2025, 12, 11)
    ns = PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    table = events(3000)
    ns.write(table)
    for partition in ns.partitions():
        if partition.values["event_date"] != day:
            # no data files any more: a read that touched this leaf would fail
            shutil.rmtree(Path(partition.location.removeprefix("file://")) / "data")
    totals = PartitionedNamespace.create(
        root / "totals",
        schema=pa.schema(
            [
                pa.field("event_date", pa.date32()),
                pa.field("country", pa.utf8()),
                pa.field("events", pa.int64()),
                pa.field("amount", pa.float64()),
            ]
        ),
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    job = Path(__file__).resolve().parents[2] / "dags" / "examples" / "jobs" / "daily_rollup.py"
    submit = [
        str(BIN / "spark-submit"),
        "--master", master_url,
        "--executor-memory", "512m",
        "--driver-memory", "512m",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", "spark.ui.enabled=false",
        *executor_java_options(),
        str(job), ns.uri, totals.uri, day.isoformat(),
    ]  # fmt: skip
    versions = []
    for _ in range(2):  # the second run is a retry: its txn_id was published
        done = subprocess.run(
            submit,
            env=cluster_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        versions.append(PartitionedNamespace.open(totals.uri).version)
    assert versions[1] == versions[0]  # the retry published nothing
    on_day = table.filter(pc.equal(table["event_date"], day)).to_pylist()
    want: dict[str | None, tuple[int, float]] = {}
    for r in on_day:
        n, total = want.get(r["country"], (0, 0.0))
        want[r["country"]] = (n + 1, total + r["amount"])
    got = {
        r["country"]: (r["events"], round(r["amount"], 6)) for r in totals.to_table().to_pylist()
    }
    assert got == {c: (n, round(total, 6)) for c, (n, total) in want.items()}
    assert [p.values for p in totals.partitions()] == [{"event_date": day}]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "day": day.isoformat(),
        "countries": len(want),
    }
