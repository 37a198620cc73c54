"""Indexes as table operations: ``create_index``, ``optimize_indices`` and ``drop_index``,
each ONE ``__manifest`` swap through :mod:`.runner` (txn_id, retries, claims, crash safety).

An index is *declared* on the namespace by a reserved row ``__index$<name>`` whose
``metadata`` is an :class:`IndexDeclaration`; the swap that publishes the leaf versions
carrying the index writes (or deletes) that row too, so a reader sees the declaration and
every partition's index together, or none of them. Each leaf's index is built on its
published version without committing (``create_index_uncommitted``) and committed as that
version's ``CreateIndex``. A build is reused on a later published version whose indexed
fragments are unchanged: rows written meanwhile stay unindexed until
:class:`OptimizeIndices`, which indexes partitions and fragments the declarations cover and
their indexes do not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import inspect
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.dataset import Index

from airflow_provider_lance.namespace.errors import (
    IndexExistsError,
    IndexNotFoundError,
    InvalidArgumentError,
    LanceNamespaceError,
    SchemaError,
)
from airflow_provider_lance.namespace.format.manifest import (
    INDEX_PREFIX,
    METADATA,
    NAMESPACE,
    row,
)
from airflow_provider_lance.namespace.format.schema import is_deprecated
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.coverage import pruned_rows
from airflow_provider_lance.namespace.read.remembered import KeptPerStorage
from airflow_provider_lance.namespace.results import IndexInfo, SkipReason
from airflow_provider_lance.namespace.txn.builds import BuildRecord
from airflow_provider_lance.namespace.write.leaf_commit import published_and_kept

from .deletion import live_rows
from .index_model import ModelSpec, SharedModel, model_arguments, shares_model, train_model
from .runner import ComputedChange, Selection, TableOperation, outcome

log = logging.getLogger(__name__)

#: pylance 14's vector index types (``LanceDataset.create_index``).
VECTOR_TYPES = frozenset(
    "IVF_FLAT IVF_PQ IVF_SQ IVF_RQ IVF_HNSW_FLAT IVF_HNSW_PQ IVF_HNSW_SQ".split()  # noqa: SIM905
)
#: pylance 14's scalar index types built per fragment set (``create_index_uncommitted``).
SCALAR_TYPES = frozenset(
    "BTREE BITMAP LABEL_LIST INVERTED FTS NGRAM ZONEMAP BLOOMFILTER RTREE".split()  # noqa: SIM905
)
#: Segments of one index a leaf keeps at most: a delta that would make one more merges
#: them instead (one segment over every fragment, as pylance's
#: ``optimize_indices(num_indices_to_merge=...)`` merges them).
MAX_SEGMENTS = 4
#: The index types whose segments are merged with the delta (pylance's
#: ``merge_existing_index_segments``) when they share the namespace's model; the others'
#: are rebuilt over every fragment (docs/design.md "Indexes" says why, with figures).
MERGED_TYPES = frozenset({"IVF_FLAT"})
#: Shared models loaded, per storage (a model file never changes: its name is unique).
_MODELS: KeptPerStorage[str, SharedModel] = KeptPerStorage(16)
#: Arguments the namespace sets itself: never taken from the caller.
_MANAGED = frozenset(
    "column index_type name replace fragment_ids index_uuid storage_options train".split()  # noqa: SIM905
)
_HNSW = ("m", "ef_construction", "max_level")
#: Arguments pylance reads for every IVF type without naming them in the signature.
_IVF = ("sample_rate", "max_iters", "index_file_version")
_FTS = (
    *("with_position", "block_size", "memory_limit", "num_workers", "base_tokenizer"),
    *("language", "max_token_length", "lower_case", "stem", "remove_stop_words"),
    *("custom_stop_words", "ascii_folding", "format_version", "document_granularity"),
    *("min_ngram_length", "max_ngram_length", "prefix_only", "split_identifiers"),
    *("split_on_numerics", "preserve_original"),
)
#: The keyword arguments pylance 14 takes only through ``**kwargs`` (documented in prose,
#: or read without documentation), by index type; the vector types also take the named
#: parameters of ``create_index`` (:func:`valid_parameters`). Every other keyword pylance
#: silently ignores (tests/namespace/test_pylance_index_facts.py holds both to pylance).
PROSE_PARAMETERS: Mapping[str, frozenset[str]] = {
    "IVF_FLAT": frozenset(_IVF),
    "IVF_SQ": frozenset((*_IVF, "num_bits")),
    "IVF_PQ": frozenset((*_IVF, "num_bits")),
    "IVF_RQ": frozenset((*_IVF, "num_bits")),
    "IVF_HNSW_FLAT": frozenset((*_IVF, *_HNSW)),
    "IVF_HNSW_SQ": frozenset((*_IVF, *_HNSW, "num_bits")),
    "IVF_HNSW_PQ": frozenset((*_IVF, *_HNSW, "num_bits")),
    "INVERTED": frozenset(_FTS),
    "FTS": frozenset(_FTS),
}


@dataclass(frozen=True)
class IndexDeclaration:
    """An index declared on the namespace: what every partition in its scope gets."""

    name: str
    #: The namespace column (its field id: a rename keeps the index).
    field_id: int
    index_type: str
    #: pylance's ``create_index`` arguments (JSON).
    params: Mapping[str, Any] = field(default_factory=dict)
    #: The partitions it covers (None: all of them, present and future).
    filter: str | None = None
    #: The shared model's file, root-relative (None: each leaf trains its own).
    model: str | None = None

    @property
    def vector(self) -> bool:
        return self.index_type in VECTOR_TYPES

    @property
    def object_id(self) -> str:
        return f"{INDEX_PREFIX}{self.name}"

    def to_row(self) -> dict[str, Any]:
        return row(self.object_id, NAMESPACE, metadata=json.dumps(asdict(self), sort_keys=True))

    @classmethod
    def from_row(cls, raw: Mapping[str, Any]) -> IndexDeclaration:
        doc = json.loads(raw[METADATA])
        return cls(
            str(doc["name"]),
            int(doc["field_id"]),
            str(doc["index_type"]),
            dict(doc.get("params") or {}),
            doc.get("filter"),
            doc.get("model"),
        )

    def column(self, state: NamespaceState) -> str | None:
        """The column's current name (None: dropped since)."""
        try:
            found = state.schema.field_by_id(self.field_id)
        except SchemaError:
            return None
        return None if is_deprecated(found) else str(found.name)


