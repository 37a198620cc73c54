"""Transactions: begin, stage from any number of processes, commit once, abort, recover.

    txn = ns.begin("append", txn_id="dag.run.task.0")   # idempotent: a retry reuses it
    stage = txn.stage(table)                           # in any process; returns a small Stage
    result = ns.commit(txn.txn_id)                     # one atomic publish; idempotent
    result = ns.commit(["load.0", "load.1"], txn_id="publish")  # several, atomically

The state of every transaction is its ``__manifest`` row and changes only through the
transitions in :mod:`.lifecycle`; the JSON records under ``<root>/_transactions/`` only
describe it. The rules that make every interleaving safe:

* a stager records its stage file *before* bumping the row, so a commit's seal either comes
  after the bump (and its plan lists the stage) or makes the bump fail (and the stager
  learns from the plan whether its stage is in; if not it removes its files);
* abort and recovery fence the row first (STAGED/COMMITTING -> ABORTED, one swap) and only
  then delete files, which no published ``read_version`` can reference;
* an aborted id begun again is a new incarnation (new records directory, new claim and
  leaf-version tags), so nothing of the old one can be published by the new one.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    TransactionAborted,
    TransactionClosed,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import CLAIM, READ_VERSION
from airflow_provider_lance.namespace.format.txn_row import (
    TransactionHeader,
    TxnRecord,
    TxnState,
    parse_incarnation_tag,
)
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Budget, Outcome, Spent, retry_until
from airflow_provider_lance.namespace.types import MODES, ArrowData, WriteMode
from airflow_provider_lance.namespace.write.staging import FLUSH_BYTES, Stage, Stager, discard_stage

from .claim import Committer, Plan, current_of, only, resolve, stage_digest, staged_source
from .kernel import CommitOptions, TransactionContext
from .lifecycle import (
    TransitionRefused,
    abandoned,
    all_records,
    anonymous_lease,
    bump,
    claim_is_live,
    claim_owners,
    drop_pending,
    load_records,
    mark_aborted,
    released,
    swap,
)
from .store import TransactionStore, check_txn_id

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_provider_lance.namespace.format.state import NamespaceState

log = logging.getLogger(__name__)

#: Default lease: a transaction idle for longer is considered abandoned by ``recover``.
DEFAULT_LEASE_SECONDS = 6 * 3600.0
#: How long abort and record keep retrying compare-and-swaps lost to unrelated commits.
SWAP_TIMEOUT = 120.0
#: Swaps ``release_dead_claims`` may lose before it leaves the claims to a later recover.
RELEASE_ATTEMPTS = 64

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


def current(ctx: TransactionContext, header: TransactionHeader) -> TxnRecord:
    """The record of exactly this incarnation (ABORTED if a newer one replaced it)."""
    return of_incarnation(header, resolve(ctx, ctx.load_state(), header.txn_id))


def of_incarnation(header: TransactionHeader, record: TxnRecord | None) -> TxnRecord:
    """``record`` (the current incarnation) as seen by ``header``'s incarnation."""
    if record is None or record.incarnation < header.incarnation:
        return TxnRecord.staged(header)
    if record.incarnation > header.incarnation:
        return TxnRecord(header.txn_id, header.incarnation, TxnState.ABORTED, error="superseded")
    return record


