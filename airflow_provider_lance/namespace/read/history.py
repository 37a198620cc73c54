"""The history of a namespace: what each ``__manifest`` version did, read from Lance's own
transaction records: a version's operation gives the kind of change; an ``Update``'s new
fragments, the transaction row turned PUBLISHED and the partitions published; each such
leaf version's transaction, the rows it added and the transaction id.

A write without a transaction row is an overwrite when it replaced a partition that
existed, else an append (an append rewrites a partition that predates ``add_column`` whole,
starting with a copy of its rows). A table operation is listed under its own name;
partitions a publish dropped are in ``details["dropped"]``. Versions are described once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import LanceNamespaceError, ManifestError
from airflow_provider_lance.namespace.format.leaf_version import OPERATION_PROPERTY, TXN_PROPERTY
from airflow_provider_lance.namespace.format.manifest import (
    CLAIM,
    FENCE_PREFIX,
    INTENT_PREFIX,
    LOCATION,
    OBJECT_ID,
    OBJECT_TYPE,
    READ_VERSION,
    TABLE,
    TXN_PREFIX,
    Manifest,
    ManifestView,
)
from airflow_provider_lance.namespace.format.naming import LEAF_TABLE_NAME, SEPARATOR
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, field_id, is_deprecated
from airflow_provider_lance.namespace.format.spec import SPEC_KEY_PREFIX, spec_key, spec_versions
from airflow_provider_lance.namespace.format.state import SCHEMA_KEY
from airflow_provider_lance.namespace.format.txn_row import TxnRecord, TxnState
from airflow_provider_lance.namespace.io.storage import Storage, first_line
from airflow_provider_lance.namespace.io.uri import child_uri
from airflow_provider_lance.namespace.results import HistoryEntry, PartitionChange

from .timetravel import list_tags, version_times

log = logging.getLogger(__name__)

#: Publishes listed under these names (``mode`` None), not as a ``write``.
TABLE_OPERATIONS = (
    *("delete", "drop_partitions", "merge", "optimize", "relocate"),
    *("create_index", "optimize_indices", "drop_index"),
)
#: What a version did that readers see (anything else is bookkeeping: ``internal``).
VISIBLE = (
    frozenset({"create", "write", "create_partitions", "add_column", "drop_column", "repair"})
    | {"rename_column", "promote_column", "change_schema", "evolve_partition_spec", "foreign_write"}
    | set(TABLE_OPERATIONS)
)


@dataclass(frozen=True)
class _Published:
    """A partition row a version published (its ``read_version`` moved or it appeared)."""

    object_id: str
    location: str
    values: dict[str, Any]
    read_version: int
    before: int | None  # at the previous version (None: absent or unpublished there)
    compared: bool  # the previous version is retained (else "created" is read off the leaf)


@dataclass(frozen=True)
class _Described:
    """What one version did, as far as ``__manifest`` says."""

    operation: str
    mode: str | None = None
    txn_id: str | None = None
    published: tuple[_Published, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    #: The namespace schema at the previous version (to tell rewrites from overwrites).
    schema_before: NamespaceSchema | None = None


@dataclass(frozen=True)
class _LeafCommit:
    """The leaf version a partition was published at, as its Lance transaction says."""

    replaced: bool  # an Overwrite (a new or replaced table); else an Append
    files_rows: tuple[int, ...]  # the rows of each file it committed, in order
    base: int  # the version it was committed on (0: it created the table)
    txn_id: str | None
    base_rows: int | None = None  # rows of ``base`` (looked up for replaced tables)
    operation: str | None = None  # the table operation that made it (None: a write)
    base_schema: pa.Schema | None = None  # the schema of ``base`` (likewise)

    @property
    def written(self) -> int:
        return sum(self.files_rows)

    def starts_with_copy(self) -> bool:
        """Whether its files begin with exactly ``base``'s rows (an append's rewrite)."""
        return not self.base_rows or self.base_rows in itertools.accumulate(self.files_rows[:-1])


class History:
    """Describes the versions of one namespace's ``__manifest`` (see the module docstring)."""

    def __init__(self, manifest: Manifest) -> None:
        self.manifest = manifest
        self.storage: Storage = manifest.storage
        self._entries: dict[int, HistoryEntry] = {}

    def entries(self, limit: int | None, include_internal: bool) -> list[HistoryEntry]:
        """The newest ``limit`` entries (all: None), newest first."""
        times = version_times(self.manifest)
        retained = {v for v, _ in times}
        tagged: dict[int, list[str]] = {}
        for tag in list_tags(self.manifest):  # by version, then name
            tagged.setdefault(tag.version, []).append(tag.name)
        chosen: list[tuple[int, dt.datetime, _Described | None]] = []
        for version, ts in reversed(times):
            if limit is not None and len(chosen) >= limit:
                break
            known = self._entries.get(version)
            if known is not None:
                if include_internal or not known.internal:
                    chosen.append((version, ts, None))
                continue
            try:
                with self.storage.failures("read the history of", self.manifest.uri):
                    described = self._describe(version, retained)
            except ManifestError as exc:  # cleaned up since it was listed
                log.info("history: skipped __manifest version %d: %s", version, exc)
                continue
            if described.operation not in VISIBLE and not include_internal:
                self._entries[version] = _entry(version, ts, described, {})
                continue
            chosen.append((version, ts, described))
        leaves = self._leaf_commits([p for _, _, d in chosen if d is not None for p in d.published])
        for version, ts, new in chosen:
            if new is not None:
                self._entries[version] = _entry(version, ts, new, leaves)
        return [replace(self._entries[v], tags=tuple(tagged.get(v, ()))) for v, _, _ in chosen]

    def _describe(self, version: int, retained: set[int]) -> _Described:
        ds = self.manifest.at(version)
        try:
            txn = ds.transaction()
        except TypeError as exc:
            # pylance fact: test_fact_read_transaction_fails_on_a_compaction_that_rewrote_an_index
            if "RewrittenIndex" in str(exc):
                return _Described("compact")
            return _Described("other", details={"lance_operation": first_line(exc)})
        kind = type(txn.operation).__name__ if txn is not None else "unknown"
        before = None
        if version - 1 in retained:
            with contextlib.suppress(ManifestError):  # cleaned up since it was listed
                before = self.manifest.at(version - 1)
        if kind == "Overwrite":
            if version == 1:
                return _Described("create_table")
            return _Described("repair" if READ_VERSION in ds.schema.names else "foreign_write")
        if kind == "UpdateConfig":
            assert txn is not None
            return _config_change(txn.operation, before)
        if kind == "Update":
            assert txn is not None
            return self._row_change(ds, txn.operation, before)
        names = {
            "Merge": "add_manifest_columns",
            "Project": "add_manifest_columns",
            "Rewrite": "compact",
            # a compaction's reservation of fragment ids (pylance fact: test_pylance_facts.py::
            # test_fact_compaction_reserves_fragment_ids_as_an_operation_without_a_class)
            "BaseOperation": "compact",
            "CreateIndex": "index",
            "Delete": "drop_rows",
        }
        if kind in names:
            return _Described(names[kind])
        return _Described("other", details={"lance_operation": kind})

    def _row_change(self, ds: ManifestView, op: Any, before: ManifestView | None) -> _Described:
        """An ``Update``: classified by the rows it wrote (its new fragments, nothing else)."""
        paths = {f.path for frag in op.new_fragments for f in frag.files}
        fragments = [f for f in ds.fragments() if any(d.path in paths for d in f.metadata.files)]
        if not fragments:
            dropped = _dropped_leaves(ds, before)
            if dropped:  # a drop only, without a transaction row
                return _Described("drop_partitions", details={"dropped": dropped})
            return _Described("drop_rows")
        rows = ds.rows_in_fragments(fragments)
        records = [TxnRecord.from_row(r) for r in rows if r[OBJECT_ID].startswith(TXN_PREFIX)]
        leaves = [r for r in rows if r[OBJECT_TYPE] == TABLE and _is_leaf_id(r[OBJECT_ID])]
        claimed = {r.get(CLAIM) for r in leaves if r.get(CLAIM)}
        for state in (TxnState.PUBLISHED, TxnState.ABORTED, TxnState.COMMITTING):
            record = next((r for r in records if r.state is state), None)
            if record is None:
                continue
            if state is TxnState.PUBLISHED:
                made = self._published(ds, before, leaves)
                operation, mode = "write", record.mode
                if mode in TABLE_OPERATIONS:
                    operation, mode = str(mode), None
                details = _dropped_details(ds, before)
                return _Described(operation, mode, record.txn_id, made, details, _schema(before))
            if state is TxnState.ABORTED:
                return _Described("abort", txn_id=record.txn_id)
            step = "seal" if record.incarnation_tag in claimed else "takeover"
            return _Described(step, txn_id=record.txn_id)
        if records:
            return _Described("stage", txn_id=records[0].txn_id)
        published = self._published(ds, before, leaves)
        moved = tuple(p for p in published if not p.compared or p.before != p.read_version)
        if moved:
            details = _dropped_details(ds, before)
            return _Described("write", None, None, moved, details, _schema(before))
        dropped = _dropped_leaves(ds, before)
        if dropped:
            return _Described("drop_partitions", details={"dropped": dropped})
        if leaves:
            return _Described("release_claims")
        if any(r[OBJECT_ID].startswith(FENCE_PREFIX) for r in rows):
            return _Described("fence_spec")
        if any(r[OBJECT_ID].startswith(INTENT_PREFIX) for r in rows):
            return _Described("merge_intent")
        return _Described("add_namespaces")

    def _published(
        self, ds: ManifestView, before: ManifestView | None, leaves: Sequence[Mapping[str, Any]]
    ) -> tuple[_Published, ...]:
        """The published partition rows among ``leaves``, with their previous read_version."""
        rows = [r for r in leaves if r[READ_VERSION] is not None and not r.get(CLAIM)]
        if not rows:
            return ()
        previous: dict[str, int | None] = {}
        if before is not None:
            previous = before.read_versions([r[OBJECT_ID] for r in rows])
        root, fields, compared = self.manifest.root, _spec_fields(ds.metadata), before is not None
        out = []
        for r in rows:
            oid, names = r[OBJECT_ID], fields.get(_spec_version(r[OBJECT_ID]) or 0, [])
            values, location = {n: r.get(n) for n in names}, child_uri(root, r[LOCATION])
            at = int(r[READ_VERSION]), previous.get(oid), compared
            out.append(_Published(oid, location, values, *at))
        return tuple(out)

    def _leaf_commits(self, published: Sequence[_Published]) -> dict[tuple[str, int], _LeafCommit]:
        """The leaf commit of every published partition, in parallel; unreadable ones left out."""

        def one(p: _Published) -> _LeafCommit | None:
            try:
                return _leaf_commit(self.storage, p)
            except LanceNamespaceError as exc:
                log.info("history: leaf %s v%d unreadable: %s", p.object_id, p.read_version, exc)
                return None

        unique = list({(p.location, p.read_version): p for p in published}.values())
        found = self.storage.map(one, unique)
        pairs = zip(unique, found, strict=True)
        return {(p.location, p.read_version): leaf for p, leaf in pairs if leaf is not None}


