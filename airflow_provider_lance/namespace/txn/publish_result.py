"""What a publish reports, built here whichever path published it (claim protocol, direct
write and its hand-over, table operations): a retried commit, a committer taken over and a
result rebuilt after a crash then say what the publish itself said, above all which
partitions it created (one definition: :func:`commit_result`). The types stay in
:mod:`.results`, which reads no ``__manifest`` (history and time travel use them too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.txn_row import TxnRecord, TxnState
from airflow_provider_lance.namespace.results import (
    CommitResult,
    OperationResult,
    PartitionCommit,
    PartitionOutcome,
)
from airflow_provider_lance.namespace.write.staging import StagedPartition

from .lifecycle import load_records


def commit_result(
    version: int,
    mode: str,
    txn_id: str | None,
    partitions: Mapping[str, StagedPartition],
    read_versions: Mapping[str, int],
    before: Mapping[str, int | None],
) -> CommitResult:
    """The result of publishing ``partitions`` as manifest ``version`` with
    ``read_versions``. ``before``: their ``read_version``\\ s before the swap (absent: no
    row). A partition is created when it had no published version before, as
    :mod:`.history` says too: a row the seal inserted unpublished is created by the publish.
    """
    return CommitResult(
        version,
        mode,
        [
            PartitionCommit(oid, p.values, int(read_versions[oid]), p.rows, before.get(oid) is None)
            for oid, p in partitions.items()
        ],
        txn_id=txn_id,
    )


def empty_result(version: int, mode: str, txn_id: str | None) -> CommitResult:
    """The result of a publish that wrote nothing (no rows staged, or no plan)."""
    return CommitResult(version, mode, [], txn_id)


def rebuilt_result(
    load_state: Callable[..., NamespaceState],
    record: TxnRecord,
    mode: str,
    partitions: Mapping[str, StagedPartition] | None,
) -> CommitResult:
    """The result of the published transaction ``record`` when the publish's own is lost (a
    crash right after it, a record that does not read, a hand-over whose commit failed
    after the swap): ``partitions`` (a plan's, or the stage a writer holds; None: it had no
    plan) as published in the version where its row turned PUBLISHED, against the one
    before it."""
    version = published_at(load_state, record)
    if partitions is None:
        return empty_result(version, mode, record.txn_id)
    ids = list(partitions)
    after, before = (
        {r[OBJECT_ID]: r[READ_VERSION] for r in load_state(v).full_rows(ids).to_pylist()}
        for v in (version, version - 1)
    )
    return commit_result(version, mode, record.txn_id, partitions, after, before)


def operation_result(
    kind: str, changes: list[PartitionOutcome], txn_id: str | None, skipped: Mapping[str, str]
) -> OperationResult:
    """A table operation's result before its swap: ``manifest_version`` is set once the
    swap publishes (and stays None when there is nothing to publish)."""
    return OperationResult(kind, None, changes, txn_id, skipped)


def published_at(load_state: Callable[..., NamespaceState], record: TxnRecord) -> int:
    """The first ``__manifest`` version where ``record``'s row is PUBLISHED in its
    incarnation (a binary search: once published, a row stays so until collected)."""

    def published(version: int) -> bool:
        try:
            state = load_state(version)
        except LanceNamespaceError:  # cleaned up: long before the publish
            return False
        found = load_records(state, [record.txn_id]).get(record.txn_id)
        return (
            found is not None
            and found.incarnation == record.incarnation
            and found.state is TxnState.PUBLISHED
        )

    low, high = 1, load_state().version
    while low < high:
        mid = (low + high) // 2
        if published(mid):
            high = mid
        else:
            low = mid + 1
    return low
