"""The publish kernel: what every publish path (the claim protocol of :mod:`.commit`, the
direct write of :mod:`.direct`, the table operations of :mod:`~.runner`) does alike.

* **Leaf fan-out.** A publish is a set of :class:`LeafWork`, one per touched leaf, each a
  :data:`LeafChange`: staged files appended (:class:`AppendFiles`), a leaf replaced whole
  (:class:`ReplaceLeaf`) or a Lance operation computed on the published version applied
  (:class:`ApplyChange`). :func:`commit_leaves` commits them all in ONE ``storage.map``,
  with the guards of :func:`~.leaf_commit.commit_leaf` and :func:`~.leaf_commit.commit_change` (G1:
  a commit is used only as base + 1; G3: a roll-back restored exactly the base; G5: an
  append only onto a leaf of the schema its files were written with; G6: a partition that
  does not exist is replaced whole) and one :class:`LeafGuard` asked before any roll-back
  (G2): :class:`HeldClaim` for the claim protocol, :class:`StillPublished` for the others.
  G4 (the staged files still exist) is :func:`check_works_files`.
* **Requirements and claims.** What a swap needs of the rows it read is a
  :data:`~..format.swap.Requirement` (:func:`staged_requirements` for staged files);
  :class:`ClaimWait` is the one wait for partitions other transactions hold.
* **Failures.** :func:`leaf_failure` is the one rule for a failed leaf commit (a lost race,
  or the attempt's error); :func:`published_after_all` the one rule for a swap that
  reported a storage error (pyiceberg's ``CommitStateUnknown``: when it cannot tell, the
  staged files are kept); :func:`best_effort` runs what follows a publish.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
        """The defaults, with the caller's ``claim_timeout`` when it gave one: a number of
        seconds, checked before anything is written (otherwise a wrong one would surface
        only once a wait began, deep inside the retry loop)."""
        if claim_timeout is None:
            return cls()
        if (
            isinstance(claim_timeout, bool)
            or not isinstance(claim_timeout, (int, float))
            or not 0 <= claim_timeout < math.inf
        ):
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
    """The latest state, its ``__manifest`` holding the claim column: a namespace created
    before transactions gets it first (one commit, once)."""
    state = ctx.load_state()
    if not state.view.has_claim_column:
        ctx.manifest.ensure_claim_column()
        state = ctx.load_state()
    return state


# -- leaf work -------------------------------------------------------------------------------
#: Staged fragments, or how to parse them from their record: parsed in the fan-out's
#: threads, next to the commits (a thousand parsed before the first commit cost ~5%).
Fragments = Sequence[FragmentMetadata] | Callable[[], Sequence[FragmentMetadata]]


@dataclass(frozen=True)
class AppendFiles:
    """Staged files appended onto the published version (or, for a partition without a
    published row, a new leaf of them)."""

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
    #: The partition's read_version as the attempt read it (None: a new partition, or one
    #: published as "read the latest").
    published: int | None
    #: Whether the partition has a published row (False: the leaf is replaced whole).
    exists: bool
    change: LeafChange
    #: The leaf version committed for it (set by :func:`commit_leaves`, or before it by a
    #: stager that made exactly the right version): never committed again.
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
    """The work of committing ``part``'s staged files onto its partition's row (None: no
    row, a new partition) as the attempt read it."""
    published = None if row is None else row[READ_VERSION]
    fragments = part.fragment_metadata
    change: LeafChange = (
        ReplaceLeaf(fragments, leaf_schema, part.schema)
        if replace
        else AppendFiles(fragments, leaf_schema, part.staged_on, part.schema)
    )
    location = part.directory if row is None else row["location"]
    exists = part.existed or published is not None
    return LeafWork(part.object_id, storage.uri(location), published, exists, change, files=part)


# -- guards before a roll-back (G2) ----------------------------------------------------------
class LeafGuard(Protocol):
    """Asked before any roll-back of versions above ``base`` (and when ``base`` cannot be
    read): False means they may be another writer's to publish, and the commit raises
    :class:`~.leaf_commit.LeafMoved` instead of rolling them back."""

    def may_roll_back(self, work: LeafWork, base: int) -> bool: ...


def _row_now(manifest: Manifest, object_id: str) -> dict[str, Any] | None:
    """The partition's row (read_version, claim) in the latest ``__manifest`` version."""
    return manifest.latest().rows_by_id([object_id]).get(object_id)


@dataclass(frozen=True)
class HeldClaim:
    """The claim protocol's guard: the partition's row is still claimed by ``writer``
    (a zombie committer never rolls back the next committer's version)."""

    manifest: Manifest
    writer: str

    def may_roll_back(self, work: LeafWork, base: int) -> bool:
        row = _row_now(self.manifest, work.object_id)
        return row is not None and row[CLAIM] == self.writer


@dataclass(frozen=True)
class StillPublished:
    """The guard of writers without a claim (direct writes, table operations): the row
    is unclaimed and still publishes ``base`` or what the attempt read. For a partition
    published as "read the latest", no foreign version (not tagged by one of our writers:
    a foreign writer's publish, readers see it) lies above ``base``."""

    manifest: Manifest
    storage: Storage

    def may_roll_back(self, work: LeafWork, base: int) -> bool:
        row = _row_now(self.manifest, work.object_id)
        if row is None or row[CLAIM] is not None:
            return False
        published = row[READ_VERSION]
        if published is None and work.published is None:
            return not foreign_above(self.storage, work.uri, base)
        return published in (base, work.published)


