"""A progress line on the terminal while a command works through many partitions.

Drawn on stderr, and only when stderr is a terminal and the command prints tables (not
``--json``): a pipe, a log file or a script sees nothing of it. The line is redrawn in
place (at most as often as the core reports, four times a second), cleared before any log
line is printed, and cleared when the command ends, however it ends.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from airflow_provider_lance.namespace import Progress, ProgressCallback

#: Erase the line the cursor is on and go back to its start (ANSI: every terminal the
#: command line runs in reads it).
CLEAR = "\r\x1b[K"


class ProgressLine:
    """Draws ``what: done/total (percent)`` over itself on a terminal stream."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = False

    def __call__(self, progress: Progress) -> None:
        percent = int(100 * progress.fraction)
        self.stream.write(
            f"{CLEAR}{progress.what}: {progress.done:,}/{progress.total:,} ({percent}%)"
        )
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.shown = False


class _ClearFirst(logging.Filter):
    """Clears the progress line before a log record is printed under it."""

    def __init__(self, line: ProgressLine) -> None:
        super().__init__()
        self.line = line

    def filter(self, record: logging.LogRecord) -> bool:
        self.line.clear()
        return True


@contextmanager
def shown(args: argparse.Namespace) -> Iterator[ProgressCallback | None]:
    """The progress callback for a command (None when no line may be drawn), cleared
    when the command ends."""
    stream = sys.stderr
    json_output = bool(args.global_json or getattr(args, "json", False))
    if json_output or not stream.isatty():
        yield None
        return
    line = ProgressLine(stream)
    handlers = logging.getLogger().handlers
    guard = _ClearFirst(line)
    for handler in handlers:
        handler.addFilter(guard)
    try:
        yield line
    finally:
        line.clear()
        for handler in handlers:
            handler.removeFilter(guard)
