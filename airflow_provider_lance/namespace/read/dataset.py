"""A namespace as a ``pyarrow.dataset.Dataset``: what DuckDB, Polars and DataFusion query.

:class:`NamespaceDataset` is pinned to the ``__manifest`` version it was made at. Each scan
is a scan plan of that version (:mod:`.plan`): the engine's filter, a pyarrow expression,
prunes partitions and is pushed into every leaf's Lance scan as the namespace's SQL
(:mod:`.arrow_filter`); only the projected columns are read; leaves are read several at
once (the namespace's ``concurrency``). ``count_rows`` counts from Lance's metadata the
partitions the filter holds for whole; ``head`` stops once it has its rows.

Engines call ``schema`` and ``scanner(columns=, filter=)`` then ``to_reader()`` (DuckDB),
``to_batches(columns=, filter=, batch_size=)`` (Polars' ``scan_pyarrow_dataset``) and
``scanner(columns=, filter=)`` (for its schema), ``get_fragments(filter)`` then each
fragment's ``scanner(schema, columns=, filter=, batch_size=)`` (DataFusion's
``register_dataset``: a fragment is a partition).

DataFusion calls these from inside its async runtime, where the DataFusion this package
plans filters with cannot run (it would start a runtime inside one): planning runs on
threads of this module (:func:`apart`), and so does reading a fragment (what DataFusion
reads; a read of a whole dataset stays on the engine's thread). The fragments of one
``get_fragments`` are read ahead together, at most ``concurrency`` not yet asked for
(:class:`_ReadAhead`), from that call on if the dataset's last scan had its filter (as
DataFusion's has). A dataset reads the ``__manifest`` rows while the engine plans (if
they are few) and translates each filter once.

Like pylance's ``LanceDataset``, the classes subclass pyarrow's (engines test for them)
without a C++ object behind them, so every public method pyarrow defines is defined here;
those a namespace cannot serve raise :class:`NotImplementedError`.
"""

from __future__ import annotations

import functools
import operator
import threading
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, NoReturn, TypeAlias, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage

from .arrow_filter import ArrowFilter
from .coverage import pruned_rows
from .plan import ScanPlan, ScanTask, plan_scan
from .scan import first_rows

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


