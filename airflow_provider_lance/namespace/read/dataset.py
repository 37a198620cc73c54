"""A namespace as a ``pyarrow.dataset.Dataset``: what DuckDB, Polars and DataFusion query.

:class:`NamespaceDataset` is pinned to the ``__manifest`` version it was made at. Each scan
is a scan plan of that version (:mod:`.plan`): the engine's filter, a pyarrow expression,
prunes partitions and is pushed into every leaf's Lance scan as the namespace's SQL
(:mod:`.arrow_filter`); only the projected columns are read; leaves are read several at
once (the namespace's ``concurrency``). ``count_rows`` counts from Lance's metadata the
partitions the filter holds for whole; ``head`` stops once it has its rows.

Engines call ``schema`` and ``scanner(columns=, filter=)`` then ``to_reader()`` (DuckDB),
``to_batches(columns=, filter=, batch_size=)`` (Polars' ``scan_pyarrow_dataset``) and
``get_fragments(filter)`` then each fragment's ``scanner(schema, columns=, filter=,
batch_size=)`` (DataFusion's ``register_dataset``: a fragment is a partition).

DataFusion calls these from inside its async runtime, where the DataFusion this package
plans filters with cannot run (it would start a runtime inside one): planning runs on
threads of this module (:func:`apart`), and so does reading a fragment (what DataFusion
reads; a read of a whole dataset stays on the engine's thread).

Like pylance's ``LanceDataset``, the classes subclass pyarrow's (engines test for them)
without a C++ object behind them, so every public method pyarrow defines is defined here;
those a namespace cannot serve raise :class:`NotImplementedError`.
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage

from .arrow_filter import ArrowFilter
from .coverage import pruned_rows
from .plan import ScanPlan, plan_scan

#: A filter: a pyarrow expression (what engines give) or a SQL string (the namespace's).
Filter: TypeAlias = "pc.Expression | str | None"
R = TypeVar("R")
_THREADS = "lance-dataset"
_POOL = ThreadPoolExecutor(thread_name_prefix=_THREADS)
_END = object()


def apart(fn: Callable[[], R]) -> R:
    """``fn()`` on a thread of this module (outside any engine's async runtime)."""
    if threading.current_thread().name.startswith(_THREADS):
        return fn()
    return _POOL.submit(fn).result()


def pulled_apart(items: Iterator[R]) -> Generator[R, None, None]:
    """``items``, each taken on a thread of this module (see :func:`apart`)."""
    try:
        while (item := apart(lambda: next(items, _END))) is not _END:
            yield item  # type: ignore[misc]
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            apart(close)


class NamespaceDataset(pads.Dataset):  # type: ignore[misc]
    """The namespace as of one ``__manifest`` version, as a pyarrow dataset (see the
    module docstring). ``filter`` arguments take a pyarrow expression or a SQL string."""

    def __init__(
        self,
        storage: Storage,
        state: NamespaceState,
        filters: tuple[pc.Expression | str, ...] = (),
    ) -> None:
        # No Dataset.__init__: pyarrow's would refuse (as for pylance's LanceDataset).
        self._storage = storage
        self._state = state
        self._filters = filters

    @property
    def schema(self) -> pa.Schema:
        return self._state.schema.active

    @property
    def version(self) -> int:
        """The ``__manifest`` version every scan reads."""
        return self._state.version

    @property
    def uri(self) -> str:
        return self._state.root

    @property
    def partition_expression(self) -> pc.Expression:
        return pc.scalar(True)

    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: Filter = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> NamespaceScanner:
        """A scan of ``columns`` (all for None) of the rows ``filter`` is TRUE for.

        ``options`` are pyarrow's scan options (``use_threads``, ``batch_readahead``,
        ...), accepted and not needed: leaves are read ``concurrency`` at a time."""
        return self._scan(columns, filter, batch_size, options, None)

    def _scan(
        self,
        columns: Sequence[str] | None,
        filter: Filter,
        batch_size: int | None,
        options: dict[str, Any],
        partitions: Sequence[Partition] | None,
    ) -> NamespaceScanner:
        """The scan (of ``partitions``: a fragment's, read apart; None: those it keeps)."""
        _check_options(options)
        if columns is not None and not isinstance(columns, list | tuple):
            raise InvalidArgumentError(
                f"columns must be a list of column names, got {type(columns).__name__} "
                "(expressions are not supported: select them in the engine)"
            )
        output = self._state.schema.project(columns)
        sql, residual = apart(lambda: self._translate(filter))
        read = list(output.names)
        if residual is not None:
            read += [c for c in residual.columns if c not in read]

        def planned() -> ScanPlan:
            kept = partitions if partitions is not None else self._prune(sql)
            return plan_scan(self._storage, self._state, kept, filter=sql, columns=read)

        scanner = NamespaceScanner(self, planned, output, residual, batch_size)
        scanner.apart = partitions is not None
        return scanner

    def _translate(self, filter: Filter) -> tuple[str | None, ArrowFilter | None]:
        """The SQL a scan plans with, and the expression it applies after (if the SQL
        does not select its rows exactly)."""
        parts = [*self._filters, *([] if filter is None else [filter])]
        sql_parts = [f for f in parts if isinstance(f, str)]
        expressions = [f for f in parts if not isinstance(f, str)]
        residual = None
        if expressions:
            arrow = ArrowFilter(functools.reduce(operator.and_, expressions), self._state.schema)
            if arrow.sql is not None:
                sql_parts.append(arrow.sql)
            residual = None if arrow.complete else arrow
        if len(sql_parts) <= 1:
            return (sql_parts[0] if sql_parts else None), residual
        return " AND ".join(f"({s})" for s in sql_parts), residual

    def _prune(self, sql: str | None) -> list[Partition]:
        if sql is None:
            return self._state.partitions()
        return self._state.partitions_from_rows(pruned_rows(self._state, sql))

    # -- what pyarrow's Dataset does, on the scanner -----------------------------------------
    def to_table(
        self, columns: Sequence[str] | None = None, filter: Filter = None, **options: Any
    ) -> pa.Table:
        return self.scanner(columns, filter, **options).to_table()

    def to_batches(
        self, columns: Sequence[str] | None = None, filter: Filter = None, **options: Any
    ) -> Iterator[pa.RecordBatch]:
        return self.scanner(columns, filter, **options).to_batches()

    def head(
        self,
        num_rows: int,
        columns: Sequence[str] | None = None,
        filter: Filter = None,
        **options: Any,
    ) -> pa.Table:
        return self.scanner(columns, filter, **options).head(num_rows)

    def count_rows(self, filter: Filter = None, **options: Any) -> int:
        return self.scanner([], filter, **options).count_rows()

    def filter(self, expression: pc.Expression | str) -> NamespaceDataset:
        """This dataset with ``expression`` applied to every scan as well."""
        filtered = NamespaceDataset(self._storage, self._state, (*self._filters, expression))
        filtered._translate(None)  # a bad filter fails here
        return filtered

    def get_fragments(self, filter: Filter = None) -> list[NamespaceFragment]:
        """One fragment per partition that may hold rows ``filter`` is TRUE for."""
        kept = apart(lambda: self._prune(self._translate(filter)[0]))
        return [NamespaceFragment(self, p) for p in kept]

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.scanner().to_reader().__arrow_c_stream__(requested_schema)

    def take(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("take")

    def sort_by(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("sort_by")

    def join(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("join")

    def join_asof(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("join_asof")

    def replace_schema(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("replace_schema")

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a namespace dataset is not pickled: make one where it is read "
            "(PartitionedNamespace.open(uri).to_pyarrow_dataset(as_of=version))"
        )

    def __repr__(self) -> str:
        return f"NamespaceDataset({self.uri!r}, version={self.version})"


class NamespaceFragment:
    """One partition of a :class:`NamespaceDataset` (what DataFusion reads as one of its
    partitions)."""

    def __init__(self, dataset: NamespaceDataset, partition: Partition) -> None:
        self.dataset = dataset
        self.partition = partition

    @property
    def values(self) -> dict[str, Any]:
        """The partition's values, by partition field name."""
        return dict(self.partition.values)

    @property
    def partition_expression(self) -> pc.Expression:
        return pc.scalar(True)

    @property
    def physical_schema(self) -> pa.Schema:
        return self.dataset.schema

    def scanner(
        self,
        schema: pa.Schema | None = None,
        columns: Sequence[str] | None = None,
        filter: Filter = None,
        batch_size: int | None = None,
        **options: Any,
    ) -> NamespaceScanner:
        """A scan of this partition (``schema``: the dataset's, as pyarrow takes it)."""
        return self.dataset._scan(columns, filter, batch_size, options, [self.partition])

    def to_table(
        self, columns: Sequence[str] | None = None, filter: Filter = None, **options: Any
    ) -> pa.Table:
        return self.scanner(None, columns, filter, **options).to_table()

    def to_batches(
        self, columns: Sequence[str] | None = None, filter: Filter = None, **options: Any
    ) -> Iterator[pa.RecordBatch]:
        return self.scanner(None, columns, filter, **options).to_batches()

    def count_rows(self, filter: Filter = None, **options: Any) -> int:
        return self.scanner(None, [], filter, **options).count_rows()

    def head(self, num_rows: int, columns: Sequence[str] | None = None, **options: Any) -> Any:
        return self.scanner(None, columns, **options).head(num_rows)

    def __repr__(self) -> str:
        return f"NamespaceFragment({self.partition.object_id!r}, values={self.values!r})"


class NamespaceScanner(pads.Scanner):  # type: ignore[misc]
    """One scan of a :class:`NamespaceDataset`, planned when it is first read."""

    def __init__(
        self,
        dataset: NamespaceDataset,
        planned: Any,
        output: pa.Schema,
        residual: ArrowFilter | None,
        batch_size: int | None,
    ) -> None:
        self._dataset = dataset
        self._planned = planned
        self._plan: ScanPlan | None = None
        self._output = output
        self._residual = residual
        self._batch_size = batch_size
        #: Whether batches are read on this module's threads (see the module docstring).
        self.apart = False

    @property
    def plan(self) -> ScanPlan:
        """The scan plan this scan reads (made on first use)."""
        if self._plan is None:
            self._plan = apart(self._planned)
        return self._plan

    @property
    def projected_schema(self) -> pa.Schema:
        return self._output

    @property
    def dataset_schema(self) -> pa.Schema:
        return self._dataset.schema

    def to_batches(self) -> Generator[pa.RecordBatch, None, None]:
        batches: Iterator[pa.RecordBatch]
        if not self._output.names and self._residual is None:  # a count (DataFusion's)
            batches = self._counted()
        else:
            batches = self.plan.to_batches(self._batch_size)
        if self._residual is not None:
            batches = self._residual.filter(batches, self._output)
        return pulled_apart(batches) if self.apart else _generator(batches)

    def _counted(self) -> Iterator[pa.RecordBatch]:
        """The rows as a batch of no column, counted as :meth:`count_rows` counts."""
        rows = self.plan.count_rows()
        if rows:
            yield pa.record_batch([pa.nulls(rows)], names=["_"]).select([])

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._output, self.to_batches())

    def to_table(self) -> pa.Table:
        return self.to_reader().read_all()

    def count_rows(self) -> int:
        """The rows the scan reads: from Lance's metadata for the partitions the filter
        holds for whole (or when there is none), counted from the filter's columns for
        the others."""
        if self._residual is None:
            return apart(self.plan.count_rows)
        return sum(b.num_rows for b in self.to_batches())

    def head(self, num_rows: int) -> pa.Table:
        """The first ``num_rows`` rows; no leaf is read once they are had."""
        out: list[pa.RecordBatch] = []
        left = num_rows
        batches = self.to_batches()
        try:
            while left > 0:
                batch = next(batches, None)
                if batch is None:
                    break
                out.append(batch.slice(0, left))
                left -= out[-1].num_rows
        finally:
            batches.close()
        return pa.Table.from_batches(out, self._output)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def take(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("take")

    def scan_batches(self, *args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("scan_batches")

    @staticmethod
    def from_dataset(*args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("Scanner.from_dataset")

    @staticmethod
    def from_fragment(*args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("Scanner.from_fragment")

    @staticmethod
    def from_batches(*args: Any, **kwargs: Any) -> NoReturn:
        _unsupported("Scanner.from_batches")

    def __reduce__(self) -> NoReturn:
        raise TypeError("a namespace scan is not pickled: pickle its plan (scanner.plan)")


def _generator(items: Iterator[R]) -> Generator[R, None, None]:
    yield from items


#: pyarrow's scan options: a namespace scan takes them and needs none.
_PYARROW_OPTIONS = frozenset(
    {
        "batch_readahead",
        "fragment_readahead",
        "fragment_scan_options",
        "use_threads",
        "cache_metadata",
        "memory_pool",
    }
)


def _check_options(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - _PYARROW_OPTIONS)
    if unknown:
        raise InvalidArgumentError(
            f"a namespace dataset's scan takes no option {unknown[0]!r} (it takes columns, "
            f"filter, batch_size and pyarrow's {', '.join(sorted(_PYARROW_OPTIONS))})"
        )


def _unsupported(what: str) -> NoReturn:
    raise NotImplementedError(
        f"{what} is not supported on a namespace dataset: read it first "
        "(dataset.to_table(columns=..., filter=...)) and use pyarrow's on the table"
    )
