"""``PartitionedNamespace.write``: one transaction per write, published whole or not at all.

A write without a ``txn_id`` publishes directly (:mod:`.direct`) and hands its staged files to the
claim protocol only when a partition is claimed or it keeps losing races. A write with a ``txn_id``
stages into that transaction and commits it, so a retry finds the first attempt's outcome. A failed
write is aborted: nothing of it stays, and the error says whether a retry will succeed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from airflow_provider_lance.namespace.errors import (
    LanceNamespaceError,
    StaleStage,
    TransactionAborted,
    aborted_meanwhile,
    stage_again,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.txn_row import TxnState, incarnation_tag
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Spent
from airflow_provider_lance.namespace.types import ArrowData, WriteMode
from airflow_provider_lance.namespace.write.staging import (
    Stage,
    Stager,
    discard_stage,
    list_fragments,
)

from . import transactions
from .abort import abort_transaction
from .direct import publish_stage
from .kernel import CommitOptions, TransactionContext, state_with_claims
from .transactions import Transaction

log = logging.getLogger(__name__)


def write(
    ctx: TransactionContext,
    data: ArrowData,
    mode: WriteMode,
    *,
    txn_id: str | None,
    options: CommitOptions,
    flush_bytes: int,
) -> CommitResult:
    """Stage ``data`` and publish it (see the module docstring)."""
    if txn_id is None:
        return write_direct(ctx, data, mode, options, flush_bytes)
    txn = transactions.begin_transaction(ctx, mode, txn_id, anonymous=False)
    if txn.state is not TxnState.STAGED:  # a retry got as far as committing
        log.info("transaction %s is %s: finishing it", txn.txn_id, txn.state.value)
        return transactions.commit(ctx, txn.txn_id, options)
    return commit_staged(
        ctx, txn, lambda: txn.stage(data, stage_id="write", flush_bytes=flush_bytes), options
    )


def write_direct(
    ctx: TransactionContext,
    data: ArrowData,
    mode: WriteMode,
    options: CommitOptions,
    flush_bytes: int,
) -> CommitResult:
    """A write nobody else knows: published directly (:mod:`.direct`), or handed over."""
    transactions.check_mode(mode)
    held, newer_state = _held_state(ctx)
    txn_id = uuid.uuid4().hex
    owner = incarnation_tag(txn_id, 1)
    empty = Stage(txn_id, "write", mode, held.spec_version)
    stager = Stager(
        held, empty, ctx.storage, flush_bytes, create_leaves_as=owner, newer_state=newer_state
    )
    stage = stager.write(data)
    state = stager.state  # the latest when its first rows were routed
    try:
        return publish_stage(ctx, state, stage, owner=owner)
    except StaleStage as exc:  # its files are discarded: a retry stages afresh
        raise stage_again(exc) from exc
    except Spent:
        log.info("committing %s through the claim protocol", owner)
    try:  # recorded for the claim protocol, which commits the files itself
        list_fragments(stage, ctx.storage)
    except (Exception, KeyboardInterrupt):
        discard_stage(stage, ctx.storage)
        raise
    txn = transactions.begin_transaction(ctx, mode, txn_id, anonymous=True)
    failpoint("direct.handing_over")
    result = commit_staged(ctx, txn, lambda: txn.record(stage), options)
    ctx.store.delete(txn_id)  # nobody can retry an id they never saw: keep no record
    return result


def _held_state(
    ctx: TransactionContext,
) -> tuple[NamespaceState, Callable[[], NamespaceState | None]]:
    """The state the handle holds, and the newer one if any: asked of the storage while
    the stager looks its first partitions up, answered before it writes anything."""
    held = ctx.held_state()
    if not held.view.has_claim_column:  # a namespace from before transactions: once
        return state_with_claims(ctx), lambda: None
    latest = ctx.storage.beside(held.view.is_latest)
    return held, lambda: None if latest.result() else state_with_claims(ctx)


def commit_staged(
    ctx: TransactionContext, txn: Transaction, stage: Callable[[], object], options: CommitOptions
) -> CommitResult:
    """Stage (``stage()``) and commit ``txn``; a failure aborts it (nothing of it stays)."""
    try:
        stage()
        return transactions.commit(ctx, txn.txn_id, options)
    except (Exception, KeyboardInterrupt) as exc:
        _abort_quietly(ctx, txn.txn_id, exc, forget=txn.header.anonymous)
        if isinstance(exc, TransactionAborted):
            raise aborted_meanwhile(txn.txn_id, exc) from exc
        if isinstance(exc, StaleStage):  # aborted above: a retry begins and stages anew
            raise stage_again(exc) from exc
        raise


def _abort_quietly(
    ctx: TransactionContext, txn_id: str, cause: BaseException, *, forget: bool
) -> None:
    """Abort a failed write; an id nobody else knows leaves no record behind."""
    try:
        abort_transaction(ctx, txn_id, f"write failed: {cause}", own_write=forget)
        if forget:
            ctx.store.delete(txn_id)
    except LanceNamespaceError as exc:  # e.g. it was published after all
        log.warning("could not abort transaction %s: %s", txn_id, exc)
