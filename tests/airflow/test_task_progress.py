"""Tasks that run long work log its progress: a line each 10% (or 10 s) of a step that
runs longer than a second, through ``dag.test()`` on real namespaces."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_provider_lance.hooks import lance as hook_module
from airflow_provider_lance.hooks.lance import TaskProgress
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField, Progress
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events

RunDag = Callable[..., RunResult]


@pytest.fixture
def every_step_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of a test's small namespaces end within a second: log them anyway."""
    monkeypatch.setattr(hook_module, "PROGRESS_AFTER", 0.0)


def test_a_write_task_logs_its_progress(
    run_dag: RunDag, lance_test_root: Path, every_step_logged: None
) -> None:
    PartitionedNamespace.create(
        lance_test_root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    run = run_dag("lance_test_write", conf={"rows": 300, "days": 30})
    assert run.state == "success", run.output[-3000:]
    assert "write: 30 of 30 partitions (100%" in run.output


def test_a_maintain_task_logs_its_progress(
    run_dag: RunDag, lance_test_root: Path, every_step_logged: None
) -> None:
    ns = PartitionedNamespace.create(
        lance_test_root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    ns.write(events(300, days=30))
    ns.write(events(30, days=30, first_id=1000))
    run = run_dag("lance_test_upkeep", conf={"older_than": 0})
    assert run.state == "success", run.output[-3000:]
    assert "maintain: clean up leaves: 30 of 30 partitions (100%" in run.output


def test_a_long_step_logs_a_line_each_tenth(
    every_step_logged: None, caplog: pytest.LogCaptureFixture
) -> None:
    """Reported once per partition (the core reports at most four times a second; this is
    the worst case), 1,000 partitions log ten lines, not a thousand."""
    log = logging.getLogger("test_task_progress")
    progress = TaskProgress(log)
    with caplog.at_level(logging.INFO, logger="test_task_progress"):
        for done in range(1001):
            progress(Progress(done, 1000, "write"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10, lines
    assert lines[-1].startswith("write: 1000 of 1000 partitions (100%")


def test_a_quick_step_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test_task_progress")
    progress = TaskProgress(log)
    with caplog.at_level(logging.INFO, logger="test_task_progress"):
        for done in range(3):
            progress(Progress(done, 2, "write"))
    assert caplog.records == []
