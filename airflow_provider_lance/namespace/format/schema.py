"""The namespace schema: field ids, evolution, and the spec's read/write consistency rules.

The schema is the union of every column that ever existed: each field carries
``lance:field_id``, a dropped one stays, marked ``lance:deprecated``. Leaf tables carry the
id under :data:`LEAF_FIELD_ID_KEY`, so a rename never touches data and partitions map by id.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import (
    DataValidationError,
    InvalidArgumentError,
    MissingPartitionSourceError,
    SchemaError,
)

from .arrow_json import normalize_type, schema_from_json, schema_to_json
from .conversion import ConversionRefused, cast_losslessly, is_widening, values_text

FIELD_ID_KEY = "lance:field_id"
DEPRECATED_KEY = "lance:deprecated"
#: Field-id key on leaf-table columns (pylance fact: Lance strips ``lance:`` keys,
#: test_fact_lance_strips_lance_prefixed_field_metadata).
LEAF_FIELD_ID_KEY = "partitioned-namespace:field_id"


class SourcedField(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def source_id(self) -> int | None: ...


def field_id(field: pa.Field, key: str = FIELD_ID_KEY) -> int | None:
    raw = (field.metadata or {}).get(key.encode())
    return int(raw) if raw is not None else None


def is_deprecated(field: pa.Field) -> bool:
    return (field.metadata or {}).get(DEPRECATED_KEY.encode()) == b"true"


def _with_meta(field: pa.Field, **updates: str | None) -> pa.Field:
    meta = {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}
    for key, value in updates.items():
        key = {"field_id": FIELD_ID_KEY, "deprecated": DEPRECATED_KEY}[key]
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    return field.with_metadata(meta)


@dataclass(frozen=True, eq=False)
class NamespaceSchema:
    """An immutable namespace schema; evolution methods return a new one. Two are equal
    when their fields are, field metadata (ids, ``lance:deprecated``) included."""

    arrow: pa.Schema

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NamespaceSchema) and self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)

    @functools.cached_property
    def _identity(self) -> str:
        return self.to_json()

    @classmethod
    def from_user_schema(cls, schema: pa.Schema) -> NamespaceSchema:
        """Validate a user's schema and assign field ids 0..n-1 where none are given."""
        if not isinstance(schema, pa.Schema):
            raise SchemaError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
        if len(schema) == 0:
            raise SchemaError("a partitioned namespace schema needs at least one column")
        names = [f.name for f in schema]
        _check_names(names)
        given = [field_id(f) for f in schema]
        if any(i is not None for i in given) and not all(i is not None for i in given):
            raise SchemaError(f"either every field or no field may carry {FIELD_ID_KEY!r} metadata")
        fields = []
        for i, f in enumerate(schema):
            fid = given[i] if given[i] is not None else i
            fields.append(_with_meta(f.with_type(normalize_type(f.type)), field_id=str(fid)))
        ids = [field_id(f) for f in fields]
        if len(set(ids)) != len(ids) or any(i is None or i < 0 for i in ids):
            raise SchemaError(f"field ids must be unique non-negative integers, got {ids}")
        return cls(pa.schema(fields))

    @classmethod
    def from_json(cls, text: str) -> NamespaceSchema:
        schema = schema_from_json(text)
        for f in schema:
            if field_id(f) is None:
                raise SchemaError(f"schema field {f.name!r} has no {FIELD_ID_KEY!r} metadata")
        return cls(schema)

    def to_json(self) -> str:
        return schema_to_json(self.arrow)

    @functools.cached_property
    def active(self) -> pa.Schema:
        """The columns reads return and writes accept (deprecated columns left out)."""
        return pa.schema([f for f in self.arrow if not is_deprecated(f)])

    @functools.cached_property
    def _by_name(self) -> dict[str, pa.Field]:
        return {f.name: f for f in self.active}

    def _active(self, name: object) -> pa.Field | None:
        """The active field called ``name`` (None: none, or ``name`` is no string)."""
        return self._by_name.get(name) if isinstance(name, str) else None

    @functools.cached_property
    def _by_id(self) -> dict[int | None, pa.Field]:
        return {field_id(f): f for f in self.arrow}

    @property
    def max_field_id(self) -> int:
        return max((field_id(f) or 0) for f in self.arrow)

    def field(self, name: str) -> pa.Field:
        """The active field called ``name``."""
        found = self._active(name)
        if found is not None:
            return found
        dropped = any(f.name == name for f in self.arrow)
        hint = " (it was dropped; reads at a version before the drop, as_of, still have it)"
        raise SchemaError(
            f"unknown column {name!r}{hint if dropped else ''}; the namespace columns are "
            f"{', '.join(self.active.names)}"
        )

    def field_by_id(self, fid: int) -> pa.Field:
        for f in self.arrow:
            if field_id(f) == fid:
                return f
        raise SchemaError(f"no column has field id {fid}")

    def id_of(self, name: str) -> int:
        fid = field_id(self.field(name))
        assert fid is not None
        return fid

    def add_column(self, field: pa.Field) -> NamespaceSchema:
        if not isinstance(field, pa.Field):
            raise SchemaError(f"add_column needs a pyarrow.Field, got {type(field).__name__}")
        existing = self._active(field.name)
        if existing is not None:
            raise SchemaError(
                f"cannot add column {field.name!r}: a column of that name exists ({existing.type}, "
                f"field id {field_id(existing)}), a duplicate column name. Widen its type with "
                "promote_column, free the name with rename_column, or drop_column it first (a "
                "column added again is new and empty: the dropped column's values never come back)"
            )
        _check_names([*self.active.names, field.name])
        if not field.nullable:
            raise SchemaError(
                f"cannot add non-nullable column {field.name!r}: partitions written before it "
                "have no values for it, so it must be nullable"
            )
        fid = str(self.max_field_id + 1)
        new = _with_meta(field.with_type(normalize_type(field.type)), field_id=fid, deprecated=None)
        return NamespaceSchema(self.arrow.append(new))

    def drop_column(self, name: str) -> NamespaceSchema:
        f = self.field(name)
        if len(self.active) == 1:
            raise SchemaError(f"cannot drop {name!r}: it is the last column of the namespace")
        dropped = _with_meta(f, deprecated="true").with_nullable(True)
        return NamespaceSchema(self.arrow.set(self._active_index(name), dropped))

    def rename_column(self, old: str, new: str) -> NamespaceSchema:
        f = self.field(old)
        if old == new:
            return self
        if self._active(new) is not None:
            raise SchemaError(
                f"cannot rename {old!r} to {new!r}: a column {new!r} exists (a duplicate column "
                f"name); rename or drop_column {new!r} first"
            )
        _check_names([n for n in self.active.names if n != old] + [new])
        return NamespaceSchema(self.arrow.set(self._active_index(old), f.with_name(new)))

    def promote_column(self, name: str, dtype: pa.DataType) -> NamespaceSchema:
        f = self.field(name)
        dtype = normalize_type(dtype)
        if not is_widening(f.type, dtype):
            raise SchemaError(
                f"cannot change column {name!r} from {f.type} to {dtype}: only widening "
                "promotions are allowed (int8->int16->int32->int64, float32->float64, "
                "utf8->large_utf8, binary->large_binary, decimal precision)"
            )
        return NamespaceSchema(self.arrow.set(self._active_index(name), f.with_type(dtype)))

    def _active_index(self, name: str) -> int:
        for i, f in enumerate(self.arrow):
            if f.name == name and not is_deprecated(f):
                return i
        raise SchemaError(f"unknown column {name!r}")

    def conform_input(self, table: pa.Table, *, spec: Sequence[SourcedField]) -> pa.Table:
        """User data shaped into the active schema, before it is routed by ``spec``. Errors: unknown
        or dropped columns, a missing source column of a ``spec`` field, NULLs in a non-nullable
        column, a value :func:`cast_losslessly` refuses; missing nullable columns become NULL."""
        active = self.active
        known = set(active.names)
        dropped = {f.name for f in self.arrow if is_deprecated(f)} - known
        for name in table.column_names:
            if name in dropped:
                raise DataValidationError(
                    f"column {name!r} was dropped from the namespace: leave it out of the data "
                    f"(the columns are {', '.join(active.names)}), or add_column it again, as "
                    "a new column (the dropped column's values do not come back)"
                )
            if name not in known and name in pandas_index_columns(table.schema):
                raise DataValidationError(
                    f"the pandas DataFrame's index {name!r} is not a namespace column (columns: "
                    f"{', '.join(active.names)}): a named index is written as a column. Leave it "
                    "out with df.reset_index(drop=True), or rename it to a namespace column"
                )
            if name not in known:
                raise DataValidationError(
                    f"column {name!r} is not in the namespace schema "
                    f"(columns: {', '.join(active.names)}){_unknown_column_advice(name, active)}"
                )
        if len(set(table.column_names)) != table.num_columns:
            raise DataValidationError(f"duplicate column names in data: {table.column_names}")
        self._check_partition_sources(table.column_names, spec)
        arrays = []
        for f in active:
            if f.name in table.column_names:
                arrays.append(_cast_column(table.column(f.name), f.type, f.name))
            elif f.nullable:
                arrays.append(pa.nulls(table.num_rows, f.type))
            else:
                raise DataValidationError(
                    f"column {f.name!r} is not nullable and is missing from the data"
                )
            if not f.nullable and arrays[-1].null_count:
                first = pc.index(pc.is_null(arrays[-1]), True).as_py()
                raise DataValidationError(
                    f"column {f.name!r} is not nullable but the data has "
                    f"{arrays[-1].null_count} NULL value(s), the first at row {first}"
                )
        return pa.Table.from_arrays(arrays, schema=active)

    def _check_partition_sources(self, names: Sequence[str], spec: Sequence[SourcedField]) -> None:
        """Refuse data lacking a column the partition fields of ``spec`` are computed from."""
        present = set(names)
        missing: dict[str, list[str]] = {}
        for f in spec:
            try:
                source = self.field_by_id(f.source_id)  # type: ignore[arg-type]
            except SchemaError:  # a source dropped since: nothing to route by
                continue
            if source.name not in present:
                missing.setdefault(source.name, []).append(f.name)
        if missing:
            needs = "; ".join(
                f"{column!r} (for partition field{'s' if len(fs) > 1 else ''} "
                f"{', '.join(map(repr, fs))})"
                for column, fs in missing.items()
            )
            raise MissingPartitionSourceError(
                f"the data has no column {needs}: rows are routed to partitions by it, and "
                "without it every row would land in the NULL partition. Add the column to the "
                "data (with explicit NULLs if that is what you mean)",
                columns=list(missing),
                fields=[name for fs in missing.values() for name in fs],
            )

    def leaf_schema(self) -> pa.Schema:
        """The schema a new leaf table is written with: active columns, ids as leaf metadata."""
        return pa.schema([_leaf_field(f) for f in self.active])

    def to_leaf(self, table: pa.Table, leaf: pa.Schema) -> pa.Table:
        """Conformed data in an existing leaf's schema, by the spec's write rules: a column
        the leaf lacks is an error (evolve it first), a leaf column the namespace does not
        know gets NULL (an error if not nullable), other types are cast losslessly."""
        return self.leaf_shaper(leaf)(table)

    def leaf_shaper(self, leaf: pa.Schema) -> Callable[[pa.Table], pa.Table]:
        """:meth:`to_leaf` into ``leaf``, the column mapping worked out once."""
        by_id = self._leaf_mapping(leaf)
        sources: list[tuple[pa.Field, str | None]] = []
        for lf in leaf:
            ns_field = by_id.get(lf.name)
            if ns_field is None and not lf.nullable:
                raise DataValidationError(
                    f"leaf column {lf.name!r} is not in the namespace schema and is not "
                    "nullable, so NULL cannot be written to it"
                )
            sources.append((lf, None if ns_field is None else ns_field.name))
        covered = {name for _, name in sources if name is not None}
        names = [lf.name for lf in leaf]
        types = [lf.type for lf in leaf]
        plain = all(name == lf.name for lf, name in sources)

        def shape(table: pa.Table) -> pa.Table:
            if plain and table.schema.equals(leaf, check_metadata=True):
                return table
            if plain and table.column_names == names and table.schema.types == types:
                return pa.Table.from_arrays(table.columns, schema=leaf)
            missing = [n for n in table.column_names if n not in covered]
            if missing:
                raise DataValidationError(
                    f"the partition table has no column for {missing}; it must be evolved first"
                )
            arrays = [
                pa.nulls(table.num_rows, lf.type)
                if name is None
                else _cast_column(table.column(name), lf.type, name)
                for lf, name in sources
            ]
            return pa.Table.from_arrays(arrays, schema=leaf)

        return shape

    def missing_in_leaf(self, leaf: pa.Schema) -> list[pa.Field]:
        """Active columns (as leaf fields) a leaf lacks (added since) or holds in a narrower
        type (promoted since): a write rewrites such a leaf in the leaf schema."""
        stored = {f.name: leaf.field(name).type for name, f in self._leaf_mapping(leaf).items()}
        return [
            _leaf_field(f)
            for f in self.active
            if f.name not in stored or _narrower(stored[f.name], f.type)
        ]

    def read_plan(self, leaf: pa.Schema, columns: Iterable[str] | None = None) -> ReadPlan:
        """How to read a leaf into the namespace schema: which leaf columns, renamed how."""
        wanted = self.project(columns)
        by_leaf = self._leaf_mapping(leaf)
        ns_to_leaf = {f.name: leaf_name for leaf_name, f in by_leaf.items()}
        return ReadPlan(wanted, {f.name: ns_to_leaf.get(f.name) for f in wanted})

    def project(self, columns: Iterable[str] | None) -> pa.Schema:
        """The active columns named in ``columns`` (all of them for None), in that order."""
        names = column_names(columns)
        if names is None:
            return self.active
        repeated = [name for name, count in Counter(names).items() if count > 1]
        if repeated:
            raise InvalidArgumentError(
                f"columns names {', '.join(map(repr, repeated))} more than once; name each "
                "column once (a Lance read refuses a repeated column too)"
            )
        return pa.schema([self.field(c) for c in names])

    def _leaf_mapping(self, leaf: pa.Schema) -> dict[str, pa.Field]:
        """Leaf column name -> active namespace field (by field id, else by name)."""
        ids = self._by_id
        out: dict[str, pa.Field] = {}
        for lf in leaf:
            lid = field_id(lf, LEAF_FIELD_ID_KEY)
            ns = ids.get(lid) if lid is not None else self._active(lf.name)
            if ns is not None and not is_deprecated(ns):
                out[lf.name] = ns
        return out


