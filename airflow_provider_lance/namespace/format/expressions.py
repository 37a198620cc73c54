"""DataFusion SQL expressions: partition expressions and filters, with the ``hash`` UDF.

Evaluated in a session pinned to UTC. A UDF has one signature that DataFusion coerces other
types to, so an expression is planned in a probe session to learn the argument type of its
``hash(...)`` calls, then bound to a session whose ``hash`` takes exactly that type.

DataFusion 55's simplifier merges IN lists on one operand as sets, against SQL's NULL logic
(apache/datafusion#24246, fixed after 55): ``c IN ('US') AND c IN ('DE')`` becomes FALSE
where SQL says NULL for a NULL ``c``, so ``NOT (...)`` is TRUE there and a delete would
remove the row. An expression where it may (:func:`merges_lists`) is evaluated with its
``AND``, ``OR``, ``NOT`` and ``IS [NOT] TRUE/FALSE/UNKNOWN`` applied here, by pyarrow's
Kleene kernels, and only the comparisons between them by DataFusion (:func:`values_of`). One
inside a ``CASE`` or a function's argument cannot be taken apart
(:attr:`BoundExpression.hidden_merges`): filters refuse it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from datafusion import DataFrame, Expr, SessionConfig, SessionContext, udf

from airflow_provider_lance.namespace.errors import ExpressionError

from .arrow_json import normalize_type
from .hashing import hash_array, hashable_type

_FRAME_IDS = itertools.count()


@contextmanager
def registered(session: SessionContext, data: pa.Table) -> Iterator[DataFrame]:
    """``data`` as a frame of ``session`` for the ``with`` block, then deregistered, so a
    long-lived session keeps no input alive (pylance fact:
    test_fact_datafusion_from_arrow_registers_its_input_until_deregistered)."""
    name = f"__input_{next(_FRAME_IDS)}"
    frame = session.from_arrow(data, name)
    try:
        yield frame
    finally:
        session.deregister_table(name)


#: Functions whose result depends on something other than their arguments.
NON_DETERMINISTIC = frozenset(
    {"random", "uuid", "now", "today", "localtime", "localtimestamp", "current_timestamp"}
    | {"current_date", "current_time"}
)
_LEAVES = ("Reference", "Literal")
_FORBIDDEN_VARIANTS = frozenset(
    {"ScalarSubquery", "InSubquery", "Exists", "AggregateFunction", "WindowFunction", "Unnest"}
    | {"Placeholder", "OuterReferenceColumn", "Wildcard", "GroupingSet"}
)


def new_session(hash_input: pa.DataType | None = None) -> SessionContext:
    """A session pinned to UTC, ``hash`` bound to ``hash_input``, one target partition (so
    values come out in input order). pylance facts:
    test_fact_datafusion_with_one_target_partition_keeps_the_input_order,
    test_fact_datafusion_coerces_udf_arguments_to_its_one_signature,
    test_fact_datafusion_evaluates_zoned_timestamps_in_their_zone_and_naive_ones_in_utc."""
    config = SessionConfig().set("datafusion.execution.time_zone", "+00:00")
    ctx = SessionContext(config.with_target_partitions(1))
    if hash_input is not None:
        ctx.register_udf(udf(hash_array, [hash_input], pa.int64(), "immutable", "hash"))
    return ctx


def children(expr: Any) -> list[Any]:
    """The operand sub-expressions of a DataFusion ``RawExpr`` (leaves have none)."""
    rtype = str(expr.rex_type())
    if rtype.endswith(_LEAVES):
        return []
    if expr.variant_name() == "Alias":
        return [expr.to_variant().expr()]
    try:
        return list(expr.rex_call_operands())
    except Exception:  # subqueries and other exotic nodes have no operand list
        return []


def walk(expr: Any) -> Iterator[Any]:
    """Every node of an expression tree, root first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def function_name(expr: Any) -> str | None:
    is_call = expr.variant_name() == "ScalarFunction"
    return str(expr.rex_call_operator()).lower() if is_call else None