def foreign_above(storage: Storage, uri: str, base: int) -> bool:
    """Whether a version above ``base`` of the leaf at ``uri`` was committed by a writer
    that is none of ours (no transaction tag)."""
    ds = storage.table(uri)
    return any(committed_by(ds, v) is None for v in range(base + 1, int(ds.version) + 1))


# -- the fan-out -----------------------------------------------------------------------------
def check_works_files(
    storage: Storage,
    works: Sequence[LeafWork],
    owner: str,
    anonymous: bool = False,
    still_live: Callable[[], bool] | None = None,
) -> None:
    """G4: :func:`~.leaf_commit.check_staged_files` for the staged files of ``works``."""
    parts = {w.object_id: w.files for w in works if w.files is not None}
    if parts:
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
    """Commit every work not committed yet, in ONE ``storage.map`` (``storage.concurrency``
    at once), each tagged ``writer`` (``txn#k``) and, for a table operation, ``kind``;
    failpoint ``{name}.leaf_committed`` after each. Returns the version of each work."""

    def commit_one(work: LeafWork) -> None:
        change = work.change

        def may_roll_back(base: int) -> bool:
            return guard.may_roll_back(work, base)

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


# -- what a swap requires ------------------------------------------------------------------
def staged_requirements(
    parts: Mapping[str, StagedPartition], *, overwrite: bool
) -> list[Requirement]:
    """What staged files need of the rows they are published onto."""
    out: list[Requirement] = [RowExists(oid) for oid, p in parts.items() if p.existed]
    out += [
        ReadVersionIs(oid, p.base_read_version)
        for oid, p in parts.items()
        if overwrite or p.rewrite
    ]
    return out


class ClaimWait:
    """The one wait for partitions other transactions hold: :meth:`live` finds the live
    claims among rows read, :meth:`wait` ends the attempt (failpoint
    ``{name}.claim_blocked``; ``abandon`` aborts anonymous holders past their lease, see
    :func:`~.abort.abort_abandoned`), and :meth:`timed_out` is the error once the claim
    timeout is spent, naming the holders the last attempt found."""

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
        self.ctx = ctx
        self.timeout = timeout
        self.name = name
        self._abandon = abandon
        self._what, self._after = what, after
        self._last: tuple[dict[str, str], Mapping[str, TxnRecord]] = ({}, {})

    def live(
        self,
        state: NamespaceState,
        rows: Mapping[str, Mapping[str, Any]],
        mine: str | None = None,
    ) -> tuple[dict[str, str], Mapping[str, TxnRecord]]:
        """The partitions among ``rows`` a live transaction other than ``mine`` holds
        (partition -> ``txn#k``), and the records of every holder found."""
        if not any(r.get(CLAIM) for r in rows.values()):
            return {}, {}
        holders = load_records(state, claim_owners(rows.values()))
        claims = [NoLiveClaim(oid, mine) for oid in rows]
        unmet = requirements_unmet(claims, rows, holders)
        return {r.object_id: rows[r.object_id][CLAIM] for r in unmet}, holders

    def wait(
        self, state: NamespaceState, live: dict[str, str], holders: Mapping[str, TxnRecord]
    ) -> Retry:
        """The attempt's end while ``live`` claims block it (CLAIMED), once anonymous
        holders past their lease are aborted (the next attempt finds those claims dead)."""
        failpoint(f"{self.name}.claim_blocked")
        self._last = (live, holders)
        self._abandon(state, live, holders)
        return Retry(Outcome.CLAIMED)

    def timed_out(self) -> LanceNamespaceError:
        blocked, holders = self._last
        return claims_timed_out(blocked, holders, self.timeout, what=self._what, after=self._after)


# -- leaf failures and the outcome of a swap -------------------------------------------------
def moved_on(ctx: TransactionContext, state: NamespaceState) -> bool:
    """Whether the namespace moved on from ``state`` in a way that can remove what an
    attempt on it reads: ``state``'s own version cleaned up, or a partition published
    anew since (``maintain`` may then remove the version the attempt read)."""
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
    """The one rule for a leaf commit that raised ``error``: True when the attempt lost a
    race (a guard refused to roll back another writer's version, the leaf kept changing,
    or what the attempt read was removed after the namespace moved on), False when
    ``error`` is the attempt's failure."""
    if isinstance(error, CommitConflict):
        return True
    return (
        isinstance(error, LanceNamespaceError)
        and not isinstance(error, InvalidArgumentError)
        and moved_on(ctx, state)
    )


def published_after_all(manifest: Manifest, swap: Swap, error: StorageError) -> int:
    """The manifest version ``swap`` made although it reported ``error``: the first
    version after its base holding a row only it writes (:meth:`~.swap.Swap.made`; every
    version is looked at, not only the latest: a writer may have published over it).

    Every version read and none holds one: ``error`` again (nothing was published; the
    caller may delete what it staged). The versions cannot be read: :class:`OutcomeUnknown`
    (the staged files must be kept: they may be published)."""
    try:
        latest = manifest.latest().version
        for version in range(swap.base_version + 1, latest + 1):
            if any(map(swap.made, manifest.at(version).rows_by_id(swap.object_ids).values())):
                log.warning("the publish reported %s but was committed (v%d)", error, version)
                return version
    except LanceNamespaceError as exc:
        raise OutcomeUnknown(
            f"a publish reported {error}, and whether it committed cannot be told ({exc}): "
            "its files are kept; read the data to see whether it was published before "
            "writing it again"
        ) from error
    raise error


def best_effort(what: str, call: Callable[[], object]) -> None:
    """Run ``call`` after a publish: its failure is logged, never raised (the publish
    happened; reporting it failed would make its caller write it again)."""
    try:
        call()
    except Exception as exc:
        log.warning("%s failed after the publish (the publish stands): %s", what, exc)
