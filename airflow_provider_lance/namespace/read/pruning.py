"""Partition pruning: which leaf tables can hold rows matching a filter.

The filter, parsed by DataFusion and in negation normal form, is projected through each spec
version's partition expressions onto the ``__manifest`` partition columns: ``=``, ``IN`` and
``IS NULL`` through any expression, ranges only through order-preserving ones
(:func:`_monotone`), ``<>``, ``NOT IN`` and ``IS NOT NULL`` only through identity;
``AND``/``OR``/``NOT`` combine, and anything else keeps every partition.

The result is sound (keeping a partition is always safe): every partition that holds a matching row
is kept, and the full filter is then applied to the rows. Keeping answers "not understood", never
"cannot be evaluated": a literal that is no value of its type (``DATE '2025-13-45'``) or a constant
that fails (``1/0``) raises :class:`InvalidLiteralError` naming it.
"""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import (
    ExpressionError,
    FilterError,
    InvalidLiteralError,
    SchemaError,
)
from airflow_provider_lance.namespace.format.conversion import cast_for_comparison
from airflow_provider_lance.namespace.format.expressions import (
    BoundExpression,
    bind,
    children,
    column_name,
    evaluate_scalar,
    function_name,
    is_constant,
    raw,
    root_cause,
    to_sql,
    walk,
)
from airflow_provider_lance.namespace.format.manifest import prunes_in_scan
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, field_id, is_deprecated
from airflow_provider_lance.namespace.format.spec import PartitionField, bound_expression, evaluator

from .remembered import Remembered

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "!=", "!=": "="}
_COMPARISONS = frozenset(_FLIP)
#: Leaf operations that hold for a NULL partition in Arrow (``~isin``) but not in SQL.
_NEGATED = frozenset({"!=", "not in"})


@dataclass(frozen=True)
class Leaf:
    """``column op values``: op is a comparison, ``in``, ``not in``, ``is null``, ``not null``."""

    column: str
    op: str
    values: tuple[pa.Scalar, ...] = ()


@dataclass(frozen=True)
class And:
    parts: tuple[Pred, ...]


@dataclass(frozen=True)
class Or:
    parts: tuple[Pred, ...]


Pred = Union[Leaf, And, Or, bool]  # noqa: UP007 - a runtime alias, not an annotation


#: Filters parsed, and whether they hold for a spec's kept partitions, remembered.
_PARSED_MAX = 512
_PARSED: Remembered[tuple[str, NamespaceSchema], tuple[BoundExpression, Pred]] = Remembered(
    _PARSED_MAX
)


def parse_filter(sql: object, schema: NamespaceSchema) -> tuple[BoundExpression, Pred]:
    """Bind ``sql`` to the namespace columns and translate it for pruning (the last
    :data:`_PARSED_MAX` filters parsed are remembered)."""
    if not isinstance(sql, str):
        raise FilterError(
            f"filter must be a non-empty SQL expression string, got {type(sql).__name__}"
        )
    return _PARSED.get_or_make((sql, schema), lambda: _parse_filter(sql, schema))


def is_parsed(sql: object, schema: NamespaceSchema) -> bool:
    """Whether :func:`parse_filter` remembers ``sql`` (returns it without DataFusion)."""
    return isinstance(sql, str) and (sql, schema) in _PARSED


def _parse_filter(sql: str, schema: NamespaceSchema) -> tuple[BoundExpression, Pred]:
    try:
        bound = bind(sql, schema.active, "filter")
    except ExpressionError as exc:
        raise FilterError(_unknown_column(sql, str(exc), schema) or str(exc)) from exc
    check_filter(sql, bound)
    _check_literals(sql, bound)
    try:
        return bound, _translate(raw(bound.expr), negate=False, schema=schema)
    except InvalidLiteralError as exc:
        raise InvalidLiteralError(f"filter {sql!r}: {exc}", exc.literal) from exc


