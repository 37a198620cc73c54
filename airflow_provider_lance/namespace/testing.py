"""Failpoints: where tests crash, fail or park the core at its named points.

The core calls :func:`failpoint` at named points of its protocols (``commit.after_claim``,
``read.resolved``, ...); they do nothing unless a test asks:

* across processes, by environment: ``LANCE_PNS_FAILPOINTS="commit.after_claim=kill"``
  (:data:`ENV`) makes the process kill itself when it reaches that point; ``=raise``
  raises :class:`FailpointError` (a simulated crash), ``=error`` an ``OSError`` (a
  simulated storage failure), ``=sleep:0.5`` sleeps; several points are separated by
  commas;
* inside one process, :func:`hold` parks the threads that reach a point until the test
  releases them, so that another operation runs at exactly that moment.

Code outside the core that has a point of its own (the Spark writer's
``spark.task.staged.attempt<N>``) calls :func:`failpoint` from here.
"""

from __future__ import annotations

from .failpoints import ENV, FailpointError, Hold, failpoint, hold

__all__ = ["ENV", "FailpointError", "Hold", "failpoint", "hold"]
