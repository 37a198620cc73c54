"""Partition values <-> Airflow asset partition keys (no Airflow imported here).

Airflow 3.2+ partitions assets and DAG runs by a *partition key*, one string of at most 250
characters. A partition of a namespace is a tuple of typed values, one per field of its
spec version. This module is the one mapping between the two, stable and documented:

* one value per partition field, **in spec order**, joined by ``|`` (:data:`SEPARATOR`,
  the default delimiter of Airflow's ``ProductMapper``, so a multi-field key splits into
  one key per field there too);
* each value is spelled by its field's ``result_type``:

  =====================  ==========================================================
  date32, date64         ISO date: ``2025-12-10``
  timestamp (any unit)   UTC wall time, ISO: ``2025-12-10T13:00:00``, with the
                         fraction only when it is not zero (``...T13:00:00.25``);
                         the time zone of the column is not written (the value is
                         an instant, written in UTC). This is the spelling of
                         ``CronPartitionTimetable``'s default ``key_format`` with
                         ``timezone="UTC"``; decoding also takes ``Z``/``+hh:mm``
  integers (hash bucket) decimal: ``-42``
  bool                   ``true`` / ``false``
  floats, decimals       ``repr``-exact: ``1.5``, ``nan``, ``-0.0``
  binary                 lowercase hex
  strings                the text itself, escaped (below)
  =====================  ==========================================================

* escaping: ``%`` and ``|``, whitespace and unprintable characters are percent-encoded
  (UTF-8 bytes, ``%7C`` for ``|``), so a key never holds a raw separator and never
  begins or ends with whitespace (Airflow refuses blank keys);
* NULL is spelled :data:`NULL` (``%null``) and an empty value :data:`EMPTY`
  (``%empty``): neither can come out of the escaping (``%`` is always followed by two
  hex digits there), so they never collide with a value.

Examples: ``{"event_date": 2025-12-10}`` -> ``2025-12-10``; ``(2025-12-10, "DE")`` ->
``2025-12-10|DE``; ``(2025-12-10, None)`` -> ``2025-12-10|%null``; ``"a|b c"`` ->
``a%7Cb%20c``.

Decoding needs the spec (the key does not carry types): :func:`partition_values` takes the
partition fields of the spec version the key was made for (by default a namespace's current
spec, as ``values=`` arguments do).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace import NamespaceState, PartitionField, spec_version_of
from airflow_provider_lance.namespace.errors import InvalidArgumentError, PartitionSpecError

#: Between the values of a multi-field key (Airflow's ``ProductMapper`` default delimiter).
SEPARATOR = "|"
#: The spelling of a NULL partition value.
NULL = "%null"
#: The spelling of an empty string (or empty binary) value.
EMPTY = "%empty"
#: Airflow stores partition keys in ``StringID`` columns (``ID_LEN``).
MAX_KEY_LENGTH = 250

_EPOCH = dt.datetime(1970, 1, 1)
_TICKS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_TIMESTAMP = re.compile(
    r"^(?P<date>-?\d{4,}-\d{2}-\d{2})"
    r"(?:[T ](?P<time>\d{2}:\d{2}(?::\d{2})?)(?:\.(?P<frac>\d{1,9}))?)?"
    r"(?P<zone>Z|(?P<sign>[+-])(?P<hh>\d{2}):?(?P<mm>\d{2})(?::?(?P<ss>\d{2})(?:\.(?P<us>\d{1,6}))?)?)?$"
)


# -- one value ------------------------------------------------------------------------------
def _needs_escape(ch: str) -> bool:
    return ch in "%" + SEPARATOR or ch.isspace() or not ch.isprintable()


def escape(text: str) -> str:
    """Percent-encode ``%``, the separator, whitespace and unprintable characters."""
    if not any(_needs_escape(ch) for ch in text):
        return text
    return "".join(
        "".join(f"%{b:02X}" for b in ch.encode("utf-8")) if _needs_escape(ch) else ch for ch in text
    )


def unescape(text: str) -> str:
    """The inverse of :func:`escape`; a ``%`` not followed by two hex digits is an error."""
    if "%" not in text:
        return text
    out = bytearray()
    pos = 0
    for match in _ESCAPE.finditer(text):
        out += text[pos : match.start()].encode("utf-8")
        out.append(int(match.group(1), 16))
        pos = match.end()
    out += text[pos:].encode("utf-8")
    rest = _ESCAPE.sub("", text)
    if "%" in rest:
        raise InvalidArgumentError(f"partition key value {text!r} has a malformed % escape")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidArgumentError(
            f"partition key value {text!r} escapes bytes that are not UTF-8"
        ) from exc


def _ticks_to_text(ticks: int, unit: str) -> str:
    per_second = _TICKS_PER_SECOND[unit]
    seconds, fraction = divmod(ticks, per_second)
    try:
        wall = _EPOCH + dt.timedelta(seconds=seconds)
    except OverflowError as exc:
        raise InvalidArgumentError(f"timestamp {ticks} {unit} has no ISO spelling") from exc
    text = wall.isoformat(timespec="seconds")
    if fraction:
        text += "." + f"{fraction:0{_DIGITS[unit]}d}".rstrip("0")
    return text


def _text_to_ticks(text: str, unit: str) -> int:
    match = _TIMESTAMP.match(text)
    if match is None:
        raise InvalidArgumentError(f"{text!r} is not an ISO timestamp (2025-12-10T13:00:00)")
    try:
        day = dt.date.fromisoformat(match["date"])
        clock = dt.time.fromisoformat(match["time"]) if match["time"] else dt.time()
    except ValueError as exc:
        raise InvalidArgumentError(f"{text!r} is not a valid timestamp: {exc}") from exc
    wall = dt.datetime.combine(day, clock)
    if match["sign"]:  # an offset (Python writes seconds, even microseconds, for old zones)
        offset = dt.timedelta(
            hours=int(match["hh"]),
            minutes=int(match["mm"]),
            seconds=int(match["ss"] or 0),
            microseconds=int((match["us"] or "").ljust(6, "0")),
        )
        wall = wall - offset if match["sign"] == "+" else wall + offset
    per_second = _TICKS_PER_SECOND[unit]
    frac = match["frac"] or ""
    delta = wall - _EPOCH
    micros, finer = divmod(delta.microseconds * per_second, 1_000_000)
    if len(frac.rstrip("0")) > _DIGITS[unit] or finer:
        raise InvalidArgumentError(f"{text!r} is finer than the column's unit ({unit})")
    fraction = int((frac + "0" * 9)[: _DIGITS[unit]] or "0")
    return (delta.days * 86_400 + delta.seconds) * per_second + micros + fraction


def _typed(value: Any, dtype: pa.DataType) -> Any:
    """``value`` (a Python value, or its text as a key or ``Partition.to_dict`` spells it)
    as the canonical Python value of ``dtype`` (timestamps: integer ticks)."""
    if value is None:
        return None
    try:
        if isinstance(value, str) and not (
            pa.types.is_string(dtype) or pa.types.is_large_string(dtype)
        ):
            return _parse(value, dtype)
        scalar = pa.scalar(value, dtype)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
        raise InvalidArgumentError(
            f"partition value {value!r} is not a {dtype}: {str(exc).splitlines()[0]}"
        ) from exc
    if pa.types.is_timestamp(dtype):
        return scalar.cast(pa.int64()).as_py()
    return scalar.as_py()


def _parse(text: str, dtype: pa.DataType) -> Any:
    """A value's text (as this module or ``value_text`` writes it) as a typed Python value."""
    bad = InvalidArgumentError(f"{text!r} is not a {dtype} partition value")
    if pa.types.is_timestamp(dtype):
        return _text_to_ticks(text, dtype.unit)
    if pa.types.is_date(dtype):
        try:
            return dt.date.fromisoformat(text)
        except ValueError:
            raise bad from None
    if pa.types.is_boolean(dtype):
        if text not in ("true", "false"):
            raise bad
        return text == "true"
    if pa.types.is_integer(dtype):
        if not re.fullmatch(r"[+-]?\d+", text):
            raise bad
        return pa.scalar(int(text), dtype).as_py()
    if pa.types.is_floating(dtype):
        try:
            return pa.scalar(float(text), dtype).as_py()
        except ValueError:
            raise bad from None
    if pa.types.is_decimal(dtype):
        try:
            return pa.scalar(Decimal(text), dtype).as_py()
        except InvalidOperation:
            raise bad from None
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise bad from None
    raise InvalidArgumentError(f"partition values of type {dtype} have no partition key spelling")


