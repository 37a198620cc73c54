"""The one retry helper of the core (namespace/retry.py), and the bound it gives the
seal's lost-race loop, which had none (invariant 8: nothing is retried forever)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import airflow_provider_lance.namespace.txn.commit as commit_module
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.errors import CommitConflict
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.retry import (
    Budget,
    Outcome,
    Spent,
    backoff,
    retry_until,
)
from airflow_provider_lance.namespace.txn.commit import Committer
from airflow_provider_lance.namespace.txn.kernel import CommitOptions
from airflow_provider_lance.namespace.txn.lifecycle import bumped
from tests.support import TAGGED, tagged_rows


class Clock:
    """A clock the steps move (no real waiting in these tests)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Sleeps(list[int]):
    """Records what retry_until asked to sleep, without sleeping."""

    def __call__(self, n: int) -> None:
        self.append(n)


def steps(*outcomes: Any, clock: Clock | None = None, took: float = 0.0) -> Callable[[int], Any]:
    """A step returning ``outcomes`` in turn (each attempt taking ``took`` seconds)."""
    seen: list[int] = []

    def step(attempt: int) -> Any:
        assert attempt == len(seen)  # attempts are numbered from 0, one by one
        seen.append(attempt)
        if clock is not None:
            clock.now += took
        return outcomes[attempt]

    return step


def conflict(text: str = "spent") -> Callable[[], CommitConflict]:
    return lambda: CommitConflict(text)


# -- the helper ----------------------------------------------------------------------------
def test_the_first_result_that_is_no_outcome_is_returned() -> None:
    sleeps = Sleeps()
    step = steps(Outcome.LOST, Outcome.LOST, "done")
    budget = Budget(conflict(), attempts=5)
    assert retry_until(step, {Outcome.LOST: budget}, sleep=sleeps) == "done"
    assert sleeps == [0, 1]  # a backoff between attempts, growing


def test_none_is_a_result_too() -> None:
    assert (
        retry_until(
            steps(Outcome.LOST, None),
            {Outcome.LOST: Budget(conflict(), attempts=3)},
            sleep=Sleeps(),
        )
        is None
    )


def test_a_spent_attempt_budget_raises_its_error_after_that_many_attempts() -> None:
    sleeps = Sleeps()
    with pytest.raises(CommitConflict, match="kept losing") as caught:
        retry_until(
            steps(*[Outcome.LOST] * 10),
            {Outcome.LOST: Budget(conflict("kept losing"), attempts=3)},
            sleep=sleeps,
        )
    assert caught.value.retryable
    assert sleeps == [0, 1]  # three attempts, the last one spent the budget: no wait after it


def test_a_spent_deadline_raises_its_error() -> None:
    clock, sleeps = Clock(), Sleeps()
    with pytest.raises(CommitConflict, match="timed out"):
        retry_until(
            steps(*[Outcome.LOST] * 100, clock=clock, took=1.0),
            {Outcome.LOST: Budget(conflict("timed out"), seconds=3.5)},
            sleep=sleeps,
            clock=clock,
        )
    # attempts end at 1, 2, 3 s (still within 3.5 s: wait and go again), the 4th at 4 s
    assert sleeps == [0, 1, 2]


def test_the_deadline_runs_from_the_start_of_the_first_attempt() -> None:
    """Not from its end: a single attempt longer than the deadline spends it."""
    clock = Clock()
    with pytest.raises(CommitConflict):
        retry_until(
            steps(Outcome.LOST, "never reached", clock=clock, took=5.0),
            {Outcome.LOST: Budget(conflict(), seconds=4.0)},
            sleep=Sleeps(),
            clock=clock,
        )


def test_each_budget_runs_from_the_first_attempt_that_drew_on_it() -> None:
    """A long wait for claims does not eat the time a later lost race gets."""
    clock, sleeps = Clock(), Sleeps()
    outcomes = [*[Outcome.CLAIMED] * 9, Outcome.LOST, Outcome.LOST, "sealed"]
    got = retry_until(
        steps(*outcomes, clock=clock, took=1.0),
        {
            Outcome.CLAIMED: Budget(conflict("claims"), seconds=60.0),
            Outcome.LOST: Budget(conflict("lost"), seconds=2.5),
        },
        sleep=sleeps,
        clock=clock,
    )
    assert got == "sealed"
    assert sleeps == [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1]  # each budget counts its own waits


