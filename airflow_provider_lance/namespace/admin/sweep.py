"""The orphan sweep (see docs/design.md, "The orphan sweep"). It removes only:

* a data, deletion or index file of a leaf directory that no existing version of that leaf
  references, older than ``min_age``, named by no live transaction's stage record or plan
  nor by a live build record (:mod:`..txn.builds`: an index build's segments before its
  leaf commits; one killed before its publish leaves segments no version references);
* a shared index model (``_index_models/<name>-<hex>.json``, see ``ops.index_model``) that
  no index declared as of the latest ``__manifest`` version names nor a live build record,
  older than ``min_age`` (a crashed build's, a dropped or replaced index's);
* a whole leaf directory that no row of the latest ``__manifest`` and no retained version
  points at, named by no live transaction, every file in it older than ``min_age`` (its
  version files first, so nobody opens a table whose data is being removed).

A ``min_age`` below :data:`MIN_SAFE_ORPHAN_AGE` is refused (nothing removed) unless
``enforce_min_age=False``; ``dry_run`` removes nothing and accepts any non-negative age.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields

from airflow_provider_lance.namespace.errors import InvalidArgumentError, LanceNamespaceError
from airflow_provider_lance.namespace.format.manifest import MANIFEST_NAME, METADATA
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.txn_row import TxnState
from airflow_provider_lance.namespace.io.storage import FileEntry, Storage
from airflow_provider_lance.namespace.io.uri import local_path
from airflow_provider_lance.namespace.txn.abort import DEFAULT_LEASE_SECONDS
from airflow_provider_lance.namespace.txn.builds import live_paths
from airflow_provider_lance.namespace.txn.kernel import TransactionContext
from airflow_provider_lance.namespace.txn.lifecycle import all_records
from airflow_provider_lance.namespace.txn.plan import Plan
from airflow_provider_lance.namespace.txn.records import current_of, only
from airflow_provider_lance.namespace.txn.store import TXN_DIR, TransactionStore
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition

log = logging.getLogger(__name__)

#: Files younger than this are kept by default (a margin above the safe minimum).
DEFAULT_MIN_AGE = dt.timedelta(days=1)
#: The shortest age a sweep accepts without ``enforce_min_age=False``: ``recover``'s
#: default lease, within which a write records or commits its files.
MIN_SAFE_ORPHAN_AGE = dt.timedelta(seconds=DEFAULT_LEASE_SECONDS)
#: Leaf directories (``<8 hex>_v<N>$...$dataset``, see ``naming.leaf_directory``).
LEAF_DIRECTORY = re.compile(r"^[0-9a-f]{8}_v\d+\$.+\$dataset$")
#: The root's directory of shared index models (``ops.index_model.MODEL_DIR``).
MODEL_DIR = "_index_models"
#: Paths listed in the report, at most.
SAMPLE = 20


@dataclass
class SweepReport:
    """What the sweep removed (or, in a dry run, would remove)."""

    dry_run: bool = False
    leaf_directories: int = 0
    files_removed: int = 0
    bytes_freed: int = 0
    #: Leaf tables of dropped partitions removed whole (their files are counted above).
    leaf_tables_removed: int = 0
    #: Unreferenced files kept: younger than the safety age, or named by a live transaction.
    kept_young: int = 0
    kept_staged: int = 0
    sample: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)

    def _remove(self, storage: Storage, entry: FileEntry) -> None:
        """Count ``entry`` in, and delete it unless a dry run."""
        self.files_removed += 1
        self.bytes_freed += entry.size
        if len(self.sample) < SAMPLE:
            self.sample.append(entry.path)
        if not self.dry_run:
            storage.delete(entry.path)

    def _add(self, other: SweepReport) -> None:
        """Count in the sweep of one more leaf directory."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.sample += other.sample[: SAMPLE - len(self.sample)]


_COUNTS = [f.name for f in fields(SweepReport) if f.name not in ("dry_run", "sample")]


def check_min_age(
    min_age: object, *, enforce: bool = True, dry_run: bool = False, name: str = "min_age"
) -> None:
    """Refuse a negative ``min_age`` always, and one below :data:`MIN_SAFE_ORPHAN_AGE`
    for a sweep that deletes, unless ``enforce`` is off (``name``: the caller's spelling
    of the age, for the message)."""
    if not isinstance(min_age, dt.timedelta) or min_age < dt.timedelta(0):
        raise InvalidArgumentError(f"{name} must be a non-negative timedelta, got {min_age!r}")
    if enforce and not dry_run and min_age < MIN_SAFE_ORPHAN_AGE:
        raise InvalidArgumentError(
            f"{name} of {min_age} is below the safe minimum of {MIN_SAFE_ORPHAN_AGE}: the "
            "files of writes still in flight (a direct write not yet committed, a Spark "
            "job's tasks, a transaction's stage call) are referenced by no version yet and "
            "would be deleted, and such a write then fails or publishes rows whose files "
            f"are gone. Use an age of at least {MIN_SAFE_ORPHAN_AGE} (a dry run accepts any), "
            "or pass enforce_min_age=False if no write can be running while the sweep does"
        )