def value_key(value: Any, dtype: pa.DataType) -> str:
    """One partition value (Python value or its text) as it appears in a partition key."""
    typed = _typed(value, dtype)
    if typed is None:
        return NULL
    if pa.types.is_timestamp(dtype):
        text = _ticks_to_text(typed, dtype.unit)
    elif pa.types.is_date(dtype):
        text = typed.isoformat()
    elif pa.types.is_boolean(dtype):
        text = "true" if typed else "false"
    elif pa.types.is_floating(dtype):
        text = repr(float(typed))
    elif pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        text = bytes(typed).hex()
    elif pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        text = escape(typed)
    elif pa.types.is_integer(dtype) or pa.types.is_decimal(dtype):
        text = str(typed)
    else:
        raise InvalidArgumentError(
            f"partition values of type {dtype} have no partition key spelling"
        )
    return text or EMPTY


def key_value(text: str, dtype: pa.DataType) -> Any:
    """One value of a partition key, typed by ``dtype`` (the inverse of :func:`value_key`)."""
    if text == NULL:
        return None
    if text == EMPTY:
        if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
            return b""
        if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
            return ""
        raise InvalidArgumentError(f"{EMPTY!r} is not a {dtype} partition value")
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return unescape(text)
    if "%" in text:
        raise InvalidArgumentError(f"{text!r} is not a {dtype} partition value")
    value = _parse(text, dtype)
    if pa.types.is_timestamp(dtype):
        try:
            return pa.scalar(value, pa.int64()).cast(dtype).as_py()
        except (pa.ArrowInvalid, OverflowError) as exc:
            raise InvalidArgumentError(f"{text!r} is out of the range of {dtype}") from exc
    return value