def pulled_apart(items: Iterator[R] | None, held: Sequence[R] = ()) -> Generator[R, None, None]:
    """``held``, then ``items`` (if any), each taken on a thread of this module (see
    :func:`apart`)."""
    try:
        yield from held
        while items is not None and (item := apart(lambda: next(items, _END))) is not _END:
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
        loading: Future[pa.Table] | None = None,
    ) -> None:
        # No Dataset.__init__: pyarrow's would refuse (as for pylance's LanceDataset).
        self._storage = storage
        self._state = state
        self._filters = filters
        #: The filters translated last, with their translations (see :meth:`_translate`).
        self._translated: list[tuple[Filter, tuple[str | None, ArrowFilter | None]]] = []
        #: What the last :meth:`scanner` reads (see :meth:`get_fragments`).
        self._last_read: _Read | None = None
        #: The ``__manifest`` rows, read while the engine plans (when that is cheap).
        self._loading = loading if loading is not None else state.load_tables_beside()

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
        scanner = self._scan(columns, filter, batch_size, options, None)
        self._last_read = scanner.read
        return scanner

    def _scan(
        self,
        columns: Sequence[str] | None,
        filter: Filter,
        batch_size: int | None,
        options: dict[str, Any],
        partitions: Sequence[Partition] | None,
        fragment: tuple[_ReadAhead, int] | None = None,
    ) -> NamespaceScanner:
        """The scan of ``partitions`` (None: those the filter keeps); ``fragment``: the
        fragment's read-ahead and index (its reads run apart)."""
        _check_options(options)
        if columns is not None and not isinstance(columns, list | tuple):
            raise InvalidArgumentError(
                f"columns must be a list of column names, got {type(columns).__name__} "
                "(expressions are not supported: select them in the engine)"
            )
        output = self._state.schema.project(columns)
        sql, residual = self._translate(filter)
        read = list(output.names)
        if residual is not None:
            read += [c for c in residual.columns if c not in read]

        def planned() -> ScanPlan:
            kept = partitions if partitions is not None else self._prune(sql)
            return plan_scan(self._storage, self._state, kept, filter=sql, columns=read)

        scanner = NamespaceScanner(self, planned, output, residual, batch_size)
        scanner.apart = partitions is not None
        scanner.read = _Read(None if columns is None else tuple(columns), filter, batch_size)
        scanner.fragment = fragment
        return scanner

    def _translate(self, filter: Filter) -> tuple[str | None, ArrowFilter | None]:
        """:meth:`_translated`, once per filter of the last few (engines give one
        expression to the dataset's scan, ``get_fragments`` and every fragment's scan)."""
        for seen, translated in self._translated:
            if _same_filter(seen, filter):
                return translated
        translated = apart(lambda: self._translated_now(filter))
        self._translated = [(filter, translated), *self._translated[: _TRANSLATIONS - 1]]
        return translated

    def _translated_now(self, filter: Filter) -> tuple[str | None, ArrowFilter | None]:
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
        if self._loading is not None:  # read or failed: a failure is the prune's to raise
            wait([self._loading])
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
        filters = (*self._filters, expression)
        filtered = NamespaceDataset(self._storage, self._state, filters, self._loading)
        filtered._translate(None)  # a bad filter fails here
        return filtered

    def get_fragments(self, filter: Filter = None) -> list[NamespaceFragment]:
        """One fragment per partition that may hold rows ``filter`` is TRUE for; their
        scans of the same columns and filter read them ahead together, from now on if
        the last :meth:`scanner` had this filter (DataFusion's, which reads its columns)."""
        sql = self._translate(filter)[0]
        kept = apart(lambda: self._prune(sql))
        ahead = _ReadAhead(self, kept)
        last = self._last_read
        if last is not None and _same_filter(last.filter, filter):
            ahead.begin(last)
        return [NamespaceFragment(self, p, (ahead, i)) for i, p in enumerate(kept)]

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

    def __init__(
        self,
        dataset: NamespaceDataset,
        partition: Partition,
        ahead: tuple[_ReadAhead, int] | None = None,
    ) -> None:
        self.dataset = dataset
        self.partition = partition
        self._ahead = ahead

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
        partitions = [self.partition]
        return self.dataset._scan(columns, filter, batch_size, options, partitions, self._ahead)

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
        #: What it reads (scans with equal ones read the same rows).
        self.read = _Read(None, None, batch_size)
        #: The read-ahead of the fragments it is a scan of, and its fragment's index.
        self.fragment: tuple[_ReadAhead, int] | None = None

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
        if self.fragment is not None:
            ahead, index = self.fragment
            shared = ahead.batches(index, self.read)
            if shared is not None:
                return shared
        batches = self.batches_of(self.plan)
        return pulled_apart(batches) if self.apart else _generator(batches)

    def batches_of(self, source: ScanPlan | ScanTask) -> Iterator[pa.RecordBatch]:
        """The batches this scan reads of its plan or of one of its tasks."""
        batches: Iterator[pa.RecordBatch]
        if not self._output.names and self._residual is None:  # a count (DataFusion's)
            batches = _counted(source)
        else:
            batches = source.to_batches(self._batch_size)
        if self._residual is not None:
            batches = self._residual.filter(batches, self._output)
        return batches

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
        return pa.Table.from_batches(list(first_rows(self.to_batches(), num_rows)), self._output)

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


def _counted(source: ScanPlan | ScanTask) -> Iterator[pa.RecordBatch]:
    """The rows as a batch of no column, counted as :meth:`NamespaceScanner.count_rows`."""
    rows = source.count_rows()
    if rows:
        yield pa.record_batch([pa.nulls(rows)], names=["_"]).select([])


#: Translations a dataset keeps (of the filters it was given last).
_TRANSLATIONS = 4
#: Batches a read-ahead holds per partition started (the rest is read when wanted).
_HELD = 2


def _same_filter(a: Filter, b: Filter) -> bool:
    if a is b:
        return True
    if isinstance(a, pc.Expression) and isinstance(b, pc.Expression):
        return bool(a.equals(b))
    return isinstance(a, str) and a == b


