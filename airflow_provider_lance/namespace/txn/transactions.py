"""Transactions: begin, stage from any number of processes, commit once, abort, recover.

    txn = ns.begin("append", txn_id="dag.run.task.0")   # idempotent: a retry reuses it
    stage = txn.stage(table)                           # in any process; returns a small Stage
    result = ns.commit(txn.txn_id)                     # one atomic publish; idempotent
    result = ns.commit(["load.0", "load.1"], txn_id="publish")  # several, atomically

A transaction's state is its ``__manifest`` row, changed only by the transitions of
:mod:`.lifecycle`; the records under ``_transactions/`` only describe it. What makes every
interleaving safe:

* a stager records its stage file *before* bumping the row, so a seal either comes after
  the bump (its plan lists the stage) or makes the bump fail (the stager learns from the
  plan whether its stage is in; if not it removes its files);
* abort and recovery fence the row before they delete files (:mod:`.abort`);
* an aborted id begun again is a new incarnation (new records, claim and leaf-version
  tags): nothing of the old one can be published by the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    TransactionAborted,
    TransactionClosed,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.swap import Swap, TransitionRefused
from airflow_provider_lance.namespace.format.txn_row import (
    TransactionHeader,
    TxnRecord,
    TxnState,
    parse_incarnation_tag,
)
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Budget, Outcome, retry_until
from airflow_provider_lance.namespace.types import MODES, ArrowData, WriteMode
from airflow_provider_lance.namespace.write.staging import FLUSH_BYTES, Stage, Stager, discard_stage

from .abort import staged_fragments
from .commit import Committer
from .kernel import CommitOptions, TransactionContext
from .lifecycle import all_records, bumped
from .plan import Plan, stage_digest
from .records import current, current_of, of_incarnation, only, resolve, staged_source
from .store import TransactionStore, check_txn_id

if TYPE_CHECKING:
    import pyarrow as pa


log = logging.getLogger(__name__)

#: How long recording stages retries swaps lost to unrelated commits (seconds).
SWAP_TIMEOUT = 120.0

__all__ = ["MODES", "Transaction", "TransactionInfo"]


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
    incarnation: int = 1

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Transaction:
    """One incarnation of a transaction of one namespace (see the module docstring)."""

    def __init__(self, header: TransactionHeader, ctx: TransactionContext) -> None:
        self.header = header
        self.txn_id, self.mode, self.incarnation = header.txn_id, header.mode, header.incarnation
        self._ctx, self._store = ctx, ctx.store

    @property
    def state(self) -> TxnState:
        """Its state now (read from ``__manifest``)."""
        return current(self._ctx, self.header).state

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id!r}, mode={self.mode!r}, incarnation={self.incarnation})"

    def stage(
        self,
        data: ArrowData,
        stage_id: str | None = None,
        *,
        record: bool = True,
        manifest_version: int | None = None,
        flush_bytes: int = FLUSH_BYTES,
    ) -> Stage:
        """Write ``data`` as data files of its partitions; nothing becomes visible. Staging again
        under a ``stage_id`` replaces that stage (a retried task never duplicates rows).
        ``record=False`` only returns the stage, for :meth:`record` later; ``manifest_version`` pins
        the partitions staged against; ``flush_bytes`` bounds the routed rows buffered."""
        if not self.header.anonymous:  # (else only we can close it: the seal checks)
            self._check_open()
        stage_id = check_txn_id(stage_id or uuid.uuid4().hex)
        state = self._ctx.load_state(manifest_version)
        if state.spec_version != self.header.spec_version:
            raise CommitConflict(
                f"the partition spec changed (v{self.header.spec_version} -> "
                f"v{state.spec_version}) after transaction {self.txn_id} began; begin a new one"
            )
        empty = Stage(self.txn_id, stage_id, self.mode, state.spec_version)
        stage = Stager(state, empty, self._ctx.storage, flush_bytes).write(data)
        failpoint("stage.written")
        if record:
            self.record(stage)
        return stage

    def record(self, stage: Stage) -> None:
        """Make a stage part of the transaction (replacing an earlier one with its id)."""
        self.record_all([stage])

    def record_all(self, stages: Sequence[Stage]) -> None:
        """Record several stages in one ``__manifest`` commit. :class:`TransactionClosed`
        (their files removed) if a commit sealed the transaction first,
        :class:`TransactionAborted` if it was aborted."""
        if not stages:
            return
        for stage in stages:
            if stage.txn_id != self.txn_id:
                raise InvalidArgumentError(f"stage of {stage.txn_id} handed to {self.txn_id}")
        if not self.header.anonymous:
            record = current(self._ctx, self.header)
            if record.state is not TxnState.STAGED:
                self._withdraw_excluded(record, {s.stage_id: (s, s.to_json()) for s in stages})
                return
        k = self.incarnation
        previous = {s.stage_id: self._store.stage(self.txn_id, k, s.stage_id) for s in stages}
        records = {s.stage_id: s.to_json() for s in stages}
        self._store.save_stages(self.txn_id, k, records)
        failpoint("stage.recorded")
        if not self.header.anonymous:
            self._order_stages({s.stage_id: (s, records[s.stage_id]) for s in stages})
        for stage in stages:
            earlier = previous[stage.stage_id]
            if earlier is not None:  # no plan can include it any more: the seal is ordered
                discard_stage(
                    Stage.from_json(earlier), self._ctx.storage, keep=staged_fragments([stage])
                )

    def _order_stages(self, recorded: Mapping[str, tuple[Stage, Mapping[str, Any]]]) -> None:
        """Order recorded stages before any seal (the epoch bump), or learn its plan."""

        def attempt(_: int) -> Outcome | None:
            state = self._ctx.load_state()
            record = current(self._ctx, self.header)
            if record.state is TxnState.STAGED:
                try:
                    self._ctx.manifest.commit(Swap(state.view, moves=[bumped(record)]))
                except (CommitConflict, TransitionRefused):
                    return Outcome.LOST
                return None
            self._withdraw_excluded(record, recorded)
            return None

        stuck = CommitConflict(
            f"could not record stages of {self.txn_id}: concurrent commits kept winning "
            f"for {SWAP_TIMEOUT:.0f}s"
        )
        retry_until(attempt, {Outcome.LOST: Budget(lambda: stuck, seconds=SWAP_TIMEOUT)})

    def _withdraw_excluded(
        self, record: TxnRecord, recorded: Mapping[str, tuple[Stage, Mapping[str, Any]]]
    ) -> None:
        """The transaction left STAGED while stages were recorded: keep those its plan
        includes (with this content), remove the others and say so."""
        plan = self._sealed_plan(record)

        def included(stage_id: str) -> str | None:
            return None if plan is None else plan.included(self.txn_id, self.incarnation, stage_id)

        excluded = [s for sid, (s, raw) in recorded.items() if included(sid) != stage_digest(raw)]
        for stage in excluded:
            if included(stage.stage_id) is None:
                self._store.delete_stage(self.txn_id, self.incarnation, stage.stage_id)
            discard_stage(stage, self._ctx.storage)
        if not excluded:
            return
        ids = [s.stage_id for s in excluded]
        if record.state is TxnState.ABORTED:
            raise TransactionAborted(
                f"transaction {self.txn_id} was aborted; stages {ids} were removed"
            )
        raise TransactionClosed(
            f"transaction {self.txn_id} was sealed by a commit ({record.state.value}) before "
            f"stages {ids} were recorded; they are not part of it and their files were removed"
        )

    def _sealed_plan(self, record: TxnRecord) -> Plan | None:
        """The plan a seal fixed (None: staged, aborted or anonymous); a merged
        transaction's is its combined one's."""
        if record.plan is None or record.state in (TxnState.STAGED, TxnState.ABORTED):
            return None
        txn_id, incarnation = self.txn_id, record.incarnation
        if record.state is TxnState.MERGED and record.merged_into:
            txn_id, incarnation = parse_incarnation_tag(record.merged_into)
        return Plan.from_json(self._store.plan(txn_id, incarnation, record.plan))

    def stages(self) -> dict[str, Stage]:
        return _stages(self._store, self.header)

    def to_reader(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        batch_size: int | None = None,
    ) -> pa.RecordBatchReader:
        """Stream the rows it staged, before anything is published (e.g. to audit them)."""
        from airflow_provider_lance.namespace.write.staged_read import staged_reader

        if self.state is TxnState.ABORTED:
            raise TransactionAborted(f"transaction {self.txn_id} was aborted: nothing is staged")
        state, stages = self._ctx.load_state(), self.stages().values()
        return staged_reader(
            self._ctx.storage, state, stages, columns=columns, filter=filter, batch_size=batch_size
        )

    def to_table(
        self, *, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.Table:
        """All rows it staged that match ``filter`` (see :meth:`to_reader`)."""
        return self.to_reader(columns=columns, filter=filter).read_all()

    def discard(self, stage_ids: Iterable[str] | None = None) -> list[str]:
        """Remove stages (all by default) and delete their files; returns their ids.
        :class:`TransactionClosed` if a commit sealed the transaction with some of them."""
        self._check_open()
        wanted = None if stage_ids is None else set(stage_ids)
        recorded = self._store.stages(self.txn_id, self.incarnation)
        raws = {sid: raw for sid, raw in recorded.items() if wanted is None or sid in wanted}
        for sid in raws:
            self._store.delete_stage(self.txn_id, self.incarnation, sid)
        if not self.header.anonymous and raws:
            with contextlib.suppress(TransactionAborted):
                self._order_stages({})
        plan = self._sealed_plan(current(self._ctx, self.header))
        kept = []
        for sid, raw in raws.items():
            if plan is not None and plan.included(self.txn_id, self.incarnation, sid):
                kept.append(sid)  # the seal took it: its files will be published
            else:
                discard_stage(Stage.from_json(raw), self._ctx.storage)
        if kept:
            raise TransactionClosed(
                f"transaction {self.txn_id} was sealed by a commit that includes stages {kept}; "
                "they can no longer be discarded"
            )
        return sorted(raws)

    def drop(self, stage: Stage) -> None:
        """Delete the files of a stage never recorded (e.g. a failed task's)."""
        discard_stage(stage, self._ctx.storage)

    def info(self) -> TransactionInfo:
        """Its state, stages, rows and partitions as recorded now."""
        return info(self._store, self.header, current(self._ctx, self.header))

    def _check_open(self) -> None:
        record = current(self._ctx, self.header)
        if record.state is TxnState.ABORTED:
            raise TransactionAborted(f"transaction {self.txn_id} was aborted")
        if record.state is TxnState.MERGED:
            raise TransactionClosed(
                f"transaction {self.txn_id} was merged into {record.merged_into}; it takes no "
                "more stages"
            )
        if record.state is not TxnState.STAGED:
            raise TransactionClosed(
                f"transaction {self.txn_id} is {record.state.value}; it takes no more stages "
                "(a commit started: call commit() again to finish it)"
            )


def begin(
    ctx: TransactionContext, mode: WriteMode, txn_id: str | None, *, anonymous: bool = False
) -> TransactionHeader:
    """Create a transaction record, or return the live incarnation with that id (an
    aborted one's id starts a new incarnation)."""
    check_mode(mode)
    fresh = txn_id is None  # a new random id: nothing can exist under it yet
    txn_id = check_txn_id(txn_id or uuid.uuid4().hex)
    state = ctx.load_state()
    record = None if fresh else resolve(ctx, state, txn_id)
    incarnation, existing = _incarnation(ctx, txn_id, record)
    if existing is not None:
        if existing.mode != mode:
            raise InvalidArgumentError(
                f"transaction {txn_id} exists with mode {existing.mode!r}, not {mode!r}"
            )
        return existing
    header = TransactionHeader(
        txn_id, mode, incarnation, state.version, state.spec_version, anonymous=anonymous
    )
    ctx.store.save(header)
    return header


def _incarnation(
    ctx: TransactionContext, txn_id: str, record: TxnRecord | None
) -> tuple[int, TransactionHeader | None]:
    """The incarnation a begin of ``txn_id`` is (an aborted one's next), and its header."""
    if record is None:
        return 1, None
    if record.state is TxnState.ABORTED:
        return record.incarnation + 1, None
    return record.incarnation, ctx.store.load(txn_id, record.incarnation)


def check_mode(mode: object) -> None:
    """A write mode, or the error naming the ones there are."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")


def begin_transaction(
    ctx: TransactionContext, mode: WriteMode, txn_id: str | None, *, anonymous: bool = False
) -> Transaction:
    """:func:`begin`, as the handle users stage into (the claim column added first)."""
    ctx.manifest.ensure_claim_column()
    return Transaction(begin(ctx, mode, txn_id, anonymous=anonymous), ctx)


def commit(
    ctx: TransactionContext, txn_id: str, options: CommitOptions | None = None
) -> CommitResult:
    return Committer(ctx, options).commit(check_txn_id(txn_id))


def combined_id(txn_ids: Sequence[str]) -> str:
    """The default id of the transaction combining ``txn_ids``: the same for a retry."""
    digest = hashlib.blake2b("\n".join(sorted(set(txn_ids))).encode(), digest_size=10)
    return f"combined-{digest.hexdigest()}"


def combine(ctx: TransactionContext, txn_ids: Sequence[str], txn_id: str) -> TransactionHeader:
    """The transaction that commits the stages of several staged ones together: only its
    header is written here; the sources move to MERGED in the swap that seals it, so a
    crash leaves them all staged or all merged."""
    ids = list(dict.fromkeys(check_txn_id(t) for t in txn_ids))
    check_txn_id(txn_id)
    if not ids:
        raise InvalidArgumentError("commit() needs at least one transaction")
    if txn_id in ids:
        raise InvalidArgumentError(f"the combined transaction id {txn_id!r} is also a source")
    state = ctx.load_state()
    record = resolve(ctx, state, txn_id)
    incarnation, existing = _incarnation(ctx, txn_id, record)
    if existing is not None and record is not None:
        if sorted(existing.sources) != sorted(ids):
            raise InvalidArgumentError(
                f"transaction {txn_id} exists and combines "
                f"{existing.sources or 'nothing'}, not {ids}"
            )
        if record.state is not TxnState.STAGED:
            return existing
    sources = []
    for source in ids:
        found = staged_source(ctx, state, source)
        header = ctx.store.load(source, found.incarnation)
        if header is None:
            raise InvalidArgumentError(f"no transaction {source!r} in this namespace")
        sources.append(header)
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
    header = TransactionHeader(
        txn_id, modes[0], incarnation, min(s.base_version for s in sources), specs[0], sources=ids
    )
    ctx.store.save(header)
    failpoint("combine.done")
    return header


def _stages(store: TransactionStore, header: TransactionHeader) -> dict[str, Stage]:
    raws = store.stages(header.txn_id, header.incarnation)
    return {k: Stage.from_json(v) for k, v in raws.items()}


def info(store: TransactionStore, header: TransactionHeader, record: TxnRecord) -> TransactionInfo:
    stages = _stages(store, header)
    partitions = {oid for s in stages.values() for oid in s.partitions}
    updated = record.updated_at if record.stored else header.created_at
    named = (header.txn_id, header.mode, record.state.value, header.created_at, updated)
    counts = (len(stages), sum(s.rows for s in stages.values()), len(partitions))
    return TransactionInfo(*named, *counts, record.error, header.incarnation)


def listing(ctx: TransactionContext) -> list[TransactionInfo]:
    """Every transaction with records, in its newest incarnation, oldest first."""
    rows = {r.txn_id: r for r in all_records(ctx.load_state())}
    out = []
    for header in ctx.store.headers():
        record = current_of(header.txn_id, rows.get(header.txn_id), only(header))
        out.append(info(ctx.store, header, of_incarnation(header, record)))
    return sorted(out, key=lambda i: i.created_at)
