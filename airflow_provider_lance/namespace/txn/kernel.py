"""The publish kernel: what every publish path (:mod:`.commit`, :mod:`.direct`,
:mod:`~..ops.runner`) does alike. :func:`commit_leaves` commits one :class:`LeafWork` per
touched leaf in ONE ``storage.map`` with the guards of :mod:`~..write.leaf_commit` (G1: a
commit counts only as base + 1; G3: a roll-back restored exactly the base; G5: an append
only onto a leaf of its files' schema; G6: a partition that does not exist is replaced
whole), a :class:`LeafGuard` asked before any roll-back (G2) and G4
(:func:`check_works_files`). The one claim wait, the requirements of staged files and the
judges of failures (:func:`leaf_failure`, :func:`published_after_all`) are here too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    OutcomeUnknown,
    StorageError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.leaf_version import committed_by
from airflow_provider_lance.namespace.format.manifest import CLAIM, READ_VERSION, Manifest
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import (
    NoLiveClaim,
    ReadVersionIs,
    Requirement,
    RowExists,
    Swap,
    requirements_unmet,
)
from airflow_provider_lance.namespace.format.txn_row import TxnRecord
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.retry import Outcome, Retry
from airflow_provider_lance.namespace.write.leaf_commit import (
    StagedFiles,
    check_staged_files,
    commit_change,
    commit_leaf,
)
from airflow_provider_lance.namespace.write.staging import StagedPartition

from .lifecycle import claim_owners, claims_timed_out, load_records
from .store import TransactionStore

log = logging.getLogger(__name__)


@dataclass
class CommitOptions:
    #: How long to wait for partitions claimed by other live transactions (seconds).
    claim_timeout: float = 120.0
    #: How long to retry compare-and-swaps that lose to unrelated concurrent commits.
    swap_timeout: float = 120.0

    @classmethod
    def for_claim_timeout(cls, claim_timeout: float | None) -> CommitOptions:
        """The defaults with the caller's ``claim_timeout``, checked before anything runs."""
        if claim_timeout is None:
            return cls()
        number = isinstance(claim_timeout, (int, float)) and not isinstance(claim_timeout, bool)
        if not number or not 0 <= claim_timeout < math.inf:
            raise InvalidArgumentError(
                f"claim_timeout must be a number of seconds, 0 or more, got {claim_timeout!r}"
            )
        return cls(float(claim_timeout))


@dataclass(frozen=True)
class TransactionContext:
    """What transaction code needs of a namespace: its manifest, records and storage."""

    manifest: Manifest
    store: TransactionStore
    load_state: Callable[..., NamespaceState]  # (version: int | None = None)
    storage: Storage
    #: The state the handle holds, not checked against the storage (no request).
    held_state: Callable[[], NamespaceState]


def state_with_claims(ctx: TransactionContext) -> NamespaceState:
    """The latest state, the claim column added first to a ``__manifest`` without it."""
    state = ctx.load_state()
    if not state.view.has_claim_column:
        ctx.manifest.ensure_claim_column()
        state = ctx.load_state()
    return state


#: Staged fragments, or how to parse them (in the fan-out's threads).
Fragments = Sequence[FragmentMetadata] | Callable[[], Sequence[FragmentMetadata]]


@dataclass(frozen=True)
class AppendFiles:
    """Staged files appended onto the published version (no published row: a new leaf)."""

    fragments: Fragments
    leaf_schema: pa.Schema
    staged_on: int | None
    staged_schema: str | None


@dataclass(frozen=True)
class ReplaceLeaf:
    """Staged files replacing the leaf whole (overwrite, rewrite, a new leaf)."""

    fragments: Fragments
    leaf_schema: pa.Schema
    staged_schema: str | None


@dataclass(frozen=True)
class ApplyChange:
    """A Lance operation computed on leaf version ``base`` (a delete, merge, rewrite);
    ``opened``: the leaf opened at ``base`` when it was computed, if kept."""

    operation: LanceOperation.BaseOperation
    base: int
    opened: lance.LanceDataset | None = field(default=None, compare=False)


LeafChange = AppendFiles | ReplaceLeaf | ApplyChange


@dataclass
class LeafWork:
    """One leaf's share of a publish."""

    object_id: str
    uri: str
    #: The read_version as the attempt read it (None: new, or "read the latest").
    published: int | None
    #: Whether the partition has a published row (else the leaf is replaced whole).
    exists: bool
    change: LeafChange
    #: The leaf version committed for it (by :func:`commit_leaves`, or a stager): final.
    committed: int | None = None
    #: The staged files to check before committing (None: none to check).
    files: StagedFiles | None = field(default=None, repr=False)


