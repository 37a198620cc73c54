"""An engine's filter (a ``pyarrow.compute.Expression``) as the namespace's SQL filter.

DuckDB, Polars and DataFusion push a query's filter into a dataset's ``scanner(filter=)``
as a pyarrow expression. The namespace prunes and reads with a SQL filter
(:mod:`.pruning`), so the expression is translated: comparisons of a column with a
constant, ``is_in``, ``is_null``/``is_valid``, ``and``/``or``/``not`` (Kleene's) and
DuckDB's ``if_else(is_valid(c), is_in(c, ...), null)``, each into SQL that is TRUE for
exactly the rows the expression is TRUE for (NULL and FALSE both drop a row).

Anything else (another function, a floating column, whose NaN orders differently in
SQL) is left out of the SQL soundly: under ``and`` it is dropped (the SQL then selects
more rows), elsewhere the enclosing part is. :attr:`ArrowFilter.complete` says whether
the SQL selects exactly the expression's rows; when not, the expression itself is applied
to the rows the SQL selects (:meth:`ArrowFilter.filter`), by pyarrow.

The expression's tree is read from its pickle (pyarrow serialises an expression as an
Arrow IPC file: the tree in the schema's metadata, in order, and every constant in a
column, typed), a fact pinned by tests/namespace/read/test_arrow_filter.py.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Union

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import FilterError, LanceNamespaceError
from airflow_provider_lance.namespace.format.schema import NamespaceSchema

from .pruning import parse_filter


# -- the expression's tree -------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Literal:
    value: pa.Scalar


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]
    options: pa.StructScalar | None


@dataclass(frozen=True)
class Opaque:
    """A part the tree reader does not know (a nested field reference)."""


Node = Union[Field, Literal, Call, Opaque]  # noqa: UP007 - a runtime alias


def decode(expression: pc.Expression) -> Node | None:
    """The tree of ``expression`` (None if pyarrow cannot serialise it, e.g. a field
    referenced by position)."""
    try:
        _, (buffer,) = expression.__reduce__()
        table = pa.ipc.open_file(buffer).read_all()
    except (pa.ArrowException, ValueError, TypeError):
        return None
    pairs = _metadata_pairs(table.schema)
    columns = [table.column(i)[0] for i in range(table.num_columns)]
    try:
        node, end = _node(pairs, 0, columns)
    except (IndexError, ValueError, KeyError):
        return None
    return node if end == len(pairs) else None


def _node(pairs: list[tuple[str, str]], i: int, columns: list[pa.Scalar]) -> tuple[Node, int]:
    key, value = pairs[i]
    if key == "literal":
        return Literal(columns[int(value)]), i + 1
    if key == "field_ref":
        return Field(value), i + 1
    if key == "nested_field_ref":
        return Opaque(), i + 1 + int(value)
    if key != "call":
        raise ValueError(key)
    args: list[Node] = []
    options = None
    i += 1
    while pairs[i][0] != "end":
        if pairs[i][0] == "options":
            options = columns[int(pairs[i][1])]
            i += 1
        else:
            arg, i = _node(pairs, i, columns)
            args.append(arg)
    return Call(value, tuple(args), options), i + 1


class _CSchema(ctypes.Structure):
    """The Arrow C data interface's ``ArrowSchema``."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _metadata_pairs(schema: pa.Schema) -> list[tuple[str, str]]:
    """The schema's metadata in order, repeated keys included (``Schema.metadata`` is a
    dict), read through the C data interface: a count, then length-prefixed keys and
    values, all int32 in native order."""
    c_schema = _CSchema()
    schema._export_to_c(ctypes.addressof(c_schema))
    try:
        pointer = c_schema.metadata
        if not pointer:
            return []
        count = _int32(pointer)
        pointer += 4
        pairs = []
        for _ in range(count):
            key, pointer = _text(pointer)
            value, pointer = _text(pointer)
            pairs.append((key, value))
        return pairs
    finally:
        _RELEASE(c_schema.release)(ctypes.addressof(c_schema))


def _int32(pointer: int) -> int:
    return int(struct.unpack("=i", ctypes.string_at(pointer, 4))[0])


