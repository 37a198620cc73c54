"""Every command ends without a traceback, whatever goes wrong (issue 39).

A project error prints its message and exits 2 (no retry can help: bad input, a read-only
or denied store) or 1 (a retry may); anything unexpected prints one line naming it and how
to see its traceback; a reader that goes away (``| head``) ends the command quietly; bad
input nobody listed (a negative lease, NaN hours, non-UTF-8 arguments, ``--json`` on the
demo, an empty stdin) is refused naming it. Run as a user runs it: a child process, the
console entry point, a read-only mount where a store must refuse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.namespace.io.failing_stores import (
    CLOBBERED,
    NAMESPACE,
    prepare,
    read_only_mount,
    run,
)
from tests.support import EVENTS_SCHEMA, events

#: Every command that writes, as a user types it on a namespace ``prepare`` made.
WRITING_COMMANDS = [
    ["delete", NAMESPACE, "id = 1"],
    ["delete", NAMESPACE, "event_date = DATE '2025-12-10'"],
    ["drop-partitions", NAMESPACE, "event_date = DATE '2025-12-10'"],
    ["optimize", NAMESPACE],
    ["maintain", NAMESPACE],
    ["maintain", NAMESPACE, "--older-than-hours", "0"],
    [
        "maintain",
        NAMESPACE,
        "--sweep-orphans",
        "--orphan-min-age-hours",
        "0",
        "--no-enforce-min-age",
    ],
    ["recover", NAMESPACE, "--lease-seconds", "0"],
    ["tag", "create", NAMESPACE, "eod"],
    ["tag", "delete", NAMESPACE, "kept"],
    ["repair", CLOBBERED],
]

#: Runs each command of argv lists (JSON) through ``main`` in one process: its exit code and
#: what it printed on stderr, or what it raised.
RUN_EACH = """
import contextlib, io, json, logging, sys
from airflow_provider_lance import cli
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = cli.main(argv)
    except BaseException as exc:
        code = f"raised {type(exc).__name__}: {exc}"
    out.append([code, err.getvalue()])
print(json.dumps(out))
"""


def lance_partitioned(*args: str, stdin: bytes | None = None, **env: str) -> Any:
    """The console entry point in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_lance", *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_writing_commands_on_a_read_only_store_exit_2_saying_why(tmp_path: Path) -> None:
    prepare(str(tmp_path))
    argvs = [
        [str(tmp_path / a) if a in (NAMESPACE, CLOBBERED) else a for a in argv]
        for argv in WRITING_COMMANDS
    ]
    done = run(read_only_mount(tmp_path), "-c", RUN_EACH, json.dumps(argvs))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for argv, (code, err) in zip(WRITING_COMMANDS, results, strict=True):
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert code == 2, (argv, code, err[-2000:])
        assert last.startswith("error: cannot "), (argv, last)
        assert "the file system is read-only; choose a path on a writable one" in last, argv
        assert "Traceback" not in err, argv


@pytest.fixture
def daily_ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        tmp_path / "events", EVENTS_SCHEMA, [PartitionField("event_date", "event_date")]
    )
    ns.write(events(30))
    return ns


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_an_unexpected_error_is_one_line_saying_how_to_see_its_traceback(
    daily_ns: PartitionedNamespace,
) -> None:
    """A data file damaged on disk: pyarrow's error, which no project error wraps."""
    data = next(Path(daily_ns.partitions()[0].location.removeprefix("file://")).glob("data/*"))
    data.write_bytes(b"garbage")
    done = lance_partitioned("head", daily_ns.uri, "-n", "100")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert line.startswith("error: unexpected ArrowInvalid: "), line
    assert line.endswith(
        "(run again with --debug, or LANCE_PARTITIONED_DEBUG=1, for the traceback; please "
        "report it)"
    ), line
    for debug in (["--debug"], []):
        env = {} if debug else {cli.DEBUG_ENV: "1"}
        done = lance_partitioned("head", daily_ns.uri, "-n", "100", *debug, **env)
        assert done.returncode == 1
        assert b"Traceback (most recent call last)" in done.stderr


def test_a_reader_that_went_away_ends_the_command_quietly(daily_ns: PartitionedNamespace) -> None:
    """``lance-partitioned describe URI | head -2``, with ``head`` gone before the first
    write: the pipe's read end is closed from the start."""
    for command in (["describe"], ["head"], ["prune", "--json"], ["history"]):
        read, write = os.pipe()
        os.close(read)
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "airflow_provider_lance",
                    command[0],
                    daily_ns.uri,
                    *command[1:],
                ],
                stdout=write,
                stderr=subprocess.PIPE,
                timeout=300,
            )
        finally:
            os.close(write)
        assert done.returncode == cli.EXIT_BROKEN_PIPE == 141, (command, done.stderr)
        assert done.stderr == b"", command


