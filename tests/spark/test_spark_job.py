"""The spark-submit write job: sources, SQL transform, result file, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.spark.jobs import WRITE_JOB
from airflow_provider_lance.spark.jobs.write import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_FAILED,
    STORAGE_OPTIONS_ENV,
    BadInput,
    exit_code,
    main,
)
from tests.support import EVENTS_SCHEMA, UNREACHABLE_OPTIONS, events, sort_rows

pytestmark = pytest.mark.integration


def test_spark_submit_end_to_end(by_day: PartitionedNamespace, tmp_path: Path) -> None:
    """The job as Airflow runs it: spark-submit, a Parquet source, a committed overwrite."""
    source = tmp_path / "events.parquet"
    pq.write_table(events(3000), source)
    result_path = tmp_path / "out" / "result.json"
    spark_submit = Path(sys.executable).with_name("spark-submit")
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env["PATH"] = f"{spark_submit.parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        [
            str(spark_submit),
            "--master",
            "local[2]",
            "--conf",
            "spark.ui.enabled=false",
            WRITE_JOB,
            "--uri",
            by_day.uri,
            "--source",
            str(source),
            "--format",
            "parquet",
            "--mode",
            "overwrite",
            "--txn-id",
            "daily.2025-12-10",
            "--commit",
            "--result-path",
            str(result_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(result_path.read_text())
    assert result["txn_id"] == "daily.2025-12-10"
    assert (result["state"], result["rows"], result["partition_count"]) == ("published", 3000, 3)
    assert result["manifest_version"] == by_day.state().version
    assert all(p["read_version"] >= 1 for p in result["partitions"])
    [line] = [x for x in done.stdout.splitlines() if x.startswith('{"txn_id"')]
    summary = json.loads(line)
    assert summary["rows"] == 3000
    assert "partitions" not in summary
    assert sort_rows(by_day.to_table()) == sort_rows(events(3000))


def test_csv_source_sql_transform_and_rerun(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    source = tmp_path / "events.csv"
    pcsv.write_csv(events(400), source)
    result_path = tmp_path / "result.json"
    argv = [
        "--uri",
        by_day.uri,
        "--source",
        str(source),
        "--format",
        "csv",
        "--read-option",
        "header=true",
        "--read-option",
        "inferSchema=true",
        "--sql",
        "SELECT id, CAST(event_date AS DATE) AS event_date, country, amount "
        "FROM source WHERE amount >= 300",
        "--txn-id",
        "csv-load",
        "--result-path",
        str(result_path),
    ]
    assert main(argv) == 0
    staged = json.loads(result_path.read_text())
    assert (staged["state"], staged["manifest_version"]) == ("staged", None)
    assert by_day.count_rows() == 0  # not committed
    assert main([*argv, "--commit"]) == 0  # the rerun replaces the staged data, then commits
    published = json.loads(result_path.read_text())
    expected = [r for r in events(400).to_pylist() if r["amount"] >= 300]
    assert published["state"] == "published"
    assert published["rows"] == len(expected) == by_day.count_rows()
    assert main([*argv, "--commit"]) == 0  # again: the same result, no duplicates
    again = json.loads(result_path.read_text())
    assert (again["tasks"], published["tasks"] > 0) == (0, True)  # no Spark work this time
    same = ("txn_id", "state", "rows", "files", "partitions", "manifest_version")
    assert {k: again[k] for k in same} == {k: published[k] for k in same}
    assert by_day.count_rows() == len(expected)


def test_a_namespace_source_read_with_the_format(
    spark: SparkSession, by_day: PartitionedNamespace, tmp_path: Path
) -> None:
    """The job registers ``lance_partitioned``: a namespace is a source like Parquet."""
    source = PartitionedNamespace.create(
        tmp_path / "raw", schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    source.write(events(300))
    result_path = tmp_path / "result.json"
    argv = ["--uri", by_day.uri, "--source", source.uri, "--format", "lance_partitioned"]
    argv += ["--sql", "SELECT * FROM source WHERE event_date = DATE '2025-12-11'"]
    assert main([*argv, "--commit", "--result-path", str(result_path)]) == 0
    assert json.loads(result_path.read_text())["rows"] == 100
    assert sort_rows(by_day.to_table()) == sort_rows(
        source.to_table(filter="event_date = DATE '2025-12-11'")
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--source": "/nonexistent/events.parquet"}, "PATH_NOT_FOUND"),
        ({"--sql": "SELECT nope FROM source"}, "nope"),
        ({"--uri": "/nonexistent/namespace"}, "not a partitioned namespace"),
        ({"--sql": "SELECT id, 1 AS extra FROM source"}, "'extra' is not in the namespace"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    spark: SparkSession,
    by_day: PartitionedNamespace,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: dict[str, str],
    message: str,
) -> None:
    source = tmp_path / "events.parquet"
    pq.write_table(events(10), source)
    args = {"--uri": by_day.uri, "--source": str(source), "--result-path": str(tmp_path / "r.json")}
    args.update(change)
    assert main([x for kv in args.items() for x in kv]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ")
    assert message in err
    assert not (tmp_path / "r.json").exists()


def test_bad_storage_options_and_arguments(
    by_day: PartitionedNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, "[1, 2]")
    args = ["--uri", by_day.uri, "--source", "x", "--result-path", str(tmp_path / "r.json")]
    assert main(args) == 2
    with pytest.raises(SystemExit) as exited:
        main(["--uri", by_day.uri])  # --source and --result-path missing
    assert exited.value.code == 2


def test_unreachable_storage_exits_1_so_the_task_retries(
    spark: SparkSession,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transient storage failure is retryable: exit code 1, never 2 (bad input)."""
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv(STORAGE_OPTIONS_ENV, json.dumps(UNREACHABLE_OPTIONS))
    source = tmp_path / "events.parquet"
    pq.write_table(events(10), source)
    result_path = tmp_path / "r.json"
    argv = ["--uri", "s3://bucket/x", "--source", str(source), "--result-path", str(result_path)]
    assert main([*argv, "--commit"]) == EXIT_FAILED == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot read the __manifest of s3://bucket/x: ")
    assert "127.0.0.1:9" in err[-1]
    assert not result_path.exists()
    # the same job with bad input (the source does not exist) still exits 2
    missing = ["--source", str(tmp_path / "missing.parquet")]
    assert main([*argv, *missing]) == EXIT_BAD_INPUT == 2
    assert "PATH_NOT_FOUND" in capsys.readouterr().err.strip().splitlines()[-1]


PROJECT_ERRORS = [cls for _, cls in sorted(project_errors.error_classes().items())]


@pytest.mark.parametrize("cls", PROJECT_ERRORS, ids=lambda cls: cls.__name__)
def test_exit_code_follows_the_error_class(cls: type[LanceNamespaceError]) -> None:
    if cls is project_errors.CommitConflict:
        expected = EXIT_CONFLICT
    else:
        expected = EXIT_FAILED if cls.retryable else EXIT_BAD_INPUT
    assert exit_code(cls("boom")) == expected


def test_exit_code_of_errors_that_are_not_the_projects(spark: SparkSession) -> None:
    from pyspark.errors import AnalysisException

    assert exit_code(BadInput("no")) == EXIT_BAD_INPUT
    assert exit_code(RuntimeError("unexpected")) == EXIT_FAILED
    with pytest.raises(AnalysisException) as info:
        spark.sql("SELECT no_such_column")
    assert exit_code(info.value) == EXIT_BAD_INPUT