def check_filter(sql: str, bound: BoundExpression) -> None:
    """Refuse (:class:`FilterError`) a filter that is not a boolean expression, or that
    DataFusion 55 would evaluate against SQL's NULL logic
    (:attr:`~.expressions.BoundExpression.hidden_merges`)."""
    if not pa.types.is_boolean(bound.output_type) and not pa.types.is_null(bound.output_type):
        raise FilterError(f"filter {sql!r} is not a boolean expression ({bound.output_type})")
    if bound.hidden_merges:
        raise FilterError(
            f"filter {sql!r} combines tests of the same column (IN lists, or = and <> with "
            "constants) inside a CASE or a function call, which DataFusion 55 evaluates "
            "against SQL's NULL logic (apache/datafusion#24246): combine them outside it, "
            "where they are evaluated as SQL says, or make them one IN list"
        )


_NO_FIELD = re.compile(r'No field named (?:"((?:[^"]|"")*)"|([^\s".]+))')


def unknown_name(message: str) -> str | None:
    """The column DataFusion's "No field named X" error names; None for another error."""
    match = _NO_FIELD.search(message)
    if match is None:
        return None
    return match.group(1).replace('""', '"') if match.group(1) is not None else match.group(2)


def _unknown_column(sql: str, message: str, schema: NamespaceSchema) -> str | None:
    """For DataFusion's "No field named X": the error in the namespace's terms (a dropped
    column said to be dropped, else a close namespace column suggested); None otherwise."""
    name = unknown_name(message)
    if name is None:
        return None
    columns = schema.active.names
    listed = ", ".join(columns)
    dropped = {f.name for f in schema.arrow if is_deprecated(f)} - set(columns)
    if name in dropped:
        return (
            f"filter {sql!r}: column {name!r} was dropped: filters, like reads, see only "
            f"the columns {listed}; read an earlier version with as_of to filter on it"
        )
    same_but_case = [c for c in columns if c.lower() == name.lower()]
    if same_but_case:
        quoted = '"' + same_but_case[0].replace('"', '""') + '"'
        hint = (
            f"; did you mean {same_but_case[0]!r}? SQL reads a name without quotes in lower "
            f"case: write it in double quotes, {quoted}"
        )
    else:
        close = difflib.get_close_matches(name, columns, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
    return (
        f"filter {sql!r} is not a valid expression: it names no column {name!r}{hint} "
        f"(the columns are {listed})"
    )


_LITERAL_HINT = (
    "correct the literal (dates are written DATE 'YYYY-MM-DD', timestamps "
    "TIMESTAMP 'YYYY-MM-DD HH:MM:SS')"
)


def _check_literals(sql: str, bound: BoundExpression) -> None:
    """Refuse a filter with a literal DataFusion cannot evaluate (planned on no rows, which
    folds and coerces its constants), naming the literal."""
    failed = bound.unplannable()
    if failed is None:
        return
    node, reason = failed
    constants = [node] if is_constant(node) else [c for c in children(node) if is_constant(c)]
    if not constants:
        raise FilterError(f"filter {sql!r} cannot be planned: {to_sql(node)}: {reason}")
    literal = ", ".join(to_sql(c) for c in constants)
    context = "" if is_constant(node) else f" in {to_sql(node)}"
    raise InvalidLiteralError(
        f"filter {sql!r}: the literal {literal}{context} cannot be evaluated ({reason}); "
        f"{_LITERAL_HINT}",
        literal,
    )


def _translate(node: Any, negate: bool, schema: NamespaceSchema) -> Pred:
    kind = node.variant_name()
    if kind == "Alias":
        return _translate(children(node)[0], negate, schema)
    if kind == "Not":
        return _translate(children(node)[0], not negate, schema)
    if kind == "BinaryExpr":
        op = str(node.to_variant().op()).upper()
        left, right = children(node)
        if op in ("AND", "OR"):
            parts = (_translate(left, negate, schema), _translate(right, negate, schema))
            return _and(parts) if (op == "AND") != negate else _or(parts)
        if op == "<>":
            op = "!="
        if op in _COMPARISONS:
            return _comparison(left, op, right, negate, schema)
        return True
    if kind in ("IsNull", "IsNotNull"):
        col = column_name(children(node)[0])
        is_null = (kind == "IsNull") != negate
        return True if col is None else Leaf(col, "is null" if is_null else "not null")
    if kind == "InList":
        variant = node.to_variant()
        col = column_name(variant.expr())
        # A value no row can equal (2.5 against an integer column) matches nothing.
        values = _constants(variant.list(), col, schema, "exact") if col else None
        if col is None or values is None:
            return True
        values = tuple(v for v in values if v is not _NO_VALUE)
        # SQL three-valued logic: a NULL in the list never makes a row match.
        non_null = tuple(v for v in values if v.is_valid)
        if variant.negated() != negate:
            if len(non_null) != len(values):
                return False
            return Leaf(col, "not in", values) if values else Leaf(col, "not null")
        return Leaf(col, "in", non_null) if non_null else False
    if kind == "Between":
        variant = node.to_variant()
        col = column_name(variant.expr())
        if col is None:
            return True
        bounds = _constants([variant.low()], col, schema, "ceil")
        upper = _constants([variant.high()], col, schema, "floor")
        if bounds is None or upper is None:
            return True
        low, high = bounds[0], upper[0]
        if variant.negated() != negate:
            return _or((Leaf(col, "<", (low,)), Leaf(col, ">", (high,))))
        return _and((Leaf(col, ">=", (low,)), Leaf(col, "<=", (high,))))
    if kind == "Literal":
        value = node.python_value()
        if isinstance(value, pa.Scalar) and pa.types.is_boolean(value.type):
            truth = value.as_py()
            return (not truth if negate else truth) if truth is not None else False
        return True
    return True


def _comparison(left: Any, op: str, right: Any, negate: bool, schema: NamespaceSchema) -> Pred:
    col, other = column_name(left), right
    if col is None:
        col, other, op = column_name(right), left, _FLIP[op]
    if col is None:
        return True
    op = _NEGATE[op] if negate else op
    values = _constants([other], col, schema, "exact")
    if values is None:
        return True
    if values[0] is _NO_VALUE:
        # An integer column against a non-integral number: no value equals it, and
        # ``n < 2.5`` is ``n <= 2``, ``n > 2.5`` is ``n >= 3``.
        if op in ("=", "!="):
            return False if op == "=" else Leaf(col, "not null")
        below = op in ("<", "<=")
        values = _constants([other], col, schema, "floor" if below else "ceil")
        return True if values is None else Leaf(col, "<=" if below else ">=", values)
    if not values[0].is_valid:
        return False  # a comparison with NULL is never true, nor is its negation
    return Leaf(col, op, values)


def _constants(
    nodes: Sequence[Any], column: str, schema: NamespaceSchema, rounding: str
) -> tuple[pa.Scalar, ...] | None:
    """Constant operands evaluated and cast to the column's type, rounded as ``rounding``
    says (see :func:`_cast_constant`); None if one is not constant or has no sound cast."""
    target = schema.field(column).type
    out = []
    for node in nodes:
        if any(n.variant_name() == "Column" for n in walk(node)):
            return None
        try:
            value = evaluate_scalar(node)
        except Exception as exc:
            if any(function_name(n) == "hash" for n in walk(node)):
                return None  # bound to the filter's session only: not understood here
            raise InvalidLiteralError(
                f"the constant {to_sql(node)} cannot be evaluated ({root_cause(exc)}); "
                f"{_LITERAL_HINT}",
                to_sql(node),
            ) from exc
        cast = _cast_constant(value, target, rounding)
        if cast is None:
            return None
        out.append(cast)
    return tuple(out)


#: A constant no value of the column can equal (see :func:`_cast_constant`).
_NO_VALUE = pa.scalar(None, pa.null())


def _cast_constant(value: pa.Scalar, target: pa.DataType, rounding: str) -> pa.Scalar | None:
    """The constant in the column's type, or None when no sound conversion exists. A
    non-integral number against an integer column, or a zone-less timestamp with a time of
    day against a date column, is rounded as ``rounding`` says (:data:`_NO_VALUE` for
    ``exact``); other lossy casts and zone-less times against a non-UTC zone are given up."""
    if not value.is_valid:
        return pa.scalar(None, target)
    if _zone_less_against_a_zone(value.type, target):
        return None
    try:
        return cast_for_comparison(pa.array([value]), target)[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    py = value.as_py()
    if pa.types.is_date(target) and pa.types.is_timestamp(value.type) and value.type.tz is None:
        if rounding == "exact":
            return _NO_VALUE
        day = py.date() if rounding == "floor" else py.date() + dt.timedelta(days=1)
        try:
            return pa.scalar(day, target)
        except (pa.ArrowInvalid, OverflowError):
            return None
    if not (pa.types.is_integer(target) and isinstance(py, float) and math.isfinite(py)):
        return None
    if rounding == "exact":
        return _NO_VALUE
    try:
        return pc.cast(pa.scalar(math.floor(py) if rounding == "floor" else math.ceil(py)), target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


_UTC_ZONES = frozenset({"utc", "etc/utc", "z", "+00:00", "-00:00", "gmt", "etc/gmt"})


def _zone_less_against_a_zone(value: pa.DataType, target: pa.DataType) -> bool:
    """Whether a constant of type ``value`` is read in ``target``'s zone by DataFusion
    and as UTC by Arrow: a zone-less time against a timestamp column zoned other than UTC."""
    if not pa.types.is_timestamp(target) or target.tz is None or target.tz.lower() in _UTC_ZONES:
        return False
    t = pa.types
    naive = t.is_timestamp(value) and value.tz is None
    return naive or t.is_date(value) or t.is_string(value) or t.is_large_string(value)


def _combine(parts: Sequence[Pred], kind: type[And] | type[Or]) -> Pred:
    """Flatten and simplify: TRUE absorbs an OR and vanishes from an AND (FALSE: dually)."""
    absorbing = kind is Or
    flat: list[Pred] = []
    for p in parts:
        if p is absorbing:
            return absorbing
        if p is (not absorbing):
            continue
        flat.extend(p.parts if isinstance(p, kind) else [p])
    if not flat:
        return not absorbing
    return kind(tuple(flat)) if len(flat) > 1 else flat[0]


_and = functools.partial(_combine, kind=And)
_or = functools.partial(_combine, kind=Or)


_HOLDS: Remembered[tuple[str, NamespaceSchema, tuple[PartitionField, ...]], bool] = Remembered(
    _PARSED_MAX
)


def holds_for_kept_partitions(
    bound: BoundExpression, pred: Pred, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> bool:
    """Whether every row of every partition of this spec version the pruner keeps matches
    the filter: only comparisons, ``IN``, ``BETWEEN``, ``IS [NOT] NULL`` of non-float identity
    partition sources against constants, under ``AND``/``OR``/``NOT``, and no ``<>``/``NOT
    IN`` once negations are pushed down (a NULL partition passes those in the pruner). The
    last :data:`_PARSED_MAX` answers are remembered."""
    key = (bound.sql, schema, tuple(fields))
    return _HOLDS.get_or_make(key, lambda: _holds(bound, pred, fields, schema))


def _holds(
    bound: BoundExpression, pred: Pred, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> bool:
    identity = set()
    for f in fields:
        try:
            source = schema.field_by_id(f.source_id)  # type: ignore[arg-type]
        except SchemaError:  # an unknown source: nothing to rely on
            continue
        if is_deprecated(source):  # a column dropped since: not the one of that name now
            continue
        if _is_identity(f, source.type) and not pa.types.is_floating(source.type):
            identity.add(source.name)
    return bool(identity) and _no_negated_leaves(pred) and _exact(raw(bound.expr), identity, schema)


def _no_negated_leaves(pred: Pred) -> bool:
    if isinstance(pred, bool):
        return True
    if isinstance(pred, Leaf):
        return pred.op not in _NEGATED
    return all(_no_negated_leaves(p) for p in pred.parts)


def _exact(node: Any, identity: set[str], schema: NamespaceSchema) -> bool:
    kind = node.variant_name()
    if kind in ("Alias", "Not"):
        return _exact(children(node)[0], identity, schema)
    if kind == "Literal":
        value = node.python_value()
        return isinstance(value, pa.Scalar) and pa.types.is_boolean(value.type)
    if kind == "BinaryExpr":
        op = str(node.to_variant().op()).upper()
        left, right = children(node)
        if op in ("AND", "OR"):
            return _exact(left, identity, schema) and _exact(right, identity, schema)
        if op not in (*_COMPARISONS, "<>"):
            return False
        return (_column_in(left, identity) and _projected(right, left, schema)) or (
            _column_in(right, identity) and _projected(left, right, schema)
        )
    if kind in ("IsNull", "IsNotNull"):
        return _column_in(children(node)[0], identity)
    if kind in ("InList", "Between"):
        variant = node.to_variant()
        column = variant.expr()
        values = variant.list() if kind == "InList" else (variant.low(), variant.high())
        return _column_in(column, identity) and all(_projected(v, column, schema) for v in values)
    return False


def _column_in(node: Any, names: set[str]) -> bool:
    return column_name(node) in names


def _projected(node: Any, column: Any, schema: NamespaceSchema) -> bool:
    """Whether the pruner projects the constant ``node`` onto ``column``."""
    name = column_name(column)
    if name is None or not is_constant(node):
        return False
    return all(_constants([node], name, schema, r) is not None for r in ("exact", "floor", "ceil"))


@functools.lru_cache(maxsize=256)
def _order_preserving(expression: str, source_type: pa.DataType) -> bool:
    """Whether ``expression`` is monotone non-decreasing in its source value."""
    return _monotone(raw(bound_expression(expression, source_type).expr), source_type)


def _monotone(node: Any, source_type: pa.DataType) -> bool:
    kind = node.variant_name()
    if kind == "Column":
        return True
    args = children(node)
    if kind == "ScalarFunction":
        name = str(node.rex_call_operator()).lower()
        if name in ("date_part", "datepart") and len(args) == 2:
            unit = _literal(args[0])
            temporal = pa.types.is_date(source_type) or pa.types.is_timestamp(source_type)
            year = isinstance(unit, str) and unit.lower() == "year"
            return year and temporal and args[1].variant_name() == "Column"
        if name in ("date_trunc", "datetrunc") and len(args) == 2:
            return _literal(args[0]) is not None and args[1].variant_name() == "Column"
        if name == "left" and len(args) == 2:
            return args[0].variant_name() == "Column" and isinstance(_literal(args[1]), int)
        return False
    if kind == "BinaryExpr" and str(node.to_variant().op()) == "-":
        lhs, rhs = args
        if lhs.variant_name() != "Column" or rhs.variant_name() != "BinaryExpr":
            return False
        if str(rhs.to_variant().op()) != "%":
            return False
        mod_col, width = children(rhs)
        w = _literal(width)
        return mod_col.variant_name() == "Column" and isinstance(w, int | float) and w > 0
    return False


def _literal(node: Any) -> Any:
    if node.variant_name() != "Literal":
        return None
    value = node.python_value()
    return value.as_py() if isinstance(value, pa.Scalar) else value


@dataclass(frozen=True)
class Projection:
    """A predicate projected onto one spec version's partition columns: ``exact`` (the
    pruner's), and ``in_scan``, implied by it, for the ``__manifest`` scan: only leaves it
    evaluates as Arrow does (:func:`~..format.manifest.prunes_in_scan`), no negation."""

    exact: pc.Expression | bool
    in_scan: pc.Expression | bool


@dataclass(frozen=True)
class SpecProjector:
    """Projects predicates on source columns onto one spec version's partition columns."""

    fields: Sequence[PartitionField]
    schema: NamespaceSchema

    def project(self, pred: Pred) -> Projection:
        if isinstance(pred, bool):
            return Projection(pred, pred)
        if isinstance(pred, And | Or):
            parts = [self.project(p) for p in pred.parts]
            combine = _pc_and if isinstance(pred, And) else pc_or
            return Projection(
                combine([p.exact for p in parts]), combine([p.in_scan for p in parts])
            )
        return self._leaf(pred)

    def _leaf(self, leaf: Leaf) -> Projection:
        source = self.schema.field(leaf.column)
        sid = field_id(source)
        exact: list[pc.Expression | bool] = []
        in_scan: list[pc.Expression | bool] = []
        for f in self.fields:
            if f.source_id == sid:
                projected = self._field_leaf(f, source.type, leaf)
                exact.append(projected)
                scans = leaf.op not in _NEGATED and prunes_in_scan(f.result_type)
                in_scan.append(projected if scans else True)
        return Projection(_pc_and(exact), _pc_and(in_scan))

    def _field_leaf(
        self, f: PartitionField, source_type: pa.DataType, leaf: Leaf
    ) -> pc.Expression | bool:
        column = pc.field(f.name)
        identity = _is_identity(f, source_type)
        op = leaf.op
        if op in ("=", "in", "is null"):
            values = leaf.values if op != "is null" else (pa.scalar(None, source_type),)
            mapped = self._apply(f, source_type, values)
            if mapped is None:
                return True
            return _is_in(column, mapped, f.result_type)
        if op in ("!=", "not in", "not null"):
            if not identity:
                return True
            if op == "not null":
                return column.is_valid()
            return ~column.isin(pa.array([v.as_py() for v in leaf.values], f.result_type))
        if op in ("<", "<=", ">", ">="):
            if not _order_preserving(f.expression, source_type):
                return True
            mapped = self._apply(f, source_type, leaf.values)
            if mapped is None or not mapped[0].is_valid:
                return True
            bound = pc.scalar(mapped[0])
            strict = identity and op in ("<", ">")
            if op in (">", ">="):
                return column > bound if strict else column >= bound
            return column < bound if strict else column <= bound
        return True

    @staticmethod
    def _apply(
        f: PartitionField, source_type: pa.DataType, values: Sequence[pa.Scalar]
    ) -> list[pa.Scalar] | None:
        try:
            array = pa.array([v.as_py() for v in values], source_type)
            if _is_identity(f, source_type):
                return [array[i] for i in range(len(array))]  # no query to plan
            result = evaluator(f, source_type).evaluate(array)
        except (ExpressionError, pa.ArrowException):
            return None
        return [result[i] for i in range(len(result))]


def _is_identity(f: PartitionField, source_type: pa.DataType) -> bool:
    """The partition value is the source value itself."""
    return f.expression.strip() == "col" and f.result_type == source_type


def _is_in(column: pc.Expression, values: list[pa.Scalar], dtype: Any) -> pc.Expression:
    non_null = [v.as_py() for v in values if v.is_valid]
    parts = [column.isin(pa.array(non_null, dtype))] if non_null else []
    if len(non_null) != len(values):
        parts.append(column.is_null())
    result = pc_or(parts)
    assert not isinstance(result, bool)
    return result


def pc_or(parts: Sequence[pc.Expression | bool]) -> pc.Expression | bool:
    """The OR of Arrow predicates, where ``True`` absorbs and ``False`` vanishes."""
    return _pc_combine(parts, absorbing=True)


def _pc_combine(parts: Sequence[pc.Expression | bool], absorbing: bool) -> pc.Expression | bool:
    exprs: list[pc.Expression] = []
    for p in parts:
        if p is absorbing:
            return absorbing
        if p is not (not absorbing):
            exprs.append(p)
    if not exprs:
        return not absorbing
    return functools.reduce(operator.or_ if absorbing else operator.and_, exprs)


_pc_and = functools.partial(_pc_combine, absorbing=False)