def _leaf_commit(storage: Storage, p: _Published) -> _LeafCommit:
    leaf = storage.table(p.location, p.read_version)
    with storage.failures("read the transaction of", p.location):
        txn = leaf.read_transaction(p.read_version)
    if txn is None:
        return _LeafCommit(True, (int(leaf.count_rows()),), 0, None)
    op = txn.operation
    kind = type(op).__name__
    files = tuple(int(f.physical_rows) for f in getattr(op, "fragments", None) or [])
    base = int(txn.read_version)
    props = txn.transaction_properties or {}
    commit = _LeafCommit(
        kind != "Append", files, base, props.get(TXN_PROPERTY), None, props.get(OPERATION_PROPERTY)
    )
    if commit.replaced and base > 0:
        try:
            old = storage.table(p.location, base)
        except LanceNamespaceError:  # a version below the window: its rows are unknown
            return commit
        return replace(commit, base_rows=int(old.count_rows()), base_schema=old.schema)
    return commit


def _entry(
    version: int, ts: dt.datetime, d: _Described, leaves: Mapping[tuple[str, int], _LeafCommit]
) -> HistoryEntry:
    internal = d.operation not in VISIBLE
    if not d.published:
        return HistoryEntry(version, ts, d.operation, internal, d.mode, d.txn_id, details=d.details)
    commits = {p.object_id: leaves.get((p.location, p.read_version)) for p in d.published}
    created = {p.object_id: _created(p, commits[p.object_id]) for p in d.published}
    operation = d.operation
    kinds = {c.operation for c in commits.values() if c is not None}
    if operation == "write" and d.mode is None and len(kinds) == 1 and None not in kinds:
        operation = str(kinds.pop())  # a table operation without a transaction row
    mode = None
    if operation not in TABLE_OPERATIONS:
        mode = d.mode or _inferred_mode(d, commits, created)
    changes = tuple(
        PartitionChange(p.object_id, p.values, p.read_version, _rows(leaf, mode, new), new)
        for p in d.published
        for leaf, new in [(commits[p.object_id], created[p.object_id])]
    )
    txn_id = d.txn_id or next((c.txn_id for c in commits.values() if c and c.txn_id), None)
    if operation == "write" and all(c.created and c.rows == 0 for c in changes):
        operation, mode = "create_partitions", None
    return HistoryEntry(version, ts, operation, False, mode, txn_id, changes, d.details)


