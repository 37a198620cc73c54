"""Partition fields and versioned partition specs (``partition_spec_v<N>``).

:func:`resolve_spec` validates fields against the schema and the earlier spec versions and
fills in ``field_id`` and ``source_id`` by the spec's rules: the id of an identical (source,
name, expression) field, else a fresh id above all ever assigned; a name keeps its type.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, lru_cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import ExpressionError, PartitionSpecError, SchemaError

from .arrow_json import normalize_type, type_from_json, type_to_json
from .conversion import kind
from .expressions import BoundExpression, bind, root_cause
from .schema import NamespaceSchema, field_id, is_deprecated

SPEC_KEY_PREFIX = "partition_spec_v"
FIRST_PARTITION_FIELD_ID = 1
_FIELD_KEYS = ("field_id", "name", "source_id", "expression", "result_type")


@dataclass(frozen=True)
class PartitionField:
    """One partition column: ``expression`` over the ``source`` column (a namespace column
    name), typed ``result_type`` (inferred when omitted). ``field_id`` and ``source_id``
    are filled in when the field becomes part of a spec."""

    name: str
    source: str | None = None
    expression: str = "col"
    result_type: pa.DataType | None = None
    field_id: int | None = None
    source_id: int | None = None

    def to_json_obj(self) -> dict[str, Any]:
        if self.field_id is None or self.source_id is None or self.result_type is None:
            raise PartitionSpecError(f"partition field {self.name!r} is not resolved yet")
        obj = {key: getattr(self, key) for key in _FIELD_KEYS}
        return obj | {"result_type": type_to_json(self.result_type)}

    @classmethod
    def from_json_obj(cls, obj: Any, schema: NamespaceSchema | None = None) -> PartitionField:
        if not isinstance(obj, Mapping):
            raise PartitionSpecError(f"a partition field must be a JSON object, got {obj!r}")
        missing = [k for k in _FIELD_KEYS if k not in obj]
        if missing:
            raise PartitionSpecError(f"partition field {obj!r} lacks {', '.join(missing)}")
        try:
            fid, sid = int(obj["field_id"]), int(obj["source_id"])
        except (TypeError, ValueError) as exc:
            raise PartitionSpecError(f"partition field {obj!r}: ids must be integers") from exc
        if not isinstance(obj["name"], str) or not isinstance(obj["expression"], str):
            raise PartitionSpecError(f"partition field {obj!r}: name/expression must be strings")
        try:
            result_type = type_from_json(obj["result_type"])
        except SchemaError as exc:
            raise PartitionSpecError(f"partition field {obj['name']!r}: {exc}") from exc
        source = None
        if schema is not None:
            try:
                source = schema.field_by_id(sid).name
            except SchemaError as exc:
                raise PartitionSpecError(
                    f"partition field {obj['name']!r} references unknown source_id {sid}"
                ) from exc
        return cls(obj["name"], source, obj["expression"], result_type, fid, sid)


def spec_key(version: int) -> str:
    return f"{SPEC_KEY_PREFIX}{version}"


def spec_versions(metadata: Mapping[str, str]) -> list[int]:
    """The spec versions present in ``__manifest`` table metadata, ascending."""
    tails = (key[len(SPEC_KEY_PREFIX) :] for key in metadata if key.startswith(SPEC_KEY_PREFIX))
    return sorted(int(tail) for tail in tails if tail.isdigit())


def spec_to_json(fields: Sequence[PartitionField]) -> str:
    return json.dumps([f.to_json_obj() for f in fields], separators=(",", ":"))


def spec_from_json(text: str, schema: NamespaceSchema, version: int) -> list[PartitionField]:
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise PartitionSpecError(f"{spec_key(version)} is not valid JSON: {exc}") from exc
    if not isinstance(obj, list):
        raise PartitionSpecError(f"{spec_key(version)} must be a JSON array of partition fields")
    return [PartitionField.from_json_obj(o, schema) for o in obj]


_FAMILIES: tuple[tuple[str, Any], ...] = (
    ("integer", pa.types.is_integer),
    ("floating", pa.types.is_floating),
    ("decimal", pa.types.is_decimal),
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
    ("temporal", lambda t: pa.types.is_date(t) or pa.types.is_timestamp(t)),
    ("boolean", pa.types.is_boolean),
)


def _family(dtype: pa.DataType) -> str | None:
    return next((name for name, test in _FAMILIES if test(dtype)), None)


def result_cast_allowed(inferred: pa.DataType, declared: pa.DataType) -> bool:
    """Whether an expression producing ``inferred`` may declare ``declared`` as result type:
    within one family, or integer -> float (monotone casts, so range pruning stays sound;
    a value that does not fit fails the write)."""
    inferred, declared = normalize_type(inferred), normalize_type(declared)
    if inferred == declared or pa.types.is_null(inferred):
        return True
    fam_in, fam_out = _family(inferred), _family(declared)
    if fam_in is None or fam_out is None:
        return False
    return fam_in == fam_out or (fam_in == "integer" and fam_out == "floating")


@dataclass(frozen=True)
class FieldEvaluator:
    """Computes one partition field's values from its source column's values."""

    field: PartitionField
    source_type: pa.DataType

    @cached_property
    def bound(self) -> BoundExpression:
        return bound_expression(self.field.expression, self.source_type)

    @cached_property
    def identity(self) -> bool:
        """The expression is the source column itself (DataFusion need not run)."""
        if self.field.expression.strip().lower() == "col":
            return True
        return bool(self.bound.expr.variant_name() == "Column")

    def evaluate(self, values: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The field's value for each of ``values``; an :class:`ExpressionError` names the
        source value the expression fails for, or a result that does not fit."""
        try:
            raw = values if self.identity else self.bound.evaluate(pa.table({"col": values}))
        except ExpressionError as exc:
            raise self._failure(values, exc) from exc
        assert self.field.result_type is not None
        try:
            out = pc.cast(raw, self.field.result_type, safe=True)
            _check_no_overflow(raw, out)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ExpressionError(
                f"partition field {self.field.name!r}: a value of {self.field.expression!r} "
                f"does not fit {self.field.result_type}: {str(exc).splitlines()[0]}"
            ) from exc
        return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out

    def _failure(self, values: pa.Array | pa.ChunkedArray, exc: ExpressionError) -> Exception:
        """The error of an expression that failed on ``values``, naming a value it fails for."""
        try:
            distinct = pc.unique(values)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            distinct = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        failing = _first_failing(self.bound, distinct)
        if failing is None:  # fails on all of them only: the reason is all there is
            return ExpressionError(f"partition field {self.field.name!r}: {exc}")
        value, reason = failing
        source = f"of column {self.field.source!r} " if self.field.source else ""
        return ExpressionError(
            f"partition field {self.field.name!r}: {self.field.expression!r} fails for the value "
            f"{value!r} {source}({reason}); correct that value in the data, or change the "
            "partition spec (evolve_partition_spec) to an expression defined for every value"
        )


