"""Search across partitions: pylance's ``nearest`` and ``full_text_query`` over a scan plan.

The plan's filter has pruned the partitions. Each remaining leaf is searched at its pinned
version, ``storage.concurrency`` leaves at a time, for at most k rows: with
``prefilter=True`` the filter's residual (what pruning left) is applied inside Lance before
ranking; otherwise it is applied to the global top k, as Lance applies a filter after a
search of one table. The leaves' rows merge into the global top k: ``_distance`` ascending
or ``_score`` descending, ties broken by partition id, then row id. Full-text scores use
the term statistics of all searched leaves (:mod:`.fulltext`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import (
    InvalidArgumentError,
    SchemaError,
)
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.io.storage import first_line

from . import fulltext
from .fulltext import TextQueryLike
from .leaf import ROW_ID, Leaf, open_pinned
from .plan import ScanPlan, ScanTask
from .scan import first_rows, read_columns, whole_number

#: The keys of pylance's ``nearest`` dict (``ScannerBuilder.nearest``'s parameters).
NEAREST_KEYS = frozenset(
    {
        "column",
        "q",
        "k",
        "metric",
        "nprobes",
        "minimum_nprobes",
        "maximum_nprobes",
        "refine_factor",
        "use_index",
        "ef",
        "query_parallelism",
        "approx_mode",
        "distance_range",
        "search_effort",
    }
)
#: Lance's distance metrics (case-insensitive).
METRICS = frozenset({"l2", "euclidean", "cosine", "dot", "hamming"})
DEFAULT_K = 10
_OBJECT_ID = "__partition"
R = TypeVar("R")
#: Runs a call per leaf, some at once, results in order (``Storage.map``).
MapLeaves = Callable[[Callable[[Leaf], Any], Sequence[Leaf]], list[Any]]


class VectorSearch:
    """A checked ``nearest`` dict: the top k rows by ``_distance`` (ascending)."""

    rank = "_distance"
    descending = False

    def __init__(self, nearest: Mapping[str, Any], schema: NamespaceSchema) -> None:
        if not isinstance(nearest, Mapping):
            raise InvalidArgumentError(
                f"nearest must be a dict like {{'column': 'vector', 'q': [...], 'k': 10}}, "
                f"got {type(nearest).__name__}"
            )
        unknown = sorted(set(nearest) - NEAREST_KEYS)
        if unknown:
            raise InvalidArgumentError(
                f"nearest has unknown keys {unknown}; pylance takes {sorted(NEAREST_KEYS)}"
            )
        if "column" not in nearest or "q" not in nearest:
            raise InvalidArgumentError("nearest needs 'column' (the vector column) and 'q'")
        self.column = str(nearest["column"])
        self.k = whole_number(nearest.get("k", DEFAULT_K), "nearest['k']", 1)
        self.q = _query_vector(nearest["q"], self.column, _vector_dimension(schema, self.column))
        metric = nearest.get("metric")
        if metric is not None and str(metric).lower() not in METRICS:
            raise InvalidArgumentError(
                f"unknown metric {metric!r} in nearest; use one of {sorted(METRICS)}"
            )
        self._options = {k: v for k, v in nearest.items() if k not in ("column", "q", "k")}

    @property
    def columns(self) -> list[str]:
        return [self.column]

    def prepare(self, leaves: Sequence[Leaf], map_leaves: MapLeaves, prefilter: bool) -> None:
        """Nothing: each leaf's search needs only itself."""

    def top(
        self, leaf: Leaf, columns: list[str], filter_sql: str | None, limit: int | None
    ) -> pa.Table:
        """The leaf's top ``limit`` rows (leaf columns, ``_distance``, ``_rowid``)."""
        k = self.k if limit is None else limit
        nearest = {**self._options, "column": leaf.column(self.column), "q": self.q, "k": k}
        return leaf.table.to_table(
            columns=[*columns, self.rank, ROW_ID],
            nearest=nearest,
            filter=filter_sql,
            prefilter=filter_sql is not None,
            with_row_id=True,
            disable_scoring_autoprojection=True,
        )


class Searcher(Protocol):
    """A checked query: the columns it searches, how it ranks, one leaf's best rows."""

    rank: str
    descending: bool

    @property
    def columns(self) -> list[str]: ...

    def prepare(self, leaves: Sequence[Leaf], map_leaves: MapLeaves, prefilter: bool) -> None:
        """Whatever the leaves must tell before any is searched."""

    def top(
        self, leaf: Leaf, columns: list[str], filter_sql: str | None, limit: int | None
    ) -> pa.Table | None:
        """The leaf's best ``limit`` rows: ``columns``, the rank, ``_rowid`` (None: none)."""


