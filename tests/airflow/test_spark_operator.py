"""``LanceSparkWriteOperator`` through real spark-submit (local Spark) and ``dag.test()``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.operators.spark import LanceSparkWriteOperator
from tests.airflow.conftest import SECRET, RunResult
from tests.support import EVENTS_SCHEMA, events, sort_rows

pytestmark = pytest.mark.integration

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
@pytest.mark.airflow_compat
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
    # OpenLineage: the Parquet file in, the namespace out (staged: no version yet)
    (source_dataset,) = run.xcom("write", key="openlineage_inputs")
    assert (source_dataset["namespace"], source_dataset["name"]) == ("file", str(source))
    (output,) = run.xcom("write", key="openlineage_outputs")
    assert (output["namespace"], output["name"]) == ("file", f"{lance_test_root}/events")
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 60
    assert [f["name"] for f in output["facets"]["schema"]["fields"]] == EVENTS_SCHEMA.names
    assert "version" not in output["facets"]


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


@pytest.mark.parametrize(
    ("source", "dataset"),
    [
        ("s3a://raw/events/2025-12-10", ("s3://raw", "events/2025-12-10")),
        ("gs://bucket/landing/x.parquet", ("gs://bucket", "landing/x.parquet")),
        (
            "abfss://lake@acct.dfs.core.windows.net/raw/x",
            ("abfss://lake@acct.dfs.core.windows.net", "raw/x"),
        ),
        ("hdfs://namenode:8020/raw/x", ("hdfs://namenode:8020", "raw/x")),
        ("file:///landing/x.parquet", ("file", "/landing/x.parquet")),
        ("/landing/x.parquet", ("file", "/landing/x.parquet")),
    ],
)
def test_spark_sources_are_named_as_openlineage_names_them(
    source: str, dataset: tuple[str, str]
) -> None:
    from airflow_provider_lance.operators.lineage import file_dataset_name

    assert file_dataset_name(source) == dataset


def test_a_table_source_has_no_input_dataset_and_staged_outputs_no_version() -> None:
    from airflow_provider_lance.operators.lineage import NamespaceWrite

    op = LanceSparkWriteOperator(task_id="w", source="db.events", source_format="table")
    assert op.get_openlineage_facets_on_complete(None) is None  # before it ran
    op._lineage = NamespaceWrite(
        uri="s3://lake/events", rows=5, manifest_version=7, mode="overwrite"
    )
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage is not None
    assert lineage.inputs == []
    (output,) = lineage.outputs
    assert (output.namespace, output.name) == ("s3://lake", "events")
    assert output.facets["version"].datasetVersion == "7"
    assert output.facets["lifecycleStateChange"].lifecycleStateChange.value == "OVERWRITE"


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


# -- cluster deploy mode: no secret ever on a command line --------------------------------------
@pytest.mark.parametrize(
    ("result_path", "reason"),
    [
        (None, "cannot write the local result path"),
        ("s3://lake/_results/r.json", "holds secrets (aws_secret_access_key, aws_session_token)"),
    ],
)
def test_cluster_deploy_mode_is_refused_with_the_reason(
    run_dag: RunDag, secret_connection: Path, source: Path, result_path: str | None, reason: str
) -> None:
    make_namespace(secret_connection)
    conf = {"source": str(source), "result_path": result_path}
    run = run_dag("lance_test_spark_cluster", conf=conf)
    assert run.state == "failed"
    assert run.tries["write"] == 1  # nothing a retry could change
    assert reason in run.output
    assert "Spark-Submit cmd" not in run.output
    assert SECRET not in run.output


def test_cluster_deploy_mode_sends_public_options_and_the_secret_reference(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_CLUSTER",
        json.dumps(
            {
                "conn_type": "lance",
                "extra": {
                    "root": "s3://lake/warehouse",
                    "region": "eu-west-1",
                    "storage_options": {"aws_secret_access_key": SECRET},
                },
            }
        ),
    )
    lance = LancePartitionedHook("lance_cluster")

    def cluster_args(storage_options_from: str | None) -> list[str]:
        op = LanceSparkWriteOperator(
            task_id="w",
            source="s3a://raw/in",
            lance_conn_id="lance_cluster",
            deploy_mode="cluster",
            storage_options_from=storage_options_from,
        )
        return op._cluster_mode_args(lance, "s3://lake/_results/r.json")

    args = cluster_args("env:LANCE_STORAGE_OPTIONS_SECRET")
    assert args == [
        "--storage-options",
        json.dumps({"aws_region": "eu-west-1"}),
        "--storage-options-from",
        "env:LANCE_STORAGE_OPTIONS_SECRET",
    ]
    assert SECRET not in " ".join(args)
    with pytest.raises(AirflowFailException, match="ambient credentials"):
        cluster_args(None)  # the secret has nowhere safe to go


@pytest.mark.parametrize(
    ("kwargs", "cluster"),
    [
        ({}, False),
        ({"deploy_mode": "cluster"}, True),
        ({"conf": {"spark.submit.deployMode": "cluster"}}, True),
        ({"conf": {"spark.submit.deployMode": "client"}}, False),
    ],
)
def test_deploy_mode_in_conf_counts_like_the_argument(kwargs: dict, cluster: bool) -> None:
    op = LanceSparkWriteOperator(task_id="w", source="s3a://raw/in", **kwargs)
    assert op._spark_connection() == ("local[2]", cluster)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"application": "/jobs/other.py"}, "does not take 'application'"),
        ({"conn_id": "spark_other"}, "spark_conn_id"),
    ],
)
def test_arguments_the_operator_sets_itself_are_refused_clearly(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LanceSparkWriteOperator(task_id="w", source="s3a://raw/in", **kwargs)


def test_user_application_args_follow_the_operators_own() -> None:
    op = LanceSparkWriteOperator(
        task_id="w", source="/in", application_args=["--distribution", "none"]
    )
    args = op._application_args(uri="/ns", txn_id="t", result_path="/r.json")
    assert args[:2] == ["--uri", "/ns"]
    assert args[-2:] == ["--distribution", "none"]
    assert "extra_application_args" in op.template_fields


def test_an_undefined_lance_default_is_no_local_stand_in_for_a_remote_spark(
    run_dag: RunDag, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LANCE_DEFAULT", raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_REMOTE", '{"conn_type": "spark", "host": "spark://10.1.2.3:7077"}'
    )
    run = run_dag("lance_test_spark_remote")
    assert run.state == "failed"
    assert run.tries["write"] == 1
    assert "the connection 'lance_default' is not defined" in run.output
    assert "spark://10.1.2.3:7077" in run.output
    assert "Spark-Submit cmd" not in run.output


@pytest.mark.parametrize("without", ["JAVA_HOME", "PATH"])
def test_a_worker_without_java_fails_at_once_saying_so(
    run_dag: RunDag,
    lance_test_root: Path,
    source: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    without: str,
) -> None:
    make_namespace(lance_test_root)
    if without == "JAVA_HOME":
        monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk-here"))
        expected = f"JAVA_HOME={tmp_path / 'no-jdk-here'} has no executable bin/java"
    else:
        monkeypatch.delenv("JAVA_HOME", raising=False)
        empty = tmp_path / "bin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
        expected = "JAVA_HOME is not set and no java is on PATH"
    run = run_dag("lance_test_spark", conf={"source": str(source)})
    assert run.state == "failed"
    assert run.tries["write"] == 1  # no retry can install Java
    assert expected in run.output
    assert "Spark-Submit cmd" not in run.output
