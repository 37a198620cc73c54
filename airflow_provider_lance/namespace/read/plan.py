"""Scan plans: a read of one ``__manifest`` version, planned once, run by any process.

A :class:`ScanPlan` is a :class:`Scan` (what every task shares) and a :class:`ScanTask` per
partition (or per data file, when split). A task reads its leaf at the pinned
``read_version``, conformed to the namespace schema, projected and filtered, here or in
another process after a trip through JSON or pickle.

**Storage options** (credentials) belong to the :class:`Scan`: no ``repr``, ``str`` or
``to_json`` shows them (give them to ``from_json`` where the task runs). A pickle carries
them, for Spark closures: pickle a plan only to send it to workers of your own.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any, TypeVar, cast

import pyarrow as pa

from airflow_provider_lance.namespace.errors import ExpressionError, FilterError
from airflow_provider_lance.namespace.format.arrow_json import type_from_json, type_to_json
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, column_names
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition, ReadAt
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.io.storage_options import StorageOptionValue
from airflow_provider_lance.namespace.results import typed_values

from .pruning import Pred, holds_for_kept_partitions, parse_filter
from .scan import open_leaf, read_partition

T = TypeVar("T")
StorageOptions = Mapping[str, StorageOptionValue | None] | None


class RowFilter:
    """A SQL filter over namespace columns (as ``filter=`` takes it), bound to a namespace
    schema; a bad filter raises :class:`~.errors.FilterError` when it is made."""

    def __init__(self, sql: str, schema: NamespaceState | NamespaceSchema) -> None:
        self.sql = sql
        self._schema = schema.schema if isinstance(schema, NamespaceState) else schema
        self._parsed  # noqa: B018 (parsed now: a bad filter fails here)

    @cached_property
    def _parsed(self) -> tuple[BoundExpression, Pred]:
        return parse_filter(self.sql, self._schema)

    @property
    def bound(self) -> BoundExpression:
        return self._parsed[0]

    @cached_property
    def columns(self) -> list[str]:
        """The namespace columns the filter reads, sorted."""
        return list(self.bound.columns)

    def filter(self, table: pa.Table | pa.RecordBatch) -> pa.Table:
        """The rows of ``table`` the filter is true for."""
        try:
            return self.bound.filter(table)
        except ExpressionError as exc:
            raise FilterError(str(exc)) from exc

    def __getstate__(self) -> dict[str, Any]:  # DataFusion's session is parsed again
        return {"sql": self.sql, "_schema": self._schema}

    def __repr__(self) -> str:
        return f"RowFilter({self.sql!r})"


@dataclass(frozen=True)
class FragmentInfo:
    """One data file of a leaf at its pinned version: live rows and bytes (None: unknown)."""

    fragment_id: int
    rows: int
    bytes: int | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.fragment_id, "rows": self.rows, "bytes": self.bytes}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> FragmentInfo:
        size = obj.get("bytes")
        return cls(int(obj["id"]), int(obj["rows"]), None if size is None else int(size))


class Scan:
    """What every task of one plan shares: the namespace at ``uri`` as of
    ``manifest_version`` (its schema), the projection ``columns`` and the ``filter``.
    Holds the storage options without showing them; equal scans read the same rows."""

    def __init__(
        self,
        uri: str,
        manifest_version: int,
        schema: NamespaceSchema,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        partition_types: Mapping[str, pa.DataType] | None = None,
        pinned: bool = False,
        storage_options: StorageOptions = None,
        storage: Storage | None = None,
    ) -> None:
        self.uri, self.manifest_version, self.namespace_schema = uri, manifest_version, schema
        self.columns, self.filter = None if columns is None else tuple(columns), filter
        #: The type of every partition field (of any spec version), by name.
        self.partition_types = dict(partition_types or {})
        #: The reader named the version (``as_of``), rather than reading the latest.
        self.pinned = pinned
        self._storage = storage
        self._options = storage.options if storage is not None else storage_options
        self.schema.names  # noqa: B018 (an unknown column fails here)

    @cached_property
    def schema(self) -> pa.Schema:
        """The schema of what the tasks read: the namespace's active columns, projected."""
        return self.namespace_schema.project(self.columns)

    @cached_property
    def row_filter(self) -> RowFilter | None:
        return None if self.filter is None else RowFilter(self.filter, self.namespace_schema)

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            self._storage = Storage(self.uri, self._options)
        return self._storage

    def read(
        self, task: ScanTask, *, batch_size: int | None = None, columns: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """The rows of ``task`` (``columns`` instead of the scan's, e.g. to count)."""
        residual = None if task.exact or self.row_filter is None else self.row_filter.bound
        fragments = None if task.fragments is None else [f.fragment_id for f in task.fragments]
        return read_partition(
            self.storage,
            task.partition,
            self.namespace_schema,
            columns=self.columns if columns is None else columns,
            residual=residual,
            batch_size=batch_size,
            fragment_ids=fragments,
        )

    def count_rows(self, task: ScanTask) -> int:
        """The rows of ``task`` the filter selects (from Lance's metadata if none applies)."""
        if task.exact or self.row_filter is None:
            leaf = open_leaf(self.storage, task.partition)
            if task.fragments is None:
                return int(leaf.count_rows())
            wanted = {f.fragment_id for f in task.fragments}
            return sum(f.count_rows() for f in leaf.get_fragments() if f.fragment_id in wanted)
        batches = self.read(task, columns=self.row_filter.columns)
        return sum(b.num_rows for b in batches)

    def to_json(self) -> dict[str, Any]:
        """The scan as JSON-safe data, without the storage options."""
        return {
            "uri": self.uri,
            "manifest_version": self.manifest_version,
            "pinned": self.pinned,
            "schema": json.loads(self.namespace_schema.to_json()),
            "partition_types": {k: type_to_json(t) for k, t in self.partition_types.items()},
            "columns": None if self.columns is None else list(self.columns),
            "filter": self.filter,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], storage_options: StorageOptions = None) -> Scan:
        """The scan :meth:`to_json` wrote, reading with ``storage_options``."""
        return cls(
            str(obj["uri"]),
            int(obj["manifest_version"]),
            NamespaceSchema.from_json(json.dumps(obj["schema"])),
            columns=obj.get("columns"),
            filter=obj.get("filter"),
            partition_types={k: type_from_json(t) for k, t in obj["partition_types"].items()},
            pinned=bool(obj.get("pinned", False)),
            storage_options=storage_options,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scan) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[str, Any]:
        """All but the open storage and the parsed caches (the storage options too)."""
        dropped = ("_storage", "schema", "row_filter")
        return {k: v for k, v in self.__dict__.items() if k not in dropped}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _storage=None)

    def __repr__(self) -> str:  # never the storage options
        return (
            f"Scan({self.uri!r}, manifest_version={self.manifest_version}, "
            f"columns={None if self.columns is None else list(self.columns)!r}, "
            f"filter={self.filter!r})"
        )