# -- whole keys -----------------------------------------------------------------------------
def partition_key(
    values: Mapping[str, Any],
    fields: Sequence[PartitionField],
    *,
    max_length: int | None = MAX_KEY_LENGTH,
) -> str:
    """The partition key of ``values`` (field name -> value or its text) under ``fields``.

    ``values`` must name exactly the fields; the key lists them in the fields' order.
    """
    names = [f.name for f in fields]
    if set(values) != set(names):
        raise PartitionSpecError(
            f"partition values {sorted(values)} do not name exactly the fields {names}"
        )
    parts = []
    for f in fields:
        assert f.result_type is not None
        parts.append(value_key(values[f.name], f.result_type))
    key = SEPARATOR.join(parts)
    if max_length is not None and len(key) > max_length:
        raise InvalidArgumentError(
            f"the partition key of {dict(values)} is {len(key)} characters long; Airflow "
            f"keeps at most {max_length}"
        )
    return key


def partition_values(key: str, fields: Sequence[PartitionField]) -> dict[str, Any]:
    """The typed values (field name -> value) a partition key names under ``fields``."""
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError(f"a partition key must be a non-empty string, got {key!r}")
    parts = key.split(SEPARATOR)
    if len(parts) != len(fields):
        raise InvalidArgumentError(
            f"partition key {key!r} has {len(parts)} value(s); the partition spec has "
            f"{len(fields)} field(s): {[f.name for f in fields]}"
        )
    out = {}
    for f, part in zip(fields, parts, strict=True):
        assert f.result_type is not None
        try:
            out[f.name] = key_value(part, f.result_type)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"partition key {key!r}, field {f.name!r}: {exc}") from exc
    return out


# -- keys of a namespace's partitions --------------------------------------------------------
def fields_of(state: NamespaceState, spec_version: int | None = None) -> list[PartitionField]:
    """The partition fields of ``spec_version`` (default: the current spec) of a namespace."""
    version = state.spec_version if spec_version is None else spec_version
    if version not in state.specs:
        raise PartitionSpecError(
            f"no partition spec version {version}; versions: {sorted(state.specs)}"
        )
    return list(state.specs[version])


def summary_key(state: NamespaceState, partition: Mapping[str, Any]) -> str:
    """The key of a partition summary (``{"object_id", "values", ...}`` as XCom and commit
    results carry it), under the spec version its ``object_id`` names."""
    fields = fields_of(state, spec_version_of(str(partition["object_id"])))
    return partition_key(partition["values"], fields)


def key_list(keys: object) -> list[str]:
    """One key or a list of keys (e.g. rendered from ``{{ partition_key }}`` or XCom)."""
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, Sequence) and keys and all(isinstance(k, str) for k in keys):
        return list(keys)
    raise InvalidArgumentError(f"partition_key must be a key or a list of keys, got {keys!r}")


def values_for_keys(state: NamespaceState, keys: object) -> list[dict[str, Any]]:
    """The values each key names under the namespace's current spec (as ``values=`` takes
    them: partition keys name partitions of the current spec, like values do)."""
    fields = fields_of(state)
    return [partition_values(key, fields) for key in key_list(keys)]