def declarations(state: NamespaceState) -> dict[str, IndexDeclaration]:
    """The indexes declared as of ``state``, by name."""
    found = (IndexDeclaration.from_row(r) for r in state.view.index_rows())
    return {d.name: d for d in sorted(found, key=lambda d: d.name)}


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or "$" in name or "/" in name:
        raise InvalidArgumentError(
            f"an index name must be a non-empty string without '$' or '/', got {name!r}"
        )
    return name


def _scope(state: NamespaceState, filter: str | None) -> dict[str, Partition]:
    return {p.object_id: p for p in state.partitions_from_rows(pruned_rows(state, filter))}


# -- one leaf ------------------------------------------------------------------------------
def leaf_column(state: NamespaceState, leaf: lance.LanceDataset, name: str) -> str | None:
    """The leaf's column holding the namespace column ``name`` (None: the leaf lacks it)."""
    return state.schema.read_plan(leaf.schema, [name]).sources[name]


def leaf_segments(leaf: lance.LanceDataset, name: str) -> list[Index]:
    """The segments of the leaf's index ``name`` (none: no such index)."""
    for found in leaf.describe_indices():
        if found.name == name:
            return [
                Index(
                    uuid=s.uuid,
                    name=name,
                    fields=list(found.fields),
                    dataset_version=s.dataset_version_at_last_update,
                    fragment_ids=s.fragment_ids,
                    index_version=s.index_version,
                )
                for s in found.segments
            ]
    return []


def covered(segments: Iterable[Index]) -> set[int]:
    return {int(f) for s in segments for f in s.fragment_ids}


def _files(leaf: lance.LanceDataset) -> dict[int, tuple[str, ...]]:
    """Fragment id -> its data files (what an index built on it read)."""
    return {
        f.fragment_id: tuple(sorted(str(d.path) for d in f.metadata.files))
        for f in leaf.get_fragments()
    }


def _rows(leaf: lance.LanceDataset, fragment_ids: Iterable[int] | None = None) -> int:
    wanted = None if fragment_ids is None else set(fragment_ids)
    return sum(
        live_rows(f.metadata)
        for f in leaf.get_fragments()
        if wanted is None or f.fragment_id in wanted
    )