@dataclass(frozen=True)
class Top:
    """A leaf's best rows (namespace columns, the rank, the row id), its partition id, and
    which of the rows pass the residual (None: all of them)."""

    rows: pa.Table
    object_id: str
    passes: pa.Array | None


@dataclass(frozen=True)
class Found:
    """The best rows of each searched leaf (at most ``limit``), before they are merged."""

    rank: str
    descending: bool
    limit: int | None
    tops: list[Top]

    def merge(self, schema: pa.Schema) -> pa.Table:
        """The global top ``limit``, in ``schema`` plus the rank column: ties broken by
        partition id, then row id; rows the residual rejects (not prefiltered) dropped."""
        out_schema = schema.append(pa.field(self.rank, pa.float32()))
        if not self.tops:
            return out_schema.empty_table()
        rows, taken = self._ranked()
        n = rows.num_rows if self.limit is None else min(self.limit, rows.num_rows)
        passes = self._passes()
        if taken is None:  # in order already
            top = rows.slice(0, n)
            top = top if passes is None else top.filter(passes.slice(0, n))
        else:
            taken = taken[:n]
            top = rows.take(taken if passes is None else taken.filter(passes.take(taken)))
        arrays = [_typed(top.column(f.name), f.type) for f in out_schema]
        return pa.Table.from_arrays(arrays, schema=out_schema)

    def _ranked(self) -> tuple[pa.Table, pa.Array | None]:
        """The rows, and the order that ranks them (None: they are in it)."""
        order = "descending" if self.descending else "ascending"
        if len(self.tops) == 1:
            rows = self.tops[0].rows
            column = rows.column(self.rank)
            ranks = column.to_pylist()
            before = operator.gt if self.descending else operator.lt
            if column.null_count == 0 and all(map(before, ranks, ranks[1:])):
                return rows, None  # no tie (Lance ranked them)
            return rows, pc.sort_indices(rows, [(self.rank, order), (ROW_ID, "ascending")])
        rows = pa.concat_tables(
            t.rows.append_column(_OBJECT_ID, pa.repeat(t.object_id, t.rows.num_rows))
            for t in self.tops
        )
        keys = [(self.rank, order), (_OBJECT_ID, "ascending"), (ROW_ID, "ascending")]
        return rows, pc.sort_indices(rows, sort_keys=keys)

    def _passes(self) -> pa.Array | None:
        """Whether each row passes the residual (None: every row does)."""
        if all(t.passes is None for t in self.tops):
            return None
        every = [
            pa.array(np.ones(t.rows.num_rows, dtype=bool)) if t.passes is None else t.passes
            for t in self.tops
        ]
        return pa.concat_arrays(every)


def _typed(column: pa.ChunkedArray, dtype: pa.DataType) -> pa.ChunkedArray:
    return column if column.type == dtype else column.cast(dtype)


def _open_leaves(plan: ScanPlan, searched: Sequence[str], prefilter: bool) -> list[Leaf]:
    """The plan's partitions that hold the searched columns, opened at their versions."""
    bound = None if plan.scan.row_filter is None else plan.scan.row_filter.bound
    names = list(plan.schema.names)
    after = read_columns(plan.schema, bound)  # what a leaf with a residual reads

    def open_one(task: ScanTask) -> Leaf | None:
        residual = None if task.exact else bound
        opened = open_pinned(plan.scan.storage, task.partition)
        leaf = Leaf(task, opened, names if residual is None else after, residual, prefilter)
        if any(leaf.column(c) is None for c in searched):
            return None  # written before the column existed: no row can match
        return leaf

    opened = plan.scan.storage.map(open_one, plan.tasks, step="leaves opened")
    return [leaf for leaf in opened if leaf is not None]


def _leaf_top(leaf: Leaf, query: Searcher, limit: int | None) -> Top | None:
    """The leaf's best rows in namespace columns, with the rank and the row id, and which
    pass the residual (when it is not prefiltered)."""
    found = leaf.with_filter(lambda sql: query.top(leaf, leaf.plan.leaf_columns, sql, limit))
    if found is None or found.num_rows == 0:
        return None
    table = leaf.plan.apply(found)
    passes = None
    if leaf.residual is not None and not leaf.prefiltered:
        passes = pc.fill_null(leaf.residual.evaluate(table), False).combine_chunks()
    rows = pa.Table.from_arrays(
        [*table.columns, found.column(query.rank), found.column(ROW_ID)],
        names=[*table.column_names, query.rank, ROW_ID],
    )
    return Top(rows, leaf.task.object_id, passes)


