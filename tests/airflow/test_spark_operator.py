"""``LanceSparkWriteOperator`` through real spark-submit (local Spark) and ``dag.test()``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.operators.spark import LanceSparkWriteOperator
from tests.airflow.conftest import RunResult
from tests.conftest import EVENTS_SCHEMA, events, sort_rows

RunDag = Callable[..., RunResult]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "landing" / "events.parquet"
    path.parent.mkdir()
    pq.write_table(events(60, start=dt.date(2025, 12, 1), days=3), path)
    return path


def make_namespace(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )


@pytest.mark.slow
def test_spark_write_retried_after_the_job_stages_once_then_commits(
    run_dag: RunDag, lance_test_root: Path, source: Path
) -> None:
    ns = make_namespace(lance_test_root)
    run = run_dag(
        "lance_test_spark",
        conf={"source": str(source), "mode": "append", "crash_after": True},
    )
    assert run.state == "success", run.output[-4000:]
    assert run.tries["write"] == 2  # the first try died after its Spark job had staged
    assert "simulated worker crash after the Spark job" in run.output
    staged = run.xcom("write")
    assert staged["txn_id"] == derive_txn_id("lance_test_spark", run.run_id, "write")
    assert (staged["state"], staged["mode"], staged["rows"]) == ("staged", "append", 60)
    assert staged["partition_count"] == 3
    assert staged["uri"] == ns.uri
    assert sorted(p["values"]["event_date"] for p in staged["partitions"]) == [
        "2025-12-01",
        "2025-12-02",
        "2025-12-03",
    ]
    published = run.xcom("commit")
    assert published["rows"] == 60
    assert published["sources"] == [staged["txn_id"]]
    # the retried job replaced its own staged files: every row exactly once
    assert sort_rows(ns.to_table()) == sort_rows(events(60, start=dt.date(2025, 12, 1), days=3))
    assert "LANCE_STORAGE_OPTIONS" not in "".join(
        line for line in run.output.splitlines() if "Spark-Submit cmd" in line
    )


@pytest.mark.slow
def test_spark_write_of_unknown_columns_fails_clearly_and_publishes_nothing(
    run_dag: RunDag, lance_test_root: Path, source: Path
) -> None:
    ns = make_namespace(lance_test_root)
    version = ns.version
    run = run_dag(
        "lance_test_spark",
        conf={"source": str(source), "sql": "SELECT *, 'x' AS not_in_schema FROM source"},
    )
    assert run.state == "failed"
    assert run.states["write"] == "failed"
    assert run.tries["write"] == 1  # bad input (exit code 2): no retry
    assert "failed (exit code 2)" in run.output
    assert "not_in_schema" in run.output
    assert run.states["commit"] == "upstream_failed"
    assert ns.version == version
    assert ns.count_rows() == 0


def test_spark_write_into_a_missing_namespace_fails_before_spark_starts(
    run_dag: RunDag, lance_test_root: Path, source: Path
) -> None:
    run = run_dag("lance_test_spark", conf={"source": str(source), "namespace": "nowhere"})
    assert run.state == "failed"
    assert run.tries["write"] == 1
    assert "NamespaceNotFoundError" in run.output
    assert "Spark-Submit cmd" not in run.output


# -- the job's exit code decides: fail at once or retry ----------------------------------------
def spark_submit_failure(code: int, *stderr: str) -> AirflowException:
    """The exception SparkSubmitHook raises when spark-submit exits with ``code``."""
    tail = "\nLast spark-submit output:\n" + "\n".join(stderr) if stderr else ""
    return AirflowException(
        f"Cannot execute: spark-submit --master local[2] write.py --uri /ns --txn-id t. "
        f"Error code is: {code}.{tail}"
    )


@pytest.mark.parametrize(
    ("code", "error_line", "fails_at_once", "note"),
    [
        (1, "error: cannot read the __manifest of s3://b/x: connection refused", False, "retry"),
        (2, "error: column 'extra' is not in the namespace", True, ""),
        (3, "error: commit conflict: partitions changed (partitions: p1)", False, "conflict"),
        (137, "", False, ""),  # the driver was killed
    ],
)
def test_job_failure_follows_the_exit_code(
    code: int, error_line: str, fails_at_once: bool, note: str
) -> None:
    lines = ["INFO SparkContext: Running Spark", error_line] if error_line else []
    failure = LanceSparkWriteOperator._job_failure(spark_submit_failure(code, *lines), "t", "/ns")
    assert isinstance(failure, AirflowException)
    assert isinstance(failure, AirflowFailException) is fails_at_once
    message = str(failure)
    assert message.startswith(f"Spark write t into /ns failed (exit code {code}): ")
    if error_line:
        assert message.split(": ", 1)[1].startswith(error_line.removeprefix("error: "))
    assert note in message
