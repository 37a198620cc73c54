"""Staging: route rows to partitions and write their data files, in any process.

A stage makes nothing visible: it writes Lance data files into each partition's directory
and records them, with the partition's published ``read_version``, in a JSON-serialisable
:class:`Stage`. Stages of one transaction may come from many processes; the commit gathers
them. (A write nobody else knows may commit each leaf while it stages: :class:`Stager`.)
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    LanceNamespaceError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.leaf_version import owner_properties
from airflow_provider_lance.namespace.format.naming import leaf_directory
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.scan import open_leaf

from .inputs import as_tables
from .leaf_commit import fragment_text, schema_digest, stage_fragments
from .splitting import split

log = logging.getLogger(__name__)

#: Buffered bytes of routed rows before they are flushed to data files.
FLUSH_BYTES = 128 * 1024 * 1024


@dataclass
class StagedPartition:
    """The data files one stage wrote for one partition."""

    object_id: str
    directory: str
    values: dict[str, Any]
    base_read_version: int | None
    rewrite: bool = False
    #: The JSON of the fragments listed so far (:attr:`fragments` lists them all).
    listed: list[str] = field(default_factory=list)
    rows: int = 0
    #: The partition was published when staged (its read_version may be NULL: "latest").
    existed: bool = False
    #: Of ``fragments``, the copy of the published rows a ``rewrite`` starts from; the
    #: commit takes one stage's copy and lists the others' in ``superseded`` (deleted).
    base_fragments: Sequence[str] = ()
    superseded: Sequence[str] = ()
    #: :func:`~.leaf_commit.schema_digest` of the schema the files' field ids refer to (the
    #: leaf version appended to, else the leaf schema; None in older records: unchecked).
    schema: str | None = None
    #: In this process only: the leaf version the stager committed, holding exactly the
    #: published rows (none if replaced) plus ``fragments``; publishable as it is.
    committed_version: int | None = field(default=None, compare=False)
    #: In this process only: lists, when first asked, the fragments of
    #: ``committed_version`` that ``listed`` lacks.
    unlisted: _Listing | None = field(default=None, repr=False, compare=False)

    @property
    def fragments(self) -> list[str]:
        """The JSON of every fragment of data files staged for the partition."""
        if self.unlisted is not None:
            self.listed += self.unlisted()  # raises, and stays unlisted, if they are gone
            self.unlisted = None
        return self.listed

    @fragments.setter
    def fragments(self, texts: list[str]) -> None:
        if self.unlisted is not None:
            raise AssertionError("fragments replaced before they were listed")
        self.listed = texts

    def fragment_metadata(self) -> list[FragmentMetadata]:
        return [FragmentMetadata.from_json(f) for f in self.fragments]

    def data_files(self) -> list[str]:
        """The data files of :attr:`fragments`, relative to the leaf's directory."""
        return [
            f"data/{file['path']}"
            for text in self.fragments
            for file in json.loads(text).get("files", [])
        ]

    @property
    def staged_on(self) -> int | None:
        """The leaf version the files were staged against (None: as a new leaf)."""
        return self.base_read_version if self.existed else None


#: The fields of a :class:`StagedPartition` its record holds as they are.
_KEPT = ("object_id", "directory", "base_read_version", "rewrite", "fragments", "rows", "existed")