def build_segment(
    storage: Storage,
    leaf: lance.LanceDataset,
    declaration: IndexDeclaration,
    column: str,
    fragment_ids: Sequence[int],
    model: SharedModel | None,
    record: Callable[[str], None],
    directory: str,
) -> Index:
    """The leaf's index over ``fragment_ids``, written and not committed; ``record`` is
    given the leaf's index directory (root-relative: the leaf is ``directory``) before
    anything is written (pylance chooses a BTREE segment's uuid itself)."""
    params = dict(declaration.params)
    if model is not None:
        params = model_arguments(params, model, declaration.index_type)
    what = f"build index {declaration.name!r} ({declaration.index_type} on {column}) of"
    record(f"{directory}/_indices/")
    with storage.failures(what, leaf.uri), _bad_input(declaration):
        segment = leaf.create_index_uncommitted(
            column,
            declaration.index_type,
            declaration.name,
            replace=True,
            fragment_ids=list(fragment_ids),
            **params,
        )
        if any(f.path.startswith("staging/") for f in segment.files or ()):
            segment = leaf.merge_existing_index_segments([segment])  # e.g. INVERTED
    return segment


@contextlib.contextmanager
def _bad_input(declaration: IndexDeclaration) -> Iterator[None]:
    """pylance's refusal of an argument as an :class:`InvalidArgumentError`."""
    try:
        yield
    except LanceNamespaceError:
        raise
    except (TypeError, KeyError, NotImplementedError, RuntimeError, ValueError) as exc:
        if isinstance(exc, (ValueError, RuntimeError)) and not _argument_error(exc):
            raise
        d, text = declaration, str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise InvalidArgumentError(
            f"pylance refused index {d.name!r} ({d.index_type}, parameters {dict(d.params)}): "
            f"{text or type(exc).__name__}; check the index type and parameters "
            "(help(lance.LanceDataset.create_index))"
        ) from exc


def _argument_error(exc: BaseException) -> bool:
    """Whether a ValueError/RuntimeError of pylance is about the arguments (not storage)."""
    text = str(exc)
    storage = ("No such file", "Not found", "IO error", "Object at location", "os error")
    return not any(s in text for s in storage)


# -- the operations ----------------------------------------------------------------------
@dataclass
class _Built:
    """A segment built for one partition, reusable while the fragments it read stand."""

    segment: Index
    files: dict[int, tuple[str, ...]]


