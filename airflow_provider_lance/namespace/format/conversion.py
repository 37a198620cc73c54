"""The one rule by which every path that takes data converts values to a column's type
(:func:`cast_losslessly`): every value kept exactly, or the conversion refused naming a value.

* Within a kind, a value is converted when it comes back unchanged: numbers (integers,
  floats, decimals) into any number type that holds them exactly (``2**53 + 1`` is no
  float64, ``0.1`` no float32, ``1e300`` no float32), timestamps into another unit or
  zone that loses nothing, text and bytes into their large or small types.
* Across kinds, only ``YYYY-MM-DD`` text into dates, timestamps at midnight into dates
  (a zoned one judged in its zone) and dates into zone-less timestamps (their midnight).
  Nothing else: not text and numbers either way, not numbers and truth values, not
  numbers and points in time, not zone-less timestamps and zoned ones.
* Nested values (lists, structs, maps) only into a type whose every child holds its
  values by type (``list<int32>`` into ``list<int64>``); a struct keeps its field names.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_json import normalize_type

_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINT_ORDER = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def is_widening(source: pa.DataType, target: pa.DataType) -> bool:
    """True if every value of ``source`` is exactly representable in ``target``: the
    spec's type promotion rule (no narrowing)."""
    source, target = normalize_type(source), normalize_type(target)
    if source == target:
        return True
    if pa.types.is_null(source):
        return True
    if source in _INT_ORDER and target in _INT_ORDER:
        return _INT_ORDER.index(source) <= _INT_ORDER.index(target)
    if source in _UINT_ORDER and target in _UINT_ORDER:
        return _UINT_ORDER.index(source) <= _UINT_ORDER.index(target)
    if source in _UINT_ORDER and target in _INT_ORDER:
        return _UINT_ORDER.index(source) < _INT_ORDER.index(target)
    if pa.types.is_floating(source) and pa.types.is_floating(target):
        return bool(source.bit_width <= target.bit_width)
    if pa.types.is_decimal(source) and pa.types.is_decimal(target):
        return bool(
            target.scale == source.scale
            and target.precision >= source.precision
            and target.bit_width >= source.bit_width
        )
    pairs = {(pa.utf8(), pa.large_utf8()), (pa.binary(), pa.large_binary())}
    return (source, target) in pairs


