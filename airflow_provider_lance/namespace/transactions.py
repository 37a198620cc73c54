"""Transactions: begin, stage from any number of processes, commit once, abort, recover.

    txn = ns.begin("append", txn_id="dag.run.task.0")   # idempotent: a retry reuses it
    stage = txn.stage(table)                           # in any process; returns a small Stage
    result = ns.commit(txn.txn_id)                     # one atomic publish; idempotent

A transaction is durable from ``begin``: its header and stages are JSON records under
``<root>/_transactions/<txn_id>/``. :func:`abort` undoes an unpublished transaction (rolls
back leaf versions it committed, releases its claims, deletes its staged files);
:func:`recover` aborts every transaction idle for longer than a lease.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import lance

from .commit import (
    CommitOptions,
    Committer,
    TransactionAborted,
    TransactionContext,
    merge_stages,
)
from .errors import CommitConflict, InvalidArgumentError, LanceNamespaceError
from .failpoints import failpoint
from .leaves import committed_by, discard_fragments
from .manifest import CLAIM, OBJECT_ID, READ_VERSION
from .naming import child_uri
from .results import CommitResult
from .staging import Stage, Stager
from .txnstore import (
    ABORTED,
    COMMITTING,
    PUBLISHED,
    STAGED,
    TransactionHeader,
    TransactionStore,
    check_txn_id,
)

log = logging.getLogger(__name__)

MODES = ("append", "overwrite")
#: Default lease: a transaction idle for longer is considered abandoned by ``recover``.
DEFAULT_LEASE_SECONDS = 6 * 3600.0

__all__ = ["MODES", "Transaction", "TransactionAborted", "TransactionInfo"]


@dataclass(frozen=True)
class TransactionInfo:
    """A transaction as operators see it."""

    txn_id: str
    mode: str
    state: str
    created_at: float
    updated_at: float
    stages: int
    rows: int
    partitions: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Transaction:
    """A staged transaction of one namespace (see the module docstring)."""

    def __init__(self, header: TransactionHeader, ctx: TransactionContext) -> None:
        self.header = header
        self._store = ctx.store
        self._load_state = ctx.load_state
        self._storage_options = ctx.storage_options

    @property
    def txn_id(self) -> str:
        return self.header.txn_id

    @property
    def mode(self) -> str:
        return self.header.mode

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id!r}, mode={self.mode!r}, state={self.header.state!r})"

    def stage(self, data: Any, stage_id: str | None = None, *, record: bool = True) -> Stage:
        """Write ``data`` as data files of its partitions; nothing becomes visible.

        ``stage_id`` names this staging attempt: staging again under the same id replaces
        the earlier attempt (its files are deleted), so a retried task never duplicates
        rows. With ``record=False`` the stage is only returned (e.g. from a Spark executor)
        and the caller hands it to :meth:`record` later.
        """
        self._check_open()
        stage_id = check_txn_id(stage_id or uuid.uuid4().hex)
        state = self._load_state()
        if state.spec_version != self.header.spec_version:
            raise CommitConflict(
                f"the partition spec changed (v{self.header.spec_version} -> "
                f"v{state.spec_version}) after transaction {self.txn_id} began; begin a new one"
            )
        stage = Stager(
            state,
            Stage(self.txn_id, stage_id, self.mode, state.spec_version),
            self._storage_options,
        ).write(data)
        failpoint("stage.written")
        if record:
            self.record(stage)
        return stage

    def record(self, stage: Stage) -> None:
        """Make a stage part of the transaction (replacing an earlier one with its id)."""
        self._check_open()
        if stage.txn_id != self.txn_id:
            raise InvalidArgumentError(f"stage of {stage.txn_id} handed to {self.txn_id}")
        previous = self._store.stages(self.txn_id).get(stage.stage_id)
        self._store.save_stage(self.txn_id, stage.stage_id, stage.to_json())
        if previous is not None:
            _discard(
                Stage.from_json(previous),
                self._load_state().root,
                self._storage_options,
                keep=stage,
            )
        failpoint("stage.recorded")

    def stages(self) -> dict[str, Stage]:
        return {k: Stage.from_json(v) for k, v in self._store.stages(self.txn_id).items()}

    def _check_open(self) -> None:
        current = self._store.load(self.txn_id) or self.header
        if current.state == ABORTED or current.nonce != self.header.nonce:
            raise TransactionAborted(f"transaction {self.txn_id} was aborted")
        if current.state != STAGED:
            raise InvalidArgumentError(
                f"transaction {self.txn_id} is {current.state}; it takes no more stages "
                "(a commit started: call commit() again to finish it)"
            )


def begin(ctx: TransactionContext, mode: str, txn_id: str | None) -> TransactionHeader:
    """Create a transaction record, or return the live one with that id.

    An aborted transaction's id starts a new incarnation: nothing of the old one remains.
    """
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    txn_id = check_txn_id(txn_id or uuid.uuid4().hex)
    store, state = ctx.store, ctx.load_state()
    existing = store.load(txn_id)
    if existing is not None and existing.state != ABORTED:
        if existing.mode != mode:
            raise InvalidArgumentError(
                f"transaction {txn_id} exists with mode {existing.mode!r}, not {mode!r}"
            )
        return existing
    header = TransactionHeader(txn_id, mode, STAGED, state.version, state.spec_version)
    store.delete_stages(txn_id)  # leftovers of an aborted incarnation
    store.save(header)
    return header


def commit(
    ctx: TransactionContext, txn_id: str, options: CommitOptions | None = None
) -> CommitResult:
    header = _header(ctx, txn_id)
    return Committer(ctx, options).commit(header, _stages(ctx, txn_id))


def _header(ctx: TransactionContext, txn_id: str) -> TransactionHeader:
    header = ctx.store.load(check_txn_id(txn_id))
    if header is None:
        raise LanceNamespaceError(f"no transaction {txn_id!r} in this namespace")
    return header


def _stages(ctx: TransactionContext, txn_id: str) -> dict[str, Stage]:
    return {k: Stage.from_json(v) for k, v in ctx.store.stages(txn_id).items()}


def _find_publish(ctx: TransactionContext, header: TransactionHeader) -> CommitResult | None:
    committer = Committer(ctx)
    return committer.find_publish(header, merge_stages(_stages(ctx, header.txn_id)))


def abort(ctx: TransactionContext, txn_id: str, reason: str = "aborted") -> None:
    """Undo an unpublished transaction; an error for a published one."""
    header = _header(ctx, txn_id)
    if header.state == PUBLISHED:
        raise InvalidArgumentError(f"transaction {txn_id} is published; it cannot be aborted")
    if header.state == ABORTED:
        return
    if header.state == COMMITTING:
        if _find_publish(ctx, header) is not None:
            raise InvalidArgumentError(f"transaction {txn_id} was published; it cannot be aborted")
        _release(ctx, txn_id)
    root = ctx.load_state().root
    for stage in _stages(ctx, txn_id).values():
        _discard(stage, root, ctx.storage_options)
    header.state, header.error = ABORTED, reason
    ctx.store.save(header)  # the header stays as a tombstone; the stages go
    ctx.store.delete_stages(txn_id)
    log.info("transaction %s aborted: %s", txn_id, reason)


def _release(ctx: TransactionContext, txn_id: str) -> None:
    """Roll back the leaf versions of ``txn_id`` and release its claims."""
    storage_options = ctx.storage_options
    for attempt in range(64):
        state = ctx.load_state()
        if CLAIM not in state.dataset.schema.names:
            return
        rows = state.dataset.to_table(filter=f"{CLAIM} = '{txn_id}'").to_pylist()
        if not rows:
            return
        opts = dict(storage_options) if storage_options else None
        keep, drop = [], []
        for r in rows:
            published = r[READ_VERSION]
            if published is None:
                drop.append(r[OBJECT_ID])  # a partition it was creating: never published
                continue
            ds = lance.dataset(child_uri(state.root, r["location"]), storage_options=opts)
            if ds.version != published and committed_by(ds, ds.version) == txn_id:
                lance.dataset(ds.uri, version=published, storage_options=opts).restore()  # type: ignore[no-untyped-call]
            keep.append(dict(r, **{CLAIM: None}))
        try:
            ctx.manifest.compare_and_swap(state.rows_table(keep), state.version)
        except CommitConflict:
            time.sleep(0.05 * (attempt + 1))
            continue
        if drop:
            ctx.manifest.delete_rows(drop)
        return


def _discard(
    stage: Stage, root: str, storage_options: Mapping[str, str] | None, keep: Stage | None = None
) -> None:
    """Delete a stage's data files (except those ``keep`` also lists)."""
    kept = {f for p in keep.partitions.values() for f in p.fragments} if keep else set()
    for part in stage.partitions.values():
        doomed = [
            meta
            for text, meta in zip(part.fragments, part.fragment_metadata(), strict=True)
            if text not in kept
        ]
        discard_fragments(child_uri(root, part.directory), doomed, storage_options)


def recover(ctx: TransactionContext, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> list[str]:
    """Abort every unpublished transaction idle for longer than ``lease_seconds``."""
    now = time.time()
    aborted = []
    for header in list(ctx.store.headers()):
        if header.state not in (STAGED, COMMITTING) or now - header.updated_at <= lease_seconds:
            continue
        if header.state == COMMITTING:
            found = _find_publish(ctx, header)
            if found is not None:  # it died after publishing: only the record lagged
                Committer(ctx).record(header, found)
                continue
        abort(ctx, header.txn_id, reason=f"abandoned (idle {now - header.updated_at:.0f}s > lease)")
        aborted.append(header.txn_id)
    return aborted


def info(store: TransactionStore, header: TransactionHeader) -> TransactionInfo:
    stages = {k: Stage.from_json(v) for k, v in store.stages(header.txn_id).items()}
    partitions = {oid for s in stages.values() for oid in s.partitions}
    return TransactionInfo(
        header.txn_id,
        header.mode,
        header.state,
        header.created_at,
        header.updated_at,
        len(stages),
        sum(s.rows for s in stages.values()),
        len(partitions),
        header.error,
    )
