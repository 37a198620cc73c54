"""Named failpoints for crash-injection and interleaving tests; off unless a test asks.

* Across processes, by environment: ``LANCE_PNS_FAILPOINTS="commit.after_claim=kill"``
  makes the process SIGKILL itself at that point; ``=raise`` raises
  :class:`FailpointError` (a simulated crash), ``=error`` an ``OSError`` (a simulated
  storage failure), ``=sleep:0.5`` sleeps; points are separated by commas.
* In one process, :func:`hold` parks a thread at the point until the test releases it::

      with hold("commit.before_publish") as point:
          worker = threading.Thread(target=ns.commit, args=("X",)); worker.start()
          point.wait_reached()
          ns.abort("X")          # runs while the commit is parked before its publish
      worker.join()

Unset, a failpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ENV = "LANCE_PNS_FAILPOINTS"


class FailpointError(BaseException):
    """A simulated crash (``=raise``): no ``Exception``, so no error handler runs for it,
    as none would in a process killed there."""


class Hold:
    """A point where threads stop until released (see :func:`hold`)."""

    def __init__(self, name: str, times: int | None, when: Callable[[], bool] | None) -> None:
        self.name, self._remaining, self._when = name, times, when
        self._reached, self._released = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self.hits = 0

    def _arrive(self) -> None:
        with self._lock:
            if self._remaining == 0 or (self._when is not None and not self._when()):
                return
            if self._remaining is not None:
                self._remaining -= 1
            self.hits += 1
        self._reached.set()
        if not self._released.wait(timeout=120):
            raise FailpointError(f"failpoint {self.name} was held for 120 s and never released")

    def wait_reached(self, timeout: float = 60.0) -> None:
        """Block until a thread is parked at the point (an error after ``timeout``)."""
        if not self._reached.wait(timeout):
            raise FailpointError(f"no thread reached failpoint {self.name} in {timeout} s")

    def release(self) -> None:
        self._released.set()


_holds: dict[str, Hold] = {}
_holds_lock = threading.Lock()


@contextmanager
def hold(
    name: str, *, times: int | None = 1, when: Callable[[], bool] | None = None
) -> Iterator[Hold]:
    """Park the first ``times`` threads (None: all) that reach ``name`` and for which
    ``when`` (if given) returns True; released and removed on exit."""
    point = Hold(name, times, when)
    with _holds_lock:
        if name in _holds:
            raise RuntimeError(f"failpoint {name} is already held")
        _holds[name] = point
    try:
        yield point
    finally:
        point.release()
        with _holds_lock:
            _holds.pop(name, None)


def _configured() -> dict[str, str]:
    items = (item.strip().partition("=") for item in os.environ.get(ENV, "").split(","))
    return {name: action or "raise" for name, _, action in items if name}


def failpoint(name: str) -> None:
    """Crash, raise, sleep or wait here if a test asks for it (see the module docstring)."""
    if _holds and (point := _holds.get(name)) is not None:
        point._arrive()
    if ENV not in os.environ:
        return
    action = _configured().get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise FailpointError(f"failpoint {name}")
    elif action == "error":
        raise OSError(f"injected failure at failpoint {name}")
    elif action is not None and action.startswith("sleep:"):
        time.sleep(float(action.removeprefix("sleep:")))