class _IndexOperation(TableOperation):
    """Shared by the operations that build leaf indexes: the shared models they load and
    the segments earlier attempts built, named by a build record (:mod:`..txn.builds`)
    until the run ends so that the orphan sweep keeps them, however long it runs."""

    def __init__(self, storage: Storage) -> None:
        super().__init__(storage)
        self._built: dict[tuple[str, str], _Built] = {}
        #: (partition, index) -> the uuids merged and the segment their merge wrote.
        self._merged: dict[tuple[str, str], tuple[tuple[str, ...], Index]] = {}
        self.record = BuildRecord(storage, uuid.uuid4().hex)

    def close(self) -> None:
        self.record.close()

    def model(self, declaration: IndexDeclaration) -> SharedModel | None:
        path = declaration.model
        if path is None:
            return None
        return _MODELS.get(self.storage, path, lambda: SharedModel.load(self.storage, path))

    def segment(
        self,
        partition: Partition,
        leaf: lance.LanceDataset,
        declaration: IndexDeclaration,
        column: str,
        fragment_ids: Sequence[int],
    ) -> Index:
        """A segment over ``fragment_ids``: an earlier attempt's if those fragments still
        hold the files it read, else built now."""
        key = (partition.object_id, declaration.name)
        files = _files(leaf)
        earlier = self._built.get(key)
        if (
            earlier is not None
            and covered([earlier.segment]) == set(fragment_ids)
            and all(files.get(f) == earlier.files.get(f) for f in fragment_ids)
        ):
            return earlier.segment
        model = self.model(declaration)
        segment = build_segment(
            self.storage,
            leaf,
            declaration,
            column,
            fragment_ids,
            model,
            self.record.add,
            partition.directory,
        )
        self._built[key] = _Built(segment, {f: files[f] for f in fragment_ids})
        return segment

    def merge(
        self,
        partition: Partition,
        leaf: lance.LanceDataset,
        declaration: IndexDeclaration,
        existing: Sequence[Index],
        delta: Index,
    ) -> Index | None:
        """One segment, written and not committed, merging the committed ``existing`` and
        ``delta`` (an earlier attempt's if it merged the same ones); None if pylance
        refuses them (a segment of another model or type): rebuild instead."""
        key = (partition.object_id, declaration.name)
        inputs = (*sorted(s.uuid for s in existing), delta.uuid)
        earlier = self._merged.get(key)
        if earlier is not None and earlier[0] == inputs:
            return earlier[1]
        # describe_indices gives no index_details; the delta's are the declaration's
        given = [dataclasses.replace(s, index_details=delta.index_details) for s in existing]
        self.record.add(f"{partition.directory}/_indices/")
        what = f"merge the segments of index {declaration.name!r} of"
        with self.storage.failures(what, leaf.uri):
            try:
                merged = leaf.merge_existing_index_segments([*given, delta])
            except (ValueError, RuntimeError) as exc:
                if not _argument_error(exc):
                    raise
                log.warning(
                    "pylance refused to merge the %d segments of index %r of %s (%s); "
                    "rebuilding it over every fragment",
                    len(inputs),
                    declaration.name,
                    leaf.uri,
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                )
                return None
        self._merged[key] = (inputs, merged)
        return merged

    def reusable(self, partition: Partition, name: str, leaf: lance.LanceDataset) -> list[int]:
        """The fragments of an earlier attempt's segment still standing in ``leaf`` (its
        reuse then indexes only those)."""
        earlier = self._built.get((partition.object_id, name))
        if earlier is None:
            return []
        files = _files(leaf)
        ids = sorted(covered([earlier.segment]))
        return ids if all(files.get(f) == earlier.files[f] for f in ids) else []