def test_an_unbounded_budget_is_refused() -> None:
    with pytest.raises(TypeError, match="deadline or an attempt bound"):
        Budget(conflict())
    with pytest.raises(ValueError, match="at least one attempt"):
        Budget(conflict(), attempts=0)
    with pytest.raises(ValueError, match="negative"):
        Budget(conflict(), seconds=-1.0)


def test_an_outcome_without_a_budget_is_a_bug() -> None:
    with pytest.raises(KeyError):
        retry_until(steps(Outcome.CLAIMED), {Outcome.LOST: Budget(conflict(), attempts=3)})


def test_again_never_waits_and_free_outcomes_wait_only_after_them() -> None:
    sleeps = Sleeps()
    again = Budget(conflict(), attempts=10)
    ordered = Budget(conflict(), attempts=10, free=1)
    got = retry_until(
        steps(Outcome.AGAIN, Outcome.AGAIN, Outcome.ORDERED, Outcome.ORDERED, Outcome.ORDERED, 7),
        {Outcome.AGAIN: again, Outcome.ORDERED: ordered},
        sleep=sleeps,
    )
    assert got == 7
    assert sleeps == [0, 1]  # the first ORDERED is free, AGAIN never waits


def test_outcomes_sharing_a_budget_share_its_attempts() -> None:
    shared = Budget(conflict("shared"), attempts=3)
    with pytest.raises(CommitConflict, match="shared"):
        retry_until(
            steps(Outcome.AGAIN, Outcome.LOST, Outcome.AGAIN, "too late"),
            {Outcome.AGAIN: shared, Outcome.LOST: shared},
            sleep=Sleeps(),
        )


def test_spent_is_how_a_caller_with_a_fallback_gives_up() -> None:
    """``on_spent=Spent``, then ``except Spent``: a direct write hands over this way."""
    with pytest.raises(Spent):
        retry_until(steps(Outcome.LOST, Outcome.LOST), {Outcome.LOST: Budget(Spent, attempts=2)})


def test_an_error_of_a_step_is_not_retried() -> None:
    def step(attempt: int) -> Any:
        raise CommitConflict("a real conflict")

    with pytest.raises(CommitConflict, match="a real conflict"):
        retry_until(step, {Outcome.LOST: Budget(conflict(), attempts=5)})


def test_backoff_grows_to_a_second_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    for attempt in (0, 1, 6, 50):
        backoff(attempt)
    first, second, sixth, later = slept
    assert 0.01 <= first <= 0.03
    assert 0.02 <= second <= 0.06
    assert 0.5 <= sixth <= 1.5
    assert 0.5 <= later <= 1.5


# -- the seal's lost races: bounded by the swap timeout --------------------------------------
def test_a_seal_that_keeps_losing_gives_up_after_the_swap_timeout(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a seal whose compare-and-swap kept losing retried without end. Here a
    stager records into the transaction right before every seal swap (its epoch bump
    changes the transaction row at the state the seal read), so every seal loses."""
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.begin("append", "T").stage(tagged_rows("T", [1, 2], 3, 0))
    real_sealed = commit_module.sealed
    raced: list[int] = []

    def losing_seal(record: Any, **kwargs: Any) -> Any:
        state = ns.state()  # the concurrent stager wins the row first
        ns._manifest.commit(Swap(state.view, moves=[bumped(record)]))
        raced.append(state.version)
        return real_sealed(record, **kwargs)

    monkeypatch.setattr(commit_module, "sealed", losing_seal)
    started = time.monotonic()
    with pytest.raises(CommitConflict, match=r"could not seal transaction T within 0.5s") as caught:
        Committer(ns._txn, CommitOptions(swap_timeout=0.5)).commit("T")
    elapsed = time.monotonic() - started
    assert caught.value.retryable
    assert "commit it again" in str(caught.value)
    assert len(raced) >= 2  # it did retry
    assert elapsed < 0.5 + 10  # one attempt past the deadline at most (a loaded host's)
    assert {t.txn_id: t.state for t in ns.transactions()}["T"] == "staged"  # nothing sealed
    assert ns.to_table().num_rows == 0

    monkeypatch.setattr(commit_module, "sealed", real_sealed)  # the stager is done: commit again
    result = ns.commit("T")
    assert sorted(p.rows for p in result.partitions) == [3, 3]
    assert sorted(ns.to_table().column("id").to_pylist()) == list(range(6))
