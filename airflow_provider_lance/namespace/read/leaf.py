"""A leaf table being searched: its columns under the namespace's names, its prefilter, and
the leaf versions kept open between searches."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar, cast

import lance
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import (
    InvalidArgumentError,
    LanceNamespaceError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.schema import ReadPlan
from airflow_provider_lance.namespace.format.state import Partition, is_missing
from airflow_provider_lance.namespace.io.storage import (
    Storage,
    first_line,
    storage_error,
)

from .plan import ScanTask
from .scan import _retention_checked, filter_columns, lance_filter, open_leaf

R = TypeVar("R")
ROW_ID = "_rowid"
_UNSET = object()
K = TypeVar("K")


class KeptPerStorage(Generic[K, R]):
    """The last ``size`` values made per storage, by key: for what a leaf version, which
    never changes, fixes (the open table, its document counts)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: weakref.WeakKeyDictionary[Storage, OrderedDict[K, R]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def get(self, storage: Storage, key: K, make: Callable[[], R]) -> R:
        with self._lock:
            kept = self._kept.setdefault(storage, OrderedDict())
            if key in kept:
                kept.move_to_end(key)
                return kept[key]
        value = make()
        with self._lock:
            kept[key] = value
            while len(kept) > self.size:
                kept.popitem(last=False)
        return value


#: Leaf versions kept open per storage (each keeps its index in memory once searched).
_open: KeptPerStorage[tuple[str, int], lance.LanceDataset] = KeptPerStorage(1024)


def open_pinned(storage: Storage, partition: Partition) -> lance.LanceDataset:
    """The partition's table at its ``read_version``, kept open for the next search."""
    version = partition.read_version
    if version is None:
        return open_leaf(storage, partition)
    return _open.get(storage, (partition.location, version), lambda: open_leaf(storage, partition))


class Leaf:
    """One partition to search: its table at the pinned version, how namespace columns map
    to its own, and the filter left after pruning (``residual``; None: its values prove it)."""

    def __init__(
        self,
        task: ScanTask,
        table: lance.LanceDataset,
        plan: ReadPlan,
        residual: BoundExpression | None,
        prefilter: bool,
    ) -> None:
        self.task, self.table, self.plan = task, table, plan
        self.residual = residual
        schema = task.scan.namespace_schema
        self._names = schema.read_plan(table.schema).sources
        self._prefilter = prefilter and residual is not None
        self._pushed = None if residual is None else lance_filter(residual, plan, table.schema)
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
        partition = self.task.partition
        try:
            with _retention_checked(self.task.scan.storage, partition):
                return call()
        except LanceNamespaceError:
            raise
        except (ValueError, TypeError) as exc:
            if is_missing(exc):
                raise TableNotFoundError(
                    f"partition {partition.object_id} cannot be read at {partition.location} "
                    f"version {partition.read_version}: {first_line(exc)}; a file of it is "
                    "gone (removed outside the namespace?)"
                ) from exc
            raise InvalidArgumentError(
                f"searching partition {partition.object_id} ({partition.location}) failed: "
                f"{first_line(exc)}"
            ) from exc
        except OSError as exc:
            raise storage_error("search", self.table.uri, exc) from exc


def _row_id_filter(leaf: Leaf, residual: BoundExpression) -> str | None:
    """A Lance filter of the row ids of ``leaf`` that ``residual`` holds for (None: none)."""
    schema = leaf.task.scan.namespace_schema
    plan = schema.read_plan(leaf.table.schema, filter_columns(residual))
    rows = leaf.table.to_table(columns=plan.leaf_columns, with_row_id=True)
    mask = pc.fill_null(residual.evaluate(plan.apply(rows)), False).combine_chunks()
    ids = rows.column(ROW_ID).filter(mask).to_pylist()
    return f"{ROW_ID} IN ({', '.join(map(str, ids))})" if ids else None