class CreateIndex(_IndexOperation):
    """Declare ``declaration`` and build it on every partition in its scope."""

    kind = "create_index"

    def __init__(
        self,
        storage: Storage,
        declaration: IndexDeclaration,
        *,
        replace: bool = False,
        shared_model: bool = True,
        given_model: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(storage)
        self.declaration = declaration
        self.replace = replace
        self.shared = shared_model and shares_model(declaration.index_type)
        self.given_model = given_model
        #: The declaration this one replaces, and its partitions (as of the last select).
        self._old: IndexDeclaration | None = None
        self._in_scope: set[str] = set()

    def validate(self, state: NamespaceState) -> None:
        d = self.declaration
        column = state.schema.field_by_id(d.field_id)
        check_column_type(column, d.index_type)
        self._check_declared(state)
        if d.filter is not None and not _scope(state, d.filter):
            raise InvalidArgumentError(
                f"filter {d.filter!r} of index {d.name!r} matches no partition "
                f"(the namespace has {len(state.partitions())}); check the filter, or create "
                "the index without one"
            )

    def _check_declared(self, state: NamespaceState) -> None:
        old = declarations(state).get(self.declaration.name)
        if old is not None and not self.replace:
            raise IndexExistsError(
                f"an index named {self.declaration.name!r} is declared already "
                f"({old.index_type}); choose another name, drop_index({old.name!r}) first, "
                "or pass replace=True to rebuild it"
            )
        self._old = old

    def select(self, state: NamespaceState) -> Selection:
        self._check_declared(state)
        targets = _scope(state, self.declaration.filter)
        self._in_scope = set(targets)
        if self._old is not None:  # partitions the old scope covered lose the old index
            targets = _scope(state, self._old.filter) | targets
        if self.shared and self.declaration.model is None:
            self._train(state, [targets[o] for o in sorted(self._in_scope)])
        return Selection(targets=targets)

    def _train(self, state: NamespaceState, partitions: list[Partition]) -> None:
        d = self.declaration
        column = d.column(state)
        assert column is not None
        spec = ModelSpec(d.name, d.index_type, d.params)
        path = train_model(
            self.storage, state, spec, column, partitions, self.given_model, self.record.add
        )
        if path is not None:
            self.declaration = IndexDeclaration(
                d.name, d.field_id, d.index_type, d.params, d.filter, path
            )

    def manifest_rows(self, state: NamespaceState) -> tuple[list[dict[str, Any]], list[str]]:
        return [self.declaration.to_row()], []

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        d = self.declaration
        leaf, kept = published_and_kept(self.storage, partition.location, base)
        fragments = [f.fragment_id for f in leaf.get_fragments()]
        existing = leaf_segments(kept, d.name)
        change = outcome(partition, fragments_before=len(fragments), fragments_after=len(fragments))
        if existing and self._old is None and not self.replace:
            raise IndexExistsError(
                f"partition {dict(partition.values)} already has an index named {d.name!r} "
                "(built on its leaf outside the namespace); choose another name, or pass "
                "replace=True to rebuild it"
            )
        name = d.column(state)
        column = None if name is None else leaf_column(state, leaf, name)
        in_scope = partition.object_id in self._in_scope
        if column is None or not in_scope or _rows(leaf) == 0:
            if not existing:
                return ComputedChange(partition, base, None, change, skip=SkipReason.NOT_INDEXED)
            operation = LanceOperation.CreateIndex([], existing)  # out of the new scope
            return ComputedChange(partition, base, operation, change, leaf=leaf)
        ids = self.reusable(partition, d.name, leaf) or fragments
        segment = self.segment(partition, leaf, d, column, ids)
        operation = LanceOperation.CreateIndex([segment], existing)
        change = outcome(
            partition,
            fragments_before=len(fragments),
            fragments_after=len(fragments),
            rows_indexed=_rows(leaf, ids),
        )
        return ComputedChange(partition, base, operation, change, leaf=leaf)


class OptimizeIndices(_IndexOperation):
    """Index what the declarations cover and the leaves' indexes do not: partitions
    created since (whole) and fragments written since (a new segment each)."""

    kind = "optimize_indices"
    skips_busy = True

    def __init__(
        self, storage: Storage, filter: str | None = None, names: Sequence[str] | None = None
    ) -> None:
        super().__init__(storage)
        self.filter = filter
        self.names = None if names is None else [check_name(n) for n in names]
        self._scopes: dict[str, set[str]] = {}
        self._declared: dict[str, IndexDeclaration] = {}

    def validate(self, state: NamespaceState) -> None:
        declared = declarations(state)
        unknown = [n for n in self.names or () if n not in declared]
        if unknown:
            raise IndexNotFoundError(
                f"no index named {', '.join(map(repr, unknown))} is declared on this "
                f"namespace (declared: {sorted(declared) or 'none'})"
            )
        self.selection(state)

    def select(self, state: NamespaceState) -> Selection:
        declared = declarations(state)
        wanted = [d for n, d in declared.items() if self.names is None or n in self.names]
        self._declared = {d.name: d for d in wanted}
        within = _scope(state, self.filter)
        scopes: dict[str | None, dict[str, Partition]] = {None: within}  # by declared filter
        targets: dict[str, Partition] = {}
        for d in wanted:
            if d.filter not in scopes:
                scopes[d.filter] = {o: p for o, p in _scope(state, d.filter).items() if o in within}
            scope = scopes[d.filter]
            self._scopes[d.name] = set(scope)
            targets |= scope
        return Selection(targets=targets)

    def depends_on(self, state: NamespaceState) -> list[dict[str, Any]]:
        return [d.to_row() for d in self._declared.values()]

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        leaf, kept = published_and_kept(self.storage, partition.location, base)
        n = len(leaf.get_fragments())
        new: list[Index] = []
        removed: list[Index] = []
        indexed: set[int] = set()  # a row two indexes newly cover is one row indexed
        for d in self._declared.values():
            if partition.object_id not in self._scopes[d.name]:
                continue
            found = self._missing(state, partition, leaf, kept, d)
            if found is not None:
                new.append(found[0])
                removed += found[1]
                indexed |= found[2]
        rows = _rows(leaf, indexed) if indexed else 0
        change = outcome(partition, fragments_before=n, fragments_after=n, rows_indexed=rows)
        if not new:
            return ComputedChange(partition, base, None, change)
        operation = LanceOperation.CreateIndex(new, removed)
        return ComputedChange(partition, base, operation, change, leaf=leaf)

    def _missing(
        self,
        state: NamespaceState,
        partition: Partition,
        leaf: lance.LanceDataset,
        kept: lance.LanceDataset,
        declaration: IndexDeclaration,
    ) -> tuple[Index, list[Index], set[int]] | None:
        """The segment indexing what ``declaration`` misses in ``leaf`` (``kept``: the leaf
        a commit on it builds on, :func:`~..write.leaf_commit.published_and_kept`), the
        segments it replaces and the fragments it newly covers (None: nothing missing)."""
        name = declaration.column(state)
        column = None if name is None else leaf_column(state, leaf, name)
        if column is None:
            return None
        existing = leaf_segments(kept, declaration.name)
        done = covered(existing)
        missing = [
            f.fragment_id
            for f in leaf.get_fragments()
            if f.fragment_id not in done and live_rows(f.metadata) > 0
        ]
        if not missing:
            return None
        own_model = declaration.vector and declaration.model is None
        if existing and (own_model or len(existing) >= MAX_SEGMENTS):
            # a delta would train a model of its own on the new rows alone, or make one
            # segment too many: one segment over every fragment replaces them
            if declaration.index_type in MERGED_TYPES and not own_model:
                delta = self.segment(partition, leaf, declaration, column, missing)
                merged = self.merge(partition, leaf, declaration, existing, delta)
                if merged is not None:
                    return merged, existing, set(missing)
            every = [f.fragment_id for f in leaf.get_fragments() if live_rows(f.metadata) > 0]
            segment = self.segment(partition, leaf, declaration, column, every)
            return segment, existing, set(missing)
        return self.segment(partition, leaf, declaration, column, missing), [], set(missing)


class DropIndex(TableOperation):
    """Remove the declaration ``name`` and the index from every leaf in its scope."""

    kind = "drop_index"

    def __init__(self, storage: Storage, name: str) -> None:
        super().__init__(storage)
        self.name = check_name(name)

    def select(self, state: NamespaceState) -> Selection:
        declared = declarations(state)
        found = declared.get(self.name)
        if found is None:
            raise IndexNotFoundError(
                f"no index named {self.name!r} is declared on this namespace "
                f"(declared: {sorted(declared) or 'none'}); list_indices() shows them"
            )
        return Selection(targets=_scope(state, found.filter))

    def manifest_rows(self, state: NamespaceState) -> tuple[list[dict[str, Any]], list[str]]:
        return [], [f"{INDEX_PREFIX}{self.name}"]

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        leaf, kept = published_and_kept(self.storage, partition.location, base)
        existing = leaf_segments(kept, self.name)
        n = len(leaf.get_fragments())
        change = outcome(partition, fragments_before=n, fragments_after=n)
        if not existing:
            return ComputedChange(partition, base, None, change)
        operation = LanceOperation.CreateIndex([], existing)
        return ComputedChange(partition, base, operation, change, leaf=leaf)


def check_column_type(column: pa.Field, index_type: str) -> None:
    """Refuse an index type the column's type cannot take."""
    if index_type in VECTOR_TYPES and not is_vector(column.type):
        raise InvalidArgumentError(
            f"column {column.name!r} is {column.type}: a vector index ({index_type}) needs a "
            "fixed-size list of floats (or of uint8 for hamming); index other columns with "
            "create_scalar_index (BTREE, BITMAP, INVERTED, ...)"
        )
    text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
    if index_type in ("INVERTED", "FTS", "NGRAM") and not text:
        raise InvalidArgumentError(
            f"column {column.name!r} is {column.type}: an {index_type} index needs a string "
            "column; use BTREE or BITMAP for other scalar columns"
        )
    if index_type == "LABEL_LIST" and not pa.types.is_list(column.type):
        raise InvalidArgumentError(
            f"column {column.name!r} is {column.type}: a LABEL_LIST index needs a list column"
        )


def is_vector(dtype: pa.DataType) -> bool:
    if pa.types.is_list(dtype) and pa.types.is_fixed_size_list(dtype.value_type):
        dtype = dtype.value_type  # a multivector column
    if not pa.types.is_fixed_size_list(dtype):
        return False
    value = dtype.value_type
    return bool(pa.types.is_floating(value) or pa.types.is_uint8(value))


def declaration_for(
    state: NamespaceState,
    column: str,
    index_type: object,
    name: str | None,
    *,
    filter: str | None,
    params: Mapping[str, Any],
    types: frozenset[str],
) -> IndexDeclaration:
    """The declaration of a new index, its arguments checked (the model arguments aside)."""
    if not isinstance(index_type, str) or index_type.upper() not in types:
        raise InvalidArgumentError(
            f"unknown index type {index_type!r}; pylance's are {', '.join(sorted(types))}"
        )
    if not isinstance(column, str):
        raise InvalidArgumentError(f"the column to index must be named, got {column!r}")
    fid = state.schema.id_of(column)  # SchemaError names an unknown column
    managed = sorted(set(params) & _MANAGED)
    if managed:
        raise InvalidArgumentError(
            f"{', '.join(managed)}: set by the namespace for every leaf, not an index parameter"
        )
    check_parameters(index_type.upper(), params)
    try:
        json.dumps(dict(params))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"index parameters must be JSON values (they are declared on the namespace and "
            f"reused for partitions created later): {exc}"
        ) from exc
    if filter is not None and (not isinstance(filter, str) or not filter.strip()):
        raise InvalidArgumentError(f"filter must be a non-empty SQL expression, got {filter!r}")
    name = check_name(name if name is not None else f"{column}_idx")
    kind, params = index_type.upper(), dict(params)
    field = state.schema.field(column)
    if "PQ" in kind and params.get("num_sub_vectors") is None and is_vector(field.type):
        params["num_sub_vectors"] = default_sub_vectors(field.type)
    return IndexDeclaration(name, fid, kind, params, filter)