@dataclass(frozen=True)
class ScanTask:
    """One partition of a plan (or some of its data files): read it with :meth:`to_reader`.
    ``fragments``: the data files it covers (None: all, unlisted); ``exact``: every row
    matches the filter (proven from its partition values), so none is applied."""

    scan: Scan = field(repr=False, compare=False)
    partition: Partition
    fragments: tuple[FragmentInfo, ...] | None = None
    exact: bool = False

    @property
    def object_id(self) -> str:
        return self.partition.object_id

    @property
    def location(self) -> str:
        return self.partition.location

    @property
    def values(self) -> Mapping[str, Any]:
        return self.partition.values

    @property
    def read_version(self) -> int | None:  # None: the latest
        return self.partition.read_version

    @property
    def spec_version(self) -> int:
        return self.partition.spec_version

    def to_batches(self, batch_size: int | None = None) -> Iterator[pa.RecordBatch]:
        return self.scan.read(self, batch_size=batch_size)

    def to_reader(self, batch_size: int | None = None) -> pa.RecordBatchReader:
        """Its rows, in the scan's schema, projected and filtered."""
        return pa.RecordBatchReader.from_batches(self.scan.schema, self.to_batches(batch_size))

    def to_table(self) -> pa.Table:
        return self.to_reader().read_all()

    def count_rows(self) -> int:
        return self.scan.count_rows(self)

    def split(self) -> list[ScanTask]:
        """One task per listed data file (this task itself if none are listed)."""
        if self.fragments is None:
            return [self]
        return [replace(self, fragments=(f,)) for f in self.fragments]

    def to_json(self, *, scan: bool = True) -> dict[str, Any]:
        """The task as JSON-safe data (no storage options); ``scan=False`` leaves out the
        :class:`Scan` it shares with its plan (give it to :meth:`from_json`)."""
        fragments = None if self.fragments is None else [f.to_json() for f in self.fragments]
        out = self.partition.to_dict() | {"fragments": fragments, "exact": self.exact}
        if scan:
            out["scan"] = self.scan.to_json()
        return out

    @classmethod
    def from_json(
        cls,
        obj: Mapping[str, Any] | str,
        *,
        scan: Scan | None = None,
        storage_options: StorageOptions = None,
    ) -> ScanTask:
        """The task :meth:`to_json` wrote; ``scan`` if it was written without one, else
        read with ``storage_options``."""
        data: Mapping[str, Any] = json.loads(obj) if isinstance(obj, str) else obj
        if "scan" in data:
            scan = Scan.from_json(data["scan"], storage_options)
        if scan is None:
            raise ValueError("a task written with scan=False needs the scan it belongs to")
        values = typed_values(data["values"], scan.partition_types)
        named = str(data["object_id"]), str(data["location"]), int(data["spec_version"])
        read_at = ReadAt(scan.manifest_version, scan.pinned)
        partition = Partition(*named, values, data.get("read_version"), read_at)
        listed = data.get("fragments")
        fragments = None if listed is None else tuple(FragmentInfo.from_json(f) for f in listed)
        return cls(scan, partition, fragments, bool(data.get("exact", False)))


