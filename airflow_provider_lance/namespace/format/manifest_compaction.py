"""Compaction of ``__manifest``: every ``merge_insert`` adds a fragment, so publishes compact
it once it holds :data:`AUTO_COMPACT_FRAGMENTS` fragments (best effort, after the publish),
and ``maintain`` does it on demand."""

from __future__ import annotations

import logging
from collections.abc import Callable

from airflow_provider_lance.namespace.errors import LanceNamespaceError

from .manifest import Manifest

log = logging.getLogger(__name__)

#: Compact ``__manifest`` after a publish once it has this many fragments.
AUTO_COMPACT_FRAGMENTS = 16


def compact_manifest(manifest: Manifest) -> tuple[int, int]:
    """Merge the manifest's fragments and bring its indices up to date (creating those a
    namespace made by an earlier release lacks); (before, after)."""
    ds = manifest.open()
    before = len(ds.get_fragments())
    if before > 1:
        ds.optimize.compact_files(target_rows_per_fragment=1 << 20)
        ds = manifest.open()
        ds.optimize.optimize_indices()
        ds = manifest.open()
    manifest.ensure_indices(ds)
    return before, len(ds.get_fragments())


def maybe_compact(
    manifest: Manifest,
    threshold: int = AUTO_COMPACT_FRAGMENTS,
    prepare: Callable[[], object] | None = None,
) -> None:
    """Best-effort compaction after a publish (a concurrent commit just makes it skip);
    ``prepare`` runs first when compaction is due (e.g. to drop rows it need not copy).
    The fragments are counted as the publish left them (other writers' publishes since
    then are counted by their own check)."""
    try:
        latest = manifest.last_swapped or manifest.open()
        if len(latest.get_fragments()) >= threshold:
            if prepare is not None:
                prepare()
            before, after = compact_manifest(manifest)
            log.info("compacted __manifest: %d -> %d fragments", before, after)
    except (OSError, ValueError, LanceNamespaceError) as exc:
        # Never an error of the publish that called it: that is committed already, and a
        # caller told it failed would retry it (and duplicate an anonymous write).
        log.info("skipped __manifest compaction (concurrent commit or storage error): %s", exc)