@functools.cache
def valid_parameters(index_type: str) -> frozenset[str]:
    """The keyword arguments pylance takes for ``index_type`` (an upper-case type): for
    vector types the named parameters of ``LanceDataset.create_index`` and
    ``create_index_uncommitted``, and for every type :data:`PROSE_PARAMETERS`; never
    those the namespace sets (``fragment_ids``, ``replace``, ...)."""
    named: set[str] = set()
    if index_type in VECTOR_TYPES:
        ds = lance.LanceDataset
        for method in (ds.create_index, ds.create_index_uncommitted):
            named |= {
                p.name
                for p in inspect.signature(method).parameters.values()
                if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"
            }
    found = named | PROSE_PARAMETERS.get(index_type, frozenset())
    return frozenset(found - _MANAGED - {"progress_callback", "require_commit"})


def check_parameters(index_type: str, params: Mapping[str, Any]) -> None:
    """Refuse a parameter pylance would silently ignore for ``index_type``."""
    valid = valid_parameters(index_type)
    unknown = sorted(set(params) - valid)
    if not unknown:
        return
    key = unknown[0]
    close = difflib.get_close_matches(key, sorted(valid), n=3)
    elsewhere = sorted(t for t in PROSE_PARAMETERS if key in valid_parameters(t))
    if close:
        hint = f"did you mean {' or '.join(map(repr, close))}?"
    elif elsewhere:
        hint = f"{', '.join(elsewhere)} take it"
    else:
        method = "create_index" if index_type in VECTOR_TYPES else "create_scalar_index"
        hint = f"see help(lance.LanceDataset.{method})"
    takes = ", ".join(sorted(valid)) if valid else "no parameters"
    raise InvalidArgumentError(
        f"unknown parameter {key!r} for index type {index_type} ({hint}); nothing was "
        f"built. {index_type} takes {takes}"
    )