def sweep_orphans(
    ctx: TransactionContext,
    *,
    min_age: dt.timedelta = DEFAULT_MIN_AGE,
    dry_run: bool = False,
    enforce_min_age: bool = True,
) -> SweepReport:
    """Remove orphaned files and unread leaf tables (see the module docstring)."""
    check_min_age(min_age, enforce=enforce_min_age, dry_run=dry_run)
    storage = ctx.storage
    state = ctx.load_state()
    report = SweepReport(dry_run=dry_run)
    cutoff = time.time() - min_age.total_seconds()
    protected = _named_by_live_transactions(ctx, state)
    protected |= live_paths(storage, remove_expired=not dry_run)
    listed: dict[str, list[FileEntry]] = {}
    models: list[FileEntry] = []
    for entry in storage.list_files():
        top = entry.path.split("/", 1)[0]
        if top == MODEL_DIR:
            models.append(entry)
        elif top not in (MANIFEST_NAME, TXN_DIR) and LEAF_DIRECTORY.match(top):
            listed.setdefault(top, []).append(entry)
    _sweep_models(models, _declared_models(state), protected, cutoff, report, storage)
    locations = state.view.leaf_locations()
    unlisted = [d for d in listed if d not in locations]
    unread = _unread(ctx, unlisted) if unlisted else set()

    def one(item: tuple[str, list[FileEntry]]) -> SweepReport:
        directory, entries = item
        return _sweep_directory(
            storage, directory, entries, directory in unread, protected, cutoff, dry_run
        )

    for part in storage.map(one, sorted(listed.items()), step="leaf directories"):
        report._add(part)
    log.info(
        "orphan sweep%s: %d files, %d bytes, %d dropped leaf tables %s; kept %d young and "
        "%d staged unreferenced files",
        " (dry run)" if dry_run else "",
        report.files_removed,
        report.bytes_freed,
        report.leaf_tables_removed,
        "would go" if dry_run else "removed",
        report.kept_young,
        report.kept_staged,
    )
    return report


def _sweep_directory(
    storage: Storage,
    directory: str,
    entries: list[FileEntry],
    unread: bool,
    protected: set[str],
    cutoff: float,
    dry_run: bool,
) -> SweepReport:
    """The sweep of one leaf directory: removed whole if no retained version reads it
    (``unread``) and nothing in it is named or young, else its unreferenced files."""
    part = SweepReport(dry_run=dry_run, leaf_directories=1)
    unnamed = not any(_named(e.path, directory, protected) for e in entries)
    if unread and unnamed and all(e.mtime < cutoff for e in entries):
        _remove_table(storage, directory, entries, part)
    else:
        _sweep_leaf(storage, directory, entries, protected, cutoff, part)
    return part


def _sweep_leaf(
    storage: Storage,
    directory: str,
    entries: list[FileEntry],
    protected: set[str],
    cutoff: float,
    report: SweepReport,
) -> None:
    """Remove the data, deletion and index files of one leaf no version of it references."""
    indices = f"{directory}/_indices/"
    prefixes = (f"{directory}/data/", f"{directory}/_deletions/", indices)
    candidates = [e for e in entries if e.path.startswith(prefixes)]
    if not candidates:
        return
    has_table = any(e.path.startswith(f"{directory}/_versions/") for e in entries)
    with_indices = any(e.path.startswith(indices) for e in candidates)
    referenced = _referenced(storage, directory, with_indices) if has_table else set()
    if referenced is None:
        return
    for entry in candidates:
        if entry.path in referenced or _segment(entry.path, directory) in referenced:
            continue
        if _named(entry.path, directory, protected):
            report.kept_staged += 1
        elif entry.mtime >= cutoff:
            report.kept_young += 1
        else:
            report._remove(storage, entry)


def _segment(path: str, directory: str) -> str | None:
    """The directory (``<leaf>/_indices/<uuid>/``) of the index segment ``path`` lies in."""
    indices = f"{directory}/_indices/"
    if not path.startswith(indices):
        return None
    return f"{indices}{path[len(indices) :].split('/', 1)[0]}/"


def _named(path: str, directory: str, protected: set[str]) -> bool:
    """Whether a live transaction or build names ``path``, the segment it lies in or the
    leaf's whole index directory (a build in flight there)."""
    segment = _segment(path, directory)
    if segment is None:
        return path in protected
    return bool({path, segment, f"{directory}/_indices/"} & protected)


