"""Unpublished leaf versions: what killed or interrupted writers leave above the published
``read_version`` of a partition, rolled back and removed.

The next commit to a partition rolls such versions back, but a partition never written
again keeps them. :func:`reclaim_unpublished` gives that space back, for each partition:

1. it is skipped if a transaction claims it (it is about to publish those versions), if a
   live transaction staged files for it (Lance's cleanup would delete them), if it is
   published as "read the latest" (NULL ``read_version``), or if its newest version is
   younger than ``min_age`` (a direct write in flight has committed it and not swapped);
2. the published version R is restored on top (Lance's ``restore``: version N, holding
   exactly R's fragments, checked), as every commit's roll-back does; versions right above
   R made outside the namespace that change no rows (an index built with pylance) are kept
   as every commit keeps them: the newest of them is restored (or, if nothing lies above
   it, is N itself);
3. one compare-and-swap on ``__manifest`` sets the ``read_version``\\ s of all of them to
   their N, only where each row is still unclaimed and unchanged since it was read. This is
   the fence: a direct write that committed one of those versions and swaps later fails
   and commits its rows again on N, never reusing a version about to go; a partition
   published or claimed meanwhile fails the swap and is left alone. N reads exactly what
   R read, so no reader sees a change;
4. the versions R+1 .. L (L: the newest one seen old enough) are removed with Lance's
   cleanup, which deletes their data files no remaining version references.

What ``min_age`` protects: a direct write older than it that, having lost its swap to the
fence, commits its staged files again while step 4 deletes them. Its swap checks its files
first and fails retryably if they are gone; the age closes the window between that check
and its swap.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from airflow_provider_lance.namespace.errors import CommitConflict, TableNotFoundError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import CLAIM, OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.io.storage import FileEntry, Storage
from airflow_provider_lance.namespace.txn.builds import live_paths
from airflow_provider_lance.namespace.txn.kernel import TransactionContext
from airflow_provider_lance.namespace.write.leaf_commit import (
    KEPT,
    content_at,
    kept_above,
    warn_rolled_back,
)

from .sweep import live_stages

log = logging.getLogger(__name__)

#: Version files of a leaf table: ``_versions/<n>.manifest``, ``n`` the version or (Lance's
#: V2 naming) ``2**64 - 1 - version`` (pylance fact: tests/namespace/admin/
#: test_unpublished_versions.py::test_fact_version_file_names_give_the_version).
_V2_NAMES = 1 << 63
_U64_MAX = (1 << 64) - 1
#: Fence swaps lost to concurrent publishes before giving up (the leaves rolled back keep
#: R's content until the next run).
FENCE_ATTEMPTS = 5
#: Leaves listed in the report, at most.
SAMPLE = 20


@dataclass
class UnpublishedReport:
    """What :func:`reclaim_unpublished` did (or, in a dry run, would do)."""

    dry_run: bool = False
    #: Leaves whose unpublished versions were rolled back and removed.
    leaves_reclaimed: int = 0
    versions_removed: int = 0
    bytes_freed: int = 0
    #: Leaves with unpublished versions left alone, by reason: ``young`` (newer than the
    #: safety age), ``claimed``, ``staged`` (a live transaction's), ``moved`` (published,
    #: claimed or committed to while this ran).
    kept: dict[str, int] = field(default_factory=dict)
    sample: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    def _keep(self, reason: str, count: int = 1) -> None:
        if count:
            self.kept[reason] = self.kept.get(reason, 0) + count


@dataclass(frozen=True)
class _Candidate:
    partition: Partition
    #: The newest version listed, old enough to go.
    newest: int


def version_of(name: str) -> int | None:
    """The version a leaf's ``_versions/`` file name stands for (None: not a version)."""
    stem, dot, ext = name.rpartition(".")
    if not dot or ext != "manifest" or not stem.isdigit():
        return None
    number = int(stem)
    return _U64_MAX - number if number >= _V2_NAMES else number


def newest_versions(entries: Iterable[FileEntry]) -> dict[str, tuple[int, float]]:
    """Leaf directory -> (its newest version, that version file's modification time),
    from a listing of the root."""
    out: dict[str, tuple[int, float]] = {}
    for entry in entries:
        directory, _, rest = entry.path.partition("/")
        folder, _, name = rest.partition("/")
        if folder != "_versions" or "/" in name:
            continue
        version = version_of(name)
        if version is not None and version > out.get(directory, (0, 0.0))[0]:
            out[directory] = (version, entry.mtime)
    return out


def reclaim(ctx: TransactionContext, *, min_age: dt.timedelta, dry_run: bool) -> UnpublishedReport:
    """:func:`reclaim_unpublished` on the latest state, sparing what live transactions
    staged (their stage records and plans, read now) and the leaves live builds wrote
    into (an index build's leaf commit, not yet published, whose segments it reuses)."""
    state = ctx.load_state()
    staged = set.union(*live_stages(ctx.store, state))
    staged |= {path.split("/", 1)[0] for path in live_paths(ctx.storage)}
    return reclaim_unpublished(ctx, state, min_age=min_age, staged=staged, dry_run=dry_run)