def _text(pointer: int) -> tuple[str, int]:
    size = _int32(pointer)
    return ctypes.string_at(pointer + 4, size).decode(), pointer + 4 + size


def field_names(node: Node) -> set[str]:
    if isinstance(node, Field):
        return {node.name}
    if isinstance(node, Call):
        return set().union(*(field_names(a) for a in node.args))
    return set()


# -- translation into SQL --------------------------------------------------------------------
@dataclass(frozen=True)
class _Sql:
    """SQL for one sub-expression X: ``pos`` is TRUE exactly where X is TRUE, ``neg``
    exactly where X is FALSE (None: not known); ``pos_up`` and ``neg_up`` are TRUE at
    least there (None: TRUE everywhere)."""

    pos: str | None = None
    neg: str | None = None
    pos_up: str | None = None
    neg_up: str | None = None

    @classmethod
    def exact(cls, sql: str) -> _Sql:
        """For SQL with X's three values."""
        negated = f"NOT ({sql})"
        return cls(sql, negated, sql, negated)

    def negated(self) -> _Sql:
        return _Sql(self.neg, self.pos, self.neg_up, self.pos_up)


_UNKNOWN = _Sql()


def _all(parts: Sequence[str | None], op: str) -> str | None:
    """``parts`` joined by ``op`` (None if one is None)."""
    if any(p is None for p in parts):
        return None
    return f" {op} ".join(f"({p})" for p in parts)


def _known(parts: Sequence[str | None], op: str) -> str | None:
    """The parts that are known joined by ``op`` (None if none is)."""
    return _all([p for p in parts if p is not None], op) if any(parts) else None


def _and(a: _Sql, b: _Sql) -> _Sql:
    return _Sql(
        _all([a.pos, b.pos], "AND"),
        _all([a.neg, b.neg], "OR"),
        _known([a.pos_up, b.pos_up], "AND"),
        _all([a.neg_up, b.neg_up], "OR"),
    )


def _or(a: _Sql, b: _Sql) -> _Sql:
    return _and(a.negated(), b.negated()).negated()


_COMPARISONS = {
    "equal": ("=", "="),
    "not_equal": ("<>", "<>"),
    "less": ("<", ">"),
    "less_equal": ("<=", ">="),
    "greater": (">", "<"),
    "greater_equal": (">=", "<="),
}
#: ``SetLookupOptions.null_matching_behavior``: MATCH, SKIP, EMIT_NULL, INCONCLUSIVE.
_MATCH, _SKIP, _EMIT_NULL, _INCONCLUSIVE = range(4)


