"""The command line's progress line: drawn on a terminal's stderr, never in a pipe or with
``--json``. The terminal is a real pseudo-terminal the command's stderr is attached to."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import events

DAYS = 60
#: What the line draws with: erase the line, back to its start.
CLEAR = "\r\x1b[K"


def run(argv: list[str], *, terminal: bool) -> tuple[int, str, str]:
    """The command's exit code, stdout and stderr; its stderr a pseudo-terminal or a pipe."""
    command = [sys.executable, "-m", "airflow_provider_lance", *argv]
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        return done.returncode, done.stdout, done.stderr
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the command closed its end (EIO)
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    out = proc.stdout.read().decode() if proc.stdout else ""
    return proc.wait(timeout=300), out, b"".join(chunks).decode()


@pytest.fixture
def uri(daily: PartitionedNamespace) -> str:
    daily.write(events(DAYS * 4, days=DAYS))
    daily.write(events(DAYS, days=DAYS, first_id=10_000))
    return daily.uri


MAINTAIN = ["--sweep-orphans", "--orphan-min-age-hours", "0", "--no-enforce-min-age"]


def test_maintain_draws_its_progress_on_a_terminal(uri) -> None:
    code, out, err = run(["maintain", uri, "--older-than-hours", "0", *MAINTAIN], terminal=True)
    assert code == 0, err
    assert f"{CLEAR}maintain: leaf directories: " in err
    assert f"/{DAYS} (100%)" in err
    assert err.rfind(CLEAR) > err.rfind("(100%)")  # the last line drawn was cleared
    assert json.loads(out)["orphans"]["leaf_directories"] == DAYS


def test_head_draws_the_partitions_it_read(uri) -> None:
    code, out, err = run(["head", uri, "-n", "100000"], terminal=True)
    assert code == 0, err
    assert f"{CLEAR}read: " in err
    assert "10059" in out  # every row was read


@pytest.mark.parametrize("terminal", [False, True])
def test_no_progress_in_a_pipe_or_with_json(uri, terminal) -> None:
    """In a pipe nothing is drawn; on a terminal, ``--json`` draws nothing either."""
    argv = ["--json", "maintain", uri, *MAINTAIN] if terminal else ["maintain", uri, *MAINTAIN]
    code, out, err = run(argv, terminal=terminal)
    assert code == 0, err
    assert "\x1b[K" not in err
    assert "leaf directories:" not in err
    json.loads(out)


def test_a_log_line_is_not_drawn_over(uri, tmp_path: Path) -> None:
    """``delete`` logs a summary line at its end (INFO, on stderr): the progress line is
    cleared before it, so the log line starts a line of its own."""
    code, _, err = run(["delete", uri, "id % 2 = 0"], terminal=True)
    assert code == 0, err
    assert f"{CLEAR}delete: " in err
    summary = next(line for line in err.splitlines() if "rows removed" in line)
    assert summary.replace(CLEAR, "").startswith("INFO "), repr(summary)