@dataclass
class Stage:
    """One staging attempt's output: JSON-serialisable, small (no row data)."""

    txn_id: str
    stage_id: str
    mode: str
    spec_version: int
    partitions: dict[str, StagedPartition] = field(default_factory=dict)
    #: The leaf schema new and replaced leaves are committed with (None in older records).
    leaf_schema: pa.Schema | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions.values())

    def to_json(self) -> dict[str, Any]:
        values = pa.Table.from_pylist([p.values for p in self.partitions.values()])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, values.schema) as writer:
            writer.write_table(values)
        return {
            **{k: getattr(self, k) for k in ("txn_id", "stage_id", "mode", "spec_version")},
            "values_ipc": base64.b64encode(sink.getvalue().to_pybytes()).decode(),
            "leaf_schema_ipc": None
            if self.leaf_schema is None
            else base64.b64encode(self.leaf_schema.serialize().to_pybytes()).decode(),
            "partitions": [
                {
                    **{k: getattr(p, k) for k in _KEPT},
                    "base_fragments": list(p.base_fragments),
                    "superseded": list(p.superseded),
                    "schema": p.schema,
                }
                for p in self.partitions.values()
            ],
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Stage:
        raw = base64.b64decode(obj["values_ipc"])
        values = pa.ipc.open_stream(raw).read_all().to_pylist() if obj["partitions"] else []
        schema = obj.get("leaf_schema_ipc")
        if schema is not None:
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema)))
        stage = cls(
            obj["txn_id"], obj["stage_id"], obj["mode"], int(obj["spec_version"]), {}, schema
        )
        for p, v in zip(obj["partitions"], values, strict=True):
            stage.partitions[p["object_id"]] = StagedPartition(
                *(p["object_id"], p["directory"], v, p["base_read_version"], p["rewrite"]),
                *(list(p["fragments"]), int(p["rows"]), bool(p.get("existed", False))),
                *(tuple(p.get("base_fragments", ())), tuple(p.get("superseded", ()))),
                p.get("schema"),
            )
        return stage