class _Read:
    """What a scan reads: its columns, filter and batch size."""

    def __init__(
        self, columns: tuple[str, ...] | None, filter: Filter, batch_size: int | None
    ) -> None:
        self.columns, self.filter, self.batch_size = columns, filter, batch_size

    def same(self, other: _Read) -> bool:
        """Whether both read the same rows (in batches of any size)."""
        return self.columns == other.columns and _same_filter(self.filter, other.filter)


class _ReadAhead:
    """The partitions one ``get_fragments`` returned, read ahead for their fragments'
    scans: :meth:`begin` (or the first scan read) fixes the columns and filter; from then
    on, up to the namespace's ``concurrency`` partitions not yet asked for are being read
    (opened, :data:`_HELD` batches read), in order. A fragment's scan of other columns
    or filter, or a second one, reads alone."""

    def __init__(self, dataset: NamespaceDataset, partitions: Sequence[Partition]) -> None:
        self._dataset = dataset
        self._partitions = partitions
        self._lock = threading.Lock()
        self._planning = threading.Lock()
        self._read: _Read | None = None
        self._scanner: NamespaceScanner | None = None
        self._plan: ScanPlan | None = None
        self._started: dict[int, Future[tuple[list[pa.RecordBatch], Iterator[Any] | None]]] = {}
        self._taken: set[int] = set()
        self._next = 0
        weakref.finalize(self, _cancel, self._started)  # partitions never asked for

    def begin(self, read: _Read) -> None:
        """Start reading ahead for scans of ``read`` (unless it was started already)."""
        with self._lock:
            self._begin(read)

    def _begin(self, read: _Read) -> _Read:
        """The read it reads ahead for (``read`` if none was fixed yet)."""
        if self._read is None:
            self._read = read
            self._scanner = self._dataset._scan(
                read.columns, read.filter, read.batch_size, {}, self._partitions
            )
            self._top_up()
        return self._read

    def batches(self, index: int, read: _Read) -> Generator[pa.RecordBatch, None, None] | None:
        """Partition ``index``'s batches for a scan of ``read``, none longer than its
        batch size (None: not read ahead for it; the scan reads it itself)."""
        with self._lock:
            if index in self._taken or not read.same(self._begin(read)):
                return None
            self._taken.add(index)
            started = self._started.pop(index, None) or self._start(index)
            self._top_up()
        return _streamed(started, read.batch_size)

    def _top_up(self) -> None:
        window = self._dataset._storage.concurrency
        while len(self._started) < window and self._next < len(self._partitions):
            if self._next not in self._taken:
                self._started[self._next] = self._start(self._next)
            self._next += 1

    def _start(self, index: int) -> Future[tuple[list[pa.RecordBatch], Iterator[Any] | None]]:
        ahead = weakref.ref(self)  # what is queued does not keep it (see __init__)

        def start() -> tuple[list[pa.RecordBatch], Iterator[Any] | None]:
            this = ahead()
            return ([], None) if this is None else _head(this._batches(index))

        return self._dataset._storage.beside(start)

    def _batches(self, index: int) -> Iterator[pa.RecordBatch]:
        """Partition ``index`` read (on a storage thread: planned there, once)."""
        assert self._scanner is not None
        with self._planning:
            if self._plan is None:
                self._plan = self._scanner._planned()
            plan = self._plan
        return self._scanner.batches_of(plan.tasks[index])


def _head(items: Iterator[R]) -> tuple[list[R], Iterator[R] | None]:
    """Up to :data:`_HELD` of ``items``, and the rest (None: there is none)."""
    held: list[R] = []
    for item in items:
        held.append(item)
        if len(held) == _HELD:
            return held, items
    return held, None


def _streamed(
    started: Future[tuple[list[pa.RecordBatch], Iterator[Any] | None]], batch_size: int | None
) -> Generator[pa.RecordBatch, None, None]:
    held, rest = started.result()
    for batch in pulled_apart(rest, held):
        if batch_size is None or batch.num_rows <= batch_size:
            yield batch
        else:
            yield from pa.Table.from_batches([batch]).to_batches(max_chunksize=batch_size)


def _cancel(started: dict[int, Future[Any]]) -> None:
    for future in started.values():
        future.cancel()


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
