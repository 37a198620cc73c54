"""What the command line prints: aligned tables for people, JSON for scripts.

One place decides how a value reads, so that every command shows a date as ``2025-12-10``, a
missing value as ``NULL`` and an empty listing as ``(none)`` (an empty stdout reads as a
command that failed, or printed nothing by mistake). A cell never reads as something else:
a string that could pass for NULL, or hides spaces or control characters, is quoted (``'NULL'``,
``''``, ``' a '``) with its control characters escaped (``'a\\tb'``), so a tab or a newline
in a value cannot break a table. JSON keeps the values' types: numbers are numbers, dates
and times ISO 8601, NULL is null.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import json
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: What an empty listing prints instead of nothing.
NONE = "(none)"
#: How a missing value (SQL NULL, Python None) reads in a table.
NULL = "NULL"
#: Invisible characters that reorder what follows them (bidirectional overrides): escaped.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\", "'": "\\'"}


class Shown(str):
    """Text made of cells already (e.g. :func:`values_text`): a table prints it as it is."""


def _hidden(char: str) -> bool:
    """A character a terminal does not show as itself (controls, line separators)."""
    return char in _BIDI or unicodedata.category(char) in ("Cc", "Zl", "Zp")


def text_cell(text: str) -> str:
    """A string as a cell: as it is, unless it could be misread (empty, ``NULL`` in any
    case, leading or trailing whitespace, a quote at either end, a hidden character):
    then in single quotes, with backslashes, quotes and hidden characters escaped."""
    if (
        text
        and text.upper() != NULL
        and text == text.strip()
        and not text.startswith("'")
        and not text.endswith("'")
        and not any(_hidden(c) for c in text)
    ):
        return text
    escaped = "".join(_ESCAPES.get(c) or (f"\\u{ord(c):04x}" if _hidden(c) else c) for c in text)
    return f"'{escaped}'"


def cell(value: Any, width: int | None = None) -> str:
    """``value`` as one table cell: dates ISO (``2025-12-10``), times to the second with
    their offset, NULL for None, strings as :func:`text_cell` shows them, bytes in hex,
    nested values as compact JSON; cut to ``width`` characters (with ``…``) when given,
    so one long string keeps a table readable.
    """
    if value is None:
        text = NULL
    elif isinstance(value, Shown):
        text = str(value)
    elif isinstance(value, str):
        text = text_cell(value)
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, dt.datetime):
        text = value.isoformat(sep=" ", timespec="seconds" if not value.microsecond else "auto")
    elif isinstance(value, (dt.date, dt.time)):
        text = value.isoformat()
    elif isinstance(value, bytes):
        text = value.hex()
    elif isinstance(value, float) and math.isnan(value):
        text = "NaN"
    elif isinstance(value, (Mapping, list, tuple)):
        text = json.dumps(json_value(value), ensure_ascii=False)
    else:
        text = text_cell(str(value))
    if width is not None and len(text) > width:
        text = text[: max(width - 1, 1)] + "…"
    return text


def utc_time(value: dt.datetime | float | None) -> str | None:
    """A commit or record time in UTC to the second, ``2025-12-10 06:00:03`` (records keep
    epoch seconds, Lance aware datetimes; operators compare them in one zone, which the
    column's header names)."""
    if value is None:
        return None
    if not isinstance(value, dt.datetime):
        value = dt.datetime.fromtimestamp(value, dt.timezone.utc)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def ranges(numbers: Iterable[int]) -> str:
    """``1-3, 7, 9-12``: whole numbers, sorted and compact."""
    step = itertools.count()
    runs = [list(run) for _, run in itertools.groupby(sorted(numbers), lambda n: n - next(step))]
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def byte_size(count: int | None) -> str:
    """A byte count as people read it (``4.2 MiB``); ``?`` when Lance did not record it."""
    if count is None:
        return "?"
    size = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    right: Iterable[str] = (),
    width: int | None = None,
    whole: Iterable[str] = (),
    indent: str = "",
) -> None:
    """Print ``rows`` under ``headers`` in aligned columns (``right``: the columns aligned
    right, numbers), or ``(none)`` when there are no rows. ``width`` cuts long cells,
    except in the ``whole`` columns (ids people copy)."""
    kept = set(whole)
    widths_of = [None if h in kept else width for h in headers]
    texts = [[cell(v, w) for v, w in zip(r, widths_of, strict=True)] for r in rows]
    if not texts:
        print(f"{indent}{NONE}")
        return
    widths = [max(len(h), *(len(r[i]) for r in texts)) for i, h in enumerate(headers)]
    aligned = set(right)

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if h in aligned else v.ljust(w)
            for v, w, h in zip(values, widths, headers, strict=True)
        ]
        return (indent + "  ".join(parts)).rstrip()

    print(line(list(headers)))
    for r in texts:
        print(line(r))


def fields(pairs: Sequence[tuple[str, Any]], indent: str = "") -> None:
    """Print ``name  value`` lines, the names aligned (a one-record summary)."""
    width = max(len(name) for name, _ in pairs)
    for name, value in pairs:
        print(f"{indent}{name.ljust(width)}  {value if isinstance(value, str) else cell(value)}")


def json_value(value: Any) -> Any:
    """``value`` as JSON keeps it: numbers as numbers (a decimal, NaN or an infinity as
    text: JSON has no exact decimal and no NaN), dates and times ISO 8601, bytes hex,
    NULL as null, lists and mappings item by item."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return value if math.isfinite(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)


def json_default(value: Any) -> Any:
    """JSON for what ``json`` cannot write (see :func:`json_value`)."""
    return json_value(value)


def json_line(obj: object, *, ensure_ascii: bool = False) -> None:
    """One JSON document on one line, values as :func:`json_value` keeps them."""
    print(json.dumps(json_value(obj), ensure_ascii=ensure_ascii, allow_nan=False))


def with_values(doc: dict[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` (a result's ``to_dict()``, whose partition values are text) with the
    partition's own typed ``values``."""
    return {**doc, "values": {k: json_value(v) for k, v in values.items()}}


def result_json(result: Any) -> None:
    """A result document (``to_dict()``) as one JSON line, the partition values of its
    ``partitions`` typed (a result keeps them as text for its records)."""
    doc = result.to_dict()
    parts = getattr(result, "partitions", None)
    if isinstance(doc.get("partitions"), list) and isinstance(parts, (list, tuple)):
        doc["partitions"] = [
            with_values(d, p.values) if isinstance(d, dict) and hasattr(p, "values") else d
            for d, p in zip(doc["partitions"], parts, strict=True)
        ]
    json_line(doc)


def values_text(values: Mapping[str, Any]) -> Shown:
    """A partition's values as ``name=value, ...`` (each value as a cell shows it)."""
    return Shown(", ".join(f"{k}={cell(v)}" for k, v in values.items()))


def sort_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """Partition values in the order people read them: each by its typed value (``2``
    before ``10``), NULL last."""
    return tuple((v is None, v if v is not None else 0) for v in values)


def sorted_by(items: Sequence[Any], key: Callable[[Any], tuple[Any, ...]]) -> list[Any]:
    """``items`` sorted by ``key``; by the key's text when its values do not compare
    (values of different types in one position)."""
    try:
        return sorted(items, key=key)
    except TypeError:
        return sorted(items, key=lambda item: json.dumps(json_value(list(key(item)))))
