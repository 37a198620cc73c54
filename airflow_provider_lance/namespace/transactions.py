"""Transactions: begin, stage from any number of processes, commit once, abort, recover.

    txn = ns.begin("append", txn_id="dag.run.task.0")   # idempotent: a retry reuses it
    stage = txn.stage(table)                           # in any process; returns a small Stage
    result = ns.commit(txn.txn_id)                     # one atomic publish; idempotent
    result = ns.commit(["load.0", "load.1"], txn_id="publish")  # several, atomically

A transaction is durable from ``begin``: its header and stages are JSON records under
``<root>/_transactions/<txn_id>/``. :func:`abort` undoes an unpublished transaction (rolls
back leaf versions it committed, releases its claims, deletes its staged files);
:func:`recover` aborts every transaction idle for longer than a lease.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
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
from .errors import CommitConflict, InvalidArgumentError
from .failpoints import failpoint
from .leaves import committed_by, discard_fragments
from .manifest import CLAIM, OBJECT_ID, READ_VERSION
from .naming import child_uri
from .results import CommitResult
from .staging import FLUSH_BYTES, Stage, Stager
from .txnstore import (
    ABORTED,
    COMMITTING,
    MERGED,
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

    def stage(
        self,
        data: Any,
        stage_id: str | None = None,
        *,
        record: bool = True,
        manifest_version: int | None = None,
        flush_bytes: int = FLUSH_BYTES,
    ) -> Stage:
        """Write ``data`` as data files of its partitions; nothing becomes visible.

        ``stage_id`` names this staging attempt: staging again under the same id replaces
        the earlier attempt (its files are deleted), so a retried task never duplicates
        rows. With ``record=False`` the stage is only returned (e.g. from a Spark executor)
        and the caller hands it to :meth:`record` later. ``manifest_version`` pins the
        partitions staged against (all tasks of one job see the same ones); at most
        ``flush_bytes`` of routed rows are buffered before data files are written.
        """
        self._check_open()
        stage_id = check_txn_id(stage_id or uuid.uuid4().hex)
        state = self._load_state(manifest_version)
        if state.spec_version != self.header.spec_version:
            raise CommitConflict(
                f"the partition spec changed (v{self.header.spec_version} -> "
                f"v{state.spec_version}) after transaction {self.txn_id} began; begin a new one"
            )
        stage = Stager(
            state,
            Stage(self.txn_id, stage_id, self.mode, state.spec_version),
            self._storage_options,
            flush_bytes,
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
        previous = self._store.stage(self.txn_id, stage.stage_id)
        self._store.save_stage(self.txn_id, stage.stage_id, stage.to_json())
        if previous is not None:
            _discard(
                Stage.from_json(previous),
                self._load_state().root,
                self._storage_options,
                keep=_fragments([stage]),
            )
        failpoint("stage.recorded")

    def stages(self) -> dict[str, Stage]:
        return {k: Stage.from_json(v) for k, v in self._store.stages(self.txn_id).items()}

    def discard(self, stage_ids: Iterable[str] | None = None) -> list[str]:
        """Remove stages (all by default) and delete their data files; returns their ids.

        For stages that must never be committed: those of failed or speculative task
        attempts, or everything an earlier run of a retried job staged.
        """
        self._check_open()
        wanted = None if stage_ids is None else set(stage_ids)
        root = self._load_state().root
        removed = []
        for stage_id, raw in self._store.stages(self.txn_id).items():
            if wanted is None or stage_id in wanted:
                _discard(Stage.from_json(raw), root, self._storage_options)
                self._store.delete_stage(self.txn_id, stage_id)
                removed.append(stage_id)
        return removed

    def drop(self, stage: Stage) -> None:
        """Delete the data files of a stage that was never recorded (e.g. a failed task's)."""
        _discard(stage, self._load_state().root, self._storage_options)

    def info(self) -> TransactionInfo:
        """Its state, stages, rows and partitions as recorded now."""
        return info(self._store, self._store.load(self.txn_id) or self.header)

    def _check_open(self) -> None:
        current = self._store.load(self.txn_id) or self.header
        if current.state == ABORTED or current.nonce != self.header.nonce:
            raise TransactionAborted(f"transaction {self.txn_id} was aborted")
        if current.state == MERGED:
            raise InvalidArgumentError(
                f"transaction {self.txn_id} was merged into {current.merged_into}; it takes no "
                "more stages"
            )
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
    if header.state == MERGED and header.merged_into:  # committed as part of another one
        return commit(ctx, header.merged_into, options)
    return Committer(ctx, options).commit(header, _stages(ctx, header.txn_id))


def combined_id(txn_ids: Sequence[str]) -> str:
    """The default id of the transaction combining ``txn_ids``: the same for a retry."""
    digest = hashlib.blake2b("\n".join(sorted(set(txn_ids))).encode(), digest_size=10)
    return f"combined-{digest.hexdigest()}"


def combine(ctx: TransactionContext, txn_ids: Sequence[str], txn_id: str) -> TransactionHeader:
    """Hand the stages of several staged transactions to one that commits them together.

    The steps are ordered so that a crash anywhere is safe and a retry completes them: the
    combined header names its sources first; each source is then marked merged (stagers,
    ``recover`` and ``abort`` leave it alone from then on) and its stage records are copied
    (the data files are shared, not copied). Once the combined transaction is committing or
    published, a retry only looks it up.
    """
    store = ctx.store
    ids = list(dict.fromkeys(check_txn_id(t) for t in txn_ids))
    check_txn_id(txn_id)
    if not ids:
        raise InvalidArgumentError("commit() needs at least one transaction")
    if txn_id in ids:
        raise InvalidArgumentError(f"the combined transaction id {txn_id!r} is also a source")
    existing = store.load(txn_id)
    if existing is not None and existing.state != ABORTED:
        if sorted(existing.sources) != sorted(ids):
            raise InvalidArgumentError(
                f"transaction {txn_id} exists and combines {existing.sources or 'nothing'}, "
                f"not {ids}"
            )
        if existing.state != STAGED:
            return existing
    sources = [_header(ctx, t) for t in ids]
    for src in sources:
        if src.state == MERGED and src.merged_into == txn_id:
            continue
        if src.state != STAGED:
            into = f" into {src.merged_into}" if src.state == MERGED else ""
            raise InvalidArgumentError(
                f"transaction {src.txn_id} is {src.state}{into}; only staged transactions "
                "can be committed together"
            )
    modes = sorted({s.mode for s in sources})
    if len(modes) > 1:
        raise InvalidArgumentError(
            f"transactions {ids} mix modes {modes}; commit appends and overwrites separately"
        )
    specs = sorted({s.spec_version for s in sources})
    if len(specs) > 1:
        raise CommitConflict(
            f"transactions {ids} were staged under different partition specs {specs}"
        )
    header = existing if existing is not None and existing.state == STAGED else None
    if header is None:
        header = TransactionHeader(
            txn_id,
            modes[0],
            STAGED,
            min(s.base_version for s in sources),
            specs[0],
            sources=ids,
        )
        store.delete_stages(txn_id)  # leftovers of an aborted incarnation
        store.save(header)
    for src in sources:
        if src.state != MERGED:
            src.state, src.merged_into = MERGED, txn_id
            store.save(src)
        for stage_id, stage in store.stages(src.txn_id).items():
            copy_id = _merged_stage_id(src.txn_id, stage_id)
            store.save_stage(txn_id, copy_id, dict(stage, txn_id=txn_id, stage_id=copy_id))
    failpoint("combine.done")
    return header


def _merged_stage_id(source: str, stage_id: str) -> str:
    name = f"{source}.{stage_id}"
    if len(name) <= 200:
        return name
    return "m-" + hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


def _header(ctx: TransactionContext, txn_id: str) -> TransactionHeader:
    header = ctx.store.load(check_txn_id(txn_id))
    if header is None:
        raise InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
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
    if header.state == MERGED:
        raise InvalidArgumentError(
            f"transaction {txn_id} was merged into {header.merged_into}; abort that one"
        )
    if header.state == COMMITTING:
        if _find_publish(ctx, header) is not None:
            raise InvalidArgumentError(f"transaction {txn_id} was published; it cannot be aborted")
        _release(ctx, txn_id)
    root = ctx.load_state().root
    stages = _stages(ctx, txn_id)
    for stage in stages.values():
        _discard(stage, root, ctx.storage_options)
    discarded = _fragments(stages.values())
    for source in header.sources:  # stages not yet copied in are discarded with their source
        src = ctx.store.load(source)
        if src is None or src.state != MERGED or src.merged_into != txn_id:
            continue
        for stage in _stages(ctx, source).values():
            _discard(stage, root, ctx.storage_options, keep=discarded)
        _tombstone(ctx, src, f"{reason} (merged into {txn_id})")
    _tombstone(ctx, header, reason)
    log.info("transaction %s aborted: %s", txn_id, reason)


def _tombstone(ctx: TransactionContext, header: TransactionHeader, reason: str) -> None:
    """Mark a transaction aborted; the header stays as a tombstone, the stages go."""
    header.state, header.error = ABORTED, reason
    ctx.store.save(header)
    ctx.store.delete_stages(header.txn_id)


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


def _fragments(stages: Iterable[Stage]) -> set[str]:
    return {f for s in stages for p in s.partitions.values() for f in p.fragments}


def _discard(
    stage: Stage,
    root: str,
    storage_options: Mapping[str, str] | None,
    keep: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Delete a stage's data files (except the fragments in ``keep``)."""
    for part in stage.partitions.values():
        doomed = [
            meta
            for text, meta in zip(part.fragments, part.fragment_metadata(), strict=True)
            if text not in keep
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
