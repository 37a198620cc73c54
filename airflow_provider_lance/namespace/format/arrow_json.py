"""Arrow types and schemas <-> the lance-namespace ``JsonArrowDataType`` / ``JsonArrowSchema``.

Type names follow the lance-namespace reference converter (decimals as ``length = precision
* 1000 + scale``). The unit and time zone of ``timestamp``/``time``/``duration``, which it
drops, are kept in extra keys ``unit`` and ``timezone`` (others read microseconds, no zone).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import SchemaError

_PLAIN = ("null", "float16", "float32", "float64", "date32", "date64", "utf8", "large_utf8")
_SIMPLE: dict[str, pa.DataType] = {
    "bool": pa.bool_(),
    **{name: getattr(pa, name)() for name in (*_PLAIN, "binary", "large_binary")},
    **{f"{u}int{n}": getattr(pa, f"{u}int{n}")() for u in ("", "u") for n in (8, 16, 32, 64)},
}
_SIMPLE_NAMES = {v: k for k, v in _SIMPLE.items()}
_ALIASES = {"boolean": "bool", "string": "utf8", "large_string": "large_utf8"}
_DEFAULT_UNIT = {"timestamp": "us", "duration": "us", "time32": "ms", "time64": "us"}


def normalize_type(dtype: pa.DataType) -> pa.DataType:
    """The storable form of a type: view and dictionary types become their plain type."""
    if pa.types.is_dictionary(dtype):
        return normalize_type(dtype.value_type)
    if dtype == pa.string_view():
        return pa.utf8()
    if dtype == pa.binary_view():
        return pa.binary()
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        inner = dtype.value_field
        field = inner.with_type(normalize_type(inner.type))
        return pa.list_(field) if pa.types.is_list(dtype) else pa.large_list(field)
    if pa.types.is_fixed_size_list(dtype):
        inner = dtype.value_field
        return pa.list_(inner.with_type(normalize_type(inner.type)), dtype.list_size)
    if pa.types.is_struct(dtype):
        return pa.struct([f.with_type(normalize_type(f.type)) for f in dtype])
    return dtype


def type_to_json(dtype: pa.DataType) -> dict[str, Any]:
    """Encode one Arrow type as a JsonArrowDataType object."""
    dtype = normalize_type(dtype)
    name = _SIMPLE_NAMES.get(dtype)
    if name is not None:
        return {"type": name}
    if pa.types.is_timestamp(dtype):
        zone = {} if dtype.tz is None else {"timezone": dtype.tz}
        return {"type": "timestamp", "unit": dtype.unit, **zone}
    if pa.types.is_time(dtype) or pa.types.is_duration(dtype):
        return {"type": str(dtype).split("[")[0], "unit": dtype.unit}  # time32, time64, duration
    if pa.types.is_decimal(dtype):
        return {"type": f"decimal{dtype.bit_width}", "length": dtype.precision * 1000 + dtype.scale}
    if pa.types.is_fixed_size_binary(dtype):
        return {"type": "fixed_size_binary", "length": dtype.byte_width}
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        kind = "list" if pa.types.is_list(dtype) else "large_list"
        return {"type": kind, "fields": [field_to_json(dtype.value_field)]}
    if pa.types.is_fixed_size_list(dtype):
        fields = [field_to_json(dtype.value_field)]
        return {"type": "fixed_size_list", "fields": fields, "length": dtype.list_size}
    if pa.types.is_struct(dtype):
        return {"type": "struct", "fields": [field_to_json(f) for f in dtype]}
    if pa.types.is_map(dtype):
        entries = pa.field("entries", pa.struct([dtype.key_field, dtype.item_field]), False)
        return {"type": "map", "fields": [field_to_json(entries)]}
    raise SchemaError(f"the Arrow type {dtype} cannot be stored in a partitioned namespace schema")


def type_from_json(obj: Any) -> pa.DataType:
    """Decode a JsonArrowDataType object (as parsed JSON) into an Arrow type."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("type"), str):
        raise SchemaError(
            f"a JsonArrowDataType must be an object with a 'type' string, got {obj!r}"
        )
    name = obj["type"].lower()
    name = _ALIASES.get(name, name)
    if name in _SIMPLE:
        return _SIMPLE[name]
    unit = obj.get("unit", _DEFAULT_UNIT.get(name))
    try:
        if name == "timestamp":
            return pa.timestamp(unit, tz=obj.get("timezone"))
        if name in ("time32", "time64", "duration"):
            return getattr(pa, name)(unit)
        if name.startswith("decimal") and name[7:] in ("32", "64", "128", "256"):
            encoded = int(obj.get("length", 0))
            precision = (encoded + 128) // 1000
            scale = encoded - precision * 1000
            return getattr(pa, name)(precision, scale)  # decimal32 ... decimal256
        if name == "fixed_size_binary":
            return pa.binary(int(obj["length"]))
        if name in ("list", "large_list", "fixed_size_list", "map"):
            fields = obj.get("fields") or []
            if len(fields) != 1:
                raise SchemaError(f"a JsonArrowDataType {name!r} needs exactly one child field")
            inner = field_from_json(fields[0])
            if name == "fixed_size_list":
                return pa.list_(inner, int(obj["length"]))
            if name == "map":
                return pa.map_(inner.type[0], inner.type[1])
            return pa.list_(inner) if name == "list" else pa.large_list(inner)
        if name == "struct":
            return pa.struct([field_from_json(f) for f in obj.get("fields") or []])
    except (ValueError, TypeError, KeyError, pa.ArrowException) as exc:
        raise SchemaError(f"invalid JsonArrowDataType {obj!r}: {exc}") from exc
    raise SchemaError(f"unsupported JsonArrowDataType {obj['type']!r}")


def field_to_json(field: pa.Field) -> dict[str, Any]:
    out = {"name": field.name, "nullable": field.nullable, "type": type_to_json(field.type)}
    if field.metadata:
        out["metadata"] = {k.decode(): v.decode() for k, v in field.metadata.items()}
    return out


def field_from_json(obj: Any) -> pa.Field:
    if not isinstance(obj, Mapping) or not isinstance(obj.get("name"), str):
        raise SchemaError(f"a JsonArrowField must be an object with a 'name', got {obj!r}")
    metadata = obj.get("metadata") or None
    if metadata is not None and not isinstance(metadata, Mapping):
        raise SchemaError(f"field {obj['name']!r}: 'metadata' must be an object")
    dtype, nullable = type_from_json(obj.get("type")), bool(obj.get("nullable", True))
    return pa.field(obj["name"], dtype, nullable, dict(metadata) if metadata else None)


def schema_to_json(schema: pa.Schema) -> str:
    return json.dumps({"fields": [field_to_json(f) for f in schema]}, separators=(",", ":"))


def schema_from_json(text: str) -> pa.Schema:
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"the namespace 'schema' property is not valid JSON: {exc}") from exc
    if not isinstance(obj, Mapping) or not isinstance(obj.get("fields"), list):
        raise SchemaError("the namespace 'schema' property must be a JSON object with 'fields'")
    return pa.schema([field_from_json(f) for f in obj["fields"]])
