"""The ``progress=`` callback of long operations: one :class:`Progress` type, reported
from the fan-outs over leaf tables, on the caller's thread, never per row; a callback that
raises cannot break the operation."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import InvalidArgumentError, PartitionedNamespace
from airflow_provider_lance.namespace.progress import Progress
from tests.support import EVENTS_SCHEMA, events, no_duplicates

DAYS = 40


class Recorder:
    """A progress callback keeping every report and the thread it came on."""

    def __init__(self) -> None:
        self.reports: list[Progress] = []
        self.threads: set[int] = set()

    def __call__(self, progress: Progress) -> None:
        self.reports.append(progress)
        self.threads.add(threading.get_ident())

    def steps(self) -> list[list[Progress]]:
        """The reports, one list per step (a step starts at 0)."""
        out: list[list[Progress]] = []
        for r in self.reports:
            if r.done == 0 or not out or out[-1][-1].what != r.what:
                out.append([])
            out[-1].append(r)
        return out


def check(recorder: Recorder, operation: str) -> set[str]:
    """Every step of ``operation`` counted from 0 up to its total, on the calling thread;
    the names of the steps."""
    steps = recorder.steps()
    assert steps, "no progress was reported"
    assert recorder.threads == {threading.get_ident()}
    for reports in steps:
        what = reports[0].what
        assert what == operation or what.startswith(f"{operation}: "), what
        done = [r.done for r in reports]
        assert done[0] == 0, f"{what} did not start at 0: {done}"
        assert done == sorted(done), f"{what} went backwards: {done}"
        assert reports[-1].done == reports[-1].total, f"{what} did not finish: {reports}"
    return {reports[0].what for reports in steps}


@pytest.fixture
def many(daily: PartitionedNamespace) -> PartitionedNamespace:
    daily.write(events(DAYS * 5, days=DAYS))
    return daily


def test_a_write_reports_its_partitions_not_its_rows(daily) -> None:
    rows = events(DAYS * 50, days=DAYS)
    recorder = Recorder()
    daily.write(rows, progress=recorder)
    check(recorder, "write")
    assert max(r.total for r in recorder.reports) == DAYS
    assert len(recorder.reports) < 10 * len(recorder.steps())  # a few a step, not one a row
    assert no_duplicates(daily) == list(range(DAYS * 50))


@pytest.mark.parametrize("how", ["to_table", "to_reader", "to_batches"])
def test_a_read_reports_the_partitions_it_started(many, how) -> None:
    recorder = Recorder()
    read: Callable[..., object] = getattr(many, how)
    result = read(columns=["id"], progress=recorder)
    if how == "to_reader":
        result = result.read_all()
    elif how == "to_batches":
        assert recorder.reports == []  # nothing read yet: the batches are lazy
        result = pa.Table.from_batches(list(result))
    assert result.num_rows == DAYS * 5
    check(recorder, "read")
    assert recorder.reports[-1].total == DAYS


@pytest.mark.parametrize("how", ["to_table", "to_reader", "to_batches"])
def test_a_search_reports_the_leaves_it_searched(many, how) -> None:
    """A search runs when it is asked (its top rows are merged before any is returned): its
    leaves opened, their term statistics and their searches are reported then."""
    recorder = Recorder()
    read: Callable[..., object] = getattr(many, how)
    query = {"query": "DE", "columns": ["country"]}  # searched without an index
    result = read(columns=["id"], full_text_query=query, progress=recorder)
    assert check(recorder, "search") == {
        "search: leaves opened",
        "search: term statistics",
        "search: leaves searched",
    }
    assert recorder.reports[-1].total == DAYS
    if how == "to_reader":
        result = result.read_all()
    elif how == "to_batches":
        result = pa.Table.from_batches(list(result))
    assert result.num_rows > 0


def test_table_operations_report(many) -> None:
    for name, call in [
        ("delete", lambda p: many.delete("id % 2 = 0", progress=p)),
        (
            "merge",
            lambda p: many.merge(events(DAYS, days=DAYS), on=["id", "event_date"], progress=p),
        ),
        ("optimize", lambda p: many.optimize(progress=p)),
    ]:
        recorder = Recorder()
        call(recorder)
        check(recorder, name)


def test_maintain_reports_its_steps(many) -> None:
    many.write(events(DAYS, days=DAYS, first_id=1000))
    recorder = Recorder()
    many.maintain(
        older_than=dt.timedelta(0),
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(0),
        enforce_min_age=False,
        progress=recorder,
    )
    steps = check(recorder, "maintain")
    assert {"maintain: clean up leaves", "maintain: leaf directories"} <= set(steps)


def test_a_callback_that_raises_is_dropped_and_the_write_completes(daily, caplog) -> None:
    """Before: there was no callback. Decided: an exception in a progress display must
    not fail (or half-publish) a write. The first one is logged, the callback is not
    called again, and the write publishes every row once."""
    calls = 0

    def broken(progress: Progress) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("the display is gone")

    with caplog.at_level(logging.WARNING, logger="airflow_provider_lance.namespace.progress"):
        result = daily.write(events(DAYS * 5, days=DAYS), progress=broken)
    assert calls == 1
    assert "the display is gone" in caplog.text
    assert result.rows == DAYS * 5
    assert no_duplicates(daily) == list(range(DAYS * 5))


def test_a_progress_that_is_not_callable_is_refused_before_anything_is_written(
    daily, root: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="progress must be a callable"):
        daily.write(events(10), progress="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="progress must be a callable"):
        daily.to_table(progress=1)  # type: ignore[arg-type]
    assert daily.to_table().num_rows == 0
    assert daily.to_table().schema == EVENTS_SCHEMA