class Stager:
    """Writes one stage: conform, route, buffer, flush data files per partition.

    ``create_leaves_as`` (a ``txn#k`` owner, for a write nobody else knows) commits each
    leaf while it stages; the version is kept (``committed_version``) only if it lies right
    above the version it was written on, else its files are staged like any other.
    ``newer_state`` is asked once, before anything is written: a newer state to stage on.
    """

    def __init__(
        self,
        state: NamespaceState,
        stage: Stage,
        storage: Storage,
        flush_bytes: int = FLUSH_BYTES,
        *,
        create_leaves_as: str | None = None,
        newer_state: Callable[[], NamespaceState | None] | None = None,
    ) -> None:
        self.stage = stage
        self.storage = storage
        self.flush_bytes = flush_bytes
        self.create_leaves_as = create_leaves_as
        self._newer_state = newer_state
        self._begin(state)

    def _begin(self, state: NamespaceState) -> None:
        """Stage on ``state`` (its spec routes, its schema shapes), from nothing routed."""
        self.state = state
        stage = self.stage
        stage.spec_version = state.spec_version
        stage.partitions.clear()
        self._buffers: dict[str, list[pa.Table]] = {}
        self._buffered = 0
        self._appended: dict[str, Partition] = {}  # partitions appended to, as published
        self._leaf_schemas: dict[str, pa.Schema] = {}  # their published versions' schemas
        self._opened: dict[str, lance.LanceDataset] = {}  # until their first rows are written
        self._covered: set[str] = set()  # leaves with versions above the published one
        self._complete: dict[str, pa.Schema] = {}  # leaf schemas with every column, by digest
        self._shapers: dict[str, Callable[[pa.Table], pa.Table]] = {}
        self._created_digest: str | None = None  # see _digest_of_created
        self._new_schema = stage.leaf_schema = state.schema.leaf_schema()
        self._new_digest = schema_digest(self._new_schema)

    @property
    def overwrite(self) -> bool:
        return self.stage.mode == "overwrite"

    def write(self, data: Any) -> Stage:
        """Stage ``data`` (see :func:`~.inputs.as_tables`); on failure its files are deleted."""
        started, rows = time.monotonic(), 0
        try:
            for table in as_tables(data):
                try:
                    self._route(table)
                except LanceNamespaceError:  # e.g. rows the held state's schema refuses
                    if not self._stage_on_newest():
                        raise
                    self._route(table)
                else:
                    if self._stage_on_newest():
                        self._route(table)
                rows += table.num_rows
                if self._buffered >= self.flush_bytes:
                    self._flush()
                    n, seconds = len(self.stage.partitions), time.monotonic() - started
                    log.info("staged %d rows into %d partitions (%.1fs)", rows, n, seconds)
            self._stage_on_newest()  # no rows: published on the newest state all the same
            self._flush()
        except BaseException:
            self.discard()
            raise
        return self.stage

    def _route(self, table: pa.Table) -> None:
        """Route ``table``'s rows, shaped for new leaves, to their partitions' buffers."""
        conformed = self._shaper(self._new_digest, self._new_schema)(
            self.state.schema.conform_input(table, spec=self.state.current_spec)
        )
        chunks = list(split(conformed, self.state.current_spec, self.state.schema))
        targets = self._targets([chunk.values for chunk in chunks])
        for chunk, target in zip(chunks, targets, strict=True):
            self._buffers.setdefault(target.object_id, []).append(chunk.data)
            target.rows += chunk.data.num_rows
        self._buffered += conformed.nbytes

    def _stage_on_newest(self) -> bool:
        """Once, before anything is written: if the state staged on is no longer the
        latest, begin again on the latest, and say so (the caller routes its rows again)."""
        ask, self._newer_state = self._newer_state, None
        newer = ask() if ask is not None else None
        if newer is None:
            return False
        log.debug("__manifest moved on: staging on v%d", newer.version)
        self._begin(newer)
        return True

    def _targets(self, values: Sequence[tuple[Any, ...]]) -> list[StagedPartition]:
        """The staged partition of each values tuple (partitions new to the stage are looked
        up together; the leaves appended to are opened when their rows are written)."""
        ids = [self.state.leaf_id(v) for v in values]
        new = {
            oid: v for oid, v in zip(ids, values, strict=True) if oid not in self.stage.partitions
        }
        if new:
            existing = self.state.find(list(new), list(new.values()))
            names = [f.name for f in self.state.current_spec]
            for oid, v in new.items():  # registered first: discard() sees what they stage
                found = existing.get(oid)
                self.stage.partitions[oid] = StagedPartition(
                    object_id=oid,
                    directory=found.directory if found else leaf_directory(oid),
                    values=dict(zip(names, v, strict=True)),
                    base_read_version=found.read_version if found else None,
                    existed=found is not None,
                    schema=self._new_digest,  # until _open_leaf finds it appended to
                )
                if found is not None and not self.overwrite:
                    self._appended[oid] = found
        return [self.stage.partitions[oid] for oid in ids]

    def _open_leaf(self, existing: Partition) -> None:
        """Learn the schema of a partition appended to (its files are staged in it)."""
        target = self.stage.partitions[existing.object_id]
        leaf = self.storage.table_to_write(existing.location)  # the published version, usually
        if existing.read_version is not None and int(leaf.version) != existing.read_version:
            self._covered.add(existing.object_id)  # another writer's version lies above
            leaf = self.storage.table_to_write(existing.location, existing.read_version)
        digest = schema_digest(leaf.lance_schema)
        schema = self._complete.get(digest)  # leaves of one schema are looked at once
        if schema is None and not self.state.schema.missing_in_leaf(leaf.schema):
            schema = self._complete[digest] = leaf.schema
        if schema is not None:
            self._opened[existing.object_id] = leaf
            self._leaf_schemas[existing.object_id] = schema
            target.schema = digest
            return
        # It predates add_column: rewrite it whole, from a copy of its published rows
        # (files of their own: a commit of several such stages takes one copy).
        target.rewrite = True
        published = open_leaf(self.storage, existing)
        plan = self.state.schema.read_plan(published.schema)
        copy = plan.apply(published.to_table(columns=plan.leaf_columns))
        if copy.num_rows:
            rows, into = self.state.schema.to_leaf(copy, self._new_schema), target.directory
            fragments = stage_fragments(self.storage, self.storage.uri(into), rows, overwrite=True)
            target.base_fragments = [fragment_text(f) for f in fragments]
            target.fragments += target.base_fragments

    def _flush(self) -> None:
        """Write the buffered rows of every partition as data files, in parallel."""
        work = []
        for object_id, buffered in self._buffers.items():
            if not buffered:
                continue
            work.append((self.stage.partitions[object_id], pa.concat_tables(buffered)))
            buffered.clear()

        def write(item: tuple[StagedPartition, pa.Table]) -> Sequence[str]:
            target, data = item
            oid = target.object_id
            if oid in self._appended and not target.rewrite and oid not in self._leaf_schemas:
                self._open_leaf(self._appended[oid])
            leaf_schema = self._leaf_schemas.get(oid)
            replace = self.overwrite or target.rewrite or leaf_schema is None
            shaped = self._shaper(target.schema, leaf_schema or self._new_schema)(data)
            try:
                if self.create_leaves_as is not None:
                    committed = self._commit_now(target, shaped, replace)
                    if committed is not None:
                        return committed
                into = self.storage.uri(target.directory) if replace else self._published_leaf(oid)
                fragments = stage_fragments(self.storage, into, shaped, overwrite=replace)
            finally:
                self._opened.pop(oid, None)
            return [fragment_text(f) for f in fragments]

        written: list[Sequence[str] | None] = [None] * len(work)

        def tracked(i: int) -> None:  # what was written stays known, for discard()
            written[i] = write(work[i])

        try:
            self.storage.map(tracked, range(len(work)))
        finally:
            for (target, _), fragments in zip(work, written, strict=True):
                if fragments:  # (not (), which leaves committed ones unlisted)
                    target.fragments += fragments
        self._buffered = 0

    def _shaper(self, digest: str | None, leaf: pa.Schema) -> Callable[[pa.Table], pa.Table]:
        """Shapes rows into ``leaf`` (the schema ``digest`` digests: one shaper per distinct
        leaf schema of the write)."""
        key = digest or ""
        shaper = self._shapers.get(key)
        if shaper is None:
            shaper = self._shapers[key] = self.state.schema.leaf_shaper(leaf)
        return shaper

    def _commit_now(
        self, target: StagedPartition, shaped: pa.Table, replace: bool
    ) -> Sequence[str] | None:
        """Commit ``shaped`` to the partition's leaf now, onto the published version (or
        the one an earlier flush committed); the fragments written, or None: stage files
        instead. Only a version right above its base is kept."""
        committed, target.committed_version = target.committed_version, None
        head: lance.LanceDataset | None
        if committed is not None:  # a later flush: add to what the earlier one committed
            head = self.storage.table_to_write(self.storage.uri(target.directory), committed)
            replace = False
        elif target.fragments:
            return None  # an earlier flush staged files: these join them
        elif not target.existed:
            return self._create(target, shaped)
        else:
            head = self._published_head(target, replace)
            if head is None:
                return None
        failpoint("leaf.before_commit")  # a leaf version is committed here, as at publish
        assert self.create_leaves_as is not None
        made = self.storage.write_onto(
            shaped, head, overwrite=replace, properties=owner_properties(self.create_leaves_as)
        )
        if made is None or int(made.version) != int(head.version) + 1:
            return None
        if replace and schema_digest(made.lance_schema) != target.schema:
            return None  # the files took field ids other than the leaf schema's
        self._committed(target, made, _added(made, None if replace else head))
        return ()

    def _published_head(self, target: StagedPartition, replace: bool) -> lance.LanceDataset | None:
        """An existing partition's leaf at its published version, to write onto, if nothing
        lay above that version when it was opened (None: stage files instead)."""
        published = target.base_read_version
        if target.rewrite or published is None:  # rewritten whole, or NULL ("latest")
            return None
        if replace:  # not opened for routing
            try:
                leaf = self.storage.table_to_write(self.storage.uri(target.directory))
            except TableNotFoundError:
                return None
            return leaf if int(leaf.version) == published else None
        if target.object_id in self._covered:
            return None
        return self._published_leaf(target.object_id)

    def _published_leaf(self, object_id: str) -> lance.LanceDataset:
        """The leaf of a partition appended to, at its published version."""
        leaf = self._opened.pop(object_id, None)
        if leaf is None:  # a later flush (rare: more than flush_bytes were buffered)
            existing = self._appended[object_id]
            leaf = self.storage.table_to_write(existing.location, existing.read_version)
        return leaf

    def _create(self, target: StagedPartition, shaped: pa.Table) -> Sequence[str] | None:
        """Create a new partition's leaf table from its first rows; None if a table is
        there already. Only version 1 (this write's alone) is kept as committed; a later
        one (a concurrent creator made version 1) is returned as staged files."""
        assert self.create_leaves_as is not None
        uri = self.storage.uri(target.directory)
        failpoint("leaf.before_commit")
        made = self.storage.create_leaf(shaped, uri, owner_properties(self.create_leaves_as))
        if made is None:
            return None
        version, table = made
        if version == 1 and self._digest_of_created(table) == target.schema:
            self._committed(target, table, _added(table, None))
            return ()
        return _texts(table, _added(table, None))

    def _committed(
        self, target: StagedPartition, made: lance.LanceDataset, ids: tuple[int, ...]
    ) -> None:
        """``made`` (fragments ``ids`` added) is the version to publish the partition as;
        its fragments are listed only when asked for."""
        version = int(made.version)
        if target.unlisted is not None:  # a later flush: the earlier ones are in it too
            ids = (*target.unlisted.ids, *ids)
        uri = self.storage.uri(target.directory)
        target.unlisted = _Listing(self.storage, uri, version, ids, target.object_id)
        target.committed_version = version

    def _digest_of_created(self, table: lance.LanceDataset) -> str:
        """The schema digest of ``table``, a new leaf (the same for all: read once)."""
        if self._created_digest is None:
            self._created_digest = schema_digest(table.lance_schema)
        return self._created_digest

    def discard(self) -> None:
        """Delete the data files this stage wrote (it will never be committed)."""
        discard_stage(self.stage, self.storage)
        for target in self.stage.partitions.values():
            target.unlisted = None
            target.listed.clear()