def staged_work(
    storage: Storage,
    part: StagedPartition,
    row: dict[str, Any] | None,
    leaf_schema: pa.Schema,
    *,
    replace: bool,
) -> LeafWork:
    """The work of committing ``part`` onto its partition's ``row`` (None: new)."""
    published = None if row is None else row[READ_VERSION]
    fragments = part.fragment_metadata
    change: LeafChange = ReplaceLeaf(fragments, leaf_schema, part.schema)
    if not replace:
        change = AppendFiles(fragments, leaf_schema, part.staged_on, part.schema)
    location = part.directory if row is None else row["location"]
    exists = part.existed or published is not None
    return LeafWork(part.object_id, storage.uri(location), published, exists, change, files=part)


class LeafGuard(Protocol):
    """Asked before rolling back versions above ``base`` (or when ``base`` cannot be read):
    False (they may be another writer's) makes the commit raise ``LeafMoved`` instead."""

    def may_roll_back(self, work: LeafWork, base: int) -> bool: ...


@dataclass(frozen=True)
class HeldClaim:
    """The claim protocol's guard: the row is still claimed by ``writer`` (a zombie
    committer never rolls back the next committer's version)."""

    manifest: Manifest
    writer: str

    def may_roll_back(self, work: LeafWork, base: int) -> bool:
        row = self.manifest.latest().rows_by_id([work.object_id]).get(work.object_id)
        return row is not None and row[CLAIM] == self.writer


@dataclass(frozen=True)
class StillPublished:
    """The guard of writers without a claim: the row is unclaimed and still publishes
    ``base`` or what the attempt read; for a "read the latest" row, no version above
    ``base`` is a foreign writer's (untagged: readers see it)."""

    manifest: Manifest
    storage: Storage

    def may_roll_back(self, work: LeafWork, base: int) -> bool:
        row = self.manifest.latest().rows_by_id([work.object_id]).get(work.object_id)
        if row is None or row[CLAIM] is not None:
            return False
        published = row[READ_VERSION]
        if published is None and work.published is None:  # no foreign version above base
            ds = self.storage.table(work.uri)
            above = range(base + 1, int(ds.version) + 1)
            return all(committed_by(ds, v) is not None for v in above)
        return published in (base, work.published)


def check_works_files(
    storage: Storage,
    works: Sequence[LeafWork],
    owner: str,
    anonymous: bool = False,
    still_live: Callable[[], bool] | None = None,
) -> None:
    """G4: :func:`~.leaf_commit.check_staged_files` for the staged files of ``works``."""
    if parts := {w.object_id: w.files for w in works if w.files is not None}:
        check_staged_files(storage, parts, owner, anonymous, still_live)


def commit_leaves(
    storage: Storage,
    works: Sequence[LeafWork],
    *,
    writer: str,
    guard: LeafGuard,
    name: str,
    kind: str | None = None,
) -> dict[str, int]:
    """Commit every work not committed yet in ONE ``storage.map``, tagged ``writer``
    (``txn#k``) and ``kind`` (a table operation's); failpoint ``{name}.leaf_committed``
    after each. Returns each work's version by object id."""

    def commit_one(work: LeafWork) -> None:
        change = work.change
        may_roll_back = partial(guard.may_roll_back, work)
        if isinstance(change, ApplyChange):
            work.committed = commit_change(
                storage,
                work.uri,
                change.operation,
                base=change.base,
                owner=writer,
                may_roll_back=may_roll_back,
                operation_kind=kind,
                opened=change.opened,
                latest_is_read=work.published is None,
            )
        else:
            fragments = change.fragments
            work.committed = commit_leaf(
                storage,
                work.uri,
                fragments() if callable(fragments) else fragments,
                replace=isinstance(change, ReplaceLeaf),
                schema=change.leaf_schema,
                published=work.published,
                exists=work.exists,
                owner=writer,
                staged_schema=change.staged_schema,
                staged_on=change.staged_on if isinstance(change, AppendFiles) else None,
                operation_kind=kind,
                may_roll_back=may_roll_back,
            )
        failpoint(f"{name}.leaf_committed")

    storage.map(commit_one, [w for w in works if w.committed is None])
    out: dict[str, int] = {}
    for w in works:
        assert w.committed is not None
        out[w.object_id] = w.committed
    return out


