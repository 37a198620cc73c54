"""``optimize()``: compact leaves with many small fragments, published in one swap.

Each leaf's compaction is planned and executed on its *published* version (files written,
nothing committed), committed as that version's ``Rewrite`` through
:func:`~.leaf_commit.commit_change`, and every compacted leaf published in one ``__manifest``
swap like any table operation (:mod:`~.runner`). A leaf that keeps moving under the swap
(``kept_moving``), that a committing transaction holds (``claimed``) or that has indices and
is read at its latest version (``indexed``) is left alone. A leaf with indices is committed
by Lance's own compaction commit, which remaps them onto the new fragments
(:class:`~.leaf_commit.IndexedRewrite`): searches return what they did, and the rows they
index stay indexed. A compaction never changes what a leaf holds.

pylance facts, in tests/namespace/test_pylance_facts.py:
test_fact_compaction_planned_on_an_old_version_writes_files_without_committing,
test_fact_restore_keeps_fragment_ids_so_a_change_computed_before_applies_after,
test_fact_stale_delete_and_rewrite_are_rebased_over_an_append.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from lance import LanceOperation
from lance.optimize import Compaction, CompactionOptions, RewriteResult

from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.coverage import pruned_rows
from airflow_provider_lance.namespace.results import SkipReason
from airflow_provider_lance.namespace.write.leaf_commit import (
    IndexedRewrite,
    content_after,
    published_and_kept,
)

from .runner import ComputedChange, Selection, TableOperation, outcome

log = logging.getLogger(__name__)

#: Lance's default: fragments smaller than this are merged.
DEFAULT_TARGET_ROWS = 1024 * 1024


class Optimize(TableOperation):
    """Compact the leaves of the partitions ``filter`` may touch (all for None)."""

    kind = "optimize"
    skips_busy = True

    def __init__(
        self,
        storage: Storage,
        filter: str | None = None,
        *,
        target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
        materialize_deletions: bool = True,
    ) -> None:
        super().__init__(storage)
        if not isinstance(target_rows_per_fragment, int) or target_rows_per_fragment < 1:
            raise InvalidArgumentError(
                f"target_rows_per_fragment must be a positive integer, got "
                f"{target_rows_per_fragment!r}"
            )
        self.filter = filter
        self.options = CompactionOptions(
            target_rows_per_fragment=target_rows_per_fragment,
            materialize_deletions=materialize_deletions,
            num_threads=1,  # leaves are compacted in parallel already
        )

    def select(self, state: NamespaceState) -> Selection:
        rows = pruned_rows(state, self.filter)
        return Selection(targets={p.object_id: p for p in state.partitions_from_rows(rows)})

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        # planned on the newest version kept above the published one (an index built with
        # pylance, same fragments), so that its commit remaps those indices too
        leaf, planned = published_and_kept(self.storage, partition.location, base)
        before = len(leaf.get_fragments())
        change = outcome(partition, fragments_before=before, fragments_after=before)
        indexed = bool(planned.describe_indices())
        if indexed and partition.read_version is None:
            log.info("optimize left %s alone: indexed, read at its latest", partition.object_id)
            return ComputedChange(partition, base, None, change, skip=SkipReason.INDEXED)
        with self.storage.failures("plan the compaction of", partition.location):
            plan = Compaction.plan(planned, self.options)
        if plan.num_tasks() == 0:
            return ComputedChange(partition, base, None, change)
        with self.storage.failures("compact", partition.location):
            rewrites = [task.execute(planned) for task in plan.tasks]
        groups = [_group(r) for r in rewrites]
        operation: LanceOperation.Rewrite = LanceOperation.Rewrite(groups, [])
        if indexed:
            operation = IndexedRewrite(groups, [], rewrites, self.options)
        change = replace(change, fragments_after=len(content_after(leaf, base, operation)))
        return ComputedChange(partition, base, operation, change, leaf=leaf)


def _group(rewrite: RewriteResult) -> LanceOperation.RewriteGroup:
    """One task's rewritten fragments (the stub's ``old_fragments`` is
    ``original_fragments``: pylance fact, tests/namespace/test_pylance_facts.py::
    test_fact_rewrite_result_names_the_old_fragments_original_fragments)."""
    old = rewrite.original_fragments  # type: ignore[attr-defined]
    return LanceOperation.RewriteGroup(old, rewrite.new_fragments)