def column_names(columns: Iterable[str] | None) -> list[str] | None:
    """``columns`` (a list, a tuple, any iterable of names; None: all) as a list, read once;
    :class:`InvalidArgumentError` for a string, or for an item that is not a name."""
    if columns is None:
        return None
    if isinstance(columns, str):
        raise InvalidArgumentError("columns must be a list of column names, not a string")
    if isinstance(columns, Mapping):
        raise InvalidArgumentError(
            "columns must be a list of column names; a dict of SQL expressions (pylance's "
            "computed columns) is not supported: read the columns, then compute"
        )
    try:
        names = list(columns)
    except TypeError:
        raise InvalidArgumentError(
            f"columns must be a list of column names, got {type(columns).__name__}"
        ) from None
    odd = [name for name in names if not isinstance(name, str)]
    if odd:
        raise InvalidArgumentError(
            f"columns must be column names (strings), got {odd[0]!r} among them"
        )
    return names


@dataclass(frozen=True)
class ReadPlan:
    """Namespace columns to produce and, for each, the leaf column it comes from (or None)."""

    target: pa.Schema
    sources: Mapping[str, str | None]

    @property
    def leaf_columns(self) -> list[str]:
        return [s for s in self.sources.values() if s is not None]

    def apply(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """Spec read rules: missing -> NULL, extra -> ignored, other type -> cast or error."""
        arrays = [
            pa.nulls(batch.num_rows, f.type)
            if (src := self.sources[f.name]) is None
            else _cast_column(batch.column(src), f.type, f.name, reading=True)
            for f in self.target
        ]
        if not arrays:  # no column read: the rows are still counted
            return pa.Table.from_arrays([pa.nulls(batch.num_rows)], names=["_"]).select([])
        return pa.Table.from_arrays(arrays, schema=self.target)


def _unknown_column_advice(name: str, active: pa.Schema) -> str:
    """What to do about data naming no namespace column."""
    same_case = [c for c in active.names if c.lower() == name.lower()]
    close = same_case or difflib.get_close_matches(name, active.names, n=1)
    if close:
        return f": did you mean {close[0]!r}? (a new column needs add_column first)"
    return (
        "; add it with add_column first, or rename it in the data if the namespace column "
        "was renamed"
    )


def pandas_index_columns(schema: pa.Schema) -> list[str]:
    """The columns of ``schema`` that were a pandas DataFrame's index (pyarrow's metadata)."""
    meta = (schema.metadata or {}).get(b"pandas")
    if meta is None:
        return []
    try:
        index = json.loads(meta).get("index_columns", [])
    except (ValueError, AttributeError):
        return []
    return [c for c in index if isinstance(c, str) and c in schema.names]


def _narrower(stored: pa.DataType, wanted: pa.DataType) -> bool:
    """A leaf column of type ``stored`` is narrower than the namespace's ``wanted``."""
    stored, wanted = normalize_type(stored), normalize_type(wanted)
    return stored != wanted and is_widening(stored, wanted)


def _leaf_field(f: pa.Field) -> pa.Field:
    fid = field_id(f)
    return pa.field(f.name, f.type, f.nullable, metadata={LEAF_FIELD_ID_KEY: str(fid)})


def _cast_column(column: Any, dtype: pa.DataType, name: str, *, reading: bool = False) -> Any:
    if column.type == dtype:
        return column
    try:
        return cast_losslessly(column, dtype) if not reading else _read_cast(column, dtype)
    except ConversionRefused as exc:
        raise DataValidationError(
            f"column {name!r}: {values_text(exc.source, exc.example)} cannot be written as "
            f"{dtype}: {exc.reason}"
        ) from exc
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        action = "read" if reading else "written"
        raise DataValidationError(
            f"column {name!r}: values of type {column.type} cannot be {action} as {dtype}: "
            f"{str(exc).splitlines()[0]}"
        ) from exc


def _read_cast(column: Any, dtype: pa.DataType) -> Any:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    return pc.cast(column, dtype, safe=True)


def _check_names(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise SchemaError(f"column names must be non-empty strings, got {name!r}")
        if name in seen:
            raise SchemaError(f"duplicate column name {name!r}")
        seen.add(name)
