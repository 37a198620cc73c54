"""Failpoints, the public face of :mod:`.failpoints` (which describes them): where tests
crash, fail or park the core at its named points (``commit.after_claim``, ...), and where
code outside the core calls its own (the Spark writer's ``spark.task.staged.attempt<N>``).
"""

from __future__ import annotations

from .failpoints import ENV, FailpointError, Hold, failpoint, hold

__all__ = ["ENV", "FailpointError", "Hold", "failpoint", "hold"]
