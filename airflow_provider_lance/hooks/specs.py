"""Schemas and partition fields as JSON-able specs, so DAG authors can template them.

A schema spec is a list of ``{"name", "type", "nullable"}`` (``nullable`` defaults to true);
a partition field spec is ``{"name", "source", "expression", "result_type"}`` (``source``
defaults to ``name``, ``expression`` to ``col``, ``result_type`` is inferred when omitted).
Types are JsonArrowDataType objects (``{"type": "timestamp", "unit": "us", "timezone": "UTC"}``)
or short strings: ``int64``, ``utf8``/``string``, ``date32``/``date``, ``bool``, ``float64``/
``double``, ``timestamp[us]``, ``timestamp[us, tz=UTC]``, ``decimal128(12, 2)``. Parsed
:class:`pyarrow.Schema` / :class:`PartitionField` objects pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import pyarrow as pa

from airflow_provider_lance.namespace import (
    PartitionField,
    SchemaError,
    type_from_json,
    type_to_json,
)

SchemaSpec: TypeAlias = "pa.Schema | Sequence[Mapping[str, Any]] | Mapping[str, Any]"
FieldsSpec: TypeAlias = Sequence[PartitionField | Mapping[str, Any]]

_SHORT = {
    "date": "date32",
    "int": "int32",
    "integer": "int32",
    "long": "int64",
    "bigint": "int64",
    "smallint": "int16",
    "tinyint": "int8",
    "float": "float32",
    "double": "float64",
    "str": "utf8",
}
_TIMESTAMP = re.compile(r"^timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]]+?))?\s*\]$", re.I)
_DECIMAL = re.compile(r"^decimal(32|64|128|256)?\(\s*(\d+)\s*,\s*(\d+)\s*\)$", re.I)


def parse_type(spec: Any) -> pa.DataType:
    """An Arrow type from a short string or a JsonArrowDataType object."""
    if isinstance(spec, pa.DataType):
        return spec
    if isinstance(spec, Mapping):
        return type_from_json(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise SchemaError(f"a type must be a string or a JsonArrowDataType object, got {spec!r}")
    text = spec.strip()
    if match := _TIMESTAMP.match(text):
        return pa.timestamp(match.group(1).lower(), tz=match.group(2))
    if match := _DECIMAL.match(text):
        width, precision, scale = match.group(1) or "128", int(match.group(2)), int(match.group(3))
        ctor = {"32": pa.decimal32, "64": pa.decimal64, "128": pa.decimal128}.get(
            width, pa.decimal256
        )
        try:
            return ctor(precision, scale)
        except (ValueError, pa.ArrowException) as exc:
            raise SchemaError(f"invalid decimal type {text!r}: {exc}") from exc
    name = _SHORT.get(text.lower(), text.lower())
    return type_from_json({"type": name})


def parse_schema(spec: SchemaSpec) -> pa.Schema:
    """A :class:`pyarrow.Schema` from a schema spec (see the module docstring)."""
    if isinstance(spec, pa.Schema):
        return spec
    if isinstance(spec, Mapping):
        if not isinstance(spec.get("fields"), list):
            raise SchemaError("a schema object must have a 'fields' list")
        spec = spec["fields"]
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence) or not spec:
        raise SchemaError("a schema must be a non-empty list of {name, type, nullable} objects")
    fields = []
    for item in spec:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SchemaError(f"schema entry {item!r} needs a 'name' string")
        unknown = set(item) - {"name", "type", "nullable", "metadata"}
        if unknown:
            raise SchemaError(f"schema entry {item['name']!r} has unknown keys {sorted(unknown)}")
        if "type" not in item:
            raise SchemaError(f"schema entry {item['name']!r} needs a 'type'")
        try:
            dtype = parse_type(item["type"])
        except SchemaError as exc:
            raise SchemaError(f"column {item['name']!r}: {exc}") from exc
        fields.append(
            pa.field(
                item["name"],
                dtype,
                nullable=bool(item.get("nullable", True)),
                metadata=item.get("metadata"),
            )
        )
    return pa.schema(fields)


def parse_partition_fields(spec: FieldsSpec) -> list[PartitionField]:
    """:class:`PartitionField` objects from partition field specs."""
    if isinstance(spec, (str, bytes, Mapping)) or not isinstance(spec, Sequence) or not spec:
        raise SchemaError(
            "partition fields must be a non-empty list of {name, source, expression, "
            "result_type} objects"
        )
    out = []
    for item in spec:
        if isinstance(item, PartitionField):
            out.append(item)
            continue
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise SchemaError(f"partition field {item!r} needs a 'name' string")
        unknown = set(item) - {"name", "source", "expression", "result_type"}
        if unknown:
            raise SchemaError(
                f"partition field {item['name']!r} has unknown keys {sorted(unknown)}"
            )
        result_type = item.get("result_type")
        out.append(
            PartitionField(
                item["name"],
                item.get("source") or item["name"],
                item.get("expression") or "col",
                parse_type(result_type) if result_type is not None else None,
            )
        )
    return out


def schema_to_spec(schema: pa.Schema) -> list[dict[str, Any]]:
    """The JSON-able form of a schema (for ``describe`` and lineage), without field metadata."""
    return [{"name": f.name, "type": type_to_json(f.type), "nullable": f.nullable} for f in schema]


def field_to_spec(field: PartitionField) -> dict[str, Any]:
    return {
        "name": field.name,
        "source": field.source,
        "expression": field.expression,
        "result_type": type_to_json(field.result_type) if field.result_type else None,
    }