def _added(made: lance.LanceDataset, base: lance.LanceDataset | None) -> tuple[int, ...]:
    """The ids of the fragments of ``made`` that ``base`` lacks (all of them for None)."""
    before = set() if base is None else set(base.fragment_ids())
    return tuple(i for i in made.fragment_ids() if i not in before)


@dataclass(frozen=True)
class _Listing:
    """Lists fragments ``ids`` of version ``version`` of the leaf at ``uri`` (JSON), for
    :attr:`StagedPartition.unlisted`."""

    storage: Storage
    uri: str
    version: int
    ids: tuple[int, ...]
    object_id: str

    def __call__(self) -> list[str]:
        try:
            return _texts(self.storage.table_to_write(self.uri, self.version), self.ids)
        except TableNotFoundError as exc:
            raise CommitConflict(
                f"version {self.version} of the leaf table {self.uri}, which this write "
                "committed, was removed meanwhile (maintain with an older_than shorter than "
                "the write?); nothing of the write was published: write again",
                [self.object_id],
            ) from exc


def _texts(leaf: lance.LanceDataset, ids: Sequence[int]) -> list[str]:
    """The JSON of fragments ``ids`` of ``leaf``."""
    out = []
    for i in ids:
        fragment = leaf.get_fragment(i)
        if fragment is None:
            raise StorageError(f"{leaf.uri} v{leaf.version} has no fragment {i}")
        out.append(fragment_text(fragment.metadata))
    return out


def list_fragments(stage: Stage, storage: Storage) -> None:
    """List the fragments of every partition the stager left unlisted, in parallel."""
    pending = [p for p in stage.partitions.values() if p.unlisted is not None]
    storage.map(lambda p: p.fragments, pending)


def discard_stage(stage: Stage, storage: Storage, keep: Collection[str] = frozenset()) -> None:
    """Delete the data files of a stage that will never be committed (except the
    fragments in ``keep``, JSON as in :attr:`StagedPartition.fragments`)."""
    with suppress(LanceNamespaceError):  # those stay unlisted: left to the orphan sweep below
        list_fragments(stage, storage)
    for part in stage.partitions.values():
        try:
            texts = part.fragments
        except LanceNamespaceError as exc:  # the leaf version is gone, or cannot be read
            log.warning("left the data files of %s to the orphan sweep: %s", part.directory, exc)
            continue
        doomed = [FragmentMetadata.from_json(t) for t in texts if t not in keep]
        storage.delete_data_files(storage.uri(part.directory), doomed)
