"""One publish attempt, the same for the claim protocol (:mod:`.commit`), the direct write
(:mod:`.direct`) and the table operations (:mod:`~..ops.runner`), over :mod:`.kernel`:

1. the strategy **prepares**: reads the rows the swap is against, checks what it will
   require of them and names the leaf work (:class:`~..retry.Retry` ends the attempt);
2. :func:`~.kernel.commit_leaves` commits the leaf work under the strategy's
   :class:`~.kernel.LeafGuard` (a failure judged by :func:`~.kernel.leaf_failure`);
3. the strategy builds one :class:`~..format.swap.Swap`: lost, refused or unmet is LOST;
   a reported storage error is decided by :func:`~.kernel.published_after_all`;
4. the strategy builds the result; ``__manifest`` is compacted when due. From the swap on
   nothing raises (a publish reported as failed would be written again).

Failpoints ``{name}.before_publish`` and ``{name}.after_publish`` bracket the swap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import lance

from airflow_provider_lance.namespace.errors import CommitConflict, StorageError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import ManifestView
from airflow_provider_lance.namespace.format.manifest_compaction import maybe_compact
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import Swap, TransitionRefused
from airflow_provider_lance.namespace.retry import Outcome, Retry

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
    """An attempt ready for its leaf commits (``writer``: the ``txn#k`` tagging leaf versions;
    ``detail``: what the strategy carries between its steps)."""

    state: NamespaceState
    works: Sequence[LeafWork]
    guard: LeafGuard
    writer: str
    detail: X
    #: The manifest version the swap made (from then on nothing may delete its files).
    published: int | None = None
    #: Leaf versions committed by this attempt, by object id (set by the kernel).
    versions: dict[str, int] = field(default_factory=dict)


class PublishStrategy(Protocol[X, R_co]):
    """What one publish path decides (its steps: see the module docstring). ``name``: the
    failpoint prefix ("commit", "direct", or the operation kind); ``kind``: the table
    operation tagging its leaf versions (None for writes); ``swap`` reads the committed leaf
    versions in ``prepared.versions``; ``finish`` gets None for an empty swap, never raises."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    def prepare(self, attempt: int) -> Prepared[X]: ...
    def swap(self, prepared: Prepared[X]) -> Swap: ...
    def finish(self, prepared: Prepared[X], version: int | None) -> R_co: ...


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


def after_publish(ctx: TransactionContext) -> None:
    """The post-commit hook: compact ``__manifest`` when due, then collect the records of
    finished transactions from the compacted table."""
    manifest = ctx.manifest

    def collect(table: lance.LanceDataset) -> None:
        state = NamespaceState.load(manifest.root, ManifestView(table))
        collect_finished(manifest, state, ctx.store.delete)

    maybe_compact(manifest, then=collect)