def kind(dtype: pa.DataType) -> str:
    """The kind of value a type holds, as the conversion rule groups them."""
    checks = (
        ("null", pa.types.is_null),
        ("truth value", pa.types.is_boolean),
        ("number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t)),
        ("number", pa.types.is_decimal),
        ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        ("text", lambda t: t == pa.string_view()),
        ("bytes", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
        ("bytes", lambda t: pa.types.is_fixed_size_binary(t) or t == pa.binary_view()),
        ("date", pa.types.is_date),
        ("zoned timestamp", lambda t: pa.types.is_timestamp(t) and t.tz is not None),
        ("timestamp", pa.types.is_timestamp),
        ("time of day", pa.types.is_time),
        ("duration", pa.types.is_duration),
        ("list", _is_list),
        ("struct", pa.types.is_struct),
        ("map", pa.types.is_map),
    )
    return next((name for name, test in checks if test(dtype)), str(dtype))


def _is_list(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(dtype)
        or pa.types.is_large_list(dtype)
        or pa.types.is_fixed_size_list(dtype)
        or pa.types.is_list_view(dtype)
        or pa.types.is_large_list_view(dtype)
    )


#: Conversions across kinds that keep every value (checked value by value where needed).
_ACROSS_KINDS = frozenset(
    {("text", "date"), ("timestamp", "date"), ("zoned timestamp", "date"), ("date", "timestamp")}
)
_POINTS_IN_TIME = frozenset({"date", "timestamp", "zoned timestamp", "time of day", "duration"})
#: Kinds whose values are checked by converting them back (a narrowing may round them).
_ROUND_TRIPPED = frozenset({"number", "date", "timestamp", "zoned timestamp", "time of day"})
_EXPLICITLY = "convert the column explicitly (pyarrow.compute.cast) if that is what you mean"


def conversion_refused(source: pa.DataType, target: pa.DataType) -> str | None:
    """Why no value of type ``source`` is converted to ``target``; None when values are
    (each one checked by :func:`cast_losslessly`)."""
    if pa.types.is_dictionary(source):
        source = source.value_type
    ks, kt = kind(source), kind(target)
    if source == target or ks == "null" or (ks, kt) in _ACROSS_KINDS:
        return None
    if ks == kt and ks in ("list", "struct", "map"):
        if _holds_by_type(source, target):
            return None
        return (
            f"nested values are converted only into a type whose every child holds them "
            f"(struct fields of the same names): {_EXPLICITLY}"
        )
    if ks == kt and ks in ("number", "text", "bytes", *_POINTS_IN_TIME):
        return None
    return _why_not(ks, kt)


def _why_not(ks: str, kt: str) -> str:
    """Why values of kind ``ks`` are not ``kt`` values, and what to do, in a user's words."""
    pair = {ks, kt}
    if pair == {"number", "truth value"}:
        why = "a number is not a truth value" if ks == "number" else "a truth value is not a number"
    elif pair == {"number", "text"}:
        why = "text is not read as a number" if ks == "text" else "a number is not text"
    elif "number" in pair and pair & _POINTS_IN_TIME:
        what = "numbers as points in time" if ks == "number" else "points in time as numbers"
        why = f"that would reinterpret {what}"
    elif ks == "timestamp" and kt == "zoned timestamp":
        return (
            "a timestamp without a time zone is not read as one in a zone: say which zone "
            "its values are in (pyarrow.compute.assume_timezone(column, 'UTC'))"
        )
    elif ks == "zoned timestamp" and kt == "timestamp":
        return (
            "a zoned timestamp is not written as one without a zone: convert it "
            "(pyarrow.compute.local_timestamp(column) for its local time, "
            "column.cast(pa.timestamp(unit)) for its UTC time)"
        )
    elif ks == "text" and kt in _POINTS_IN_TIME:
        return "text is read as a date (YYYY-MM-DD) only: parse it (pyarrow.compute.strptime)"
    else:
        why = f"{_a(ks)} is not {_a(kt)}"
    return f"{why}; {_EXPLICITLY}"


def _a(kind_name: str) -> str:
    if kind_name in ("text", "bytes", "null"):
        return kind_name
    return f"{'an' if kind_name[0] in 'aeiou' else 'a'} {kind_name}"


def _holds_by_type(source: pa.DataType, target: pa.DataType) -> bool:
    """Every value of nested type ``source`` fits ``target``, judged by the types alone."""
    source, target = normalize_type(source), normalize_type(target)
    if source == target or is_widening(source, target):
        return True
    ks, kt = kind(source), kind(target)
    if ks != kt:
        return False
    if ks == "text" or ks == "bytes":
        return not pa.types.is_fixed_size_binary(target)  # Arrow refuses an overflow
    if ks == "list":
        if pa.types.is_fixed_size_list(target) and source != target:
            return False
        return _holds_by_type(source.value_type, target.value_type)
    if ks == "struct":
        return [f.name for f in source] == [f.name for f in target] and all(
            _holds_by_type(s.type, t.type) for s, t in zip(source, target, strict=True)
        )
    if ks == "map":
        return _holds_by_type(source.key_type, target.key_type) and _holds_by_type(
            source.item_type, target.item_type
        )
    return False


class ConversionRefused(pa.ArrowInvalid):  # type: ignore[misc]
    """No value of ``source`` is converted to ``target`` (an Arrow error, as Arrow's own
    refusals are); ``example`` is a value of the data, if it had one."""

    def __init__(self, source: pa.DataType, target: pa.DataType, reason: str, example: Any):
        super().__init__(f"{values_text(source, example)} are not converted to {target}: {reason}")
        self.source = source
        self.reason = reason
        self.example = example


def values_text(source: pa.DataType, example: Any) -> str:
    """``int64 values (e.g. 2)``: what the data holds, for an error message."""
    return f"{source} values" + ("" if example is None else f" (e.g. {example!r})")


def cast_losslessly(values: Any, dtype: pa.DataType) -> Any:
    """``values`` (an Arrow array or chunked array) cast to ``dtype`` only if every value
    is kept exactly (the rule of the module docstring), else ``pa.ArrowInvalid`` naming a
    value and saying why."""
    source = values.type
    if pa.types.is_dictionary(source):
        values = values.cast(source.value_type)
        source = values.type
    if source == dtype:
        return values
    refused = conversion_refused(source, dtype)
    if refused is not None:
        raise ConversionRefused(source, dtype, refused, _first_value(values))
    try:
        out = pc.cast(values, dtype, safe=True)
    except pa.ArrowInvalid as exc:  # Arrow's message may not say which value
        value = _first_uncastable(values, dtype)
        shown = "" if value is None else f" (e.g. {value!r})"
        raise pa.ArrowInvalid(f"{str(exc).splitlines()[0]}{shown}") from exc
    if pa.types.is_timestamp(source) and pa.types.is_date(dtype):
        _check_midnight(values, dtype)
    elif kind(source) in _ROUND_TRIPPED and not is_widening(source, dtype):
        _check_round_trip(values, out)
    return out


def _first_uncastable(values: Any, dtype: pa.DataType) -> Any:
    """A value of ``values`` Arrow's safe cast to ``dtype`` refuses (found by halving);
    None if none alone is."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if _casts(values, dtype):
        return None
    while len(values) > 1:
        half = values.slice(0, len(values) // 2)
        values = half if not _casts(half, dtype) else values.slice(len(values) // 2)
    return values[0].as_py() if len(values) else None


def _casts(values: Any, dtype: pa.DataType) -> bool:
    try:
        pc.cast(values, dtype, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _first_value(values: Any) -> Any:
    valid = pc.drop_null(values)
    return valid[0].as_py() if len(valid) else None


def _check_midnight(values: Any, dtype: pa.DataType) -> None:
    """A timestamp with a time of day is no date (a zoned one judged in its zone)."""
    local = values if values.type.tz is None else pc.local_timestamp(values)
    dropped = pc.not_equal(pc.cast(pc.cast(local, pa.date32()), local.type), local)
    if pc.any(dropped).as_py():
        first = pc.index(dropped, True).as_py()
        raise pa.ArrowInvalid(
            f"{values[first].as_py()} has a time of day, which a {dtype} would drop; pass "
            "dates, or truncate the timestamps explicitly if that is what you mean"
        )


def _check_round_trip(values: Any, out: Any) -> None:
    """Refuse a conversion that changed a value: converted back, it differs (``1e300``
    became ``inf`` in a float32, ``0.1`` became ``0.10000000149011612``, ``1.005`` became
    ``1.00`` in a decimal of scale 2)."""
    back = pc.cast(out, values.type, safe=False)
    same = pc.equal(back, values)
    if pa.types.is_floating(values.type):
        same = pc.or_kleene(same, pc.and_(pc.is_nan(back), pc.is_nan(values)))
    changed = pc.invert(pc.fill_null(same, True))
    if pc.any(changed).as_py():
        first = pc.index(changed, True).as_py()
        raise pa.ArrowInvalid(
            f"{values[first].as_py()!r} would be stored as {out[first].as_py()!r}; round or "
            "convert the values yourself if that is what you mean, or give the column a type "
            "that holds them (promote_column)"
        )


#: Conversions a filter's comparison makes that a write does not: DataFusion compares text
#: and zone-less timestamps with a zoned column's values as times in its zone.
_COMPARED_AS_TIMES = frozenset(
    {("text", "timestamp"), ("text", "zoned timestamp"), ("timestamp", "zoned timestamp")}
)


def cast_for_comparison(values: Any, dtype: pa.DataType) -> Any:
    """A filter's constants in a column's type, to compare with partition values: by
    :func:`cast_losslessly`, and also text and zone-less timestamps into timestamps, read
    as DataFusion reads them against a column of ``dtype`` (the caller keeps a zone-less
    time away from a column zoned other than UTC, which DataFusion reads in that zone)."""
    try:
        return cast_losslessly(values, dtype)
    except ConversionRefused:
        pair = (kind(values.type), kind(dtype))
        if pair not in _COMPARED_AS_TIMES:
            raise
    return pc.cast(values, dtype, safe=True)