def column_name(expr: Any) -> str | None:
    return str(expr.to_variant().name()) if expr.variant_name() == "Column" else None


def raw(expr: Expr | Any) -> Any:
    """The ``RawExpr`` behind a ``datafusion.Expr``."""
    return expr.expr if isinstance(expr, Expr) else expr


def check_deterministic(expr: Any, what: str) -> None:
    for node in walk(raw(expr)):
        name = function_name(node)
        if name in NON_DETERMINISTIC:
            raise ExpressionError(f"{what} uses {name}(), which is not deterministic")
        if node.variant_name() in _FORBIDDEN_VARIANTS:
            raise ExpressionError(
                f"{what} may only use scalar functions of its row (found {node.variant_name()})"
            )


@dataclass
class BoundExpression:
    """A SQL expression planned against a schema, ready to evaluate on matching data."""

    sql: str
    schema: pa.Schema
    output_type: pa.DataType
    hash_input: pa.DataType | None
    _session: SessionContext = field(repr=False)
    expr: Expr = field(repr=False)
    #: ``schema`` with no rows, as :func:`bind` parsed ``expr`` against it.
    _empty: DataFrame = field(repr=False)

    @contextmanager
    def frame(self, data: pa.Table | pa.RecordBatch) -> Iterator[DataFrame]:
        """``data`` as a DataFusion frame, for the duration of the ``with`` block."""
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        with registered(self._session, data) as frame:
            yield frame

    def evaluate(self, data: pa.Table | pa.RecordBatch) -> pa.ChunkedArray:
        """The expression's value for every row of ``data`` (schema must match)."""
        if data.num_rows == 0:
            return pa.chunked_array([], self.output_type)
        with self.frame(data) as frame, self._failures():
            return values_of(frame, raw(frame.parse_sql_expr(self.sql)), self.merges_lists)

    def filter(self, data: pa.Table | pa.RecordBatch) -> pa.Table:
        """The rows of ``data`` for which the (boolean) expression is true."""
        if data.num_rows == 0:
            return data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
        if self.merges_lists:
            table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
            return table.filter(pc.fill_null(self.evaluate(table), False))
        with self.frame(data) as frame, self._failures():
            out = frame.filter(frame.parse_sql_expr(self.sql)).to_arrow_table()
        return out.cast(data.schema) if out.schema != data.schema else out

    @contextmanager
    def _failures(self) -> Iterator[None]:
        try:
            yield
        except Exception as exc:
            raise ExpressionError(f"evaluating {self.sql!r} failed: {_first_line(exc)}") from exc

    @cached_property
    def columns(self) -> tuple[str, ...]:
        """The columns the expression names, sorted."""
        names = {column_name(n) for n in walk(raw(self.expr))}
        return tuple(sorted(n for n in names if n))

    @property
    def merges_lists(self) -> bool:
        """Whether DataFusion's simplifier may get this expression wrong for NULL (see the
        module docstring): then it is evaluated in parts, and Lance must not evaluate it."""
        return self._list_merges.any

    @property
    def hidden_merges(self) -> bool:
        """Whether such a merge sits inside something that is not ``AND``, ``OR``, ``NOT``
        or ``IS ...`` (a ``CASE``, a function's argument): :func:`values_of` cannot take it
        apart, and DataFusion 55 gets it wrong (``CASE WHEN NOT (c IN ('US') AND c IN
        ('DE')) ...``)."""
        return self._list_merges.hidden

    @cached_property
    def _list_merges(self) -> _Merges:
        return _merges(raw(self.expr))

    def unplannable(self) -> tuple[Any, str] | None:
        """The smallest part of the expression DataFusion cannot plan (``DATE '2025-13-45'``),
        and why; None if it plans."""
        return _unplannable_in(self._empty, raw(self.expr))


