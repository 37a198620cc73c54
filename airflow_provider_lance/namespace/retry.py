"""The one retry loop of the core: attempts repeat until one finishes or a budget is spent.

An attempt that does not finish says why (an :class:`Outcome`); each reason draws on a
:class:`Budget` with a deadline or an attempt bound, whose ``on_spent`` is the error
saying what to do (:class:`Spent` where the caller has a fallback). A budget without a
bound is refused: nothing is retried forever.
"""

from __future__ import annotations

import enum
import itertools
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

R = TypeVar("R")


class Outcome(enum.Enum):
    """Why an attempt did not finish (what the loop does next is the budget's business)."""

    #: A concurrent swap or commit won, or what the attempt read was cleaned up: back off.
    LOST = "lost"
    #: A live transaction holds a touched partition: wait for it.
    CLAIMED = "claimed"
    #: A merge fenced its spec or registered its intent: go again on the newer version.
    ORDERED = "ordered"
    #: Another committer owns the transaction now: poll for its outcome.
    TAKEN_OVER = "taken_over"
    #: The attempt changed what the next one starts from: go again at once, never waiting.
    AGAIN = "again"
    #: A concurrent commit rewrote, unchanged, a row the attempt's swap writes too (an index
    #: declaration many operations depend on): what it computed still holds, go again.
    QUEUED = "queued"


class Retry(Exception):
    """Ends the attempt with ``outcome`` from deep inside a step (as returning it does)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


class Spent(Exception):
    """The error of a budget whose caller has a fallback (``on_spent=Spent``)."""


@dataclass(frozen=True, eq=False)
class Budget:
    """How long one kind of :class:`Outcome` may repeat before ``on_spent`` is raised.

    ``seconds`` runs from the first attempt that drew on the budget; ``attempts`` counts
    those attempts, the one reaching it being the last. Outcomes mapped to one Budget
    object share it. The first ``free`` outcomes go again without waiting.
    """

    #: The error once spent, saying what to do (built then: it names what was found).
    on_spent: Callable[[], BaseException]
    seconds: float | None = None
    attempts: int | None = None
    free: int = 0

    def __post_init__(self) -> None:
        if self.seconds is None and self.attempts is None:
            raise TypeError("a retry budget needs a deadline or an attempt bound")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"a retry budget needs at least one attempt, not {self.attempts}")
        if self.seconds is not None and self.seconds < 0:
            raise ValueError(f"a retry deadline cannot be negative ({self.seconds})")


def backoff(attempt: int) -> None:
    """Sleep before retry ``attempt`` (0-based): 20 ms doubling up to 1 s, jittered."""
    time.sleep(min(0.02 * 2 ** min(attempt, 6), 1.0) * (0.5 + random.random()))


def retry_until(
    step: Callable[[int], R | Outcome],
    budgets: Mapping[Outcome, Budget],
    *,
    sleep: Callable[[int], None] = backoff,
    clock: Callable[[], float] = time.monotonic,
) -> R:
    """Run ``step(0)``, ``step(1)``, ... until one returns something other than an
    :class:`Outcome`, and return that. An Outcome draws on its budget: once spent,
    ``on_spent()`` is raised, else ``sleep(n)`` runs (``n``: the budget's waits so far;
    AGAIN never waits). An outcome without a budget: :class:`KeyError`."""
    used: dict[int, int] = {}  # id(budget) -> attempts that drew on it
    since: dict[int, float] = {}  # id(budget) -> start of the first of them
    for attempt in itertools.count():
        started = clock()
        try:
            got = step(attempt)
        except Retry as again:
            got = again.outcome
        if not isinstance(got, Outcome):
            return got
        budget = budgets[got]
        key = id(budget)
        used[key] = count = used.get(key, 0) + 1
        first = since.setdefault(key, started)
        if (budget.attempts is not None and count >= budget.attempts) or (
            budget.seconds is not None and clock() - first > budget.seconds
        ):
            raise budget.on_spent()
        if got is not Outcome.AGAIN and count > budget.free:
            sleep(count - budget.free - 1)
    raise AssertionError("unreachable")