@dataclass(frozen=True)
class _Translator:
    schema: pa.Schema

    def sql(self, node: Node) -> _Sql:
        if isinstance(node, Literal):
            return self._boolean(node.value)
        if not isinstance(node, Call):
            return _UNKNOWN
        name, args = node.name, node.args
        if name in ("and_kleene", "or_kleene") and len(args) == 2:
            combine = _and if name == "and_kleene" else _or
            return combine(self.sql(args[0]), self.sql(args[1]))
        if name == "invert" and len(args) == 1:
            return self.sql(args[0]).negated()
        if name == "if_else" and len(args) == 3:
            return self._if_else(*args)
        if name in _COMPARISONS and len(args) == 2:
            return self._comparison(name, *args)
        if name in ("is_null", "is_valid") and len(args) == 1:
            return self._null_test(name, args[0], node.options)
        if name == "is_in" and len(args) == 1 and node.options is not None:
            return self._is_in(args[0], node.options)
        return _UNKNOWN

    @staticmethod
    def _boolean(value: pa.Scalar) -> _Sql:
        if not pa.types.is_boolean(value.type) and not pa.types.is_null(value.type):
            return _UNKNOWN
        if not value.is_valid:  # never TRUE, never FALSE
            return _Sql("FALSE", "FALSE", "FALSE", "FALSE")
        return _Sql.exact("TRUE" if value.as_py() else "FALSE")

    def _if_else(self, cond: Node, then: Node, other: Node) -> _Sql:
        """``if_else(c, a, NULL)``: TRUE where c and a are, FALSE where c is TRUE and a
        FALSE (DuckDB's form of ``c IN (...)``)."""
        if not isinstance(other, Literal) or other.value.is_valid:
            return _UNKNOWN
        c, a = self.sql(cond), self.sql(then)
        return _Sql(
            _all([c.pos, a.pos], "AND"),
            _all([c.pos, a.neg], "AND"),
            _known([c.pos_up, a.pos_up], "AND"),
            _known([c.pos_up, a.neg_up], "AND"),
        )

    def _column(self, node: Node) -> tuple[str, pa.DataType] | None:
        """A column the translation can compare (not floating: NaN orders differently
        in SQL), quoted, and its type."""
        if not isinstance(node, Field) or node.name not in self.schema.names:
            return None
        dtype = self.schema.field(node.name).type
        if _family(dtype) is None:
            return None
        return '"' + node.name.replace('"', '""') + '"', dtype

    def _comparison(self, name: str, left: Node, right: Node) -> _Sql:
        op, flipped = _COMPARISONS[name]
        if isinstance(left, Literal):
            left, right, op = right, left, flipped
        column = self._column(left)
        if column is None or not isinstance(right, Literal):
            return _UNKNOWN
        literal = constant_sql(right.value, column[1])
        return _UNKNOWN if literal is None else _Sql.exact(f"{column[0]} {op} {literal}")

    def _null_test(self, name: str, arg: Node, options: pa.StructScalar | None) -> _Sql:
        column = self._column(arg)
        if column is None:
            return _UNKNOWN
        test = "IS NULL" if name == "is_null" else "IS NOT NULL"
        return _Sql.exact(f"{column[0]} {test}")

    def _is_in(self, arg: Node, options: pa.StructScalar) -> _Sql:
        column = self._column(arg)
        behaviour = _null_matching(options)
        if column is None or behaviour is None:
            return _UNKNOWN
        quoted, dtype = column
        value_set = options["value_set"].values
        if value_set is None:
            return _UNKNOWN
        literals = [constant_sql(v, dtype) for v in value_set if v.is_valid]
        if any(lit is None for lit in literals):
            return _UNKNOWN
        has_null = value_set.null_count > 0
        listed = f"{quoted} IN ({', '.join(str(lit) for lit in literals)})" if literals else None
        if behaviour == _INCONCLUSIVE:  # SQL's own IN
            if not literals:
                return _UNKNOWN
            nulls = ", NULL" if has_null else ""
            return _Sql.exact(f"{quoted} IN ({', '.join(map(str, literals))}{nulls})")
        if behaviour == _EMIT_NULL:
            return _Sql.exact(listed) if listed else _UNKNOWN
        if behaviour == _MATCH and has_null:
            return _Sql.exact(f"{quoted} IS NULL" + (f" OR {listed}" if listed else ""))
        return _Sql.exact(f"{quoted} IS NOT NULL AND {listed}") if listed else _Sql.exact("FALSE")


def _null_matching(options: pa.StructScalar) -> int | None:
    names = [options.type.field(i).name for i in range(options.type.num_fields)]
    if "null_matching_behavior" in names:
        value = options["null_matching_behavior"].as_py()
        return int(value) if value in range(4) else None
    if "skip_nulls" in names:  # older pyarrow
        return _SKIP if options["skip_nulls"].as_py() else _MATCH
    return None


def _family(dtype: pa.DataType) -> str | None:
    """What a column's values compare with (None: not translated)."""
    if pa.types.is_integer(dtype) or pa.types.is_decimal(dtype):
        return "number"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_string_view(dtype):
        return "string"
    if pa.types.is_boolean(dtype):
        return "bool"
    if pa.types.is_date(dtype):
        return "date"
    if pa.types.is_timestamp(dtype):
        return "timestamp" if dtype.tz is None else "zoned timestamp"
    return None


_UNITS = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}