def bind(sql: str, schema: pa.Schema, what: str) -> BoundExpression:
    """Plan ``sql`` against ``schema``; errors name ``what`` and the DataFusion message."""
    if not isinstance(sql, str) or not sql.strip():
        raise ExpressionError(f"{what} must be a non-empty SQL expression string")
    empty = pa.table({f.name: pa.array([], f.type) for f in schema})
    session = new_session(pa.utf8())  # a probe: without hash() calls, its hash is never called
    try:
        frame = session.from_arrow(empty)
        expr = frame.parse_sql_expr(sql)
        check_deterministic(expr, what)
        calls = [node for node in walk(raw(expr)) if function_name(node) == "hash"]
        hash_types = {normalize_type(_type_of(frame, a)) for n in calls for a in children(n)}
        if len(hash_types) > 1:
            raise ExpressionError(
                f"{what} {sql!r} calls hash() on values of different types "
                f"({', '.join(map(str, hash_types))}); use one type per expression"
            )
        hash_input = next(iter(hash_types), None)
        if hash_input is not None:
            if not hashable_type(hash_input):
                error = f"{what} {sql!r}: hash() is not defined for type {hash_input}"
                raise ExpressionError(error)
            session = new_session(hash_input)
            frame = session.from_arrow(empty)
            expr = frame.parse_sql_expr(sql)
        output_type = frame.select(expr.alias("__value")).schema().field("__value").type
    except ExpressionError:
        raise
    except Exception as exc:
        error = f"{what} {sql!r} is not a valid expression: {_first_line(exc)}"
        raise ExpressionError(error) from exc
    return BoundExpression(sql, schema, output_type, hash_input, session, expr, frame)


def _unplannable_in(frame: DataFrame, node: Any) -> tuple[Any, str] | None:
    """The smallest part of ``node`` (parsed against ``frame``) that cannot be planned."""
    reason = _plan_error(frame, node)
    if reason is None:
        return None
    narrowed = True
    while narrowed:
        narrowed = False
        for child in children(node):
            why = _plan_error(frame, child)
            if why is not None:
                node, reason, narrowed = child, why, True
                break
    return node, reason


def _plan_error(frame: DataFrame, node: Any) -> str | None:
    """Why DataFusion cannot plan ``node`` over ``frame``; None if it can."""
    try:
        frame.select(Expr(node).alias("__v")).optimized_logical_plan()
    except Exception as exc:
        return root_cause(exc)
    return None


_ERROR_PREFIX = re.compile(r"^(?:(?:Arrow|DataFusion|Execution|Optimizer) error: )+")


