"""A store that refuses writes is a permanent error in every operation (issue 39).

One class for one failure, whichever operation meets it: a read-only file system, a
directory the user may not write and S3 credentials that may only read each make every
operation that writes (writes, transactions, table operations, maintenance and the orphan
sweep, recovery, tags, schema and spec evolution, repair) raise
:class:`StorageAccessError`: not retryable, exit code 2, a message saying what to fix and
no Rust source location. Before, ``delete`` and ``maintain`` raised Lance's ``OSError``
(retryable), a version cleanup that could delete nothing reported success, and ``tag``
raised a retryable :class:`StorageError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import StorageAccessError
from tests.namespace.io.failing_stores import (
    ALL,
    BY_DAY,
    SCHEMA,
    ReadOnlyS3,
    attempt,
    attempt_in_child,
    denied,
    prepare,
    read_only_mount,
    without_privileges,
)
from tests.support import moto_s3, tree

RUST_LOCATION = re.compile(r"\.rs:\d+|/home/runner/|\.cargo/")


def assert_all_permanent(found: dict, words: str) -> None:
    wrong = {name: got for name, got in found.items() if got["class"] != "StorageAccessError"}
    assert not wrong, wrong
    for name, got in found.items():
        assert got["retryable"] is False, name
        assert words in got["message"], (name, got["message"])
        assert not RUST_LOCATION.search(got["message"]), (name, got["message"])
    assert set(found) == set(ALL)


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    prepare(str(tmp_path))
    return tmp_path


def test_every_operation_on_a_read_only_file_system_is_permanent(prepared: Path) -> None:
    before = tree(prepared)
    found = attempt_in_child(read_only_mount(prepared), prepared, ALL)
    assert_all_permanent(found, "the file system is read-only; choose a path on a writable one")
    assert tree(prepared) == before


def test_every_operation_in_a_directory_the_user_may_not_write_is_permanent(
    prepared: Path,
) -> None:
    before = tree(prepared)
    with denied(prepared):
        found = attempt_in_child(without_privileges(), prepared, ALL)
    assert_all_permanent(found, "permission denied; give the user this runs as")
    assert tree(prepared) == before


@pytest.fixture
def no_aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS settings or proxies from the environment (only the given options count)."""
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.mark.s3
@pytest.mark.usefixtures("no_aws_environment")
def test_every_operation_with_read_only_s3_credentials_is_permanent() -> None:
    with moto_s3("read-only-ops") as options:
        prepare("s3://read-only-ops/wh", options)
        with ReadOnlyS3(options["aws_endpoint"]) as proxy:
            read_only = {**options, "aws_endpoint": proxy.endpoint}
            found = attempt("s3://read-only-ops/wh", ALL, read_only)
    assert proxy.refused
    assert_all_permanent(found, "the store refused access (no permission); check the credentials")


@pytest.mark.s3
@pytest.mark.usefixtures("no_aws_environment")
def test_a_bucket_that_does_not_exist_is_a_permanent_error() -> None:
    with moto_s3("some-bucket") as options:
        for action in (
            lambda: PartitionedNamespace.open("s3://no-such-bucket/wh", options),
            lambda: PartitionedNamespace.create("s3://no-such-bucket/wh", SCHEMA, BY_DAY, options),
        ):
            with pytest.raises(StorageAccessError, match="the bucket does not exist") as err:
                action()
            assert cli.exit_code(err.value) == 2


def test_a_path_that_is_not_utf8_is_a_permanent_error(tmp_path: Path) -> None:
    """A path from bytes that are not UTF-8 (``os.fsdecode`` keeps them as surrogates): no
    store takes it, so no retry can help (it was a retryable StorageError)."""
    path = os.fsdecode(os.fsencode(tmp_path) + b"/events\xff")
    for action in (
        lambda: PartitionedNamespace.open(path),
        lambda: PartitionedNamespace.create(path, SCHEMA, BY_DAY),
    ):
        with pytest.raises(StorageAccessError, match="the path is not UTF-8 text") as err:
            action()
        assert cli.exit_code(err.value) == 2