def constant_sql(value: pa.Scalar, column: pa.DataType) -> str | None:
    """``value`` as a SQL constant of its own type, compared with a column of type
    ``column`` as pyarrow compares them; None when it is not (another family, NaN)."""
    dtype = value.type
    if pa.types.is_null(dtype) or not value.is_valid:
        return "NULL"
    family = _family(column)
    if pa.types.is_floating(dtype):
        number = value.as_py()
        finite = number == number and number not in (float("inf"), float("-inf"))
        return repr(float(number)) if family == "number" and finite else None
    if _family(dtype) != family:
        return None
    if pa.types.is_integer(dtype):
        return str(value.as_py())
    if pa.types.is_decimal(dtype):
        if not pa.types.is_decimal128(dtype):
            return None
        text = format(value.as_py(), "f")
        return f"arrow_cast('{text}', 'Decimal128({dtype.precision}, {dtype.scale})')"
    if family == "string":
        return "'" + str(value.as_py()).replace("'", "''") + "'"
    if family == "bool":
        return "TRUE" if value.as_py() else "FALSE"
    if family == "date":
        return _date(value)
    return _timestamp(value)


def _date(value: pa.Scalar) -> str | None:
    try:
        day = value.as_py()
    except (ValueError, OverflowError):
        return None
    if pa.scalar(day, value.type) != value:  # a date64 with a time of day
        return None
    return f"DATE '{day.isoformat()}'"


def _timestamp(value: pa.Scalar) -> str | None:
    dtype = value.type
    zone = "None" if dtype.tz is None else f'Some("{dtype.tz}")'
    if '"' in (dtype.tz or ""):
        return None
    return f"arrow_cast({value.value}, 'Timestamp({_UNITS[dtype.unit]}, {zone})')"


# -- the filter a scan applies ---------------------------------------------------------------
class ArrowFilter:
    """A pyarrow filter expression over the namespace columns, with the SQL it is read
    with (see the module docstring). An unknown column raises :class:`FilterError`."""

    def __init__(self, expression: pc.Expression, schema: NamespaceSchema) -> None:
        if not isinstance(expression, pc.Expression):
            raise FilterError(
                f"a dataset's filter is a pyarrow.compute.Expression, got "
                f"{type(expression).__name__} {expression!r} (a SQL filter is given to "
                "to_table(filter=...) of the namespace)"
            )
        self.expression = expression
        self._schema = schema
        tree = decode(expression)
        arrow = schema.active
        self._check_columns(tree, arrow)
        translated = _UNKNOWN if tree is None else _Translator(arrow).sql(tree)
        #: SQL true for every row the expression is TRUE for (None: no such SQL known).
        self.sql = translated.pos if translated.pos is not None else translated.pos_up
        #: Whether :attr:`sql` selects exactly the expression's rows.
        self.complete = translated.pos is not None
        if self.sql is not None and not self._parses(self.sql):
            self.sql, self.complete = None, False
        self._tree = tree

    def _check_columns(self, tree: Node | None, arrow: pa.Schema) -> None:
        names = field_names(tree) if tree is not None else set()
        unknown = sorted(names - set(arrow.names))
        if unknown:
            raise FilterError(
                f"filter {self.expression} names no column {unknown[0]!r} of the namespace "
                f"(the columns are {', '.join(arrow.names)})"
            )

    def _parses(self, sql: str) -> bool:
        try:
            parse_filter(sql, self._schema)
        except LanceNamespaceError:  # e.g. a constant SQL cannot compare: pyarrow decides
            return False
        return True

    @cached_property
    def columns(self) -> list[str]:
        """The columns the expression reads (all of them if its tree is not known)."""
        if self._tree is None:
            return list(self._schema.active.names)
        return sorted(field_names(self._tree))

    def filter(self, batches: Iterator[pa.RecordBatch], output: pa.Schema) -> Iterator[Any]:
        """The rows of ``batches`` the expression is TRUE for, projected to ``output``."""
        for batch in batches:
            try:
                kept = pa.Table.from_batches([batch]).filter(self.expression)
            except (pa.ArrowException, TypeError) as exc:
                raise FilterError(f"filter {self.expression} cannot be applied: {exc}") from exc
            if kept.num_rows:
                yield from kept.select(output.names).to_batches()

    def __repr__(self) -> str:
        return f"ArrowFilter({self.expression}, sql={self.sql!r}, complete={self.complete})"