class Transaction:
    """One incarnation of a transaction of one namespace (see the module docstring)."""

    def __init__(self, header: TransactionHeader, ctx: TransactionContext) -> None:
        self.header = header
        self._ctx = ctx
        self._store = ctx.store

    @property
    def txn_id(self) -> str:
        return self.header.txn_id

    @property
    def mode(self) -> str:
        return self.header.mode

    @property
    def incarnation(self) -> int:
        return self.header.incarnation

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
        """Write ``data`` as data files of its partitions; nothing becomes visible.

        ``stage_id`` names this staging attempt: staging again under the same id replaces
        the earlier attempt (its files are deleted), so a retried task never duplicates
        rows. With ``record=False`` the stage is only returned (e.g. from a Spark executor)
        and the caller hands it to :meth:`record` later. ``manifest_version`` pins the
        partitions staged against (all tasks of one job see the same ones); at most
        ``flush_bytes`` of routed rows are buffered before data files are written.
        """
        if not self.header.anonymous:  # else nobody but us can close it (the seal checks)
            self._check_open()
        stage_id = check_txn_id(stage_id or uuid.uuid4().hex)
        state = self._ctx.load_state(manifest_version)
        if state.spec_version != self.header.spec_version:
            raise CommitConflict(
                f"the partition spec changed (v{self.header.spec_version} -> "
                f"v{state.spec_version}) after transaction {self.txn_id} began; begin a new one"
            )
        stage = Stager(
            state,
            Stage(self.txn_id, stage_id, self.mode, state.spec_version),
            self._ctx.storage,
            flush_bytes,
        ).write(data)
        failpoint("stage.written")
        if record:
            self.record(stage)
        return stage

    def record(self, stage: Stage) -> None:
        """Make a stage part of the transaction (replacing an earlier one with its id)."""
        self.record_all([stage])

    def record_all(self, stages: Sequence[Stage]) -> None:
        """Record several stages at once (one ``__manifest`` commit for all of them).

        Raises :class:`TransactionClosed` (after removing the stages' files) if a commit
        sealed the transaction before they were recorded, and :class:`TransactionAborted`
        if it was aborted.
        """
        if not stages:
            return
        for stage in stages:
            if stage.txn_id != self.txn_id:
                raise InvalidArgumentError(f"stage of {stage.txn_id} handed to {self.txn_id}")
        if not self.header.anonymous:
            record = current(self._ctx, self.header)
            if record.state is not TxnState.STAGED:  # closed: keep what a seal took, drop the rest
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
                discard_stage(Stage.from_json(earlier), self._ctx.storage, keep=_fragments([stage]))

    def _order_stages(self, recorded: Mapping[str, tuple[Stage, Mapping[str, Any]]]) -> None:
        """Order recorded stages before any seal (the epoch bump), or learn the seal's plan."""

        def attempt(_: int) -> Outcome | None:
            state = self._ctx.load_state()
            record = current(self._ctx, self.header)
            if record.state is TxnState.STAGED:
                try:
                    bump(self._ctx.manifest, state, record)
                except (CommitConflict, TransitionRefused):
                    return Outcome.LOST
                return None
            self._withdraw_excluded(record, recorded)
            return None

        lost = Budget(
            lambda: CommitConflict(
                f"could not record stages of {self.txn_id}: concurrent commits kept winning "
                f"for {SWAP_TIMEOUT:.0f}s"
            ),
            seconds=SWAP_TIMEOUT,
        )
        retry_until(attempt, {Outcome.LOST: lost})

    def _withdraw_excluded(
        self, record: TxnRecord, recorded: Mapping[str, tuple[Stage, Mapping[str, Any]]]
    ) -> None:
        """The transaction left STAGED while stages were recorded: keep the ones its plan
        includes (with this content), remove the others and say so."""
        plan = self._sealed_plan(record)
        excluded = [
            stage
            for stage_id, (stage, raw) in recorded.items()
            if plan is None
            or plan.included(self.txn_id, self.incarnation, stage_id) != stage_digest(raw)
        ]
        if not excluded:
            return
        for stage in excluded:
            if plan is None or plan.included(self.txn_id, self.incarnation, stage.stage_id) is None:
                self._store.delete_stage(self.txn_id, self.incarnation, stage.stage_id)
            discard_stage(stage, self._ctx.storage)
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
        """The plan a seal fixed for this transaction (None while staged, once aborted, or
        for an anonymous one). A merged transaction's plan is its combined one's."""
        if record.plan is None or record.state in (TxnState.STAGED, TxnState.ABORTED):
            return None
        txn_id, incarnation = self.txn_id, record.incarnation
        if record.state is TxnState.MERGED and record.merged_into:
            txn_id, incarnation = parse_incarnation_tag(record.merged_into)
        return Plan.from_json(self._store.plan(txn_id, incarnation, record.plan))

    def stages(self) -> dict[str, Stage]:
        return {
            k: Stage.from_json(v)
            for k, v in self._store.stages(self.txn_id, self.incarnation).items()
        }

    def to_reader(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        batch_size: int | None = None,
    ) -> pa.RecordBatchReader:
        """Stream the rows it staged, before anything of it is published (e.g. to audit
        them); reads only its staged data files, writes nothing (see :mod:`.staged_read`)."""
        from airflow_provider_lance.namespace.write.staged_read import staged_reader

        if self.state is TxnState.ABORTED:
            raise TransactionAborted(f"transaction {self.txn_id} was aborted: nothing is staged")
        return staged_reader(
            self._ctx.storage,
            self._ctx.load_state(),
            self.stages().values(),
            columns=columns,
            filter=filter,
            batch_size=batch_size,
        )

    def to_table(
        self, *, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.Table:
        """All rows it staged that match ``filter`` (see :meth:`to_reader`)."""
        return self.to_reader(columns=columns, filter=filter).read_all()

    def discard(self, stage_ids: Iterable[str] | None = None) -> list[str]:
        """Remove stages (all by default) and delete their data files; returns their ids.

        For stages that must never be committed: those of failed or speculative task
        attempts, or everything an earlier run of a retried job staged. Raises
        :class:`TransactionClosed` if a commit sealed the transaction with some of them.
        """
        self._check_open()
        wanted = None if stage_ids is None else set(stage_ids)
        raws = {
            sid: raw
            for sid, raw in self._store.stages(self.txn_id, self.incarnation).items()
            if wanted is None or sid in wanted
        }
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
                continue
            discard_stage(Stage.from_json(raw), self._ctx.storage)
        if kept:
            raise TransactionClosed(
                f"transaction {self.txn_id} was sealed by a commit that includes stages {kept}; "
                "they can no longer be discarded"
            )
        return sorted(raws)

    def drop(self, stage: Stage) -> None:
        """Delete the data files of a stage that was never recorded (e.g. a failed task's)."""
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
    """Create a transaction record, or return the live incarnation with that id.

    An aborted transaction's id starts a new incarnation: nothing of the old one remains.
    """
    check_mode(mode)
    fresh = txn_id is None  # a new random id: nothing can exist under it yet
    txn_id = check_txn_id(txn_id or uuid.uuid4().hex)
    state = ctx.load_state()
    record = None if fresh else resolve(ctx, state, txn_id)
    if record is None:
        incarnation = 1
    elif record.state is TxnState.ABORTED:
        incarnation = record.incarnation + 1
    else:
        incarnation = record.incarnation
        existing = ctx.store.load(txn_id, incarnation)
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


def check_mode(mode: object) -> None:
    """A write mode, or the error naming the ones there are."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")


def begin_transaction(
    ctx: TransactionContext, mode: WriteMode, txn_id: str | None, *, anonymous: bool = False
) -> Transaction:
    """:func:`begin`, as the handle users stage into (the ``claim`` column added to an
    older ``__manifest`` first: every transaction needs it)."""
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
    """The transaction that commits the stages of several staged ones together.

    Only its header is written here; the sources move to MERGED in the same
    compare-and-swap that seals it, so a crash anywhere leaves them staged or merged,
    never half of each.
    """
    ids = list(dict.fromkeys(check_txn_id(t) for t in txn_ids))
    check_txn_id(txn_id)
    if not ids:
        raise InvalidArgumentError("commit() needs at least one transaction")
    if txn_id in ids:
        raise InvalidArgumentError(f"the combined transaction id {txn_id!r} is also a source")
    state = ctx.load_state()
    record = resolve(ctx, state, txn_id)
    incarnation = 1
    if record is not None:
        incarnation = record.incarnation
        if record.state is TxnState.ABORTED:
            incarnation += 1
        else:
            existing = ctx.store.load(txn_id, incarnation)
            if existing is not None:
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
        txn_id,
        modes[0],
        incarnation,
        min(s.base_version for s in sources),
        specs[0],
        sources=ids,
    )
    ctx.store.save(header)
    failpoint("combine.done")
    return header


def abort(
    ctx: TransactionContext, txn_id: str, reason: str = "aborted", *, own_write: bool = False
) -> None:
    """Undo an unpublished transaction; an error for a published one.

    First the fence: one compare-and-swap moves its row to ABORTED and releases its claims;
    if a commit published first, the swap fails and abort says so, deleting nothing. Only
    after the fence are its staged files deleted: no published version can reference them.

    ``own_write``: the caller is the anonymous transaction's own writer, whose commit
    failed and returned; nobody else can seal it, so a transaction without a row needs
    no fence. Anyone else (an operator, :func:`recover`) fences it like any other: its
    writer may be waiting for a claim and seal it any moment.
    """
    #: The stage records of an anonymous transaction, read before the fence: once it is
    #: aborted, ``collect_finished`` may delete them before the clean-up reads them.
    known: dict[str, Stage] = {}

    def attempt(_: int) -> TxnRecord | Outcome | None:
        """The fenced record (None: nothing is left to clean up), or LOST."""
        state = ctx.load_state()
        record = resolve(ctx, state, check_txn_id(txn_id))
        if record is None and own_write:  # aborted and collected meanwhile
            # Stages it recorded after that are all that is left (never sealed, so never
            # published): their files go too.
            for raw in ctx.store.stages_of_every_incarnation(txn_id):
                discard_stage(Stage.from_json(raw), ctx.storage)
            log.info("transaction %s was aborted and its records removed meanwhile", txn_id)
            return None
        if record is None:
            raise InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
        if record.state is TxnState.PUBLISHED:
            raise InvalidArgumentError(f"transaction {txn_id} is published; it cannot be aborted")
        if record.state is TxnState.MERGED:
            raise InvalidArgumentError(
                f"transaction {txn_id} was merged into {record.merged_into}; abort that one"
            )
        if record.state is TxnState.ABORTED:
            return record
        header = ctx.store.load(txn_id, record.incarnation)
        if own_write and not record.stored and header is not None and header.anonymous:
            return record  # its own writer's commit failed: nobody else could seal it
        source_ids = list(record.sources) or (header.sources if header else [])
        sources = list(load_records(state, source_ids).values())
        if record.anonymous:
            k = record.incarnation
            for stage_id, raw in ctx.store.stages(txn_id, k).items():
                known[f"{txn_id}#{k}/{stage_id}"] = Stage.from_json(raw)
        try:
            failpoint("abort.before_fence")
            record = mark_aborted(
                ctx.manifest,
                state,
                record,
                reason,
                state.view.claimed_by(record.incarnation_tag),
                sources,
            )
        except (CommitConflict, TransitionRefused):
            return Outcome.LOST
        log.info("transaction %s aborted: %s", record.incarnation_tag, reason)
        return record

    lost = Budget(
        lambda: CommitConflict(
            f"could not abort transaction {txn_id}: concurrent commits kept winning "
            f"for {SWAP_TIMEOUT:.0f}s; nothing was aborted"
        ),
        seconds=SWAP_TIMEOUT,
    )
    record = retry_until(attempt, {Outcome.LOST: lost})
    if record is None:
        return
    failpoint("abort.after_fence")
    _clean_up(ctx, record, known)


def abort_abandoned(
    ctx: TransactionContext,
    state: NamespaceState,
    blocked: Mapping[str, str],
    holders: Mapping[str, TxnRecord],
) -> None:
    """Abort the anonymous holders of ``blocked`` claims past their lease (see
    :func:`.lifecycle.abandoned`): what a writer waiting for partitions does, lest a write
    whose process died while committing hold them until someone runs ``recover`` (the
    waiter's next attempt finds those claims dead)."""
    for record in abandoned(state, blocked, holders):
        log.warning(
            "aborting %s, a write without a txn_id that has held its partitions for %.0fs "
            "(its process died while committing?)",
            record.incarnation_tag,
            record.age,
        )
        try:
            abort(ctx, record.txn_id, reason=f"abandoned: committing for {record.age:.0f}s")
        except (InvalidArgumentError, CommitConflict) as exc:  # published meanwhile, a race
            log.info("left %s alone: %s", record.incarnation_tag, exc)
        except (LanceNamespaceError, OSError) as exc:
            # Someone else's abort, not the waiter's write: its next attempt sees whether
            # the fence happened (the claim is dead) or tries again; files a failed
            # clean-up left go to the orphan sweep.
            log.warning("could not abort %s: %s", record.incarnation_tag, exc)


def _clean_up(
    ctx: TransactionContext, record: TxnRecord, known: Mapping[str, Stage] | None = None
) -> None:
    """After the fence: delete what the aborted incarnation (and sources merged into it)
    staged (``known``: stages read before the fence, whose records may be gone since),
    and drop the never-published partition rows it was creating."""
    state = ctx.load_state()
    doomed = [(record.txn_id, record.incarnation)]
    for source in load_records(state, record.sources).values():
        if source.merged_into == record.incarnation_tag:
            doomed.append((source.txn_id, source.incarnation))
    fragments: dict[str, Stage] = dict(known or {})
    for txn_id, k in doomed:
        for stage_id, raw in ctx.store.stages(txn_id, k).items():
            fragments[f"{txn_id}#{k}/{stage_id}"] = Stage.from_json(raw)
    if record.plan is not None:
        try:
            plan = Plan.from_json(ctx.store.plan(record.txn_id, record.incarnation, record.plan))
            fragments["plan"] = Stage("plan", "plan", plan.mode, plan.spec_version, plan.partitions)
        except LanceNamespaceError as exc:  # a missing plan: nothing more to delete
            log.debug("no plan to clean up for %s: %s", record.incarnation_tag, exc)
    seen: set[str] = set()
    for stage in fragments.values():
        discard_stage(stage, ctx.storage, keep=frozenset(seen))
        seen |= _fragments([stage])
    for txn_id, k in doomed:
        for stage_id in ctx.store.stages(txn_id, k):
            ctx.store.delete_stage(txn_id, k, stage_id)
    rows = [r for r in state.view.claimed_by(record.incarnation_tag) if r[READ_VERSION] is None]
    if rows:
        try:
            drop_pending(ctx.manifest, state, rows)
        except CommitConflict:
            log.info(
                "left %d dead partition rows of %s to recovery", len(rows), record.incarnation_tag
            )


def _fragments(stages: Iterable[Stage]) -> set[str]:
    return {f for s in stages for p in s.partitions.values() for f in p.fragments}


def recover(ctx: TransactionContext, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> list[str]:
    """Abort every unpublished transaction idle for longer than ``lease_seconds`` (a write
    without a txn_id committing: longer than its shorter lease, see
    :data:`.lifecycle.ANONYMOUS_LEASE_SECONDS`) and release claims that aborted, merged,
    published or missing transactions left behind."""
    now = time.time()
    state = ctx.load_state()
    rows = {r.txn_id: r for r in all_records(state)}
    idle: dict[str, float] = {}
    for header in ctx.store.headers():
        record = current_of(header.txn_id, rows.get(header.txn_id), only(header))
        if record is None or record.state not in (TxnState.STAGED, TxnState.COMMITTING):
            continue
        stored = rows.get(header.txn_id)
        since = (
            stored.updated_at
            if stored is not None and stored.incarnation == record.incarnation
            else header.created_at
        )
        idle[header.txn_id] = now - since
    for txn_id, record in rows.items():
        if txn_id not in idle and record.state is TxnState.COMMITTING:
            idle[txn_id] = record.age  # its records were deleted by hand: still fence it
    aborted = []
    for txn_id, seconds in sorted(idle.items()):
        lease = lease_seconds
        stored = rows.get(txn_id)
        if stored is not None and stored.anonymous and stored.state is TxnState.COMMITTING:
            # a write without a txn_id: nobody can finish it but its own process
            lease = min(lease, anonymous_lease(state, stored.incarnation_tag))
        if seconds <= lease:
            continue
        try:
            abort(ctx, txn_id, reason=f"abandoned (idle {seconds:.0f}s > lease)")
        except InvalidArgumentError as exc:  # published or merged meanwhile
            log.info("recover left %s alone: %s", txn_id, exc)
            continue
        aborted.append(txn_id)
    release_dead_claims(ctx)
    return aborted


def release_dead_claims(ctx: TransactionContext) -> int:
    """Clear claims whose holder can no longer publish; returns how many were released
    (0 too when concurrent commits kept winning: ``recover`` is best effort and a later
    one releases them)."""

    def attempt(_: int) -> int | Outcome:
        state = ctx.load_state()
        claimed = state.view.claimed_rows()
        holders = load_records(state, claim_owners(claimed))
        dead = [r for r in claimed if not claim_is_live(r[CLAIM], holders)]
        if not dead:
            return 0
        keep = released(dead)
        pending = [r for r in dead if r[READ_VERSION] is None]
        try:
            swap(ctx.manifest, state, [], keep)
            drop_pending(ctx.manifest, state, pending)
        except CommitConflict:
            return Outcome.LOST
        log.info("released %d claims of finished transactions", len(dead))
        return len(dead)

    try:
        return retry_until(attempt, {Outcome.LOST: Budget(Spent, attempts=RELEASE_ATTEMPTS)})
    except Spent:
        log.warning(
            "could not release dead claims: concurrent commits won %d times; recover() "
            "again releases them",
            RELEASE_ATTEMPTS,
        )
        return 0


def info(store: TransactionStore, header: TransactionHeader, record: TxnRecord) -> TransactionInfo:
    stages = {
        k: Stage.from_json(v) for k, v in store.stages(header.txn_id, header.incarnation).items()
    }
    partitions = {oid for s in stages.values() for oid in s.partitions}
    return TransactionInfo(
        header.txn_id,
        header.mode,
        record.state.value,
        header.created_at,
        record.updated_at if record.stored else header.created_at,
        len(stages),
        sum(s.rows for s in stages.values()),
        len(partitions),
        record.error,
        header.incarnation,
    )


def listing(ctx: TransactionContext) -> list[TransactionInfo]:
    """Every transaction with records, in its newest incarnation, oldest first."""
    rows = {r.txn_id: r for r in all_records(ctx.load_state())}
    out = []
    for header in ctx.store.headers():
        record = current_of(header.txn_id, rows.get(header.txn_id), only(header))
        out.append(info(ctx.store, header, of_incarnation(header, record)))
    return sorted(out, key=lambda i: i.created_at)
