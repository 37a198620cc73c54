"""One publish, for every path: the attempt that the claim protocol (:mod:`.claim`), the
direct write (:mod:`.direct`) and the table operations (:mod:`~..ops.runner`) share.

An attempt is delta-rs's CommitBuilder -> PreparedCommit -> PostCommitHook, over the
kernel (:mod:`.kernel`):

1. the strategy **prepares** it: reads the rows the swap is against, checks what the swap
   requires of them, and says which leaf work to do (or ends the attempt: a result, or an
   :class:`~..retry.Outcome` saying why to go again);
2. :func:`~.kernel.commit_leaves` commits the leaf work in one fan-out, under the
   strategy's :class:`~.kernel.LeafGuard`;
3. the strategy builds the one ``__manifest`` :class:`~.kernel.Swap` and commits it; a lost
   compare-and-swap is :attr:`~..retry.Outcome.LOST`, and a swap that reported a storage
   error is decided by :func:`~.kernel.published_after_all` (the one recovery rule);
4. the strategy builds (and records) the result, and the post-commit hook compacts
   ``__manifest`` when due, collecting finished transactions first.

Failpoints ``{name}.before_publish`` and ``{name}.after_publish`` bracket the swap on
every path. What differs between the paths is only what each strategy stages, claims and
requires; the attempts repeat under the strategy's retry budgets (:func:`publish`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import lance

from airflow_provider_lance.namespace.errors import CommitConflict, StorageError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import ManifestView
from airflow_provider_lance.namespace.format.manifest_compaction import maybe_compact
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.retry import Budget, Outcome, backoff, retry_until

from .kernel import (
    LeafGuard,
    LeafWork,
    Swap,
    TransactionContext,
    commit_leaves,
    published_after_all,
)
from .lifecycle import TransitionRefused, collect_finished

X = TypeVar("X")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
Row = Mapping[str, Any]


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

    def prepare(self, attempt: int) -> Prepared[X] | R_co | Outcome:
        """Read what the swap is against and check its requirements; a result or an
        Outcome ends the attempt before any leaf commit."""
        ...

    def leaves_failed(self, prepared: Prepared[X], error: Exception) -> R_co | Outcome:
        """A leaf commit raised ``error``: an Outcome or result, or raise it."""
        ...

    def swap(self, prepared: Prepared[X], versions: Mapping[str, int]) -> Swap | R_co | Outcome:
        """The rows the swap writes, given the committed leaf versions; or the attempt's
        end (a strategy whose rows its leaf commits cannot change reads them only now)."""
        ...

    def commit_swap(self, prepared: Prepared[X], swap: Swap) -> int:
        """The compare-and-swap; raises CommitConflict (or TransitionRefused) if it lost."""
        ...

    def mine(self, prepared: Prepared[X], versions: Mapping[str, int]) -> Callable[[Row], bool]:
        """Which row only this publish's swap writes (for :func:`published_after_all`)."""
        ...

    def lost(self, prepared: Prepared[X]) -> Outcome:
        """The swap lost a race: why to go again."""
        ...

    def finish(self, prepared: Prepared[X], versions: Mapping[str, int], version: int) -> R_co:
        """The result of the swap that made ``version`` (and whatever records it); it must
        not raise for anything but a simulated crash: the publish happened."""
        ...


def publish_once(
    ctx: TransactionContext, strategy: PublishStrategy[X, R], attempt: int
) -> R | Outcome:
    """One attempt of ``strategy`` (see the module docstring)."""
    prepared = strategy.prepare(attempt)
    if not isinstance(prepared, Prepared):
        return prepared
    try:
        versions = commit_leaves(
            ctx.storage,
            prepared.works,
            writer=prepared.writer,
            guard=prepared.guard,
            name=strategy.name,
            kind=strategy.kind,
        )
    except Exception as exc:  # the strategy says which failures repeat
        return strategy.leaves_failed(prepared, exc)
    swap = strategy.swap(prepared, versions)
    if not isinstance(swap, Swap):
        return swap
    failpoint(f"{strategy.name}.before_publish")
    try:
        version = strategy.commit_swap(prepared, swap)
    except (CommitConflict, TransitionRefused):
        return strategy.lost(prepared)
    except StorageError as exc:  # committed after all? (else: the error, or unknown)
        version = published_after_all(ctx.manifest, swap, strategy.mine(prepared, versions), exc)
    prepared.published = version
    failpoint(f"{strategy.name}.after_publish")
    result = strategy.finish(prepared, versions, version)
    after_publish(ctx)
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
    collect the records of finished transactions from the compacted table (best effort:
    never raises for storage trouble, since the publish happened)."""
    manifest = ctx.manifest

    def collect(table: lance.LanceDataset) -> None:
        state = NamespaceState.load(manifest.root, ManifestView(table))
        collect_finished(manifest, state, ctx.store.delete)

    maybe_compact(manifest, then=collect)
