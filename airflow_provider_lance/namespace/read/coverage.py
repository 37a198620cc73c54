"""Which partitions a filter may touch (:func:`pruned_rows`, sound but loose), and which
it covers entirely (:func:`coverage`: every row matches, so a delete drops the partition).

Coverage is decided on identity partition fields only (not floating point: NaN and
``-0.0`` group with values a filter tells apart): the filter is evaluated on the partition
values with SQL's three-valued logic (TRUE covers, FALSE or NULL matches no row); anything
else is "undecided", which is always safe. ``drop_partitions`` filters on partition fields
(:func:`partition_filter`), exactly; a spec version without a field sees NULL for it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import ExpressionError, FilterError
from airflow_provider_lance.namespace.format.expressions import (
    BoundExpression,
    bind,
    children,
    column_name,
    new_session,
    raw,
    registered,
    values_of,
    walk,
)
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID
from airflow_provider_lance.namespace.format.schema import field_id
from airflow_provider_lance.namespace.format.state import SPEC_COLUMN, NamespaceState

from .pruning import (
    SpecProjector,
    check_filter,
    is_parsed,
    parse_filter,
    pc_or,
    unknown_name,
)


def pruned_rows(state: NamespaceState, filter: str | None) -> pa.Table:
    """The rows of :attr:`NamespaceState.tables` whose partitions may hold rows matching
    ``filter`` (all of them for None); a bad filter raises :class:`FilterError`."""
    if filter is None:
        return state.tables
    # a filter parsed already reads no more than it needs; one of the wrong type, nothing
    settled = not isinstance(filter, str) or is_parsed(filter, state.schema)
    loading = None if settled else state.load_tables_beside()
    _, pred = parse_filter(filter, state.schema)
    if loading is not None:
        loading.result()  # its rows are the candidates now (or its error is the read's)
    if isinstance(pred, bool):
        return state.candidates(pred)
    mask: pc.Expression | bool = False
    in_scan: list[pc.Expression | bool] = []
    for version, fields in state.specs.items():
        projection = SpecProjector(fields, state.schema).project(pred)
        if (projected := projection.exact) is False:
            continue
        in_scan.append(projection.in_scan)
        in_version = pc.field(SPEC_COLUMN) == version
        term = in_version if projected is True else in_version & projected
        mask = term if mask is False else mask | term
    if mask is False:
        return state.candidates(False)
    return state.candidates(pc_or(in_scan)).filter(mask)


@dataclass(frozen=True)
class Coverage:
    """A row filter's verdict on candidate partitions (by object id)."""

    #: Every row of these partitions matches.
    covered: frozenset[str]
    #: No row of these matches (the filter is FALSE or NULL on their values).
    excluded: frozenset[str]
    #: The rest: some rows may match, some not; the filter must be applied to the rows.
    undecided: frozenset[str]


def coverage(state: NamespaceState, filter: str, candidates: pa.Table) -> Coverage:
    """Decide ``filter`` strictly for the ``candidates`` rows of ``state.tables``."""
    bound, _ = parse_filter(filter, state.schema)
    names = bound.columns
    covered, excluded, undecided = set[str](), set[str](), set[str]()
    for version in state.specs:
        rows = candidates.filter(pc.equal(candidates.column(SPEC_COLUMN), version))
        if rows.num_rows == 0:
            continue
        ids = rows.column(OBJECT_ID).to_pylist()
        identity = _identity_columns(state, version)
        known = {n: identity[n] for n in names if n in identity}
        if not known and names:
            undecided.update(ids)
            continue
        for oid, truth in zip(ids, _truths(bound, rows, known, state), strict=True):
            {_TRUE: covered, _FALSE: excluded, _NULL: excluded}.get(truth, undecided).add(oid)
    return Coverage(frozenset(covered), frozenset(excluded), frozenset(undecided))


# Kleene logic with a fourth value: what a filter is for every row of one partition.
_TRUE, _FALSE, _NULL, _UNKNOWN = "true", "false", "null", "unknown"
_FLIP = {_TRUE: _FALSE, _FALSE: _TRUE}


