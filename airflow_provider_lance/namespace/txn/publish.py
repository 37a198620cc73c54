"""One publish, for every path: the attempt that the claim protocol (:mod:`.commit`), the
direct write (:mod:`.direct`) and the table operations (:mod:`~..ops.runner`) share.

An attempt is delta-rs's CommitBuilder -> PreparedCommit -> PostCommitHook, over the
kernel (:mod:`.kernel`):

1. the strategy **prepares** it: reads the rows the swap is against, checks what the swap
   will require of them, and says which leaf work to do; an attempt that cannot go on
   raises :class:`~..retry.Retry` with the reason (wait for a claim, a lost race, ...);
2. :func:`~.kernel.commit_leaves` commits the leaf work in one fan-out, under the
   strategy's :class:`~.kernel.LeafGuard`; a failure is judged by the one rule of
   :func:`~.kernel.leaf_failure`;
3. the strategy builds the one ``__manifest`` :class:`~..format.swap.Swap` (rows,
   transaction moves, requirements) and :meth:`~..format.manifest.Manifest.commit`
   applies it; a lost compare-and-swap (or a refused move, an unmet requirement) is
   :attr:`~..retry.Outcome.LOST`, and a swap that reported a storage error is decided by
   :func:`~.kernel.published_after_all`;
4. the strategy builds the result; then the post-commit hook compacts ``__manifest`` when
   due. From the swap on nothing raises but a simulated crash: a publish reported as
   failed would be written again.

Failpoints ``{name}.before_publish`` and ``{name}.after_publish`` bracket the swap on
every path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import lance

from airflow_provider_lance.namespace.errors import CommitConflict, StorageError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import ManifestView
from airflow_provider_lance.namespace.format.manifest_compaction import maybe_compact
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import Swap, TransitionRefused
from airflow_provider_lance.namespace.retry import Budget, Outcome, Retry, backoff, retry_until

from .kernel import (
    LeafGuard,
    LeafWork,
    TransactionContext,
    best_effort,
    commit_leaves,
    leaf_failure,
    published_after_all,
)
from .lifecycle import collect_finished

X = TypeVar("X")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


@dataclass
class Prepared(Generic[X]):
    """An attempt ready for its leaf commits: the state its swap is against, the leaf work,
    the guard asked before any roll-back, the writer tagging the leaf versions (``txn#k``),
    and what else the strategy carries from one step to the next."""

    state: NamespaceState
    works: Sequence[LeafWork]
    guard: LeafGuard
    writer: str
    detail: X
    #: The manifest version the swap made, once it did (from then on nothing may delete
    #: what the attempt published, whatever fails after).
    published: int | None = None
    #: Leaf versions committed by this attempt, by object id (set by the kernel).
    versions: dict[str, int] = field(default_factory=dict)


class PublishStrategy(Protocol[X, R_co]):
    """What one publish path decides; :func:`publish_once` does the rest."""

    @property
    def name(self) -> str:
        """Failpoint prefix ("commit", "direct", or the operation kind)."""
        ...

    @property
    def kind(self) -> str | None:
        """The table operation tagging its leaf versions (None for writes)."""
        ...

    def prepare(self, attempt: int) -> Prepared[X]:
        """Read what the swap is against and check its requirements; raise
        :class:`~..retry.Retry` to end the attempt before any leaf commit."""
        ...

    def swap(self, prepared: Prepared[X]) -> Swap:
        """The swap, given the committed leaf versions (``prepared.versions``)."""
        ...

    def finish(self, prepared: Prepared[X], version: int | None) -> R_co:
        """The result of the swap that made ``version`` (None: the swap was empty, nothing
        was published); it must not raise: the publish happened."""
        ...


def publish_once(
    ctx: TransactionContext, strategy: PublishStrategy[X, R], attempt: int
) -> R | Outcome:
    """One attempt of ``strategy`` (see the module docstring)."""
    try:
        prepared = strategy.prepare(attempt)
        try:
            prepared.versions = commit_leaves(
                ctx.storage,
                prepared.works,
                writer=prepared.writer,
                guard=prepared.guard,
                name=strategy.name,
                kind=strategy.kind,
            )
        except Exception as exc:
            if leaf_failure(ctx, prepared.state, exc):
                return Outcome.LOST
            raise
        swap = strategy.swap(prepared)
        if swap.is_empty:
            return strategy.finish(prepared, None)
        try:
            swap.check()  # a swap that cannot win is never sent
            failpoint(f"{strategy.name}.before_publish")
            version = ctx.manifest.commit(swap)
        except (CommitConflict, TransitionRefused):
            return Outcome.LOST
        except StorageError as exc:  # committed after all? (else: the error, or unknown)
            version = published_after_all(ctx.manifest, swap, exc)
    except Retry as again:
        return again.outcome
    prepared.published = version
    best_effort("the step after the publish", lambda: failpoint(f"{strategy.name}.after_publish"))
    result = strategy.finish(prepared, version)
    best_effort("compacting __manifest", lambda: after_publish(ctx))
    return result


def publish(
    ctx: TransactionContext,
    strategy: PublishStrategy[X, R],
    budgets: Mapping[Outcome, Budget],
    *,
    sleep: Callable[[int], None] = backoff,
) -> R:
    """Attempts of ``strategy`` until one finishes or a budget is spent."""
    return retry_until(lambda n: publish_once(ctx, strategy, n), budgets, sleep=sleep)


def after_publish(ctx: TransactionContext) -> None:
    """The post-commit hook of every publish: compact ``__manifest`` when due, then
    collect the records of finished transactions from the compacted table."""
    manifest = ctx.manifest

    def collect(table: lance.LanceDataset) -> None:
        state = NamespaceState.load(manifest.root, ManifestView(table))
        collect_finished(manifest, state, ctx.store.delete)

    maybe_compact(manifest, then=collect)