def root_cause(exc: BaseException) -> str:
    """The last line of a DataFusion error chain (its "caused by" root), without the
    layers' prefixes: ``Cast error: Cannot cast string '2025-13-45' to ...``."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    return unqualified(_ERROR_PREFIX.sub("", lines[-1])) if lines else type(exc).__name__


#: The names of the tables an expression is planned against: never shown.
_INTERNAL_QUALIFIER = re.compile(r"\b(?:c[0-9a-f]{32}|__input_\d+)\.")


def unqualified(message: str) -> str:
    """``message`` without the internal table names DataFusion qualifies columns with."""
    return _INTERNAL_QUALIFIER.sub("", message)


_SQL_REWRITES = (
    (re.compile(r'CAST\(Utf8\("((?:[^"\\]|\\.)*)"\) AS Date(?:32|64)\)'), r"DATE '\1'"),
    (re.compile(r'CAST\(Utf8\("((?:[^"\\]|\\.)*)"\) AS Timestamp\([^)]*\)\)'), r"TIMESTAMP '\1'"),
    (re.compile(r'Utf8(?:View)?\("((?:[^"\\]|\\.)*)"\)'), r"'\1'"),
    (re.compile(r"\b(?:U?Int\d+|Float\d+|Boolean)\(([^()]*)\)"), r"\1"),
)


def to_sql(node: Any) -> str:
    """A ``RawExpr`` as SQL close to what a user wrote (``DATE '2025-13-45'``)."""
    text = unqualified(str(node.canonical_name()))
    for pattern, replacement in _SQL_REWRITES:
        text = pattern.sub(replacement, text)
    return text


def is_constant(node: Any) -> bool:
    """Whether ``node`` references no column (its value is the same for every row)."""
    return not any(n.variant_name() == "Column" for n in walk(node))


def _type_of(frame: DataFrame, node: Any) -> pa.DataType:
    return frame.select(Expr(node).alias("__t")).schema().field("__t").type


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    for prefix in ("DataFusion error: ", "Error during planning: ", "Execution error: "):
        text = text.replace(prefix, "")
    return unqualified(text.splitlines()[0]) if text else type(exc).__name__


_CONSTANTS: list[SessionContext] = []
#: Constants evaluated in the shared session, by the expression's canonical name.
_CONSTANT_VALUES: dict[str, pa.Scalar] = {}
_CONSTANT_VALUES_MAX = 1024


def evaluate_scalar(expr: Any, session: SessionContext | None = None) -> pa.Scalar:
    """Evaluate a constant ``RawExpr`` (no column references) to a pyarrow scalar."""
    if expr.variant_name() == "Literal":
        value = expr.python_value()
        if isinstance(value, pa.Scalar):
            return value
    key = None
    if session is None:  # the shared session: its values are remembered
        key = str(expr.canonical_name())
        cached = _CONSTANT_VALUES.get(key)
        if cached is not None:
            return cached
        if not _CONSTANTS:
            _CONSTANTS.append(new_session())
        session = _CONSTANTS[0]
    with registered(session, pa.table({"__one": [1]})) as frame:
        value = values_of(frame, expr)[0]
    if key is not None:
        if len(_CONSTANT_VALUES) >= _CONSTANT_VALUES_MAX:
            _CONSTANT_VALUES.clear()
        _CONSTANT_VALUES[key] = value
    return value


# -- SQL's NULL logic where DataFusion 55's simplifier breaks it --------------------------------
_TRUTH_TESTS: dict[str, Any] = {
    "IsTrue": lambda v: pc.fill_null(v, False),
    "IsFalse": lambda v: pc.fill_null(pc.invert(v), False),
    "IsNotTrue": lambda v: pc.invert(pc.fill_null(v, False)),
    "IsNotFalse": lambda v: pc.invert(pc.fill_null(pc.invert(v), False)),
    "IsUnknown": pc.is_null,
    "IsNotUnknown": pc.is_valid,
}
_CONNECTIVES = ("AND", "OR")


def values_of(frame: DataFrame, node: Any, merges: bool | None = None) -> pa.ChunkedArray:
    """The value of the ``RawExpr`` ``node`` on every row of ``frame``, with SQL's NULL
    logic even where DataFusion's simplifier would merge its IN lists (module docstring);
    ``merges``: :func:`merges_lists` of ``node`` if the caller knows it."""
    if not (merges_lists(node) if merges is None else merges):
        return frame.select(Expr(node).alias("__v")).to_arrow_table().column("__v")
    leaves: list[Any] = []
    skeleton = _skeleton(node, leaves)
    table = frame.select(*(Expr(n).alias(f"__v{i}") for i, n in enumerate(leaves)))
    columns = table.to_arrow_table().columns
    return pa.chunked_array([_combine(skeleton, [c.cast(pa.bool_()) for c in columns])])


def merges_lists(expr: Expr | Any) -> bool:
    """Whether DataFusion's simplifier may merge two of ``expr``'s IN lists on the same
    columns (an ``=`` or ``<>`` with a constant counts: it is made an IN list first) other
    than by a union, the one merge SQL's NULL logic allows: membership tests joined by OR,
    or non-membership tests joined by AND (a NOT between the two turns one into the other;
    one above both turns the pair and their join, so it changes nothing)."""
    return _merges(raw(expr)).any


@dataclass(frozen=True)
class _Merges:
    #: A merge that is not a union, among ``node``'s boolean operators.
    merges: bool
    #: One inside a node that is not a boolean operator.
    hidden: bool
    #: Its membership tests: (the columns tested, whether membership as seen from ``node``;
    #: None below an ``IS [NOT] TRUE/...``, whose NULL the union rule does not cover).
    tests: list[tuple[frozenset[str], bool | None]]

    @property
    def any(self) -> bool:
        return self.merges or self.hidden


def _merges(node: Any) -> _Merges:
    """What :func:`merges_lists` finds in ``node``."""
    kind = node.variant_name()
    if kind in ("Alias", "Not") or kind in _TRUTH_TESTS:
        inner = _merges(children(node)[0])
        if kind == "Alias":
            return inner
        tests = [(c, None if kind != "Not" or m is None else not m) for c, m in inner.tests]
        return _Merges(inner.merges, inner.hidden, tests)
    op = _connective(node)
    if op is None:  # a test, or a CASE, a call...: its operands are simplified all the same
        hidden = any(m.merges or m.hidden for m in map(_merges, children(node)))
        test = _membership(node)
        return _Merges(False, hidden, [] if test is None else [test])
    left, right = (_merges(c) for c in children(node))
    union_of = op == "OR"  # membership tests by OR, non-membership by AND
    merges = (
        left.merges
        or right.merges
        or any(
            a == b and not (in_a == in_b == union_of)
            for a, in_a in left.tests
            for b, in_b in right.tests
        )
    )
    return _Merges(merges, left.hidden or right.hidden, left.tests + right.tests)


def _connective(node: Any) -> str | None:
    if node.variant_name() != "BinaryExpr":
        return None
    op = str(node.to_variant().op()).upper()
    return op if op in _CONNECTIVES else None


def _membership(node: Any) -> tuple[frozenset[str], bool] | None:
    """(the columns of the operand, whether it tests membership) of ``x [NOT] IN (...)``,
    ``x = constant`` or ``x <> constant``; None for any other node. By columns, not by the
    operand's text: coercion may make ``CAST(n AS BIGINT)`` and ``n`` one operand."""
    kind = node.variant_name()
    if kind == "InList":
        variant = node.to_variant()
        return _columns_of(variant.expr()), not variant.negated()
    if kind != "BinaryExpr" or (op := str(node.to_variant().op())) not in ("=", "!="):
        return None
    operands = [c for c in children(node) if not is_constant(c)]
    return (_columns_of(operands[0]), op == "=") if len(operands) == 1 else None


def _columns_of(node: Any) -> frozenset[str]:
    return frozenset(name for n in walk(node) if (name := column_name(n)) is not None)


def _skeleton(node: Any, leaves: list[Any]) -> tuple[Any, ...]:
    """``node``'s boolean operators as nested tuples; other nodes go to ``leaves``
    (``("leaf", index)``)."""
    kind = node.variant_name()
    if kind == "Alias":
        return _skeleton(children(node)[0], leaves)
    if kind == "Not" or kind in _TRUTH_TESTS:
        return (kind, _skeleton(children(node)[0], leaves))
    op = _connective(node)
    if op is not None:
        return (op, *(_skeleton(c, leaves) for c in children(node)))
    leaves.append(node)
    return ("leaf", len(leaves) - 1)


def _combine(skeleton: tuple[Any, ...], leaves: list[pa.ChunkedArray]) -> pa.Array:
    kind, *parts = skeleton
    if kind == "leaf":
        return leaves[parts[0]].combine_chunks()
    values = [_combine(part, leaves) for part in parts]
    if kind == "AND":
        return pc.and_kleene(*values)
    if kind == "OR":
        return pc.or_kleene(*values)
    return pc.invert(values[0]) if kind == "Not" else _TRUTH_TESTS[kind](values[0])