def _truths(
    bound: BoundExpression, rows: pa.Table, known: dict[str, str], state: NamespaceState
) -> list[str]:
    """The filter's value for every row of each partition in ``rows``: evaluated on the partition
    values where the columns it names are identity partition columns (``known``: column ->
    ``__manifest`` column), and combined through ``AND``, ``OR`` and ``NOT`` (Kleene's logic) where
    only some of a sub-expression's columns are; ``_UNKNOWN`` where the rows must decide."""
    columns: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name in bound.columns:
        dtype = state.schema.field(name).type
        if name in known:
            columns[name] = rows.column(known[name]).cast(dtype)
        else:  # never evaluated: only there for the filter to parse
            columns[name] = pa.nulls(rows.num_rows, dtype)
    columns["__partition"] = pa.nulls(rows.num_rows, pa.int8())
    session = new_session(bound.hash_input)
    with registered(session, pa.table(columns)) as frame:
        try:
            tree = raw(frame.parse_sql_expr(bound.sql))
            return _decide(tree, frame, set(known), rows.num_rows)
        except ExpressionError:
            raise
        except Exception as exc:
            raise FilterError(
                f"evaluating {bound.sql!r} on partition values failed: {exc}"
            ) from exc


def _decide(node: Any, frame: Any, known: set[str], n: int) -> list[str]:
    used = {name for part in walk(node) if (name := column_name(part))}
    if used <= known:
        values = values_of(frame, node)
        return [_NULL if v is None else (_TRUE if v else _FALSE) for v in values.to_pylist()]
    kind = node.variant_name()
    if kind == "Alias":
        return _decide(children(node)[0], frame, known, n)
    if kind == "Not":
        return [_FLIP.get(v, v) for v in _decide(children(node)[0], frame, known, n)]
    if kind == "BinaryExpr":
        op = str(node.to_variant().op()).upper()
        if op in ("AND", "OR"):
            left, right = (_decide(c, frame, known, n) for c in children(node))
            combine = _and if op == "AND" else _or
            return [combine(a, b) for a, b in zip(left, right, strict=True)]
    return [_UNKNOWN] * n


def _and(a: str, b: str) -> str:
    if _FALSE in (a, b):
        return _FALSE
    if a == b == _TRUE:
        return _TRUE
    if {a, b} <= {_TRUE, _NULL}:
        return _NULL
    return _UNKNOWN


def _or(a: str, b: str) -> str:
    result = _and(_FLIP.get(a, a), _FLIP.get(b, b))  # De Morgan
    return _FLIP.get(result, result)


def _identity_columns(state: NamespaceState, version: int) -> dict[str, str]:
    """Namespace column -> the ``__manifest`` column of its non-float identity field."""
    out: dict[str, str] = {}
    by_id = {field_id(f): f for f in state.schema.active}
    for f in state.specs[version]:
        source = by_id.get(f.source_id)
        if source is None or f.expression.strip() != "col":
            continue
        if not (pa.types.is_floating(source.type) or pa.types.is_floating(f.result_type)):
            out[source.name] = f.name
    return out


def partition_filter(state: NamespaceState, filter: str) -> pa.Table:
    """The rows of ``state.tables`` whose partition values make ``filter`` TRUE."""
    columns = state.partition_columns
    try:
        bound = bind(filter, pa.schema(columns), "partition filter")
    except ExpressionError as exc:
        fields = [f.name for f in columns]
        unknown = unknown_name(str(exc))
        if unknown is None:
            problem = str(exc).rstrip(".")
        else:
            close = difflib.get_close_matches(unknown, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problem = f"partition filter {filter!r} names no partition field {unknown!r}{hint}"
        raise FilterError(
            f"{problem}. drop_partitions filters on partition fields ({', '.join(fields)}); "
            "to remove rows by other columns use delete()"
        ) from exc
    check_filter(filter, bound)
    tables = state.tables
    if tables.num_rows == 0:
        return tables
    values = {n: tables.column(n) for n in bound.columns}
    values = values or {"__partition": pa.nulls(tables.num_rows, pa.int8())}
    try:
        truth = bound.evaluate(pa.table(values))
    except ExpressionError as exc:
        raise FilterError(str(exc)) from exc
    return tables.filter(pc.fill_null(truth, False))
