"""What the command line prints: aligned tables for people, JSON for scripts.

One place decides how a value reads, so that every command shows a date as ``2025-12-10``, a
missing value as ``NULL`` and an empty listing as ``(none)`` (an empty stdout reads as a
command that failed, or printed nothing by mistake). JSON output is what scripts parse: it
is printed exactly as the commands printed it before tables were their default.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: What an empty listing prints instead of nothing.
NONE = "(none)"
#: How a missing value (SQL NULL, Python None) reads in a table.
NULL = "NULL"


def cell(value: Any, width: int | None = None) -> str:
    """``value`` as one table cell: dates ISO (``2025-12-10``), times to the second with
    their offset, NULL for None, bytes in hex, nested values as compact JSON; cut to
    ``width`` characters (with ``…``) when given, so one long string keeps a table readable.
    """
    if value is None:
        text = NULL
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
        text = json.dumps(value, ensure_ascii=False, default=json_default)
    else:
        text = str(value)
    text = " ".join(text.splitlines()) if "\n" in text else text
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
    indent: str = "",
) -> None:
    """Print ``rows`` under ``headers`` in aligned columns (``right``: the columns aligned
    right, numbers), or ``(none)`` when there are no rows."""
    texts = [[cell(v, width) for v in r] for r in rows]
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


def json_default(value: Any) -> Any:
    """JSON for what ``json`` cannot write: dates and times ISO 8601, bytes hex, else text."""
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def json_line(obj: object, *, ensure_ascii: bool = False) -> None:
    """One JSON document on one line (``ensure_ascii``: as the command printed it before)."""
    print(json.dumps(obj, ensure_ascii=ensure_ascii, default=json_default))


def values_text(values: Mapping[str, Any]) -> str:
    """A partition's values as ``name=value, ...`` (NULL for a NULL value)."""
    return ", ".join(f"{k}={cell(v)}" for k, v in values.items())
