"""Removing data: ``drop_partitions`` (metadata only) and ``delete`` (rows), one swap each.

A dropped partition's ``__manifest`` row is deleted; its leaf (older versions read it) and
the namespace rows above it stay until maintenance (writing the values again creates a fresh
leaf). ``delete(filter)`` drops the partitions the filter covers entirely (:mod:`.coverage`)
and writes Lance deletion files into the others, on their published versions, in one swap.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import FragmentMetadata, LanceFragment

from airflow_provider_lance.namespace.errors import FilterError, InvalidArgumentError
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID
from airflow_provider_lance.namespace.format.schema import ReadPlan
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.coverage import coverage, partition_filter, pruned_rows
from airflow_provider_lance.namespace.read.pruning import parse_filter
from airflow_provider_lance.namespace.read.scan import lance_filter

from .runner import ComputedChange, Selection, TableOperation, outcome

log = logging.getLogger(__name__)


def _check_filter(filter: object) -> str:
    if not isinstance(filter, str) or not filter.strip():
        raise InvalidArgumentError("a filter (a non-empty SQL boolean expression) is required")
    return filter


class DropPartitions(TableOperation):
    """Remove whole partitions: those whose partition values make ``filter`` TRUE."""

    kind = "drop_partitions"

    def __init__(self, storage: Storage, filter: str) -> None:
        super().__init__(storage)
        self.filter = _check_filter(filter)

    def select(self, state: NamespaceState) -> Selection:
        rows = partition_filter(state, self.filter)
        return Selection(drops={p.object_id: p for p in state.partitions_from_rows(rows)})

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        raise AssertionError("drop_partitions changes no leaf")


class DeleteRows(TableOperation):
    """Remove the rows matching ``filter``: covered partitions dropped, deletion files
    written into the others."""

    kind = "delete"

    def __init__(self, storage: Storage, filter: str) -> None:
        super().__init__(storage)
        self.filter = _check_filter(filter)

    def select(self, state: NamespaceState) -> Selection:
        candidates = pruned_rows(state, self.filter)
        verdict = coverage(state, self.filter, candidates)
        ids = candidates.column(OBJECT_ID)
        selection = Selection()
        for wanted, into in ((verdict.covered, selection.drops), (verdict.undecided, None)):
            mask = pc.is_in(ids, pa.array(sorted(wanted), pa.utf8()))
            found = state.partitions_from_rows(candidates.filter(mask))
            target = selection.targets if into is None else into
            target.update((p.object_id, p) for p in found)
        return selection

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        residual = parse_filter(self.filter, state.schema)[0]
        leaf = self.storage.table(partition.location, base)
        fragments = leaf.get_fragments()
        plan = state.schema.read_plan(leaf.schema, residual.columns)
        sql = lance_filter(residual, plan, leaf.schema)
        updated: list[FragmentMetadata] = []
        deleted: list[int] = []
        removed = 0
        for fragment in fragments:
            before = live_rows(fragment.metadata)
            with self.storage.failures("delete rows of", partition.location):
                after = _delete_rows(fragment, leaf, plan, residual, sql)
            if after is None:
                deleted.append(fragment.fragment_id)
                removed += before
            elif live_rows(after) != before:
                updated.append(after)
                removed += before - live_rows(after)
        n = len(fragments)
        change = outcome(
            partition, rows_removed=removed, fragments_before=n, fragments_after=n - len(deleted)
        )
        if not removed:
            return ComputedChange(partition, base, None, change)
        operation = LanceOperation.Delete(updated, deleted, self.filter)
        return ComputedChange(partition, base, operation, change, leaf=leaf)


def live_rows(metadata: FragmentMetadata) -> int:
    """Rows of a fragment that are not deleted."""
    deletion = metadata.deletion_file
    deleted = 0 if deletion is None else int(deletion.num_deleted_rows or 0)
    return int(metadata.physical_rows) - deleted


def _delete_rows(
    fragment: LanceFragment,
    leaf: lance.LanceDataset,
    plan: ReadPlan,
    residual: BoundExpression,
    sql: str | None,
) -> FragmentMetadata | None:
    """The fragment with the matching rows deleted (a new deletion file, nothing
    committed); None when every row matched. Lance evaluates the filter when it can, else
    it is evaluated here on the conformed rows and those deleted by address."""
    if sql is not None:
        try:
            return fragment.delete(sql)
        except (ValueError, OSError) as exc:  # Lance's planner is stricter than DataFusion's:
            # pylance fact test_fact_lance_filter_planner_rejects_what_datafusion_coerces
            log.debug("filter %r not evaluated by Lance: %s", sql, exc)
    addresses = list(_matching_addresses(fragment, leaf, plan, residual))
    if not addresses:
        return fragment.metadata
    return fragment.delete(f"_rowaddr IN ({', '.join(map(str, addresses))})")


def _matching_addresses(
    fragment: LanceFragment, leaf: lance.LanceDataset, plan: ReadPlan, residual: BoundExpression
) -> Iterable[int]:
    scanner = leaf.scanner(columns=plan.leaf_columns, with_row_address=True, fragments=[fragment])
    for batch in scanner.to_reader():
        table = plan.apply(batch)
        try:
            truth = residual.evaluate(table)
        except Exception as exc:
            raise FilterError(f"evaluating {residual.sql!r} failed: {exc}") from exc
        mask = pc.fill_null(truth, False)
        yield from pc.filter(batch.column("_rowaddr"), mask).to_pylist()