def _dropped_leaves(ds: ManifestView, before: ManifestView | None) -> list[str]:
    """Leaf rows of ``before`` that ``ds`` no longer has (partitions a publish dropped)."""
    if before is None:
        return []

    def leaf_ids(at: ManifestView) -> set[str]:
        return {i for i in at.leaf_ids() if _is_leaf_id(i)}

    return sorted(leaf_ids(before) - leaf_ids(ds))


def _dropped_details(ds: ManifestView, before: ManifestView | None) -> dict[str, Any]:
    """``details`` of a publish: the partitions it dropped, if any."""
    dropped = _dropped_leaves(ds, before)
    return {"dropped": dropped} if dropped else {}


def _created(p: _Published, leaf: _LeafCommit | None) -> bool:
    if p.compared:
        return p.before is None
    return leaf is not None and leaf.base == 0


def _inferred_mode(
    described: _Described, commits: Mapping[str, _LeafCommit | None], created: Mapping[str, bool]
) -> str | None:
    """The mode of a write without a transaction row (see the module docstring)."""
    existing = [commits[oid] for oid, new in created.items() if not new]
    known = [c for c in existing if c is not None]
    if any(not c.replaced for c in known) or not existing:
        return "append"
    if len(known) < len(existing):  # a replaced partition whose leaf cannot be read
        return None
    schema = described.schema_before

    def rewritten(c: _LeafCommit) -> bool:  # only a leaf predating a column is rewritten
        predates = schema is None or c.base_schema is None or schema.missing_in_leaf(c.base_schema)
        return bool(predates) and c.base_rows is not None and c.starts_with_copy()

    return "append" if all(rewritten(c) for c in known) else "overwrite"


