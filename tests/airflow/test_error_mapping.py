"""Retry or fail: the error classes decide (``is_retryable``), every Airflow path follows.

Real errors from real operations where one can be provoked cheaply (an object store on a
closed loopback port, a namespace on disk); the class-wide checks build each class once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_lance.common import lance_errors
from airflow_provider_lance.hooks.connection import LanceConnectionConfig, LanceConnectionError
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.errors import (
    DataValidationError,
    LanceNamespaceError,
    StorageAccessError,
    StorageError,
    TransactionAborted,
    is_retryable,
)
from tests.support import EVENTS_SCHEMA, UNREACHABLE_OPTIONS, events

PROJECT_ERRORS = [cls for _, cls in sorted(project_errors.error_classes().items())]


def raised_by(action: Any) -> BaseException:
    try:
        action()
    except BaseException as exc:
        return exc
    raise AssertionError(f"{action} raised nothing")


def mapped(exc: BaseException, action: str = "doing it") -> BaseException:
    """What ``lance_errors`` turns ``exc`` into."""

    def fail() -> None:
        with lance_errors(action):
            raise exc

    return raised_by(fail)


# -- lance_errors ---------------------------------------------------------------------------
@pytest.mark.usefixtures("no_aws_environment")
def test_an_unreachable_store_is_retryable() -> None:
    exc = raised_by(lambda: PartitionedNamespace.open("s3://bucket/x", UNREACHABLE_OPTIONS))
    assert isinstance(exc, StorageError)
    failure = mapped(exc, "pruning s3://bucket/x")
    assert type(failure) is AirflowException  # the task's retries apply
    assert not isinstance(failure, AirflowFailException)
    assert str(failure).startswith(
        "pruning s3://bucket/x failed: StorageError: cannot read the __manifest of s3://bucket/x"
    )
    assert failure.__cause__ is None
    assert failure.__suppress_context__


def test_bad_data_fails_the_task_at_once(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    exc = raised_by(lambda: ns.write(events(3).append_column("nope", pa.array([1, 2, 3]))))
    assert isinstance(exc, DataValidationError)
    failure = mapped(exc, "writing")
    assert isinstance(failure, AirflowFailException)
    assert str(failure) == f"writing failed: DataValidationError: {exc}"


def test_an_aborted_transaction_fails_the_task_at_once(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema=EVENTS_SCHEMA, partition_fields=[PartitionField("d", "event_date")]
    )
    txn = ns.begin("append", txn_id="doomed")
    txn.stage(events(4), stage_id="w")
    ns.abort("doomed")
    exc = raised_by(lambda: ns.commit("doomed"))
    assert type(exc).__name__ == "TransactionAborted"
    assert isinstance(exc, LanceNamespaceError)
    assert not is_retryable(exc)
    failure = mapped(exc, "commit of ['doomed']")
    assert isinstance(failure, AirflowFailException)
    assert str(failure).startswith("commit of ['doomed'] failed: TransactionAborted: ")
    # the class the errors module defines, raised as such
    failure = mapped(TransactionAborted("transaction t was aborted"), "commit of ['t']")
    assert isinstance(failure, AirflowFailException)
    assert str(failure) == "commit of ['t'] failed: TransactionAborted: transaction t was aborted"


def test_a_malformed_connection_fails_the_task_at_once() -> None:
    exc = raised_by(
        lambda: LanceConnectionConfig.from_fields(extras={"root": "/x", "storage_options": "{"})
    )
    assert isinstance(exc, LanceConnectionError)
    assert isinstance(exc, ValueError)
    assert isinstance(mapped(exc), AirflowFailException)


@pytest.mark.parametrize("cls", PROJECT_ERRORS, ids=lambda cls: cls.__name__)
def test_every_project_error_maps_by_its_class(cls: type[LanceNamespaceError]) -> None:
    failure = mapped(cls("boom"), "acting")
    assert isinstance(failure, AirflowException)
    assert isinstance(failure, AirflowFailException) is (not cls.retryable)
    assert str(failure).startswith(f"acting failed: {cls.__name__}: boom")


def test_other_exceptions_pass_through_unchanged() -> None:
    error = RuntimeError("not ours")
    assert mapped(error) is error


# -- bad paths (issue 25) -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["plain-file", "unknown-scheme"])
def test_a_bad_path_fails_the_task_at_once(tmp_path: Path, kind: str) -> None:
    """A plain file or a scheme no store serves is no storage outage: no retry is burnt."""
    plain = tmp_path / "events.parquet"
    plain.write_bytes(b"PAR1")
    uri = str(plain) if kind == "plain-file" else "foo://bucket/events"
    exc = raised_by(lambda: PartitionedNamespace.open(uri))
    assert isinstance(exc, StorageAccessError)
    failure = mapped(exc, f"pruning {uri}")
    assert isinstance(failure, AirflowFailException)
    assert str(failure).startswith(f"pruning {uri} failed: StorageAccessError: cannot read")
    assert ".rs:" not in str(failure)
    assert plain.read_bytes() == b"PAR1"
