"""The one retry loop of the core: attempts repeat until one finishes or a budget is spent.

Every loop that goes again after a lost race, a claim held by another transaction or a
poll says *why* an attempt did not finish (an :class:`Outcome`), and each reason draws on
a :class:`Budget` with a deadline or an attempt bound, whose ``on_spent`` is the error
that says what to do (:class:`Spent` where the caller has a fallback). A budget with
neither bound is refused, so nothing is retried forever (invariant 8 of the design).

The loops' own deadline arithmetic, counters and error texts were copies that drifted
(one loop had no bound at all); here each loop states only its budgets.
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
    #: The attempt changed or learned what the next one starts from: go again at once,
    #: never waiting (a created table, a restored leaf version).
    AGAIN = "again"


class Retry(Exception):
    """Raised by a step to end its attempt with ``outcome`` (a step that returns an
    :class:`Outcome` does the same; this lets one end an attempt from deep inside it)."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome


class Spent(Exception):
    """The error of a budget whose caller has a fallback (``on_spent=Spent``, then
    ``except Spent``): a direct write hands over, a best-effort clean-up gives up."""


@dataclass(frozen=True, eq=False)
class Budget:
    """How long one kind of :class:`Outcome` may repeat before ``on_spent`` is raised.

    ``seconds`` runs from the start of the first attempt that drew on the budget (a long
    wait for one reason does not eat the time of another); ``attempts`` counts the
    attempts that drew on it, and the one that reaches it is the last. Outcomes mapped to
    the same Budget object share its count and deadline. The first ``free`` outcomes go
    again without waiting (a merge's first ORDERED is its own registration).
    """

    #: The error raised once the budget is spent, saying what to do (built then, so it
    #: can name what the last attempt found).
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
    """Sleep before retry ``attempt`` (0-based): 20 ms doubling up to 1 s, jittered so
    racing writers spread out instead of colliding again."""
    time.sleep(min(0.02 * 2 ** min(attempt, 6), 1.0) * (0.5 + random.random()))


def retry_until(
    step: Callable[[int], R | Outcome],
    budgets: Mapping[Outcome, Budget],
    *,
    sleep: Callable[[int], None] = backoff,
    clock: Callable[[], float] = time.monotonic,
) -> R:
    """Run ``step(0)``, ``step(1)``, ... until one returns something other than an
    :class:`Outcome`, and return that. An attempt ending in an Outcome draws on its budget:
    once spent, its ``on_spent()`` is raised; otherwise ``sleep(n)`` runs before the next
    attempt (``n``: the budget's waits so far, from 0; AGAIN never waits).

    An outcome without a budget is a bug of the caller: :class:`KeyError`.
    """
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
