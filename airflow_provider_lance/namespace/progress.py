"""Progress of long work: the callback type the public API takes, and how fan-outs reach it.

A long operation (``write``, ``to_table``, ``maintain``, ...) runs its ``progress=``
callback inside :func:`reporting`, which makes it the current thread's; every fan-out over
leaf tables (``Storage.map``, ``Storage.ahead``) reports ``Progress(done, total, what)`` on
that thread, at most every :data:`INTERVAL` seconds and at its end, never from a worker.
A callback that raises is logged once and not called again (a publish never fails because
its progress display did).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

log = logging.getLogger(__name__)

#: Seconds between two reports of one fan-out (its last one is always reported).
INTERVAL = 0.25

T = TypeVar("T")


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` items (partitions, leaf tables) of one step of an operation,
    named by ``what`` (e.g. ``"write: leaves"``); each step counts from 0."""

    done: int
    total: int
    what: str

    @property
    def fraction(self) -> float:
        """``done / total`` (1.0 for an empty step)."""
        return self.done / self.total if self.total else 1.0


#: What ``progress=`` takes: called with each :class:`Progress` report.
ProgressCallback = Callable[[Progress], None]


class Reporter:
    """The current operation's callback; once it raises, logged and never called again."""

    def __init__(self, callback: ProgressCallback, operation: str) -> None:
        self._callback: ProgressCallback | None = callback
        self.operation = operation

    def report(self, done: int, total: int, step: str | None = None) -> None:
        callback = self._callback
        if callback is None:
            return
        what = self.operation if not step else f"{self.operation}: {step}"
        try:
            callback(Progress(done, total, what))
        except Exception as exc:
            self._callback = None
            log.warning("the progress callback raised %r: it is not called again", exc)


_current = threading.local()


def check_callback(callback: object) -> None:
    """Refuse a ``progress`` that cannot be called, before any work starts."""
    if callback is not None and not callable(callback):
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"progress must be a callable taking a Progress (or None), got {callback!r}"
        )


def current() -> Reporter | None:
    """The reporter of the operation running on this thread (None: nobody asked)."""
    return getattr(_current, "reporter", None)


@contextmanager
def reporting(callback: ProgressCallback | None, operation: str) -> Iterator[None]:
    """Run the enclosed work with ``callback`` as this thread's (None: leave the
    enclosing operation's)."""
    if callback is None:
        yield
        return
    check_callback(callback)
    before = current()
    _current.reporter = Reporter(callback, operation)
    try:
        yield
    finally:
        _current.reporter = before


def iterate_reporting(
    callback: ProgressCallback | None, operation: str, items: Iterator[T]
) -> Iterator[T]:
    """``items``, each taken inside :func:`reporting` (a lazy read's batches)."""
    if callback is None:
        yield from items
        return
    while True:
        with reporting(callback, operation):
            try:
                item = next(items)
            except StopIteration:
                return
        yield item


class Ticker:
    """Reports one fan-out of ``total`` (2 or more) items: 0 at its start, :meth:`tick`
    at most every :data:`INTERVAL`, :meth:`finish` at its end."""

    def __init__(self, reporter: Reporter | None, total: int, step: str | None) -> None:
        self.reporter = reporter if total > 1 else None
        self.total = total
        self.step = step
        self._last_done = -1
        self._last_at = time.monotonic()
        if self.reporter is not None:
            self._send(0)

    def tick(self, done: int) -> None:
        if self.reporter is None or done == self._last_done:
            return
        if time.monotonic() - self._last_at >= INTERVAL:
            self._send(done)

    def finish(self, done: int) -> None:
        if self.reporter is not None and done != self._last_done:
            self._send(done)

    def _send(self, done: int) -> None:
        assert self.reporter is not None
        self._last_done, self._last_at = done, time.monotonic()
        self.reporter.report(done, self.total, self.step)
