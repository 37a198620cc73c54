"""Bad paths and storage options as users write them (issue 25).

A namespace URI through a plain file, with a scheme no object store serves, or where access
is denied is a permanent error (:class:`StorageAccessError`, not retryable, CLI exit 2) whose
message says what to do and carries no Rust source locations; storage options written the
Python way (booleans, numbers) are accepted, other values refused naming the option.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace.errors import (
    LanceNamespaceError,
    StorageAccessError,
    StorageError,
    is_retryable,
)
from tests.support import EVENTS_SCHEMA, UNREACHABLE_OPTIONS, events, tree

REPO = Path(__file__).resolve().parents[3]
BY_DAY = [PartitionField("event_date", "event_date")]
#: A Rust source location as Lance appends it (``..., /home/runner/.../object_store.rs:1576:42``).
RUST_LOCATION = re.compile(r"\.rs:\d+|/home/runner/|\.cargo/")


def raised_by(action: Callable[[], object]) -> BaseException:
    try:
        action()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{action} raised nothing")


def assert_permanent(exc: BaseException, *words: str) -> None:
    """A permanent project error whose message says what to do, not where Lance failed."""
    assert isinstance(exc, StorageAccessError), repr(exc)
    assert not is_retryable(exc)
    assert cli.exit_code(exc) == 2
    assert not RUST_LOCATION.search(str(exc)), str(exc)
    for word in words:
        assert word in str(exc), str(exc)


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS settings or proxies from the environment (only the given options count)."""
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


# -- a plain file, an unknown scheme ----------------------------------------------------------
@pytest.fixture
def plain_file(tmp_path: Path) -> Path:
    path = tmp_path / "events.csv"
    path.write_text("id,event_date\n1,2025-12-01\n")
    return path


@pytest.mark.parametrize("below", [False, True], ids=["the-file", "below-the-file"])
def test_a_plain_file_is_a_permanent_error(plain_file: Path, below: bool) -> None:
    uri = plain_file / "ns" if below else plain_file
    for action in (
        lambda: PartitionedNamespace.open(uri),
        lambda: PartitionedNamespace.create(uri, EVENTS_SCHEMA, BY_DAY),
        lambda: PartitionedNamespace.exists(uri),
    ):
        assert_permanent(raised_by(action), "plain file, not a directory")
    assert plain_file.read_text() == "id,event_date\n1,2025-12-01\n"


def test_an_unknown_scheme_is_a_permanent_error() -> None:
    for action in (
        lambda: PartitionedNamespace.open("foo://x/events"),
        lambda: PartitionedNamespace.create("foo://x/events", EVENTS_SCHEMA, BY_DAY),
    ):
        assert_permanent(raised_by(action), "no object store serves foo://", "s3://")


