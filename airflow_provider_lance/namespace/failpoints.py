"""Named failpoints for crash-injection tests, enabled only by an environment variable.

``LANCE_PNS_FAILPOINTS="commit.after_claim=kill"`` makes the process kill itself with SIGKILL
when it reaches that point (``=raise`` raises :class:`FailpointError` instead). Several points
are separated by commas. Unset (always, outside tests), a failpoint costs one dict lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "LANCE_PNS_FAILPOINTS"


class FailpointError(RuntimeError):
    """Raised at a failpoint configured with ``=raise``."""


def _configured() -> dict[str, str]:
    raw = os.environ.get(ENV, "")
    out = {}
    for item in raw.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            out[name] = action or "raise"
    return out


def failpoint(name: str) -> None:
    """Crash here if the environment asks for it (see the module docstring)."""
    if ENV not in os.environ:
        return
    action = _configured().get(name)
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise FailpointError(f"failpoint {name}")
