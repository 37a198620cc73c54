"""One version of the namespace, parsed: schema, specs, and its leaf-table partitions.

A :class:`NamespaceState` is immutable and tied to one ``__manifest`` version, so all derived
from it is isolated from concurrent writers. It also plans the rows of new partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from json.encoder import encode_basestring
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import (
    LanceNamespaceError,
    LatestVersionCleanedUp,
    ManifestError,
    NamespaceNotFoundError,
    PartitionSpecError,
    VersionCleanedUp,
)
from airflow_provider_lance.namespace.io.storage import beside
from airflow_provider_lance.namespace.io.uri import child_uri
from airflow_provider_lance.namespace.results import value_text

from .manifest import (
    CLAIM,
    LOCATION,
    NAMESPACE,
    OBJECT_ID,
    POINT_LOOKUP_IDS,
    READ_VERSION,
    TABLE,
    ManifestRow,
    ManifestView,
    prunes_in_scan,
    row,
)
from .naming import (
    LEAF_TABLE_NAME,
    SEPARATOR,
    join_id,
    leaf_directory,
    partition_name,
    spec_namespace_id,
)
from .schema import NamespaceSchema
from .spec import PartitionField, spec_from_json, spec_key, spec_versions

log = logging.getLogger(__name__)

SCHEMA_KEY = "schema"
PARTITION_PROPERTY_PREFIX = "partition."
SPEC_COLUMN = "__spec_version"
#: Lookups by scanning before NamespaceState.find builds an id index.
_SCAN_LOOKUPS = 16
#: Ids whose full rows a lookup by id may read (more: one scan instead).
_FULL_ROW_LOOKUPS = 1000


@dataclass(frozen=True)
class ReadAt:
    """The ``__manifest`` version a read resolved, and whether the reader named it (``as_of``)."""

    version: int
    pinned: bool = False


@dataclass(frozen=True)
class Partition:
    """One leaf table: ``location`` its absolute URI, ``values`` partition field -> value,
    ``read_version`` the published version readers use (None: the latest), ``read_at`` the
    manifest version it was read from (for errors only)."""

    object_id: str
    location: str
    spec_version: int
    values: Mapping[str, Any]
    read_version: int | None
    read_at: ReadAt | None = field(default=None, compare=False, repr=False)

    @property
    def directory(self) -> str:
        return self.location.rsplit("/", 1)[-1]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly summary (values in their string form), e.g. for XCom."""
        return {
            "object_id": self.object_id,
            "location": self.location,
            "spec_version": self.spec_version,
            "values": {k: value_text(v) for k, v in self.values.items()},
            "read_version": self.read_version,
        }


def version_ranges(versions: Iterable[int]) -> str:
    """``1-3, 7, 9-12``: a sorted set of versions, compactly."""
    runs: list[list[int]] = []
    for v in sorted(versions):
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def is_missing(exc: BaseException) -> bool:
    """Whether a Lance error (not a project error) says a file or version is not there."""
    return not isinstance(exc, LanceNamespaceError) and "not found" in str(exc).lower()


def removed_by_retention(
    subject: str, kept: Iterable[int], what_kept: str, read_at: ReadAt | None
) -> VersionCleanedUp:
    """The error of a read whose version retention removed: retryable
    :class:`LatestVersionCleanedUp` unless ``read_at`` is pinned (:class:`VersionCleanedUp`)."""
    window = f"{what_kept} kept: {version_ranges(kept)}"
    if read_at is None or not read_at.pinned:
        return LatestVersionCleanedUp(
            f"{subject} was cleaned up, by retention (maintain with older_than), while this read "
            f"of the latest state used it; {window}. The data is intact: read again, which "
            "reads the new latest version (and keep older_than above your longest read)"
        )
    return VersionCleanedUp(
        f"{subject} was cleaned up by retention (maintain with older_than); {window}. It "
        "cannot be read any more: read a retained version, and tag the versions you will "
        "need to read later (PartitionedNamespace.tag keeps them and what they read)"
    )


@dataclass(frozen=True)
class PartitionRows:
    """``__manifest`` rows that create partitions, and the leaves they point at."""

    rows: list[dict[str, Any]]
    partitions: list[Partition]