def reclaim_unpublished(
    ctx: TransactionContext,
    state: NamespaceState,
    *,
    min_age: dt.timedelta,
    staged: set[str],
    dry_run: bool = False,
) -> UnpublishedReport:
    """Roll back and remove the unpublished leaf versions older than ``min_age`` of the
    partitions of ``state`` (the latest) that no transaction claims and that are not in
    ``staged`` (object ids and leaf directories)."""
    storage = ctx.storage
    report = UnpublishedReport(dry_run=dry_run)
    cutoff = time.time() - min_age.total_seconds()
    listed = newest_versions(storage.list_files())
    claimed = state.view.claimed_ids()
    candidates: list[_Candidate] = []
    for partition in state.partitions():
        published = partition.read_version
        newest, mtime = listed.get(partition.directory, (0, 0.0))
        if published is None or newest <= published:
            continue
        if partition.object_id in claimed:
            report._keep("claimed")
        elif partition.object_id in staged or partition.directory in staged:
            report._keep("staged")
        elif mtime >= cutoff:
            report._keep("young")
        else:
            candidates.append(_Candidate(partition, newest))
    if dry_run:
        report.leaves_reclaimed = len(candidates)
        report.versions_removed = sum(
            c.newest - (c.partition.read_version or 0) for c in candidates
        )
        report.sample = [c.partition.location for c in candidates[:SAMPLE]]
        return report
    restored = storage.map(lambda c: _restore(storage, c), candidates, step="roll back")
    rolled = {c.partition.object_id: (c, n) for c, n in zip(candidates, restored, strict=True) if n}
    report._keep("moved", len(candidates) - len(rolled))
    failpoint("maintain.unpublished_rolled_back")
    fenced = _fence(ctx, state, {oid: n for oid, (_, n) in rolled.items()})
    report._keep("moved", len(rolled) - len(fenced))
    failpoint("maintain.unpublished_fenced")
    done = [rolled[oid] for oid in fenced]
    removed = storage.map(lambda c: _remove(storage, *c), done, step="remove")
    for (candidate, _), (versions, size) in zip(done, removed, strict=True):
        report.leaves_reclaimed += 1
        report.versions_removed += versions
        report.bytes_freed += size
        if len(report.sample) < SAMPLE:
            report.sample.append(candidate.partition.location)
    if report.leaves_reclaimed or report.kept:
        log.info(
            "unpublished leaf versions: %d removed from %d leaves (%d bytes); kept %s",
            report.versions_removed,
            report.leaves_reclaimed,
            report.bytes_freed,
            report.kept or "none",
        )
    return report


def _restore(storage: Storage, candidate: _Candidate) -> int | None:
    """Restore the published version on top of the leaf, as a commit's roll-back does; the
    version made, or None: the leaf changed since it was listed, or a commit landed on the
    restore (left alone)."""
    partition = candidate.partition
    published = partition.read_version
    assert published is not None
    try:
        leaf = storage.table(partition.location)
        if int(leaf.version) != candidate.newest:  # committed to since the listing
            return None
        kept = kept_above(leaf, published)
        if kept == candidate.newest:  # nothing to roll back: the fence publishes it
            log.info("publishing %s version %d: %s", partition.location, kept, KEPT)
            return kept
        warn_rolled_back(leaf, partition.location, kept)
        with storage.failures("roll back", partition.location, conflict="a concurrent commit won"):
            failpoint("maintain.before_restore")
            storage.table(partition.location, kept).restore()  # type: ignore[no-untyped-call]
        restored = storage.table(partition.location)
    except (TableNotFoundError, CommitConflict) as exc:  # gone, or committed to meanwhile
        log.info("left the unpublished versions of %s alone: %s", partition.location, exc)
        return None
    if content_at(restored, int(restored.version)) != content_at(leaf, published):
        return None  # a commit landed on the restore
    return int(restored.version)


def _fence(
    ctx: TransactionContext, state: NamespaceState, restored: Mapping[str, int]
) -> list[str]:
    """Publish each rolled-back leaf's restored version in one compare-and-swap where the
    partition is still unclaimed and published at the version read in ``state``; returns
    the object ids it published."""
    expected = {p.object_id: p.read_version for p in state.partitions() if p.object_id in restored}
    left = dict(restored)
    for _ in range(FENCE_ATTEMPTS):
        rows = [
            dict(row, **{READ_VERSION: left[row[OBJECT_ID]]})
            for row in state.full_rows(sorted(left)).to_pylist()
            if not row.get(CLAIM) and row[READ_VERSION] == expected[row[OBJECT_ID]]
        ]
        if not rows:
            return []
        try:
            ctx.manifest.commit(Swap(state.view, rows))
        except CommitConflict:
            state = ctx.load_state()
            left = {r[OBJECT_ID]: left[r[OBJECT_ID]] for r in rows}
            continue
        return [r[OBJECT_ID] for r in rows]
    log.warning("unpublished leaf versions: the fence kept losing races; left for the next run")
    return []


def _remove(storage: Storage, candidate: _Candidate, fenced: int) -> tuple[int, int]:
    """Remove the versions above the formerly published one up to the newest listed, below
    the one the fence published (versions, bytes)."""
    partition = candidate.partition
    published = partition.read_version
    assert published is not None
    doomed = list(range(published + 1, min(candidate.newest + 1, fenced)))
    if not doomed:
        return 0, 0
    try:
        leaf = storage.table(partition.location)
    except TableNotFoundError:  # removed meanwhile (its partition dropped and swept)
        return 0, 0
    with storage.failures("remove unpublished versions of", partition.location):
        stats = leaf.cleanup_old_versions(
            older_than=dt.timedelta(0), versions=doomed, error_if_tagged_old_versions=False
        )
    return int(stats.old_versions), int(stats.bytes_removed)