@pytest.mark.parametrize("command", ["describe", "prune", "history", "transactions"])
def test_the_cli_exits_2_for_bad_paths(
    plain_file: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for uri in (str(plain_file), "foo://x/events"):
        argv = [command, uri] + (["event_date > DATE '2025-01-01'"] if command == "prune" else [])
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: cannot read the __manifest of ")
        assert not RUST_LOCATION.search(err[-1]), err[-1]


@pytest.mark.usefixtures("no_aws_environment")
def test_an_unreachable_store_stays_retryable() -> None:
    """The other side of the line: a store nobody answers may answer later."""
    exc = raised_by(lambda: PartitionedNamespace.open("s3://bucket/x", UNREACHABLE_OPTIONS))
    assert type(exc) is StorageError
    assert is_retryable(exc)
    assert cli.exit_code(exc) == 1
    assert not RUST_LOCATION.search(str(exc)), str(exc)


# -- permission problems ------------------------------------------------------------------------
def unprivileged() -> list[str]:
    """A command prefix that runs without the privileges that ignore file permissions: none
    for a normal user; for root, ``setpriv`` dropping every capability."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file permissions cannot be provoked")
    return ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--"]


PROBE = """
import json, sys
import pyarrow as pa
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.errors import is_retryable
schema = pa.schema([("id", pa.int64()), ("event_date", pa.date32())])
out = {}
try:
    if sys.argv[1] == "create":
        PartitionedNamespace.create(sys.argv[2], schema, [PartitionField("d", "event_date")])
    elif sys.argv[1] == "write":
        PartitionedNamespace.open(sys.argv[2]).write(
            pa.table({"id": [9], "event_date": pa.array([20000], pa.int32()).cast(pa.date32())})
        )
    else:
        PartitionedNamespace.open(sys.argv[2])
except Exception as exc:
    out = {"class": type(exc).__name__, "retryable": is_retryable(exc), "message": str(exc)}
print(json.dumps(out))
"""


def run_unprivileged(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*unprivileged(), sys.executable, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "LANCE_LOG": "error"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def locked(tmp_path: Path) -> Iterator[Path]:
    """A namespace with rows, and a directory, both readable by nobody but root's
    capabilities (restored afterwards, so that pytest can clean up)."""
    ns = PartitionedNamespace.create(tmp_path / "ns", EVENTS_SCHEMA, BY_DAY)
    ns.write(events(6))
    (tmp_path / "read-only").mkdir()
    yield tmp_path
    for path in (tmp_path, *tmp_path.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)


@pytest.mark.parametrize(
    ("action", "path", "mode"),
    [
        ("open", "ns", 0o000),
        ("create", "read-only/ns", 0o555),
        ("write", "ns", 0o555),
    ],
)
def test_a_permission_problem_is_a_permanent_error(
    locked: Path, action: str, path: str, mode: int
) -> None:
    target = locked / path
    locked_dir = target if action != "create" else target.parent
    before = tree(locked)
    dirs = [locked_dir, *(p for p in locked_dir.rglob("*") if p.is_dir())]
    for d in sorted(dirs, key=lambda p: -len(p.parts)):  # children first, then the parent
        d.chmod(mode)
    done = run_unprivileged("-c", PROBE, action, str(target))
    for d in dirs:
        d.chmod(0o755)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["class"] == "StorageAccessError", out
    assert out["retryable"] is False
    assert "permission denied" in out["message"]
    assert "read and write access" in out["message"]
    assert not RUST_LOCATION.search(out["message"]), out["message"]
    assert tree(locked) == before  # nothing written


def test_the_cli_exits_2_for_a_permission_problem(locked: Path) -> None:
    (locked / "ns").chmod(0o000)
    try:
        done = run_unprivileged("-m", "airflow_provider_lance", "describe", str(locked / "ns"))
    finally:
        (locked / "ns").chmod(0o755)
    assert done.returncode == 2, (done.returncode, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cannot read the __manifest of ")
    assert "permission denied" in last
    assert not RUST_LOCATION.search(last), last


# -- storage options ------------------------------------------------------------------------
def test_booleans_and_numbers_are_accepted_as_storage_options(tmp_path: Path) -> None:
    options = {
        "allow_http": True,
        "timeout": 30,
        "client_max_retries": 2,
        "unset": None,
        "connect_timeout": "2m",  # text passes through as it is
    }
    ns = PartitionedNamespace.create(tmp_path / "ns", EVENTS_SCHEMA, BY_DAY, options)
    ns.write(events(9))
    again = PartitionedNamespace.open(tmp_path / "ns", options)
    assert again.count_rows() == 9
    assert again.storage_options == {
        "allow_http": "true",
        "timeout": "30s",
        "client_max_retries": "2",
        "connect_timeout": "2m",
    }


@pytest.mark.usefixtures("no_aws_environment")
def test_python_storage_options_reach_an_object_store() -> None:
    """A number for a duration option is seconds (object_store parses ``"30"`` as no
    duration): the call gets as far as the network, which nobody answers."""
    options = {
        **UNREACHABLE_OPTIONS,
        "allow_http": True,
        "timeout": 30,
        "connect_timeout": 1.5,
        "client_max_retries": 0,
    }
    exc = raised_by(lambda: PartitionedNamespace.open("s3://bucket/x", options))
    assert type(exc) is StorageError, repr(exc)  # unreachable: retryable, not a config error
    assert "Duration" not in str(exc)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"aws_region": ["eu-west-1"]}, "storage option 'aws_region' must be a string"),
        ({"timeout": float("nan")}, "storage option 'timeout' must be a string"),
        ({1: "x"}, "storage option names must be strings"),
        ({"timeout": -5}, "storage option 'timeout' is a duration"),
        ("allow_http=true", "storage options must be a mapping"),
    ],
)
def test_other_storage_option_values_are_refused_naming_the_option(
    tmp_path: Path, options: object, words: str
) -> None:
    exc = raised_by(
        lambda: PartitionedNamespace.create(tmp_path / "ns", EVENTS_SCHEMA, BY_DAY, options)  # type: ignore[arg-type]
    )
    assert isinstance(exc, InvalidArgumentError), repr(exc)
    assert isinstance(exc, LanceNamespaceError)
    assert words in str(exc)
    assert not (tmp_path / "ns").exists()


def test_a_refused_storage_option_value_is_not_echoed(tmp_path: Path) -> None:
    """The value of a refused option may be a secret: the message names the option only."""
    options = {"aws_secret_access_key": ["s3cr3t"]}
    exc = raised_by(
        lambda: PartitionedNamespace.create(tmp_path / "ns", EVENTS_SCHEMA, BY_DAY, options)
    )  # type: ignore[arg-type]
    assert isinstance(exc, InvalidArgumentError), repr(exc)
    assert "storage option 'aws_secret_access_key' must be a string" in str(exc)
    assert "s3cr3t" not in str(exc)
    assert not (tmp_path / "ns").exists()


@pytest.mark.usefixtures("no_aws_environment")
def test_a_storage_option_the_store_cannot_parse_is_a_permanent_error() -> None:
    options = {**UNREACHABLE_OPTIONS, "timeout": "thirty"}
    exc = raised_by(lambda: PartitionedNamespace.open("s3://bucket/x", options))
    assert_permanent(exc, "thirty", "'30s'")