def _vector_dimension(schema: NamespaceSchema, column: str) -> int:
    """The dimension of the vector column ``column``; :class:`SchemaError` for a column
    that does not exist or is not a fixed-size list of numbers."""
    field = schema.field(column)
    dtype = field.type
    if not pa.types.is_fixed_size_list(dtype) or not (
        pa.types.is_floating(dtype.value_type) or pa.types.is_integer(dtype.value_type)
    ):
        raise SchemaError(
            f"nearest column {column!r} is {dtype}, not a vector column (a fixed-size list "
            "of numbers, e.g. pa.list_(pa.float32(), 128)); name a vector column"
        )
    return int(dtype.list_size)


def _query_vector(q: Any, column: str, dimension: int) -> np.ndarray:
    """``q`` as one numeric vector of ``dimension`` numbers (else an error saying so)."""
    try:
        vector = np.asarray(q.to_numpy(zero_copy_only=False) if isinstance(q, pa.Array) else q)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"nearest['q'] is not a vector: {first_line(exc)}") from exc
    if vector.dtype.kind not in "fiu" or vector.ndim != 1:
        raise InvalidArgumentError(
            f"nearest['q'] must be one vector of {dimension} numbers (one query at a time), "
            f"got an array of shape {vector.shape} and type {vector.dtype}"
        )
    if vector.shape[0] != dimension:
        raise InvalidArgumentError(
            f"nearest['q'] has {vector.shape[0]} numbers but column {column!r} holds "
            f"vectors of {dimension}; give a vector of {dimension}"
        )
    return vector


class Search:
    """What a read asks beyond its plan: a search (``nearest`` or ``full_text_query``,
    ``prefilter``) and a ``limit``; checked when made."""

    def __init__(
        self,
        nearest: Mapping[str, Any] | None,
        full_text_query: TextQueryLike | None,
        prefilter: bool,
        limit: int | None,
    ) -> None:
        self.nearest, self.full_text_query = nearest, full_text_query
        self.prefilter = prefilter
        self.limit = None if limit is None else whole_number(limit, "limit", 0)
        if not isinstance(prefilter, bool):
            raise InvalidArgumentError(f"prefilter must be True or False, got {prefilter!r}")
        if nearest is not None and full_text_query is not None:
            raise InvalidArgumentError(
                "give nearest= or full_text_query= (one of them, not both), e.g. "
                "nearest={'column': 'vector', 'q': [...], 'k': 10}"
            )
        if nearest is None and full_text_query is None and prefilter:
            raise InvalidArgumentError(
                "prefilter applies to a search: nearest= or full_text_query="
            )

    @property
    def searching(self) -> bool:
        return self.nearest is not None or self.full_text_query is not None

    def schema(self, plan: ScanPlan) -> pa.Schema:
        """The schema of what :meth:`run` yields."""
        if not self.searching:
            return plan.schema
        rank = "_distance" if self.nearest is not None else "_score"
        return plan.schema.append(pa.field(rank, pa.float32()))

    def run(self, plan: ScanPlan, batch_size: int | None) -> Iterator[pa.RecordBatch]:
        """The plan's rows (the first ``limit``), or the search's top rows (searched now)."""
        if not self.searching:
            return first_rows(plan.to_batches(batch_size), self.limit)
        return iter(self.top(plan).to_batches(max_chunksize=batch_size))

    def top(self, plan: ScanPlan) -> pa.Table:
        """The global top rows of ``plan``'s partitions for ``nearest`` (k by
        ``_distance``, at most ``limit``) or ``full_text_query`` (by ``_score``, all
        matches or ``limit``), in the plan's schema plus the rank column. Bad input raises a
        project error."""
        return self.found(plan).merge(plan.schema)

    def found(self, plan: ScanPlan) -> Found:
        """Each leaf's best rows for :meth:`top` (searched ``concurrency`` at a time)."""
        schema = plan.scan.namespace_schema
        query: Searcher
        limit = self.limit
        if self.nearest is not None:
            vector = VectorSearch(self.nearest, schema)
            query, limit = vector, vector.k if limit is None else min(limit, vector.k)
        elif self.full_text_query is not None:
            query = fulltext.TextSearch(self.full_text_query, schema)
        else:
            raise InvalidArgumentError("give nearest= or full_text_query= to search")
        if limit == 0:  # as pylance's: no rows, the search checked all the same
            return Found(query.rank, query.descending, 0, [])
        leaves = _open_leaves(plan, query.columns, self.prefilter)
        storage = plan.scan.storage

        def each(call: Callable[[Leaf], R], leaves: Sequence[Leaf], step: str) -> list[R]:
            return storage.map(lambda leaf: leaf.guarded(lambda: call(leaf)), leaves, step=step)

        query.prepare(leaves, functools.partial(each, step="term statistics"), self.prefilter)
        found = each(lambda leaf: _leaf_top(leaf, query, limit), leaves, "leaves searched")
        return Found(query.rank, query.descending, limit, [t for t in found if t is not None])
