"""A leaf table being searched: its columns under the namespace's names, its prefilter, and
the leaf versions kept open between searches."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import lance
import pyarrow.compute as pc
from lance.dataset import Session  # type: ignore[attr-defined]

from airflow_provider_lance.namespace.errors import (
    InvalidArgumentError,
    LanceNamespaceError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, ReadPlan
from airflow_provider_lance.namespace.format.state import Partition, is_missing
from airflow_provider_lance.namespace.io.storage import (
    Storage,
    first_line,
    storage_error,
)

from .plan import ScanTask
from .remembered import KeptPerStorage
from .scan import lance_filter, leaf_cleaned_up, open_leaf

R = TypeVar("R")
ROW_ID = "_rowid"
_UNSET = object()


#: Leaf versions kept open per storage (small: their indexes are in the storage's session).
OPEN_LEAVES = 1024
#: Bytes of the indexes searched, and of leaf metadata, kept in memory per storage, as
#: Lance counts them (for IVF_PQ it counts far more than is resident: see docs/design.md).
INDEX_CACHE_BYTES = 16 << 30
METADATA_CACHE_BYTES = 256 << 20
#: Read plans an open leaf keeps (per namespace schema and columns).
_PLANS = 16


class OpenLeaf:
    """A leaf version opened to search: its table, its schema, and the read plans made
    for it (a version never changes, so neither do they)."""

    def __init__(self, table: lance.LanceDataset) -> None:
        self.table = table
        self.schema = table.schema
        self._plans: dict[tuple[NamespaceSchema, tuple[str, ...] | None], ReadPlan] = {}

    def read_plan(self, schema: NamespaceSchema, columns: Sequence[str] | None) -> ReadPlan:
        """``schema.read_plan`` of this leaf for ``columns`` (None: all)."""
        key = (schema, None if columns is None else tuple(columns))
        plan = self._plans.get(key)
        if plan is None:
            plan = schema.read_plan(self.schema, columns)
            if len(self._plans) >= _PLANS:
                self._plans.clear()
            self._plans[key] = plan
        return plan


_open: KeptPerStorage[tuple[str, int], OpenLeaf] = KeptPerStorage(OPEN_LEAVES)
_sessions: weakref.WeakKeyDictionary[Storage, Session] = weakref.WeakKeyDictionary()
_sessions_lock = threading.Lock()


def search_session(storage: Storage) -> Session:
    """The Lance session searches of ``storage`` open leaf versions in: the indexes and
    metadata they load stay there, up to :data:`INDEX_CACHE_BYTES` and
    :data:`METADATA_CACHE_BYTES` (the least recently used go first), or the caps of the
    session the namespace was opened with."""
    if storage.session is not None:
        return storage.session
    with _sessions_lock:
        session = _sessions.get(storage)
        if session is None:
            session = _sessions[storage] = Session(
                index_cache_size_bytes=INDEX_CACHE_BYTES,
                metadata_cache_size_bytes=METADATA_CACHE_BYTES,
            )
        return session


def open_pinned(storage: Storage, partition: Partition) -> OpenLeaf:
    """The partition's table at its ``read_version``, opened in the storage's
    :func:`search_session` and kept open (the last :data:`OPEN_LEAVES`) for the next search."""
    version = partition.read_version
    if version is None:
        return OpenLeaf(open_leaf(storage, partition))
    key = (partition.location, version)
    return _open.get(
        storage, key, lambda: OpenLeaf(open_leaf(storage, partition, search_session(storage)))
    )


class Leaf:
    """One partition to search: its table at the pinned version, how namespace columns map
    to its own (reading ``columns``), and the filter left after pruning (``residual``;
    None: its values prove it)."""

    def __init__(
        self,
        task: ScanTask,
        opened: OpenLeaf,
        columns: Sequence[str],
        residual: BoundExpression | None,
        prefilter: bool,
    ) -> None:
        schema = task.scan.namespace_schema
        self.task, self.table = task, opened.table
        self.plan = opened.read_plan(schema, columns)
        self.residual = residual
        self._names = opened.read_plan(schema, None).sources
        self._prefilter = prefilter and residual is not None
        self._pushed = (
            None if residual is None else lance_filter(residual, self.plan, opened.schema)
        )
        self._ids: str | object | None = _UNSET

    @property
    def prefiltered(self) -> bool:
        """Whether Lance applies the residual before ranking (else it is applied after)."""
        return self._prefilter

    def column(self, name: str) -> str | None:
        """The leaf's name of namespace column ``name`` (None: the leaf has no such column)."""
        return self._names.get(name)

    def with_filter(self, call: Callable[[str | None], R]) -> R | None:
        """``call`` with the leaf's prefilter as a Lance filter (None: none applies): the
        residual's SQL where Lance evaluates it, else the row ids it holds for, read and
        evaluated here. None when it holds for no row."""
        if not self._prefilter or self.residual is None:
            return call(None)
        if self._pushed is not None:
            try:
                return call(self._pushed)
            except ValueError:  # Lance's planner is stricter (e.g. an int column vs 2.5)
                self._pushed = None
        if self._ids is _UNSET:
            self._ids = _row_id_filter(self, self.residual)
        return None if self._ids is None else call(cast(str, self._ids))

    def guarded(self, call: Callable[[], R]) -> R:
        """``call()``, its Lance failures as project errors naming the partition."""
        try:
            return call()
        except LanceNamespaceError:
            raise
        except (ValueError, TypeError, OSError) as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: ValueError | TypeError | OSError) -> LanceNamespaceError:
        """What a Lance failure of this leaf's search means, as a project error."""
        partition = self.task.partition
        gone = leaf_cleaned_up(self.task.scan.storage, partition, exc)
        if gone is not None:  # retention removed a file of it meanwhile
            return gone
        if isinstance(exc, OSError):
            return storage_error("search", self.table.uri, exc)
        if is_missing(exc):
            return TableNotFoundError(
                f"partition {partition.object_id} cannot be read at {partition.location} "
                f"version {partition.read_version}: {first_line(exc)}; a file of it is "
                "gone (removed outside the namespace?)"
            )
        return InvalidArgumentError(
            f"searching partition {partition.object_id} ({partition.location}) failed: "
            f"{first_line(exc)}"
        )


def _row_id_filter(leaf: Leaf, residual: BoundExpression) -> str | None:
    """A Lance filter of the row ids of ``leaf`` that ``residual`` holds for (None: none)."""
    schema = leaf.task.scan.namespace_schema
    plan = schema.read_plan(leaf.table.schema, residual.columns)
    rows = leaf.table.to_table(columns=plan.leaf_columns, with_row_id=True)
    mask = pc.fill_null(residual.evaluate(plan.apply(rows)), False).combine_chunks()
    ids = rows.column(ROW_ID).filter(mask).to_pylist()
    return f"{ROW_ID} IN ({', '.join(map(str, ids))})" if ids else None