def _declared_models(state: NamespaceState) -> set[str]:
    """The model files the index declarations of ``state`` name (root-relative)."""
    docs = (json.loads(r[METADATA] or "{}") for r in state.view.index_rows())
    return {str(d["model"]) for d in docs if d.get("model")}


def _sweep_models(
    entries: list[FileEntry],
    named: set[str],
    protected: set[str],
    cutoff: float,
    report: SweepReport,
    storage: Storage,
) -> None:
    """Remove the model files no declaration nor live build names, older than the cutoff."""
    for entry in entries:
        if entry.path in named:
            continue
        if entry.path in protected:
            report.kept_staged += 1
        elif entry.mtime >= cutoff:
            report.kept_young += 1
        else:
            report._remove(storage, entry)


def _remove_table(
    storage: Storage, directory: str, entries: list[FileEntry], report: SweepReport
) -> None:
    """Remove a whole leaf directory, its version files first."""
    report.leaf_tables_removed += 1
    versions_first = sorted(entries, key=lambda e: not e.path.startswith(f"{directory}/_versions/"))
    for entry in versions_first:
        report._remove(storage, entry)
    if not report.dry_run:
        _remove_empty_directories(storage, directory)
    log.info("orphan sweep: leaf table %s is read by no retained __manifest version", directory)


def _remove_empty_directories(storage: Storage, directory: str) -> None:
    """On a local disk, the directories a removed leaf table left, deepest first (one a
    writer put a file into meanwhile stays; an object store has no directories)."""
    base = local_path(storage.uri(directory))
    if base is None:
        return
    for path, _, _ in os.walk(base, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def _referenced(storage: Storage, directory: str, indices: bool = False) -> set[str] | None:
    """The files any existing version of the leaf references, and with ``indices`` the
    directories (``<leaf>/_indices/<uuid>/``) of its index segments (None: unreadable)."""
    uri = storage.uri(directory)
    try:
        ds = storage.table(uri)
    except LanceNamespaceError as exc:
        log.warning("orphan sweep left %s alone: %s", directory, exc)
        return None
    out: set[str] = set()
    for version in ds.versions():
        at = ds.checkout_version(int(version["version"]))
        for fragment in at.get_fragments():
            raw = fragment.metadata.to_json()
            out.update(f"{directory}/data/{f['path']}" for f in raw.get("files", []))
            deletion = raw.get("deletion_file")
            if deletion:
                ext = "arrow" if deletion.get("file_type") == "array" else "bin"
                name = f"{raw['id']}-{deletion['read_version']}-{deletion['id']}.{ext}"
                out.add(f"{directory}/_deletions/{name}")
        if indices:
            segments = (s for found in at.describe_indices() for s in found.segments)
            out.update(f"{directory}/_indices/{s.uuid}/" for s in segments)
    return out


def _unread(ctx: TransactionContext, directories: Iterable[str]) -> set[str]:
    """Those of ``directories`` no retained ``__manifest`` version points at."""
    left = set(directories)
    for version in sorted(ctx.manifest.latest().retained_versions(), reverse=True):
        if not left:
            break
        try:
            at = ctx.manifest.at(version)
        except LanceNamespaceError:  # removed meanwhile: older versions are gone too
            break
        left -= at.leaf_locations()
    return left


def _named_by_live_transactions(ctx: TransactionContext, state: NamespaceState) -> set[str]:
    """Files (root-relative) that stage records or plans of live transactions name."""
    out: set[str] = set()
    for part in live_staged_partitions(ctx.store, state):
        for meta in part.fragment_metadata():
            files = meta.to_json().get("files", [])
            out.update(f"{part.directory}/data/{f['path']}" for f in files)
    return out


def live_stages(store: TransactionStore, state: NamespaceState) -> tuple[set[str], set[str]]:
    """The object ids and leaf directories of :func:`live_staged_partitions`."""
    parts = live_staged_partitions(store, state)
    return {p.object_id for p in parts}, {p.directory for p in parts}


def live_staged_partitions(store: TransactionStore, state: NamespaceState) -> list[StagedPartition]:
    """Every partition a live (staged or committing) transaction has staged files for, as
    its stage records and its plan name them (read from storage now: a transaction with
    no row yet is live through its header alone)."""
    rows = {r.txn_id: r for r in all_records(state)}
    out: list[StagedPartition] = []
    for header in store.headers():
        record = current_of(header.txn_id, rows.get(header.txn_id), only(header))
        if record is None or record.state not in (TxnState.STAGED, TxnState.COMMITTING):
            continue
        for raw in store.stages(header.txn_id, record.incarnation).values():
            out.extend(Stage.from_json(raw).partitions.values())
        if record.plan is not None:
            try:
                plan = Plan.from_json(store.plan(header.txn_id, record.incarnation, record.plan))
            except LanceNamespaceError:
                continue
            out.extend(plan.partitions.values())
    return out