def test_ctrl_c_ends_the_command_without_a_traceback(
    daily_ns: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT while ``maintain`` waits at a failpoint (no timing: the signal is sent once the
    command is parked there), with Python's own SIGINT handler, as the command's process has
    it (a SparkContext or an Airflow task run earlier on this worker may have put theirs)."""
    import signal
    import threading

    from airflow_provider_lance.namespace.testing import hold

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    with hold("maintain.before_live_stages") as point:

        def interrupt() -> None:
            point.wait_reached()
            # To the main thread, which is parked: a signal to the process may be taken by
            # another thread (Lance's runtime has several), and then the parked wait only
            # ends at the failpoint's 120 s timeout (it did, once in a few everyday runs).
            main = threading.main_thread().ident
            assert main is not None
            signal.pthread_kill(main, signal.SIGINT)

        thread = threading.Thread(target=interrupt)
        thread.start()
        try:
            code = cli.main(["maintain", daily_ns.uri, "--older-than-hours", "0"])
        finally:
            signal.signal(signal.SIGINT, previous)
        thread.join()
    assert code == cli.EXIT_INTERRUPTED == 130
    assert capsys.readouterr().err.splitlines()[-1] == "interrupted"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["recover", "{uri}", "--lease-seconds", "-5"], "'-5' is not a number of at least 0"),
        (["maintain", "{uri}", "--older-than-hours", "nan"], "'nan' is not a number of at least"),
        (
            ["maintain", "{uri}", "--sweep-orphans", "--orphan-min-age-hours", "inf"],
            "'inf' is not a number of at least 0",
        ),
        (["head", "{uri}", "--columns", ""], "--columns '' names no column"),
        (["describe", "{uri}", "--as-of", " "], "argument --as-of: is empty: give a __manifest"),
        (["--json", "demo", "{path}-demo"], "demo prints a walkthrough for people, not JSON"),
        (["demo", "s3://bucket/demo"], "the demo makes a local directory, not one on s3://"),
    ],
)
def test_bad_numbers_and_flags_are_refused_before_anything_runs(
    daily_ns: PartitionedNamespace, argv: list[str], says: str
) -> None:
    """A negative lease aborted every transaction (running ones too); NaN hours ended in a
    ValueError traceback; an empty ``--columns`` read every column, an empty ``--as-of``
    looked for a tag named ''; ``--json demo`` printed text a script could not parse; a
    demo on ``file:///x`` made a directory named ``file:``."""
    version = daily_ns.version
    path = daily_ns.uri.removeprefix("file://")
    done = lance_partitioned(*[a.format(uri=daily_ns.uri, path=path) for a in argv])
    assert done.returncode == 2
    assert says in done.stderr.decode().strip().splitlines()[-1]
    assert PartitionedNamespace.open(daily_ns.uri).version == version


def test_arguments_that_are_not_utf8_are_refused_naming_the_byte(
    daily_ns: PartitionedNamespace,
) -> None:
    """A path or filter from bytes that are not UTF-8 (a shell in Latin-1): a URI was a
    retryable storage error (exit 1), a filter an encoder's message."""
    for argv in (
        [os.fsencode(daily_ns.uri) + b"\xff"],
        [os.fsencode(daily_ns.uri), b"country = '\xe9'"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "airflow_provider_lance", b"prune", *argv],
            capture_output=True,
            timeout=300,
        )
        assert done.returncode == 2
        last = done.stderr.decode().strip().splitlines()[-1]
        assert "is not UTF-8 text (byte 0x" in last, last
        assert "give paths, filters and names in UTF-8" in last


def test_merge_reads_stdin_and_says_when_it_is_empty(
    daily_ns: PartitionedNamespace, tmp_path: Path
) -> None:
    done = lance_partitioned("merge", daily_ns.uri, "-", "--on", "id", stdin=b"")
    assert done.returncode == 2
    assert one_line(done.stderr).startswith("error: stdin is empty: pipe a Parquet file in")
    done = lance_partitioned("merge", daily_ns.uri, str(tmp_path / "nope.parquet"), "--on", "id")
    assert done.returncode == 2
    assert one_line(done.stderr) == f"error: there is no file {tmp_path / 'nope.parquet'}"
    rows = events(2, first_id=500)
    path = tmp_path / "rows.parquet"
    pq.write_table(rows, path)
    done = lance_partitioned(
        "merge", daily_ns.uri, "-", "--on", "id", "--on", "event_date", stdin=path.read_bytes()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows_inserted"] == 2
    assert PartitionedNamespace.open(daily_ns.uri).count_rows() == 32


def test_every_command_prints_json_lines_with_json(
    daily_ns: PartitionedNamespace, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    uri = daily_ns.uri
    update = tmp_path / "update.parquet"
    pq.write_table(events(1, first_id=900), update)
    for argv in (
        ["describe", uri],
        ["head", uri],
        ["prune", uri],
        ["history", uri],
        ["transactions", uri],
        ["verify", uri],
        ["repair", uri],
        ["recover", uri],
        ["tag", "create", uri, "t1"],
        ["tag", "list", uri],
        ["tag", "delete", uri, "t1"],
        ["delete", uri, "id = 1"],
        ["drop-partitions", uri, "event_date = DATE '2025-12-12'"],
        ["merge", uri, str(update), "--on", "id", "--on", "event_date"],
        ["optimize", uri],
        ["create-index", uri, "id", "BTREE"],
        ["indices", uri],
        ["optimize-indices", uri],
        ["drop-index", uri, "id_idx"],
        ["maintain", uri, "--older-than-hours", "0"],
    ):
        code = cli.main([*argv, "--json"])
        out = capsys.readouterr().out
        assert code == 0, argv
        assert out.strip() or argv[0] == "transactions", argv  # none: no lines
        for line in out.splitlines():
            json.loads(line)  # every line is a JSON document


def test_the_demo_takes_a_file_uri_as_its_path() -> None:
    """``demo file:///x/events`` made a directory named ``file:`` in the working directory."""
    args = cli.build_parser().parse_args(["demo", "file:///tmp/demo%20events"])
    assert args.directory == Path("/tmp/demo events")