def check_given_model(index_type: str, given: Mapping[str, Any], shared: bool) -> None:
    """Refuse ``ivf_centroids``/``pq_codebook`` where no shared model would take them."""
    check_parameters(index_type, given)
    if not shared or not shares_model(index_type):
        why = "shared_model=False" if shares_model(index_type) else f"{index_type} has none"
        raise InvalidArgumentError(
            f"{', '.join(sorted(given))} become the shared model of every partition, and "
            f"{why}: leave them out, or pass shared_model=True with an IVF type other "
            "than IVF_RQ"
        )
    if "pq_codebook" in given and "PQ" not in index_type:
        raise InvalidArgumentError(
            f"pq_codebook is for the PQ types (IVF_PQ, IVF_HNSW_PQ); {index_type} would "
            "ignore it: leave it out"
        )


def default_sub_vectors(dtype: pa.DataType) -> int:
    """pylance's ``IndicesBuilder`` default: dimension / 16, else / 8, else 1."""
    if pa.types.is_list(dtype):
        dtype = dtype.value_type
    dimension = int(dtype.list_size)
    return next((dimension // d for d in (16, 8) if dimension % d == 0), 1)


def index_info(
    storage: Storage, state: NamespaceState, *, coverage: bool = True
) -> list[IndexInfo]:
    """Every declared index with its coverage as of ``state``, then every index built on
    published leaves outside the namespace (with pylance) under a name no declaration
    has (``declared=False``, its scope the partitions that have it): one leaf open each.
    ``coverage=False``: the declarations alone, read from ``__manifest`` (no leaf opened;
    the counts None)."""
    declared = declarations(state)
    scopes = {n: _scope(state, d.filter) for n, d in declared.items()}
    if not coverage:
        return [
            _info(n, d.column(state), d.index_type, len(scopes[n]), None, d)
            for n, d in declared.items()
        ]
    partitions = {p.object_id: p for p in state.partitions()}
    wanted = sorted(partitions)

    def count(oid: str) -> tuple[dict[str, _Coverage], dict[str, _Undeclared]]:
        p = partitions[oid]
        leaf = _LeafIndexes(storage.table(p.location, p.read_version))
        out = {n: leaf.coverage(n) for n in declared if oid in scopes[n]}
        return out, _undeclared(state, leaf, set(declared))

    found = dict(zip(wanted, storage.map(count, wanted), strict=True))
    infos = []
    for name, d in declared.items():
        counts = [found[o][0][name] for o in scopes[name] if o in found]
        infos.append(_info(name, d.column(state), d.index_type, len(counts), counts, d))
    others: dict[str, list[_Undeclared]] = {}
    for oid in wanted:
        for name, one in found[oid][1].items():
            others.setdefault(name, []).append(one)
    for name, seen in sorted(others.items()):
        counts = [s.counts for s in seen]
        infos.append(_info(name, seen[0].column, seen[0].index_type, len(counts), counts))
    return infos


#: A leaf's rows indexed, rows not indexed, and whether it has the index at all.
_Coverage = tuple[int, int, bool]


class _LeafIndexes:
    """One published leaf's indexes and live rows per fragment, each read once."""

    def __init__(self, leaf: lance.LanceDataset) -> None:
        self.leaf = leaf
        self.described = {d.name: d for d in leaf.describe_indices()}
        self.live = {f.fragment_id: live_rows(f.metadata) for f in leaf.get_fragments()}

    def coverage(self, name: str) -> _Coverage:
        found = self.described.get(name)
        done = {int(f) for s in found.segments for f in s.fragment_ids} if found else set()
        indexed = sum(n for f, n in self.live.items() if f in done)
        return indexed, sum(self.live.values()) - indexed, bool(done)


@dataclass(frozen=True)
class _Undeclared:
    """An index of one leaf no declaration names (built with pylance)."""

    column: str | None
    index_type: str
    counts: _Coverage


def _undeclared(
    state: NamespaceState, leaf: _LeafIndexes, declared: set[str]
) -> dict[str, _Undeclared]:
    found = [d for name, d in leaf.described.items() if name not in declared]
    if not found:
        return {}
    sources = state.schema.read_plan(leaf.leaf.schema, None).sources
    names = {source: name for name, source in sources.items() if source is not None}
    out = {}
    for d in found:
        column = names.get(d.field_names[0]) if len(d.field_names) == 1 else None
        out[d.name] = _Undeclared(column, str(d.index_type).upper(), leaf.coverage(d.name))
    return out


def _info(
    name: str,
    column: str | None,
    index_type: str,
    partitions: int,
    counts: list[_Coverage] | None,
    declaration: IndexDeclaration | None = None,
) -> IndexInfo:
    d = declaration
    return IndexInfo(
        name=name,
        column=column,
        index_type=index_type,
        params={} if d is None else dict(d.params),
        filter=None if d is None else d.filter,
        shared_model=d is not None and d.model is not None,
        partitions=partitions,
        partitions_indexed=None if counts is None else sum(1 for c in counts if c[2]),
        rows_indexed=None if counts is None else sum(c[0] for c in counts),
        rows_unindexed=None if counts is None else sum(c[1] for c in counts),
        declared=d is not None,
    )
