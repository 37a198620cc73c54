"""What a publish reports, built here for every path, so that a retried commit, a
takeover and a result rebuilt after a crash say what the publish itself said (above all,
which partitions it created: :func:`commit_result`). The types live in :mod:`..results`.
"""

from __future__ import annotations

import bisect
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
    """The result of publishing ``partitions`` as ``version`` with ``read_versions``;
    ``before``: their versions before the swap. A partition without a published version
    before is created (as :mod:`.history` says too)."""
    changes = [
        PartitionCommit(oid, p.values, int(read_versions[oid]), p.rows, before.get(oid) is None)
        for oid, p in partitions.items()
    ]
    return CommitResult(version, mode, changes, txn_id=txn_id)


def rebuilt_result(
    load_state: Callable[..., NamespaceState],
    record: TxnRecord,
    mode: str,
    partitions: Mapping[str, StagedPartition] | None,
) -> CommitResult:
    """The result of published ``record`` when the publish's own is lost: ``partitions``
    (None: no plan) as the version where its row turned PUBLISHED published them."""
    version = published_at(load_state, record)
    if partitions is None:
        return CommitResult(version, mode, [], record.txn_id)
    ids = list(partitions)
    after, before = (
        {r[OBJECT_ID]: r[READ_VERSION] for r in load_state(v).full_rows(ids).to_pylist()}
        for v in (version, version - 1)
    )
    return commit_result(version, mode, record.txn_id, partitions, after, before)


def operation_result(
    kind: str, changes: list[PartitionOutcome], txn_id: str | None, skipped: Mapping[str, str]
) -> OperationResult:
    """A table operation's result before its swap (``manifest_version`` set after it)."""
    return OperationResult(kind, None, changes, txn_id, skipped)


def published_at(load_state: Callable[..., NamespaceState], record: TxnRecord) -> int:
    """The first version where ``record``'s incarnation is PUBLISHED (binary search: once
    published, a row stays so until collected)."""
    wanted = (record.incarnation, TxnState.PUBLISHED)

    def published(version: int) -> bool:
        try:
            state = load_state(version)
        except LanceNamespaceError:  # cleaned up: long before the publish
            return False
        found = load_records(state, [record.txn_id]).get(record.txn_id)
        return found is not None and (found.incarnation, found.state) == wanted

    return 1 + bisect.bisect_left(range(1, load_state().version), True, key=published)