def _check_no_overflow(raw: Any, out: Any) -> None:
    """Raise if a finite number became infinite in the result type."""
    if not (pa.types.is_floating(out.type) and kind(raw.type) == "number"):
        return
    finite = pc.is_finite(raw) if pa.types.is_floating(raw.type) else pc.is_valid(raw)
    grown = pc.and_(pc.fill_null(finite, False), pc.is_inf(out))
    if pc.any(grown).as_py():
        first = pc.index(grown, True).as_py()
        raise pa.ArrowInvalid(f"{raw[first].as_py()!r} would be {out[first].as_py()!r}")


def _first_failing(bound: BoundExpression, values: pa.Array) -> tuple[Any, str] | None:
    """A value ``bound`` fails for, and DataFusion's reason; None if there is no one."""
    reason = _failure_of(bound, values)
    if reason is None or len(values) == 0:
        return None
    while len(values) > 1:
        half = values.slice(0, len(values) // 2)
        why = _failure_of(bound, half)
        if why is not None:
            values, reason = half, why
        else:
            values = values.slice(len(values) // 2)
            reason = _failure_of(bound, values) or reason
    return values[0].as_py(), reason


def _failure_of(bound: BoundExpression, values: pa.Array) -> str | None:
    try:
        bound.evaluate(pa.table({"col": values}))
    except ExpressionError as exc:
        return root_cause(exc.__cause__ or exc)
    return None


@lru_cache(maxsize=256)
def bound_expression(expression: str, source_type: pa.DataType) -> BoundExpression:
    """A partition expression bound to its source type (cached)."""
    return bind(expression, pa.schema([pa.field("col", source_type)]), "partition expression")


evaluator = FieldEvaluator


def resolve_spec(
    fields: Iterable[PartitionField],
    schema: NamespaceSchema,
    earlier: Mapping[int, Sequence[PartitionField]],
    reserved_names: Iterable[str],
) -> list[PartitionField]:
    """Validate ``fields`` for a new spec version and fill in ids and result types."""
    fields = list(fields)
    if not fields:
        raise PartitionSpecError("a partition spec needs at least one partition field")
    reserved = set(reserved_names)
    previous = [f for version in sorted(earlier) for f in earlier[version]]
    next_id = max([FIRST_PARTITION_FIELD_ID - 1, *(f.field_id or 0 for f in previous)]) + 1
    type_by_name = {f.name: f.result_type for f in previous}
    # the id of an identical earlier field (the first one: the dict keeps the last it sees)
    ids = {(p.source_id, p.name, p.expression): p.field_id for p in reversed(previous)}
    out: list[PartitionField] = []
    seen_names: set[str] = set()
    for f in fields:
        if not isinstance(f, PartitionField):
            raise PartitionSpecError(f"expected PartitionField objects, got {type(f).__name__}")
        if not isinstance(f.name, str) or not f.name:
            raise PartitionSpecError(f"partition field names must be non-empty, got {f.name!r}")
        if f.name in seen_names:
            raise PartitionSpecError(f"partition field name {f.name!r} is used twice")
        if f.name in reserved or f.name.startswith("__"):
            raise PartitionSpecError(
                f"partition field name {f.name!r} collides with a __manifest column; "
                "choose another name"
            )
        seen_names.add(f.name)
        source = _resolve_source(f, schema)
        sid = field_id(source)
        assert sid is not None
        bound = _bind_checked(f, source.type)
        result_type = normalize_type(f.result_type) if f.result_type is not None else None
        if result_type is None:
            earlier_type = type_by_name.get(f.name)
            inferred = normalize_type(bound.output_type)
            usable = earlier_type is not None and result_cast_allowed(inferred, earlier_type)
            result_type = earlier_type if usable else inferred
        if f.name in type_by_name and type_by_name[f.name] != result_type:
            raise PartitionSpecError(
                f"partition field {f.name!r} had result_type {type_by_name[f.name]} in an "
                f"earlier spec version; the same name must keep the same type (got {result_type})"
            )
        if not result_cast_allowed(bound.output_type, result_type):
            raise ExpressionError(
                f"partition field {f.name!r}: {f.expression!r} produces {bound.output_type}, "
                f"which cannot be stored as result_type {result_type}"
            )
        fid = ids.get((sid, f.name, f.expression))
        if fid is None:
            fid, next_id = next_id, next_id + 1
        out.append(
            replace(f, source=source.name, result_type=result_type, field_id=fid, source_id=sid)
        )
    return out


def _resolve_source(f: PartitionField, schema: NamespaceSchema) -> pa.Field:
    if f.source is None and f.source_id is None:
        raise PartitionSpecError(f"partition field {f.name!r} needs a source column")
    try:
        source = (
            schema.field(f.source) if f.source is not None else schema.field_by_id(f.source_id or 0)
        )
    except SchemaError as exc:
        raise PartitionSpecError(f"partition field {f.name!r}: {exc}") from exc
    if f.source_id is not None and field_id(source) != f.source_id:
        raise PartitionSpecError(
            f"partition field {f.name!r}: source {f.source!r} has field id "
            f"{field_id(source)}, not {f.source_id}"
        )
    if is_deprecated(source):
        raise PartitionSpecError(
            f"partition field {f.name!r}: source column {source.name!r} was dropped"
        )
    return source


def _bind_checked(f: PartitionField, source_type: pa.DataType) -> BoundExpression:
    what = f"partition field {f.name!r}"
    try:
        bound = bound_expression(f.expression, source_type)
    except ExpressionError as exc:
        raise ExpressionError(f"{what}: {exc}") from exc
    null_result = bound.evaluate(pa.table({"col": pa.nulls(1, source_type)}))
    if null_result.null_count != 1:
        raise ExpressionError(
            f"{what}: {f.expression!r} must return NULL for a NULL source value "
            f"(it returns {null_result[0].as_py()!r})"
        )
    _check_defined(f, bound, source_type)
    return bound


#: Values an expression is tried on, by the kind of its source type (see _check_defined).
_PROBES: dict[str, list[Any]] = {
    "number": [0, 1, -1],
    "truth value": [False, True],
    "text": ["", "0", "a", "2025-01-01"],
    "bytes": [b"", b"a"],
    "date": [dt.date(2025, 1, 1), dt.date(1970, 1, 1)],
    "timestamp": [dt.datetime(2025, 1, 1), dt.datetime(1970, 1, 1)],
    "zoned timestamp": [dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)],
}


def _check_defined(f: PartitionField, bound: BoundExpression, source_type: pa.DataType) -> None:
    """Refuse an expression that fails for every probe value of its source type
    (``col % 0``): every write would fail."""
    probes = []
    for value in _PROBES.get(kind(source_type), []):
        try:
            probes.append(pa.array([value], source_type))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            continue  # -1 is no unsigned integer, 2025 no date in a small type
    reasons = [_failure_of(bound, probe) for probe in probes]
    if probes and all(reasons):
        tried = ", ".join(repr(p[0].as_py()) for p in probes)
        raise ExpressionError(
            f"partition field {f.name!r}: {f.expression!r} fails for every {source_type} value "
            f"tried ({tried}): {reasons[0]}; every write would fail. Correct the expression"
        )
