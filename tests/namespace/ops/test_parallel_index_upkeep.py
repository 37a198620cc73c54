"""Many ``optimize_indices`` at once, each on a partition of its own (issue 41): the
daily backfill's upkeep tasks, one per new day, publishing together. Each one's swap
rewrites the index declaration it built under (so that a concurrent drop or replacement
makes it compute again), and so loses to every sibling that publishes first; such a loss
leaves what it computed valid and must not use up its retries."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import btree, whole
from tests.support import Worker, no_duplicates, other

#: More siblings than an operation's attempts (runner.OPERATION_ATTEMPTS is 8).
SIBLINGS = 10


def new_days(ns: PartitionedNamespace, n: int) -> list[int]:
    """The BTREE on ``id`` over partitions 1-4, then ``n`` new days of 10 rows each."""
    btree(ns)
    days = list(range(10, 10 + n))
    ns.write(vector_rows(days, 10, first_id=5000))
    return days


def all_indexed(ns: PartitionedNamespace, n: int) -> None:
    assert whole(ns) == {"id_idx": (4 + n, 1200 + 10 * n, 0)}
    assert no_duplicates(ns) == [*range(1200), *range(5000, 5000 + 10 * n)]


class Parking:
    """A failpoint held for the thread named ``thread`` only, entered and left by hand."""

    def __init__(self, point: str, thread: str) -> None:
        self._held = hold(point, when=lambda: threading.current_thread().name == thread)
        self.point = self._held.__enter__()

    def wait(self, task: Worker) -> None:
        """Until ``task`` parks here (or has ended: its error is then raised)."""
        deadline = time.monotonic() + 60
        while self.point.hits == 0 and task.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.point.hits == 0:
            task.outcome(timeout=0)
            raise AssertionError(f"the task never reached {self.point.name}")

    def release(self) -> None:
        self._held.__exit__(None, None, None)


def test_an_upkeep_task_outlasts_more_siblings_publishing_first_than_it_has_attempts(
    vectors: PartitionedNamespace,
) -> None:
    """The first day's task parks before each of its swaps while one more sibling
    publishes its own day (and at the start of its next attempt while the next swap is
    set up): it loses its swap to each of them, then publishes its day."""
    days = new_days(vectors, 1 + SIBLINGS)
    task = Worker(other(vectors).optimize_indices, f"part = {days[0]}")
    task.name = "upkeep-first-day"
    parked = Parking("optimize_indices.before_publish", task.name)
    try:
        task.start()
        for day in days[1:]:
            parked.wait(task)
            assert other(vectors).optimize_indices(f"part = {day}").rows_indexed == 10
            retried = Parking("optimize_indices.selected", task.name)
            parked.release()  # its swap loses to the sibling's
            retried.wait(task)
            parked = Parking("optimize_indices.before_publish", task.name)
            retried.release()
        parked.wait(task)
    finally:
        parked.release()
    result = task.outcome()
    assert [p.values["part"] for p in result.partitions] == [days[0]]
    assert result.rows_indexed == 10
    all_indexed(vectors, 1 + SIBLINGS)


@pytest.mark.integration
def test_thirty_upkeep_tasks_at_once_all_publish(vectors: PartitionedNamespace) -> None:
    """Thirty tasks park once their leaf version is committed and are released together,
    so every swap races every other."""
    tasks = 30
    days = new_days(vectors, tasks)
    with hold("optimize_indices.before_publish", times=None) as parked:
        workers = [Worker(other(vectors).optimize_indices, f"part = {d}") for d in days]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 120
        while parked.hits < tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parked.hits == tasks, f"{parked.hits} of {tasks} tasks reached their publish"
    for day, worker in zip(days, workers, strict=True):
        result = worker.outcome()
        assert [p.values["part"] for p in result.partitions] == [day]
        assert result.rows_indexed == 10
    all_indexed(vectors, tasks)
