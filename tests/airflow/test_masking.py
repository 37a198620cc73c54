"""Secrets of a ``lance`` connection never show in task logs, XCom or rendered fields."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.operators import LanceSparkWriteOperator
from airflow_provider_lance.operators.spark import STORAGE_OPTIONS_ENV
from tests.airflow.conftest import SECRET, TOKEN, RunResult

pytestmark = pytest.mark.integration


def _rendered_fields(run_id: str) -> list[Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(RenderedTaskInstanceFields)
            .filter(RenderedTaskInstanceFields.run_id == run_id)
            .all()
        )
        return [r.rendered_fields for r in rows]


def test_connection_secrets_stay_out_of_logs_xcom_and_rendered_fields(
    run_dag: Callable[..., RunResult], secret_connection: Path
) -> None:
    run = run_dag("lance_test_masking")
    assert run.state == "success", run.output[-3000:]
    # the careless task did log the options: the values are masked
    logged = [line for line in run.output.splitlines() if "storage options in use" in line]
    assert logged
    assert "***" in logged[0]
    assert logged[0].split("storage options in use: ")[1].split()[:2] == ["***", "***"]
    for secret in (SECRET, TOKEN):
        assert secret not in run.output
        assert secret not in json.dumps(run.xcoms, default=str)
    rendered = _rendered_fields(run.run_id)
    assert len(rendered) == 3
    assert all(SECRET not in json.dumps(r, default=str) for r in rendered)
    assert run.xcom("create")[0]["values"] == {"event_date": "2025-12-10"}


def test_spark_storage_options_go_to_the_environment_not_the_command_line() -> None:
    op = LanceSparkWriteOperator(task_id="w", source="/data/in.parquet", namespace="events")
    args = op._application_args(uri="s3://lake/events", txn_id="t-1", result_path="/tmp/r.json")
    assert SECRET not in " ".join(args)
    assert args[:4] == ["--uri", "s3://lake/events", "--source", "/data/in.parquet"]
    env = op._job_environment({"aws_secret_access_key": SECRET})
    assert json.loads(env[STORAGE_OPTIONS_ENV]) == {"aws_secret_access_key": SECRET}