def staged_requirements(parts: Mapping[str, StagedPartition], overwrite: bool) -> list[Requirement]:
    """What staged files need of the rows they are published onto."""
    exist: list[Requirement] = [RowExists(oid) for oid, p in parts.items() if p.existed]
    at = [ReadVersionIs(o, p.base_read_version) for o, p in parts.items() if overwrite or p.rewrite]
    return exist + at


class ClaimWait:
    """The one wait for partitions other transactions hold: :meth:`live` finds live claims
    among rows read, :meth:`wait` ends the attempt (failpoint ``{name}.claim_blocked``;
    ``abandon`` aborts anonymous holders past their lease), :meth:`timed_out` is the error
    once the claim timeout is spent, naming the last holders found."""

    def __init__(
        self,
        ctx: TransactionContext,
        timeout: float,
        abandon: Callable[[NamespaceState, Mapping[str, str], Mapping[str, TxnRecord]], None],
        *,
        name: str,
        what: str = "",
        after: str = "",
    ) -> None:
        self.ctx, self.timeout, self.name = ctx, timeout, name
        self._abandon, self._what, self._after = abandon, what, after
        self._last: tuple[dict[str, str], Mapping[str, TxnRecord]] = ({}, {})

    def live(
        self, state: NamespaceState, rows: Mapping[str, Mapping[str, Any]], mine: str | None = None
    ) -> tuple[dict[str, str], Mapping[str, TxnRecord]]:
        """The partitions among ``rows`` held by a live transaction other than ``mine``
        (-> ``txn#k``), and the holders' records."""
        if not any(r.get(CLAIM) for r in rows.values()):
            return {}, {}
        holders = load_records(state, claim_owners(rows.values()))
        claims = [NoLiveClaim(oid, mine) for oid in rows]
        unmet = requirements_unmet(claims, rows, holders)
        return {r.object_id: rows[r.object_id][CLAIM] for r in unmet}, holders

    def wait(
        self, state: NamespaceState, live: dict[str, str], holders: Mapping[str, TxnRecord]
    ) -> Retry:
        """End the attempt (CLAIMED), once anonymous holders past their lease are aborted."""
        failpoint(f"{self.name}.claim_blocked")
        self._last = (live, holders)
        self._abandon(state, live, holders)
        return Retry(Outcome.CLAIMED)

    def timed_out(self) -> LanceNamespaceError:
        blocked, holders = self._last
        return claims_timed_out(blocked, holders, self.timeout, what=self._what, after=self._after)


def moved_on(ctx: TransactionContext, state: NamespaceState) -> bool:
    """Whether what an attempt on ``state`` reads may have been removed since: its version
    is cleaned up, or a partition was published anew (``maintain`` may then remove it)."""
    try:
        ctx.manifest.at(state.version)
    except LanceNamespaceError:
        return True
    latest = ctx.load_state()
    if latest.version == state.version:
        return False
    before = {p.object_id: p.read_version for p in state.partitions()}
    now = {p.object_id: p.read_version for p in latest.partitions()}
    return any(now.get(oid, -1) != version for oid, version in before.items())


def leaf_failure(ctx: TransactionContext, state: NamespaceState, error: Exception) -> bool:
    """The one rule for a failed leaf commit: True when the attempt lost a race (a guard
    refused a roll-back, the leaf kept changing, or what it read was removed after the
    namespace moved on), False when ``error`` is the attempt's failure."""
    if isinstance(error, CommitConflict):
        return True
    valid = isinstance(error, LanceNamespaceError) and not isinstance(error, InvalidArgumentError)
    return valid and moved_on(ctx, state)


def published_after_all(manifest: Manifest, swap: Swap, error: StorageError) -> int:
    """The manifest version ``swap`` made although it reported ``error`` (the first after
    its base holding a row only it writes); none: ``error`` again (nothing published);
    unreadable versions: :class:`OutcomeUnknown` (the files are kept)."""
    try:
        latest = manifest.latest().version
        for version in range(swap.base_version + 1, latest + 1):
            if any(map(swap.made, manifest.at(version).rows_by_id(swap.object_ids).values())):
                log.warning("the publish reported %s but was committed (v%d)", error, version)
                return version
    except LanceNamespaceError as exc:
        raise OutcomeUnknown(
            f"a publish reported {error}, and whether it committed cannot be told ({exc}): its "
            "files are kept; read the data to see whether it was published before writing it again"
        ) from error
    raise error


def best_effort(what: str, call: Callable[[], object]) -> None:
    """Run ``call`` after a publish: a failure is logged, never raised (the publish stands)."""
    try:
        call()
    except Exception as exc:
        log.warning("%s failed after the publish (the publish stands): %s", what, exc)
