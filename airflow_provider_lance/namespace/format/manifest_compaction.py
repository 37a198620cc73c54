"""Compaction of ``__manifest`` (every ``merge_insert`` adds a fragment): after a publish,
once it holds :data:`AUTO_COMPACT_FRAGMENTS` fragments, and on demand by ``maintain``.

A publish's compaction folds the fragments no index covers into one; once the rows outside
the indices reach :data:`REINDEX_ROWS` (or an index is missing) it compacts and re-indexes
the whole table, as ``maintain`` always does.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

import lance

from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.namespace.failpoints import failpoint

from .manifest import Manifest

log = logging.getLogger(__name__)

#: Compact ``__manifest`` after a publish once it has this many fragments.
AUTO_COMPACT_FRAGMENTS = 16
#: Rows outside the indices at which a publish's compaction re-indexes the whole table.
REINDEX_ROWS = 8192
#: Fragments of at most this many rows (Lance's default file size, as ``maintain`` makes).
TARGET_ROWS_PER_FRAGMENT = 1 << 20


def compact_manifest(manifest: Manifest, ds: lance.LanceDataset | None = None) -> tuple[int, int]:
    """Merge the manifest's fragments and bring its indices up to date; (before, after)
    fragments. ``ds``: the latest version, if the caller just opened it."""
    ds = ds if ds is not None else manifest.open()
    before = len(ds.get_fragments())
    if before > 1:
        ds.optimize.compact_files(target_rows_per_fragment=TARGET_ROWS_PER_FRAGMENT)
        ds = manifest.open()
        ds.optimize.optimize_indices()
        ds = manifest.open()
    manifest.ensure_indices(ds)
    return before, len(ds.get_fragments())


def compact_unindexed(manifest: Manifest, ds: lance.LanceDataset | None = None) -> tuple[int, int]:
    """Fold the fragments no index covers into one, or compact and re-index the whole table
    when due; (before, after). ``ds``: the latest version, which it advances: give a copy."""
    ds = ds if ds is not None else manifest.open()
    indexed = indexed_fragments(ds)
    fragments = ds.get_fragments()
    unindexed = [f for f in fragments if f.fragment_id not in indexed]
    rows = sum(f.metadata.physical_rows or 0 for f in unindexed)  # (no deletion file read)
    if not indexed or rows >= REINDEX_ROWS or manifest.missing_indices(ds):
        return compact_manifest(manifest, ds)
    if len(unindexed) < 2:
        return len(fragments), len(fragments)
    failpoint("manifest.before_fold")
    metrics = ds.optimize.compact_files(
        target_rows_per_fragment=TARGET_ROWS_PER_FRAGMENT, excluded_fragment_ids=sorted(indexed)
    )
    return len(fragments), len(fragments) - metrics.fragments_removed + metrics.fragments_added


def indexed_fragments(ds: lance.LanceDataset) -> frozenset[int]:
    """The fragments every index of ``ds`` covers (none if it has no index)."""
    covered: frozenset[int] | None = None
    for index in ds.describe_indices():
        ids = frozenset(i for s in index.segments for i in s.fragment_ids)
        covered = ids if covered is None else covered & ids
    return covered or frozenset()


def maybe_compact(
    manifest: Manifest,
    threshold: int = AUTO_COMPACT_FRAGMENTS,
    then: Callable[[lance.LanceDataset], object] | None = None,
) -> None:
    """Best-effort compaction after a publish, when the table has ``threshold`` fragments;
    ``then`` runs after it, on the table it left. Never raises a storage error or a
    conflict: the publish is committed already."""
    try:
        latest = manifest.last_swapped or manifest.open()
        if len(latest.get_fragments()) < threshold:
            return
        table = copy.copy(latest)  # the compaction advances it: not the handle's own copy
        try:
            before, after = compact_unindexed(manifest, table)
            log.info("compacted __manifest: %d -> %d fragments", before, after)
        except (OSError, ValueError, LanceNamespaceError) as exc:
            log.info("skipped __manifest compaction (concurrent commit or storage error): %s", exc)
        if then is not None:
            then(table)
    except (OSError, ValueError, LanceNamespaceError) as exc:  # see the docstring
        log.info("skipped what follows a publish (concurrent commit or storage error): %s", exc)
