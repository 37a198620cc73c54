"""read_partitioned and write_partitioned on a Spark Connect session (``sc://``).

A Connect session has no ``sparkContext`` (Databricks serverless and shared clusters are
Connect-only). The server is the one in the pyspark install (its jars carry it), started on
loopback; the client runs in a process of its own, because a Connect session in this process
would switch the shared classic session's PySpark into Connect mode.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace

pytestmark = pytest.mark.slow

ROUND_TRIP = Path(__file__).resolve().parent.parent / "scripts" / "spark_round_trip.py"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STARTED = "Spark Connect server started"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("connect") / "server.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with log_path.open("w") as log:
        server = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "spark-submit"),
                "--class", SERVER_CLASS,
                "--master", "local[2]",
                "--driver-memory", "512m",
                "--conf", f"spark.connect.grpc.binding.port={port}",
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", "spark.ui.enabled=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while STARTED not in log_path.read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not start:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)


def test_write_and_read_on_a_spark_connect_session(connect_url: str, tmp_path: Path) -> None:
    uri = tmp_path / "events"
    done = subprocess.run(
        [sys.executable, str(ROUND_TRIP), str(uri), "--remote", connect_url],
        capture_output=True,
        text=True,
        env={**os.environ, "LANCE_LOG": "error"},
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["session"].startswith("pyspark.sql.connect")  # really a Connect session
    assert report["published_rows"] == 600
    assert report["published_partitions"] == 3
    assert report["read_ids"] == list(range(0, 600, 3))  # one pruned date, every row once
    # format("lance_partitioned") registered on the Connect session: written twice under one
    # txn_id (published once), read back with a filter Spark pushed down
    assert report["format_rows"] == 600
    assert report["format_read_ids"] == list(range(0, 600, 3))
    ns = PartitionedNamespace.open(uri)
    assert ns.count_rows() == 600
    assert len(ns.prune(None)) == 3
