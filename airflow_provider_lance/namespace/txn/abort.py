"""Undoing transactions: abort, the abort of abandoned anonymous writes, and ``recover``.

Abort and recovery *fence* the transaction row first (one swap to ABORTED, claims
released): if a commit published first, the fence fails and nothing is deleted. Only
then are its staged files deleted, which no published ``read_version`` can reference.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import CLAIM, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import Swap, TransitionRefused
from airflow_provider_lance.namespace.format.txn_row import TxnRecord, TxnState, claim_is_live
from airflow_provider_lance.namespace.retry import Budget, Outcome, Spent, retry_until
from airflow_provider_lance.namespace.write.staging import Stage, discard_stage

from .kernel import TransactionContext
from .lifecycle import (
    abandoned,
    aborted,
    all_records,
    anonymous_lease,
    claim_owners,
    drop_pending,
    load_records,
    released,
)
from .plan import Plan
from .records import current_of, only, resolve
from .store import check_txn_id

log = logging.getLogger(__name__)

#: Default lease: a transaction idle for longer is considered abandoned by ``recover``.
DEFAULT_LEASE_SECONDS = 6 * 3600.0
#: How long abort retries swaps lost to unrelated commits (seconds).
SWAP_TIMEOUT = 120.0
#: Swaps ``release_dead_claims`` may lose before it leaves them to a later recover.
RELEASE_ATTEMPTS = 64


def abort_transaction(
    ctx: TransactionContext, txn_id: str, reason: str = "aborted", *, own_write: bool = False
) -> None:
    """Undo an unpublished transaction (fence, then delete its files); an error for a
    published one. ``own_write``: the caller is the anonymous transaction's own writer,
    whose commit failed: nobody else can seal it, so without a row it needs no fence."""
    known: dict[str, Stage] = {}  # an anonymous one's stages, read before the fence

    def attempt(_: int) -> TxnRecord | Outcome | None:
        """The fenced record (None: nothing is left to clean up), or LOST."""
        state = ctx.load_state()
        record = resolve(ctx, state, check_txn_id(txn_id))
        if record is None and own_write:  # aborted and collected: its later stages go too
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
            moves = aborted(record, reason, sources)
            keep = released(state.view.claimed_by(record.incarnation_tag))
            ctx.manifest.commit(Swap(state.view, keep, moves=moves))
        except (CommitConflict, TransitionRefused):
            return Outcome.LOST
        record = moves[0].after
        log.info("transaction %s aborted: %s", record.incarnation_tag, reason)
        return record

    stuck = CommitConflict(
        f"could not abort transaction {txn_id}: concurrent commits kept winning "
        f"for {SWAP_TIMEOUT:.0f}s; nothing was aborted"
    )
    record = retry_until(attempt, {Outcome.LOST: Budget(lambda: stuck, seconds=SWAP_TIMEOUT)})
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
    """Abort the anonymous holders of ``blocked`` past their lease (:func:`abandoned`)."""
    for record in abandoned(state, blocked, holders):
        tag, age = record.incarnation_tag, record.age
        log.warning(
            "aborting %s, a write without a txn_id that has held its partitions for %.0fs "
            "(its process died while committing?)",
            tag,
            age,
        )
        try:
            abort_transaction(ctx, record.txn_id, reason=f"abandoned: committing for {age:.0f}s")
        except (InvalidArgumentError, CommitConflict) as exc:  # published meanwhile, a race
            log.info("left %s alone: %s", tag, exc)
        except (LanceNamespaceError, OSError) as exc:  # not the waiter's failure
            log.warning("could not abort %s: %s", tag, exc)


def _clean_up(
    ctx: TransactionContext, record: TxnRecord, known: Mapping[str, Stage] | None = None
) -> None:
    """After the fence: delete what the incarnation (and its merged sources) staged
    (``known``: stages read before the fence) and drop the unpublished rows it created."""
    state, tag = ctx.load_state(), record.incarnation_tag
    doomed = [(record.txn_id, record.incarnation)]
    for source in load_records(state, record.sources).values():
        if source.merged_into == tag:
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
            log.debug("no plan to clean up for %s: %s", tag, exc)
    seen: set[str] = set()
    for stage in fragments.values():
        discard_stage(stage, ctx.storage, keep=frozenset(seen))
        seen |= staged_fragments([stage])
    for txn_id, k in doomed:
        for stage_id in ctx.store.stages(txn_id, k):
            ctx.store.delete_stage(txn_id, k, stage_id)
    rows = [r for r in state.view.claimed_by(tag) if r[READ_VERSION] is None]
    if rows:
        try:
            drop_pending(ctx.manifest, state, rows)
        except CommitConflict:
            log.info("left %d dead partition rows of %s to recovery", len(rows), tag)


def staged_fragments(stages: Iterable[Stage]) -> set[str]:
    """The fragments (JSON) of every partition of ``stages``."""
    return {f for s in stages for p in s.partitions.values() for f in p.fragments}


def recover(ctx: TransactionContext, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> list[str]:
    """Abort every unpublished transaction idle longer than ``lease_seconds`` (an anonymous
    one committing: its shorter lease) and release the claims of finished or missing ones."""
    now = time.time()
    state = ctx.load_state()
    rows = {r.txn_id: r for r in all_records(state)}
    idle: dict[str, float] = {}
    for header in ctx.store.headers():
        record = current_of(header.txn_id, rows.get(header.txn_id), only(header))
        if record is None or record.state not in (TxnState.STAGED, TxnState.COMMITTING):
            continue
        idle[header.txn_id] = now - (record.updated_at if record.stored else header.created_at)
    for txn_id, record in rows.items():
        if txn_id not in idle and record.state is TxnState.COMMITTING:
            idle[txn_id] = record.age  # its records were deleted by hand: still fence it
    aborted = []
    for txn_id, seconds in sorted(idle.items()):
        lease = lease_seconds
        stored = rows.get(txn_id)
        if stored is not None and stored.anonymous and stored.state is TxnState.COMMITTING:
            lease = min(lease, anonymous_lease(state, stored.incarnation_tag))
        if seconds <= lease:
            continue
        try:
            abort_transaction(ctx, txn_id, reason=f"abandoned (idle {seconds:.0f}s > lease)")
        except InvalidArgumentError as exc:  # published or merged meanwhile
            log.info("recover left %s alone: %s", txn_id, exc)
            continue
        aborted.append(txn_id)
    release_dead_claims(ctx)
    return aborted


def release_dead_claims(ctx: TransactionContext) -> int:
    """Clear claims whose holder can no longer publish; returns how many (0 when concurrent
    commits kept winning: a later ``recover`` releases them)."""

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
            ctx.manifest.commit(Swap(state.view, keep))
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
