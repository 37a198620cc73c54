"""Publishing a staged transaction: claim, commit leaves, publish in one compare-and-swap.

1. **Claim.** One ``__manifest`` compare-and-swap marks every partition the transaction
   touches with its id in the claim column (``__txn_id``), inserting the rows of partitions it
   creates (invisible to readers until published). A partition claimed by another
   transaction is waited for; an overwrite whose base ``read_version`` moved fails with
   :class:`CommitConflict` and claims nothing.
2. **Commit leaves.** While holding the claims, each leaf table gets one Lance commit
   (Append, or Overwrite) tagged with the transaction id. Orphan versions of crashed writers
   are rolled back first; a version this transaction already committed is reused.
3. **Publish.** One compare-and-swap sets every ``read_version`` and releases the claims:
   readers see the whole transaction or nothing of it.

Each step is idempotent, so a retried commit (after a crash or an unknown outcome) finishes
the job or returns the recorded result, and never duplicates rows.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from .catalog import NamespaceState
from .errors import CommitConflict, LanceNamespaceError
from .failpoints import failpoint
from .leaves import commit_leaf, leaf_version, own_versions
from .maintenance import maybe_compact
from .manifest import CLAIM, OBJECT_ID, READ_VERSION, Manifest
from .naming import child_uri
from .results import CommitResult, PartitionCommit
from .staging import Stage, StagedPartition
from .txnstore import ABORTED, COMMITTING, PUBLISHED, TransactionHeader, TransactionStore

log = logging.getLogger(__name__)


#: Leaf tables committed in parallel (object-store commits are latency bound).
LEAF_COMMIT_THREADS = 16


class TransactionAborted(LanceNamespaceError):
    """The transaction was aborted (by the user or by recovery); it can never commit."""


@dataclass
class CommitOptions:
    #: How long to wait for partitions claimed by other live transactions.
    claim_timeout: float = 120.0
    #: Compare-and-swap attempts on ``__manifest`` before giving up.
    attempts: int = 64


def merge_stages(stages: Mapping[str, Stage]) -> dict[str, StagedPartition]:
    """All partitions of all stages, their data files and row counts added up."""
    merged: dict[str, StagedPartition] = {}
    for stage in stages.values():
        for oid, part in stage.partitions.items():
            into = merged.get(oid)
            if into is None:
                merged[oid] = replace(
                    part, values=dict(part.values), fragments=list(part.fragments)
                )
                continue
            if (part.rewrite, part.base_read_version, part.existed) != (
                into.rewrite,
                into.base_read_version,
                into.existed,
            ):
                raise CommitConflict(
                    "stages of one transaction saw different versions of a partition "
                    "(a concurrent commit happened while staging); stage again",
                    [oid],
                )
            into.fragments += part.fragments
            into.rows += part.rows
    return merged


@dataclass(frozen=True)
class TransactionContext:
    """What transaction code needs of a namespace: its manifest, records and storage."""

    manifest: Manifest
    store: TransactionStore
    load_state: Callable[..., NamespaceState]  # (version: int | None = None)
    storage_options: Mapping[str, str] | None


class Committer:
    """Runs the claim / commit / publish protocol for one transaction."""

    def __init__(self, ctx: TransactionContext, options: CommitOptions | None = None) -> None:
        self.ctx = ctx
        self.manifest = ctx.manifest
        self.store = ctx.store
        self.load_state = ctx.load_state
        self.storage_options = ctx.storage_options
        self.options = options or CommitOptions()

    def commit(self, header: TransactionHeader, stages: Mapping[str, Stage]) -> CommitResult:
        if header.state == PUBLISHED and header.result is not None:
            return CommitResult.from_dict(header.result)
        if header.state == ABORTED:
            raise TransactionAborted(f"transaction {header.txn_id} was aborted: {header.error}")
        parts = merge_stages(stages)
        if not parts:  # nothing staged (e.g. an empty input): nothing to publish
            nothing = CommitResult(self.load_state().version, header.mode, [], txn_id=header.txn_id)
            return self.record(header, nothing)
        retry = header.state == COMMITTING
        if retry:
            found = self.find_publish(header, parts)
            if found is not None:
                return self.record(header, found)
        else:
            header.state = COMMITTING
            self.store.save(header)
        failpoint("commit.before_claim")
        self._check_current(header)
        state, claimed = self._claim(header, parts)
        failpoint("commit.after_claim")
        versions = self._commit_leaves(header, parts, state, claimed)
        failpoint("commit.before_publish")
        self._check_current(header)
        result = self._publish(header, parts, versions)
        failpoint("commit.after_publish")
        maybe_compact(self.manifest)
        return self.record(header, result)

    def _check_current(self, header: TransactionHeader) -> None:
        """Stop a committer whose transaction was aborted (e.g. by recovery) meanwhile."""
        stored = self.store.load(header.txn_id)
        if stored is None or stored.nonce != header.nonce or stored.state == ABORTED:
            raise TransactionAborted(
                f"transaction {header.txn_id} was aborted while this commit was running"
            )

    def record(self, header: TransactionHeader, result: CommitResult) -> CommitResult:
        header.state, header.result = PUBLISHED, result.to_dict()
        self.store.save(header)
        log.info(
            "transaction %s published %d partitions (manifest v%d)",
            header.txn_id,
            len(result.partitions),
            result.manifest_version,
        )
        return result

    # -- 1. claim ----------------------------------------------------------------------
    def _claim(
        self, header: TransactionHeader, parts: dict[str, StagedPartition]
    ) -> tuple[NamespaceState, dict[str, dict[str, Any]]]:
        """Claim every partition; returns the state and the claimed leaf rows by id."""
        txn, overwrite = header.txn_id, header.mode == "overwrite"
        deadline = time.monotonic() + self.options.claim_timeout
        for attempt in range(self.options.attempts):
            state = self.load_state()
            current = {r[OBJECT_ID]: r for r in state.full_rows(list(parts)).to_pylist()}
            blocked: dict[str, str] = {}
            rows: list[dict[str, Any]] = []
            for oid, part in parts.items():
                row = current.get(oid)
                if row is None:
                    continue
                owner = row.get(CLAIM)
                if owner not in (None, txn):
                    blocked[oid] = owner
                    continue
                if owner is None:
                    if (overwrite or part.rewrite) and row[READ_VERSION] != part.base_read_version:
                        raise CommitConflict(
                            f"transaction {txn} replaces partitions another writer published "
                            "after it was staged; nothing was published",
                            [oid],
                        )
                    rows.append(dict(row, **{CLAIM: txn}))
            new = [p for oid, p in parts.items() if oid not in current]
            if new:
                gone = [p.object_id for p in new if p.existed]
                if gone:
                    raise CommitConflict("staged partitions no longer exist", gone)
                plan = state.plan_partitions(
                    [tuple(p.values.values()) for p in new], read_version=None, claim=txn
                )
                rows += plan.rows
            if blocked:
                if time.monotonic() > deadline:
                    owners = sorted(set(blocked.values()))
                    raise CommitConflict(
                        f"partitions are held by other transactions {owners} (still committing, "
                        "or crashed: PartitionedNamespace.recover() releases expired ones)",
                        blocked,
                    )
                _backoff(attempt)
                continue
            claimed = {oid: dict(row, **{CLAIM: txn}) for oid, row in current.items()}
            claimed.update({r[OBJECT_ID]: r for r in rows if r[OBJECT_ID] in parts})
            if not rows:
                return state, claimed
            try:
                self.manifest.compare_and_swap(state.rows_table(rows), state.version)
            except CommitConflict:
                _backoff(attempt)
                continue
            # Nobody else changes rows we hold claims on, so they are as we just wrote them.
            return self.load_state(), claimed
        raise CommitConflict(f"could not claim the partitions of {txn}", list(parts))

    # -- a retry whose publish already happened -----------------------------------------
    def find_publish(
        self, header: TransactionHeader, parts: dict[str, StagedPartition]
    ) -> CommitResult | None:
        """The result of this transaction's publish if it already happened, else None.

        Published means: no partition is claimed by it any more and each partition's
        ``read_version`` has reached a leaf version this transaction committed. The manifest
        version of the publish is found by bisection (``read_version`` never moves back).
        """
        if not parts:
            return None
        state = self.load_state()
        rows = {r[OBJECT_ID]: r for r in state.full_rows(list(parts)).to_pylist()}
        mine: dict[str, tuple[int, bool]] = {}
        for oid in parts:
            row = rows.get(oid)
            if row is None or row.get(CLAIM) is not None or row[READ_VERSION] is None:
                return None
            uri = child_uri(state.root, row["location"])
            found = own_versions(uri, header.txn_id, int(row[READ_VERSION]), self.storage_options)
            if found is None:
                return None
            mine[oid] = found
        low, high = header.base_version + 1, state.version
        while low < high:
            mid = (low + high) // 2
            at = self.manifest.open(mid)
            published = {
                r[OBJECT_ID]: r[READ_VERSION]
                for r in at.to_table(columns=[OBJECT_ID, READ_VERSION]).to_pylist()
            }
            if all((published.get(oid) or 0) >= v for oid, (v, _) in mine.items()):
                high = mid
            else:
                low = mid + 1
        return CommitResult(
            low,
            header.mode,
            [
                PartitionCommit(oid, p.values, mine[oid][0], p.rows, mine[oid][1])
                for oid, p in parts.items()
            ],
            txn_id=header.txn_id,
        )

    # -- 2. leaves ---------------------------------------------------------------------------
    def _commit_leaves(
        self,
        header: TransactionHeader,
        parts: dict[str, StagedPartition],
        state: NamespaceState,
        rows: dict[str, dict[str, Any]],
    ) -> dict[str, int]:
        """One Lance commit per leaf, run in parallel (they touch different tables).

        ``rows`` are the leaf rows as the claim wrote them (publish re-checks the claims).
        """
        schema = state.schema.leaf_schema()

        def commit_one(oid: str) -> int:
            part, row = parts[oid], rows[oid]
            uri = child_uri(state.root, row["location"])
            published = row[READ_VERSION]
            if published is None and part.existed:
                # Published with NULL read_version ("read the latest"): the latest is the base.
                published = leaf_version(uri, self.storage_options)
            version = commit_leaf(
                uri,
                part.fragment_metadata(),
                replace=header.mode == "overwrite" or part.rewrite,
                schema=schema,
                published=published,
                txn_id=header.txn_id,
                storage_options=self.storage_options,
            )
            failpoint("commit.leaf_committed")
            return version

        if len(parts) == 1:
            return {oid: commit_one(oid) for oid in parts}
        with ThreadPoolExecutor(max_workers=min(LEAF_COMMIT_THREADS, len(parts))) as pool:
            return dict(zip(parts, pool.map(commit_one, parts), strict=True))

    # -- 3. publish --------------------------------------------------------------------------
    def _publish(
        self, header: TransactionHeader, parts: dict[str, StagedPartition], versions: dict[str, int]
    ) -> CommitResult:
        txn = header.txn_id
        for attempt in range(self.options.attempts):
            state = self.load_state()
            rows = state.full_rows(list(parts)).to_pylist()
            created = {r[OBJECT_ID] for r in rows if r[READ_VERSION] is None}
            for r in rows:
                if r.get(CLAIM) != txn:
                    raise CommitConflict(f"transaction {txn} lost its claim", [r[OBJECT_ID]])
                r[READ_VERSION] = versions[r[OBJECT_ID]]
                r[CLAIM] = None
            try:
                version = self.manifest.compare_and_swap(state.rows_table(rows), state.version)
            except CommitConflict:
                _backoff(attempt)
                continue
            return CommitResult(
                version,
                header.mode,
                [
                    PartitionCommit(oid, p.values, versions[oid], p.rows, oid in created)
                    for oid, p in parts.items()
                ],
                txn_id=txn,
            )
        raise CommitConflict(f"could not publish transaction {txn}", list(parts))


def _backoff(attempt: int) -> None:
    time.sleep(min(0.02 * 2 ** min(attempt, 6), 1.0) * (0.5 + random.random()))