def _rows(leaf: _LeafCommit | None, mode: str | None, created: bool) -> int | None:
    if leaf is None:
        return None
    if leaf.replaced and mode == "append" and not created and leaf.base > 0:
        # An append that rewrote a partition predating add_column: its old rows came along.
        return None if leaf.base_rows is None else leaf.written - leaf.base_rows
    return leaf.written


def _config_change(op: Any, before: ManifestView | None) -> _Described:
    updates = getattr(op, "table_metadata_updates", None)
    values: dict[str, str] = dict(getattr(updates, "updates", None) or {})
    old: Mapping[str, str] | None = None if before is None else before.metadata
    specs = [v for v in spec_versions(values) if old is None or spec_key(v) not in old]
    if specs:
        version = specs[-1]
        fields = [f.get("name") for f in json.loads(values[spec_key(version)])]
        details = {"spec_version": version, "partition_fields": fields}
        if version == 1 and not any(k.startswith(SPEC_KEY_PREFIX) for k in old or {}):
            return _Described("create", details=details)
        return _Described("evolve_partition_spec", details=details)
    if SCHEMA_KEY in values:
        if old is None or SCHEMA_KEY not in old:
            return _Described("change_schema")
        previous = NamespaceSchema.from_json(old[SCHEMA_KEY])
        return _schema_change(previous, NamespaceSchema.from_json(values[SCHEMA_KEY]))
    return _Described("update_properties", details={"keys": sorted(values)})


def _schema_change(old: NamespaceSchema, new: NamespaceSchema) -> _Described:
    """Which of add / drop / rename / promote turned ``old`` into ``new``."""
    before = {field_id(f): f for f in old.arrow}
    changes: list[tuple[str, dict[str, Any]]] = []
    for f in new.arrow:
        was = before.get(field_id(f))
        if was is None:
            changes.append(("add_column", {"column": f.name, "type": str(f.type)}))
            continue
        if is_deprecated(f) and not is_deprecated(was):
            changes.append(("drop_column", {"column": f.name}))
        if f.name != was.name:
            changes.append(("rename_column", {"column": was.name, "new_name": f.name}))
        if f.type != was.type:
            promoted = {"column": f.name, "from": str(was.type), "to": str(f.type)}
            changes.append(("promote_column", promoted))
    if len(changes) == 1:
        return _Described(changes[0][0], details=changes[0][1])
    return _Described("change_schema", details={"changes": [dict(c[1], op=c[0]) for c in changes]})


def _schema(ds: ManifestView | None) -> NamespaceSchema | None:
    if ds is None or SCHEMA_KEY not in ds.metadata:
        return None
    return NamespaceSchema.from_json(ds.metadata[SCHEMA_KEY])


def _spec_fields(metadata: Mapping[str, str]) -> dict[int, list[str]]:
    """Spec version -> its partition field names (the manifest columns of its values)."""
    return {
        v: [str(f.get("name")) for f in json.loads(metadata[spec_key(v)])]
        for v in spec_versions(metadata)
    }


def _spec_version(object_id: str) -> int | None:
    head = object_id.split(SEPARATOR, 1)[0]
    return int(head[1:]) if head.startswith("v") and head[1:].isdigit() else None


def _is_leaf_id(oid: str) -> bool:
    """Whether ``oid`` names a leaf table of a spec-version namespace."""
    return _spec_version(oid) is not None and oid.endswith(SEPARATOR + LEAF_TABLE_NAME)