@dataclass(frozen=True)
class ScanPlan:
    """The tasks of one read of one ``__manifest`` version, and the :class:`Scan` they
    share. Reading it (:meth:`to_reader`) reads its tasks, several leaves at once."""

    scan: Scan
    tasks: tuple[ScanTask, ...]

    @property
    def manifest_version(self) -> int:
        return self.scan.manifest_version

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[ScanTask]:
        return iter(self.tasks)

    @property
    def schema(self) -> pa.Schema:
        return self.scan.schema

    def to_batches(self, batch_size: int | None = None) -> Iterator[pa.RecordBatch]:
        for batches in self._ahead(lambda t: t.to_batches(batch_size)):
            yield from batches

    def to_reader(self, batch_size: int | None = None) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches(batch_size))

    def to_table(self) -> pa.Table:
        return self.to_reader().read_all()

    def count_rows(self) -> int:
        """The rows the plan reads (from Lance's metadata where no filter applies)."""
        return sum(self.scan.storage.map(ScanTask.count_rows, self.tasks))

    def _ahead(self, read: Callable[[ScanTask], Iterator[T]]) -> Iterator[Iterator[T]]:
        """``read`` of every task in order, each started ahead in a worker (opened and its
        first item read, ``storage.concurrency`` at a time)."""
        if len(self.tasks) <= 1:
            yield from (read(t) for t in self.tasks)
            return

        def start(task: ScanTask) -> tuple[object, Iterator[T]]:
            items = read(task)
            return next(items, _END), items

        for first, rest in self.scan.storage.ahead(start, self.tasks):
            if first is not _END:
                yield itertools.chain([cast(T, first)], rest)

    def split(self) -> ScanPlan:
        """This plan with one task per listed data file."""
        return replace(self, tasks=tuple(s for t in self.tasks for s in t.split()))

    def to_json(self) -> dict[str, Any]:
        """The plan as JSON-safe data (no storage options: see the module docstring)."""
        return {"scan": self.scan.to_json(), "tasks": [t.to_json(scan=False) for t in self.tasks]}

    @classmethod
    def from_json(
        cls, obj: Mapping[str, Any] | str, storage_options: StorageOptions = None
    ) -> ScanPlan:
        """The plan :meth:`to_json` wrote, reading with ``storage_options``."""
        data: Mapping[str, Any] = json.loads(obj) if isinstance(obj, str) else obj
        scan = Scan.from_json(data["scan"], storage_options)
        return cls(scan, tuple(ScanTask.from_json(t, scan=scan) for t in data["tasks"]))

    def __repr__(self) -> str:
        return f"ScanPlan({self.scan!r}, tasks={len(self.tasks)})"


_END = object()


def plan_scan(
    storage: Storage,
    state: NamespaceState,
    partitions: Sequence[Partition],
    *,
    filter: str | None,
    columns: Sequence[str] | None,
    fragments: bool = False,
    target_tasks: int | None = None,
) -> ScanPlan:
    """The plan reading ``partitions``; see ``PartitionedNamespace.plan_scan``."""
    columns = column_names(columns)  # read once (an iterator too)
    state.schema.project(columns)  # the names are checked before anything is read
    scan = Scan(
        state.root,
        state.version,
        state.schema,
        columns=columns,
        filter=filter,
        partition_types={f.name: f.type for f in state.partition_columns},
        pinned=state.pinned,
        storage=storage,
    )
    exact: set[int] = set()
    if scan.row_filter is not None:
        holds = partial(holds_for_kept_partitions, *scan.row_filter._parsed)
        exact = {v for v, fields in state.specs.items() if holds(fields, state.schema)}
    split = target_tasks is not None and len(partitions) < target_tasks
    listed: Sequence[tuple[FragmentInfo, ...] | None] = [None] * len(partitions)
    if fragments or split:
        listed = storage.map(lambda p: leaf_fragments(storage, p), partitions)
    tasks = tuple(
        ScanTask(scan, p, f, p.spec_version in exact)
        for p, f in zip(partitions, listed, strict=True)
    )
    plan = ScanPlan(scan, tasks)
    return plan.split() if split else plan


def leaf_fragments(storage: Storage, partition: Partition) -> tuple[FragmentInfo, ...]:
    """The data files of a partition's leaf at its ``read_version``, from its manifest."""
    leaf = open_leaf(storage, partition)
    out = []
    for fragment in leaf.get_fragments():
        meta = fragment.metadata
        sizes = [f.file_size_bytes for f in meta.files]
        size = None if None in sizes else sum(int(b or 0) for b in sizes)
        rows = int(meta.num_rows) if meta.num_rows is not None else int(fragment.count_rows())
        out.append(FragmentInfo(fragment.fragment_id, rows, size))
    return tuple(out)
