"""Keeping ``__manifest`` fast and storage bounded: compaction, index upkeep, cleanup.

Every ``merge_insert`` adds a fragment to ``__manifest``; without compaction each publish and
each cold prune reads more and more small fragments (pylance 14: ~100 ms -> ~700 ms per
publish after 600 commits). Publishes therefore compact the manifest once it holds
:data:`AUTO_COMPACT_FRAGMENTS` fragments, and :func:`maintain` does it on demand, together
with version cleanup that never removes what a reader or a transaction still needs.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import lance

from .catalog import NamespaceState
from .manifest import CLAIM, OBJECT_ID, Manifest

log = logging.getLogger(__name__)

#: Compact ``__manifest`` after a publish once it has this many fragments.
AUTO_COMPACT_FRAGMENTS = 16


@dataclass
class MaintenanceReport:
    manifest_fragments_before: int = 0
    manifest_fragments_after: int = 0
    manifest_versions_removed: int = 0
    leaf_versions_removed: int = 0
    leaves_skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def compact_manifest(manifest: Manifest) -> tuple[int, int]:
    """Merge the manifest's fragments and bring its index up to date; (before, after)."""
    ds = manifest.open()
    before = len(ds.get_fragments())
    if before > 1:
        ds.optimize.compact_files(target_rows_per_fragment=1 << 20)
        ds = manifest.open()
        ds.optimize.optimize_indices()
        ds = manifest.open()
    return before, len(ds.get_fragments())


def maybe_compact(manifest: Manifest, threshold: int = AUTO_COMPACT_FRAGMENTS) -> None:
    """Best-effort compaction after a publish (a concurrent commit just makes it skip)."""
    try:
        if len(manifest.open().get_fragments()) >= threshold:
            before, after = compact_manifest(manifest)
            log.info("compacted __manifest: %d -> %d fragments", before, after)
    except (OSError, ValueError) as exc:
        log.info("skipped __manifest compaction (concurrent commit): %s", exc)


def maintain(
    manifest: Manifest,
    state: NamespaceState,
    storage_options: Mapping[str, str] | None,
    *,
    compact: bool = True,
    older_than: dt.timedelta | None = None,
) -> MaintenanceReport:
    """Compact ``__manifest`` and, with ``older_than``, remove versions older than that.

    Manifest versions older than ``older_than`` go (keep it longer than your longest
    transaction and than the history :func:`~.repair.repair` may need). A leaf table is
    cleaned only while no transaction holds it and its published ``read_version`` is its
    latest version, so nothing a reader or a transaction needs is ever removed.
    """
    report = MaintenanceReport()
    if compact:
        report.manifest_fragments_before, report.manifest_fragments_after = compact_manifest(
            manifest
        )
    if older_than is None:
        return report
    claimed, partitions = _claimed(state), state.partitions()
    stats = manifest.open().cleanup_old_versions(older_than=older_than)
    report.manifest_versions_removed = int(stats.old_versions)
    opts = dict(storage_options) if storage_options else None
    for partition in partitions:
        leaf = lance.dataset(partition.location, storage_options=opts)
        if partition.object_id in claimed or leaf.version != partition.read_version:
            report.leaves_skipped.append(partition.object_id)
            continue
        removed = leaf.cleanup_old_versions(older_than=older_than).old_versions
        report.leaf_versions_removed += int(removed)
    return report


def _claimed(state: NamespaceState) -> set[str]:
    if CLAIM not in state.dataset.schema.names:
        return set()
    rows = state.dataset.to_table(columns=[OBJECT_ID], filter=f"{CLAIM} IS NOT NULL")
    return set(rows.column(OBJECT_ID).to_pylist())
