"""Keeping ``__manifest`` fast and storage bounded: compaction, index upkeep, cleanup.

Every ``merge_insert`` adds a fragment to ``__manifest`` (pylance fact:
test_fact_each_merge_insert_adds_a_fragment), so publishes fold the fragments no index
covers (``manifest_compaction``) and :func:`maintain` compacts and re-indexes it all on
demand, with a version cleanup that never removes what a reader or a transaction still
needs: whatever a retained ``__manifest`` version reads (those in the retention window,
and tagged ones however old), leaf versions not yet published, and the leaves live
transactions staged files into.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass, field

from airflow_provider_lance.namespace.errors import CommitConflict, InvalidArgumentError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import Manifest, ManifestView
from airflow_provider_lance.namespace.format.manifest_compaction import compact_manifest
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.results import SkipReason
from airflow_provider_lance.namespace.txn.spec_fence import stale_intents
from airflow_provider_lance.namespace.txn.store import TransactionStore

from .sweep import live_stages

log = logging.getLogger(__name__)

#: Compactions of ``__manifest`` tried while concurrent commits win.
COMPACT_ATTEMPTS = 5


@dataclass
class MaintenanceReport:
    manifest_fragments_before: int = 0
    manifest_fragments_after: int = 0
    manifest_versions_removed: int = 0
    leaf_versions_removed: int = 0
    #: Every leaf table left uncleaned (``leaves_skipped_by_reason`` says why).
    leaves_skipped: list[str] = field(default_factory=list)
    #: (oldest, latest) ``__manifest`` version of the retention window left after cleanup;
    #: each version in between stays readable (and so does every tagged one).
    retained_manifest_versions: tuple[int, int] | None = None
    #: Every tag -> the ``__manifest`` version it pins: kept, with all it reads, however old.
    tagged_manifest_versions: dict[str, int] = field(default_factory=dict)
    #: Cleaned leaf -> its oldest kept version (what the window's oldest version reads).
    leaves_kept_for_readers: dict[str, int] = field(default_factory=dict)
    #: Cleaned leaf -> the versions below that which tagged manifest versions read (kept).
    leaves_kept_for_tags: dict[str, list[int]] = field(default_factory=dict)
    #: Leaf -> versions kept after its published ``read_version`` (an in-flight commit may
    #: publish one).
    leaves_kept_unpublished: dict[str, int] = field(default_factory=dict)
    leaves_skipped_by_reason: dict[str, list[str]] = field(default_factory=dict)
    #: What the orphan sweep removed (``sweep.SweepReport``), when it ran.
    orphans: dict[str, object] | None = None
    #: What it rolled back and removed (``unpublished.UnpublishedReport``), when it ran.
    unpublished: dict[str, object] | None = None
    #: Intent rows of merges that died (older than ``spec_fence.INTENT_MAX_AGE``), removed.
    merge_intents_removed: int = 0
    #: What ``optimize_indices`` indexed (an ``OperationResult``), when indexes are declared.
    indices: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        out = dict(self.__dict__)
        if self.retained_manifest_versions is not None:
            out["retained_manifest_versions"] = list(self.retained_manifest_versions)
        return out

    def _skip(self, object_id: str, reason: SkipReason) -> None:
        self.leaves_skipped.append(object_id)
        self.leaves_skipped_by_reason.setdefault(reason.value, []).append(object_id)


def maintain(
    manifest: Manifest,
    state: NamespaceState,
    *,
    compact: bool = True,
    older_than: dt.timedelta | None = None,
) -> MaintenanceReport:
    """Compact ``__manifest`` and, with ``older_than``, remove versions older than that.

    Manifest versions older than ``older_than`` go, except tagged ones (Lance always keeps
    the latest). Every manifest version that remains stays readable: a published
    ``read_version`` never moves backwards, so only leaf versions below the one the
    window's oldest version reads (and older than ``older_than``) are removed, except
    those a retained tagged version reads. Versions after the published one are never
    touched (an in-flight commit may still publish them). Left alone entirely: claimed
    leaves, leaves a live transaction staged files into (Lance's cleanup would delete
    those unreferenced files), leaves read at their latest version (NULL
    ``read_version``) and leaves absent at the oldest remaining manifest version. The live
    stages are read after the ``__manifest`` cleanup, right before the leaves are cleaned;
    a commit refuses staged files that are gone (:func:`~.leaf_commit.check_staged_files`).
    """
    older_than = checked_older_than(older_than)
    report = MaintenanceReport()
    stale = stale_intents(state)
    if stale:
        manifest.delete_rows(stale)
        report.merge_intents_removed = len(stale)
    if compact:
        report.manifest_fragments_before, report.manifest_fragments_after = _compact(manifest)
    if older_than is None:
        return report
    # Read ``state`` before the cleanup: its version may be among those removed.
    claimed, partitions = state.view.claimed_ids(), state.partitions()
    at_state = state.view.published_leaves()
    stats = manifest.storage.clean_up(
        manifest.open(), older_than=older_than, error_if_tagged_old_versions=False
    )
    report.manifest_versions_removed = int(stats.old_versions)
    latest = manifest.open()
    view = ManifestView(latest)
    # Read after the cleanup: whatever it kept (a tag created meanwhile too) is honoured.
    retained = sorted(int(v["version"]) for v in latest.versions())
    oldest = _window_start(retained)
    report.retained_manifest_versions = (oldest, int(latest.version))
    tags = sorted(latest.tags.list().items())
    report.tagged_manifest_versions = {name: int(t["version"]) for name, t in tags}
    at_oldest = (view if oldest == view.version else manifest.at(oldest)).published_leaves()
    below = [manifest.at(v).published_leaves() for v in retained if v < oldest]
    failpoint("maintain.before_live_stages")
    # The stages of live transactions as of the latest rows (``state``'s may be gone).
    staged_ids, staged_dirs = live_stages(
        TransactionStore(manifest.storage), NamespaceState.load(state.root, view)
    )
    failpoint("maintain.live_stages_read")
    work: list[_LeafCleanup] = []
    for partition in partitions:
        object_id, published = partition.object_id, partition.read_version
        location, first = at_oldest.get(object_id, (None, None))
        if object_id in claimed:
            report._skip(object_id, SkipReason.CLAIMED)
        elif object_id in staged_ids or partition.directory in staged_dirs:
            report._skip(object_id, SkipReason.STAGED)
        elif location is None or location != at_state.get(object_id, (None, None))[0]:
            report._skip(object_id, SkipReason.CREATED_IN_WINDOW)
        elif published is None or first is None:
            report._skip(object_id, SkipReason.READ_LATEST)
        else:
            # min(): a caller's state older than the window must not raise the floor.
            keep = min(first, published)
            tagged = [at_tag.get(object_id, (None, None)) for at_tag in below]
            pinned = sorted(
                {r for loc, r in tagged if loc == location and r is not None and r < keep}
            )
            work.append(_LeafCleanup(partition.location, object_id, published, keep, pinned))
    done = manifest.storage.map(
        lambda w: w.run(manifest.storage, older_than), work, step="clean up leaves"
    )
    for w, (unpublished, removed) in zip(work, done, strict=True):
        if unpublished:
            report.leaves_kept_unpublished[w.object_id] = unpublished
        report.leaves_kept_for_readers[w.object_id] = w.keep
        if w.pinned:
            report.leaves_kept_for_tags[w.object_id] = w.pinned
        report.leaf_versions_removed += removed
    return report


@dataclass(frozen=True)
class _LeafCleanup:
    """The version cleanup of one leaf: versions below ``keep`` go, except ``pinned``."""

    location: str
    object_id: str
    published: int
    keep: int
    pinned: list[int]

    def run(self, storage: Storage, older_than: dt.timedelta) -> tuple[int, int]:
        """Remove the versions below ``keep`` older than ``older_than``, except ``pinned``
        (pylance facts: ``test_fact_cleanup_*``); returns (versions above the published
        one, kept; versions removed)."""
        leaf = storage.table(self.location)
        unpublished = max(int(leaf.version) - self.published, 0)
        pinned = set(self.pinned)
        doomed = [v for v in range(1, self.keep) if v not in pinned]
        if not doomed:  # pylance refuses an empty list
            return unpublished, 0
        stats = storage.clean_up(
            leaf, older_than=older_than, versions=doomed, error_if_tagged_old_versions=False
        )
        return unpublished, int(stats.old_versions)


def _compact(manifest: Manifest) -> tuple[int, int]:
    """:func:`compact_manifest`, retried on lost races; after the last, left as it is: (n, n)."""
    for _ in range(COMPACT_ATTEMPTS):
        try:
            with manifest.storage.failures(
                "compact", manifest.uri, conflict="a concurrent commit won"
            ):
                return compact_manifest(manifest)
        except CommitConflict as exc:
            log.info("__manifest compaction lost a race (%s); trying again", exc)
    log.warning(
        "__manifest was not compacted: a concurrent commit won each of %d attempts; the next "
        "maintain tries again",
        COMPACT_ATTEMPTS,
    )
    fragments = len(manifest.open().get_fragments())
    return fragments, fragments


def checked_older_than(older_than: object) -> dt.timedelta | None:
    """``older_than`` as :func:`maintain` uses it: None, or a non-negative timedelta (capped
    at the time since 1970, which Lance's clock would overflow); anything else is an
    :class:`InvalidArgumentError`."""
    if older_than is None:
        return None
    if not isinstance(older_than, dt.timedelta):
        raise InvalidArgumentError(
            f"older_than must be a datetime.timedelta (e.g. timedelta(days=7)) or None, got "
            f"{older_than!r}"
        )
    if older_than < dt.timedelta(0):
        raise InvalidArgumentError(
            f"older_than must not be negative (got {older_than}); use timedelta(0) to keep "
            "only the latest __manifest version"
        )
    ever = dt.timedelta(seconds=time.time()) + dt.timedelta(days=1)  # older than anything
    return min(older_than, ever)


def check_flags(**flags: object) -> None:
    """Refuse a flag that is not True or False (``sweep_orphans="no"`` is truthy)."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")


def _window_start(retained: list[int]) -> int:
    """The oldest version of the unbroken run of retained versions ending at the latest."""
    oldest = retained[-1]
    for version in reversed(retained[:-1]):
        if version != oldest - 1:
            break
        oldest = version
    return oldest
