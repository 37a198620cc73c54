"""The publish kernel: what every publish path (the claim protocol of :mod:`.claim`, the
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
* **Requirements.** What the one ``__manifest`` swap of a publish needs of the rows it
  read (pyiceberg's ``TableRequirement``): :data:`Requirement`, checked by
  :func:`requirements_unmet`; each path decides what an unmet one means (wait, hand over,
  fail for good). The swap's compare-and-swap makes sure none changed in between.
* **Recovery.** A swap that reported a storage error may have committed:
  :func:`published_after_all` is the one rule for telling (pyiceberg's
  ``CommitStateUnknown``: when it cannot tell, the staged files are kept).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.errors import (
    InvalidArgumentError,
    LanceNamespaceError,
    OutcomeUnknown,
    StorageError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.leaf_version import committed_by
from airflow_provider_lance.namespace.format.manifest import (
    CLAIM,
    OBJECT_ID,
    READ_VERSION,
    Manifest,
)
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.txn_row import TxnRecord
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.write.leaf_commit import (
    StagedFiles,
    check_staged_files,
    commit_change,
    commit_leaf,
)
from airflow_provider_lance.namespace.write.staging import StagedPartition

from .lifecycle import claim_is_live
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


# -- requirements of the swap ----------------------------------------------------------------
@dataclass(frozen=True)
class RowExists:
    """A partition staged into as existing still has a row (it was not dropped since)."""

    object_id: str


@dataclass(frozen=True)
class ReadVersionIs:
    """A partition replaced whole (overwrite, rewrite) still publishes the version it
    replaces (no row: a new partition, met)."""

    object_id: str
    read_version: int | None


@dataclass(frozen=True)
class NoLiveClaim:
    """No live transaction holds the partition, other than ``mine`` (``txn#k``)."""

    object_id: str
    mine: str | None = None


@dataclass(frozen=True)
class ClaimedBy:
    """The partition's row is claimed by ``holder`` (``txn#k``)."""

    object_id: str
    holder: str


Requirement = RowExists | ReadVersionIs | NoLiveClaim | ClaimedBy


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


def requirements_unmet(
    requirements: Iterable[Requirement],
    rows: Mapping[str, Mapping[str, Any]],
    holders: Mapping[str, TxnRecord] | None,
) -> list[Requirement]:
    """The requirements the ``rows`` read (by object id; absent: no row) do not meet.
    ``holders``: the rows of the transactions holding claims among them (None: every
    claim counts as live)."""

    def met(req: Requirement) -> bool:
        row = rows.get(req.object_id)
        if isinstance(req, RowExists):
            return row is not None
        if isinstance(req, ReadVersionIs):
            return row is None or row[READ_VERSION] == req.read_version
        claim = None if row is None else row.get(CLAIM)
        if isinstance(req, ClaimedBy):
            return claim == req.holder
        if not claim or claim == req.mine:
            return True
        return holders is not None and not claim_is_live(claim, holders)

    return [r for r in requirements if not met(r)]


# -- recovery --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Swap:
    """THE compare-and-swap of one publish: rows upserted and ids deleted, against the
    ``__manifest`` version ``base_version`` the rows were read at."""

    base_version: int
    upserts: Sequence[Mapping[str, Any]]
    drops: Sequence[str] = ()

    @property
    def object_ids(self) -> list[str]:
        return [*(r[OBJECT_ID] for r in self.upserts), *self.drops]


def names_versions(versions: Mapping[str, int | None]) -> Callable[[Mapping[str, Any]], bool]:
    """``mine`` for :func:`published_after_all`: a row naming one of these leaf versions
    (made by this publish: no other writer publishes them)."""

    def mine(row: Mapping[str, Any]) -> bool:
        version = versions.get(row[OBJECT_ID])
        return version is not None and row[READ_VERSION] == version

    return mine


def published_after_all(
    manifest: Manifest, swap: Swap, mine: Callable[[Mapping[str, Any]], bool], error: StorageError
) -> int:
    """The manifest version ``swap`` made although it reported ``error``: the first
    version after its base holding a row that is ``mine`` (every version is looked at,
    not only the latest: a writer may have published over it).

    Every version read and none is ``mine``: ``error`` again (nothing was published; the
    caller may delete what it staged). The versions cannot be read: :class:`OutcomeUnknown`
    (the staged files must be kept: they may be published)."""
    try:
        latest = manifest.latest().version
        for version in range(swap.base_version + 1, latest + 1):
            if any(map(mine, manifest.at(version).rows_by_id(swap.object_ids).values())):
                log.warning("the publish reported %s but was committed (v%d)", error, version)
                return version
    except LanceNamespaceError as exc:
        raise OutcomeUnknown(
            f"a publish reported {error}, and whether it committed cannot be told ({exc}): "
            "its files are kept; read the data to see whether it was published before "
            "writing it again"
        ) from error
    raise error