@dataclass
class NamespaceState:
    """The namespace as of one ``__manifest`` version."""

    root: str
    view: ManifestView  # the rows of this version, queried by name
    version: int
    schema: NamespaceSchema
    specs: dict[int, list[PartitionField]]
    #: Resolved from an explicit ``as_of`` (else: as the latest state); see :class:`ReadAt`.
    pinned: bool = False
    _tables: pa.Table | None = field(default=None, repr=False)
    _lookups: int = field(default=0, repr=False)

    @classmethod
    def load(cls, root: str, view: ManifestView, *, pinned: bool = False) -> NamespaceState:
        """The state ``view`` holds; ``pinned``: the reader named that version (``as_of``)."""
        metadata = view.metadata
        versions = spec_versions(metadata)
        if not versions:
            hint = (
                " (it looks like an interrupted PartitionedNamespace.create(): call create() "
                "again with the same schema and partition fields to finish it)"
            )
            raise NamespaceNotFoundError(
                f"{root} has a __manifest table but no partition_spec_v<N> property, so it "
                f"is not a partitioned namespace{'' if metadata else hint}"
            )
        if SCHEMA_KEY not in metadata:
            raise ManifestError(f"{root}: the __manifest metadata has no 'schema' property")
        schema = NamespaceSchema.from_json(metadata[SCHEMA_KEY])
        specs = {v: spec_from_json(metadata[spec_key(v)], schema, v) for v in versions}
        return cls(root, view, view.version, schema, specs, pinned)

    @cached_property
    def read_at(self) -> ReadAt:
        return ReadAt(self.version, self.pinned)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A read finding this version removed by retention raises :class:`VersionCleanedUp`."""
        try:
            yield
        except (OSError, ValueError) as exc:
            if not is_missing(exc):
                raise
            try:
                kept = self.view.retained_versions()
            except (OSError, ValueError):
                raise exc from None
            if self.version in kept:  # still there: something else is missing
                raise
            subject = f"__manifest version {self.version} of {self.root}"
            raise removed_by_retention(subject, kept, "__manifest versions", self.read_at) from exc

    @property
    def spec_version(self) -> int:
        return max(self.specs)

    @property
    def current_spec(self) -> list[PartitionField]:
        return self.specs[self.spec_version]

    @cached_property
    def partition_columns(self) -> list[pa.Field]:
        """One manifest column per distinct partition field name, across all versions."""
        out: dict[str, pa.Field] = {}
        for version in sorted(self.specs):
            for f in self.specs[version]:
                out.setdefault(f.name, pa.field(f.name, f.result_type))
        return list(out.values())

    @property
    def tables(self) -> pa.Table:
        """The leaf-table rows of this version, loaded once: ``object_id``, ``location``,
        ``read_version``, every partition column, and a derived ``__spec_version``."""
        if self._tables is None:
            with self._reading():
                rows = self.view.leaf_rows(self._columns)
            self._tables = self._narrow(rows)
        return self._tables

    def load_tables_beside(self) -> Future[pa.Table] | None:
        """Start reading :attr:`tables` on a storage thread when that costs about what a
        filtered scan would; None otherwise or when they are read already."""
        if self._tables is not None or not self.view.loads_whole_cheaply:
            return None
        return beside(lambda: self.tables)

    def candidates(self, where: pc.Expression | bool | None) -> pa.Table:
        """Rows of :attr:`tables` including all those ``where`` (a predicate on partition
        columns; None or True: every row, False: none) selects, and usually few more: the
        caller filters them exactly."""
        if where is False:
            if self._tables is not None:
                return self._tables.slice(0, 0)
            return self._narrow(self.rows_table([]).select(self._columns))
        if where is None or where is True or self._tables is not None or self.view.reads_whole:
            return self.tables
        try:
            with self._reading():
                rows = self.view.leaf_rows(self._columns, where)
        except (OSError, ValueError, pa.ArrowException) as exc:
            if is_missing(exc) or isinstance(exc, LanceNamespaceError):
                raise
            log.debug("__manifest scan with %s failed, reading every row: %s", where, exc)
            return self.tables
        return self._narrow(rows)

    @cached_property
    def _columns(self) -> list[str]:
        wanted = [OBJECT_ID, LOCATION, READ_VERSION, *(f.name for f in self.partition_columns)]
        missing = set(wanted) - set(self.view.column_types)
        if missing:
            raise ManifestError(
                f"{self.root}: the __manifest table lacks columns {sorted(missing)}; it was "
                "rewritten by a tool that does not know partitioned namespaces (e.g. "
                "pylance's DirectoryNamespace). Run PartitionedNamespace.repair() (or "
                "`python -m airflow_provider_lance repair URI`) to restore them."
            )
        return [*wanted, CLAIM] if self.view.has_claim_column else wanted

    def _narrow(self, rows: pa.Table) -> pa.Table:
        """Leaf rows under a spec version, not being created, with their spec version."""
        ids = rows.column(OBJECT_ID)
        spec = pa.nulls(rows.num_rows, pa.int32())
        for version in sorted(self.specs):
            under = pc.starts_with(ids, f"v{version}{SEPARATOR}")
            spec = pc.if_else(under, pa.scalar(version, pa.int32()), spec)
        ours = pc.and_(pc.is_valid(spec), pc.ends_with(ids, f"{SEPARATOR}{LEAF_TABLE_NAME}"))
        if CLAIM in rows.column_names:
            pending = pc.and_(
                pc.is_null(rows.column(READ_VERSION)), pc.is_valid(rows.column(CLAIM))
            )
            ours = pc.and_(ours, pc.invert(pending))
            rows = rows.drop_columns([CLAIM])
        rows, spec = rows.filter(ours), pc.filter(spec, ours)
        return rows.append_column(SPEC_COLUMN, spec)

    def partitions_from_rows(self, rows: pa.Table) -> list[Partition]:
        """Partition objects for rows of :attr:`tables`."""
        named = (OBJECT_ID, LOCATION, SPEC_COLUMN, READ_VERSION)
        fixed = [rows.column(c).to_pylist() for c in named]
        columns = {f.name: rows.column(f.name).to_pylist() for f in self.partition_columns}
        names = {v: [f.name for f in fields] for v, fields in self.specs.items()}
        read_at = self.read_at
        out = []
        for i, (object_id, location, version, read_version) in enumerate(zip(*fixed, strict=True)):
            uri = child_uri(self.root, location)
            values = {n: columns[n][i] for n in names.get(version, ())}
            out.append(Partition(object_id, uri, version, values, read_version, read_at))
        return out

    @cached_property
    def _all_partitions(self) -> tuple[Partition, ...]:
        return tuple(self.partitions_from_rows(self.tables))

    def partitions(self) -> list[Partition]:
        """Every published partition of this version."""
        return list(self._all_partitions)

    def full_rows(self, object_ids: Sequence[str]) -> pa.Table:
        """Every manifest column of the rows with these ids (to rewrite them in a commit)."""
        if not object_ids:
            return pa.Table.from_pylist([], schema=self.view.schema)
        if len(object_ids) <= _FULL_ROW_LOOKUPS:
            found = self._rows(object_ids)
            return self.rows_table([r for r in (found.get(i) for i in object_ids) if r])
        with self._reading():
            return self.view.scan_by_id(object_ids)

    def _rows(
        self, ids: Sequence[str], where: pc.Expression | None = None
    ) -> dict[str, ManifestRow]:
        with self._reading():
            return self.view.rows_by_id(ids, where)

    def _chain_predicate(self, value_tuples: Sequence[Sequence[Any]]) -> pc.Expression | None:
        """A predicate on the first partition column that the rows of these partitions and
        of their parent namespaces satisfy; None if there is none."""
        if len(self.specs) != 1:
            return None
        first = self.current_spec[0]
        if not prunes_in_scan(first.result_type):
            return None
        values = [v[0] for v in value_tuples if v[0] is not None]
        column = pc.field(first.name)
        if not values:
            return column.is_null()
        try:
            found = pa.array(values, first.result_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return None
        return column.is_null() | column.isin(found)

    def read_versions(self) -> list[tuple[str, int | None]]:
        """``(object_id, read_version)`` of every partition, in the order of :attr:`tables`."""
        ids = self.tables.column(OBJECT_ID).to_pylist()
        return list(zip(ids, self.tables.column(READ_VERSION).to_pylist(), strict=True))

    @cached_property
    def _positions(self) -> dict[str, int]:
        return {oid: i for i, oid in enumerate(self.tables.column(OBJECT_ID).to_pylist())}

    def find(
        self, object_ids: Sequence[str], values: Sequence[Sequence[Any]] | None = None
    ) -> dict[str, Partition]:
        """The existing partitions among ``object_ids`` (leaf table ids), by id; ``values``
        (each id's partition values under the current spec, if known) let a lookup by id
        use the partition columns' index."""
        self._lookups += 1
        few = len(object_ids) <= POINT_LOOKUP_IDS
        first = self._lookups == 1 and len(object_ids) <= _FULL_ROW_LOOKUPS
        by_id = self._tables is None and (few or first)
        if by_id:
            with_parents = list(dict.fromkeys(p for i in object_ids for p in _prefixes(i)))
            with self._reading():
                by_id = few or self.view.scan_is_cheaper(len(with_parents))
        if by_id:
            where = self._chain_predicate(values) if values is not None else None
            found = self._rows(with_parents, where)
            leaves = [found[i] for i in object_ids if i in found]
            rows = self._narrow(self.rows_table(leaves).select(self._columns))
        elif "_positions" not in self.__dict__ and self._lookups <= _SCAN_LOOKUPS:
            ids = pa.array(list(object_ids), pa.utf8())
            rows = self.tables.filter(pc.is_in(self.tables.column(OBJECT_ID), ids))
        else:
            positions = sorted({self._positions[i] for i in object_ids if i in self._positions})
            rows = self.tables.take(pa.array(positions, pa.int64()))
        return {p.object_id: p for p in self.partitions_from_rows(rows)}

    def existing(self, object_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``object_ids`` (of any row type) exist in this version."""
        with self._reading():
            return self.view.existing(object_ids)

    def leaf_id(self, values: Sequence[Any], spec_version: int | None = None) -> str:
        """The object id of the leaf table holding ``values`` (one per field, in order)."""
        return self._chain(spec_version or self.spec_version, [value_text(v) for v in values])[-1]

    def _chain(self, version: int, texts: Sequence[str | None]) -> list[str]:
        """The ids of the namespaces holding these value texts, root first, then the leaf."""
        chain = [spec_namespace_id(version)]
        for f, t in zip(self.specs[version], texts, strict=True):
            assert f.field_id is not None
            chain.append(join_id(chain[-1], partition_name(chain[-1], f.field_id, t)))
        return [*chain, join_id(chain[-1], LEAF_TABLE_NAME)]

    def plan_partitions(
        self,
        value_tuples: Sequence[Sequence[Any]],
        read_version: int | None,
        claim: str | None = None,
        spec_version: int | None = None,
    ) -> PartitionRows:
        """Rows creating every missing partition among ``value_tuples`` under ``spec_version``
        (default the current spec). Each row carries its own and its ancestors' values (in namespace
        rows also as ``partition.<name>`` metadata); leaf rows carry ``claim``."""
        version = spec_version or self.spec_version
        fields = self.specs[version]
        chains: list[list[str]] = []  # per tuple: its namespace ids, root first, then the leaf
        texts: list[list[str | None]] = []  # per tuple: its values' string forms
        for values in value_tuples:
            if len(values) != len(fields):
                raise PartitionSpecError(
                    f"expected {len(fields)} partition value(s), got {len(values)}"
                )
            texts.append([value_text(v) for v in values])
            chains.append(self._chain(version, texts[-1]))
        existing = self.existing(list({i for chain in chains for i in chain}))
        keys = [encode_basestring(f"{PARTITION_PROPERTY_PREFIX}{f.name}") for f in fields]
        rows: dict[str, dict[str, Any]] = {}
        partitions: list[Partition] = []
        for values, text, chain in zip(value_tuples, texts, chains, strict=True):
            parent = chain[0]
            if parent not in existing:
                rows.setdefault(parent, row(parent, NAMESPACE, metadata="{}"))
            inherited: dict[str, Any] = {}
            props: list[str] = []  # the JSON members of the partition.<name> properties
            for f, v, t, key, parent in zip(fields, values, text, keys, chain[1:], strict=False):
                inherited[f.name] = v
                if t is not None:  # NULL values have no entry (a property value is a string)
                    props.append(f"{key}:{encode_basestring(t)}")
                if parent not in existing and parent not in rows:
                    metadata = "{" + ",".join(props) + "}"
                    rows[parent] = row(parent, NAMESPACE, metadata=metadata) | inherited
            leaf = chain[-1]
            if leaf in existing or leaf in rows:
                continue
            location, leaf_values = leaf_directory(leaf), dict(inherited)
            leaf_row = row(leaf, TABLE, location=location, read_version=read_version, claim=claim)
            rows[leaf] = leaf_row | leaf_values
            uri = child_uri(self.root, location)
            partitions.append(Partition(leaf, uri, version, leaf_values, read_version))
        return PartitionRows(list(rows.values()), partitions)

    def rows_table(self, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
        return pa.Table.from_pylist(rows, schema=self.view.schema)


def _prefixes(object_id: str) -> list[str]:
    """The id and those of its parent namespaces (``v1``, ``v1$a``, ``v1$a$dataset``)."""
    parts = object_id.split(SEPARATOR)
    return [SEPARATOR.join(parts[: k + 1]) for k in range(len(parts))]
