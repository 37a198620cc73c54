"""The data a write takes, as pyarrow tables: every Arrow-exportable object, and pandas
DataFrames, whose index is row labels and never data."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import DataValidationError
from airflow_provider_lance.namespace.format.schema import pandas_index_columns
from airflow_provider_lance.namespace.io.storage import first_line
from airflow_provider_lance.namespace.types import ArrowData


def as_tables(data: ArrowData) -> Iterator[pa.Table]:
    """Tables of Arrow-exportable data, of a pandas DataFrame (:func:`from_pandas`), or of
    an iterable of pyarrow tables or batches or DataFrames, one chunk at a time; anything
    else is a :class:`DataValidationError` saying how to make a table of it."""
    if isinstance(data, pa.Table):
        yield data
    elif isinstance(data, pa.RecordBatch):
        yield pa.Table.from_batches([data])
    elif isinstance(data, pa.RecordBatchReader):
        for batch in data:
            yield pa.Table.from_batches([batch])
    elif _is_pandas_frame(data):
        yield from_pandas(data)
    elif hasattr(data, "__arrow_c_stream__") and not isinstance(data, (str, bytes)):
        try:
            reader = pa.RecordBatchReader.from_stream(data)
        except (TypeError, ValueError, pa.ArrowInvalid) as exc:
            raise DataValidationError(
                f"write() got a {type(data).__name__} that is not a table of columns (its "
                f"Arrow stream is no stream of rows: {str(exc).splitlines()[0]}); name its "
                "columns, e.g. pyarrow.table({'id': values})"
            ) from exc
        yield from as_tables(reader)
    elif hasattr(data, "__arrow_c_array__"):
        try:
            batch = pa.record_batch(data)
        except (TypeError, ValueError, pa.ArrowInvalid) as exc:
            raise DataValidationError(
                f"write() got an Arrow array that is not a table of columns: {exc}"
            ) from exc
        yield pa.Table.from_batches([batch])
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        for item in data:
            if _is_pandas_frame(item):
                yield from_pandas(item)
                continue
            if not isinstance(item, (pa.Table, pa.RecordBatch)):
                raise DataValidationError(_not_tables(data, item))
            yield item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
    else:
        raise DataValidationError(_not_tables(data))


_EXPECTED = (
    "write() takes Arrow data (a pyarrow Table, RecordBatch or RecordBatchReader, a pandas "
    "DataFrame, anything with __arrow_c_stream__ such as a polars or DuckDB result) or an "
    "iterable of pyarrow Tables, RecordBatches or pandas DataFrames"
)


def _not_tables(data: object, item: object = None) -> str:
    """Why ``data`` (whose first element is ``item``, if iterable) is no table, and how to
    make one of it."""
    got = type(data).__name__
    if isinstance(data, Mapping):
        why = f"a {got}: make a table of a dict of columns with pyarrow.table(data)"
    elif isinstance(item, Mapping):
        rows = f"rows as {type(item).__name__}s"
        why = f"{rows}: make a table of them with pyarrow.Table.from_pylist(rows)"
    elif item is not None:
        hint = "series.to_frame()" if got == "Series" else "pyarrow.table({'name': values})"
        why = (
            f"a {got} of {type(item).__name__} values, one column and not a table: make "
            f"a table of it ({hint})"
        )
    else:
        why = f"a {got}"
    return f"write() got {why}. {_EXPECTED}"


def _is_pandas_frame(data: object) -> bool:
    pandas = sys.modules.get("pandas")  # a DataFrame's pandas is imported: never import it
    return pandas is not None and isinstance(data, pandas.DataFrame)


def from_pandas(frame: Any) -> pa.Table:
    """A pandas DataFrame's columns as a table, as pyarrow converts it, less the row labels.

    An unnamed index is row labels, left out; a named index (``df.set_index("day")``) is a
    column. Column names must be unique, and a column's values of one type: otherwise a
    :class:`DataValidationError` names the column and a value.
    """
    names = list(frame.columns)
    repeated = sorted({str(n) for n in names if names.count(n) > 1})
    if repeated:
        raise DataValidationError(
            f"the pandas DataFrame has duplicate column names: {', '.join(repeated)}"
        )
    try:
        table = pa.Table.from_pandas(frame)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
        raise _column_error(frame, exc) from exc
    labels = [n for n in pandas_index_columns(table.schema) if _UNNAMED_LEVEL.fullmatch(n)]
    return table.drop_columns(labels) if labels else table


#: pyarrow's name for an index level without a name (or named as a column is).
_UNNAMED_LEVEL = re.compile(r"__index_level_\d+__")


def _column_error(frame: Any, exc: Exception) -> DataValidationError:
    """The project error for a DataFrame Arrow cannot convert: the column, and a value of
    another type than the column's first value where types are mixed."""
    for name in frame.columns:
        column = frame[name]
        try:
            pa.Array.from_pandas(column)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError):
            pass
        else:
            continue
        values = [(label, v) for label, v in column.items() if v is not None and v == v]
        types = list(dict.fromkeys(type(v).__name__ for _, v in values))
        if len(types) > 1:
            label, odd = next((lb, v) for lb, v in values if type(v).__name__ != types[0])
            return DataValidationError(
                f"column {name!r} of the pandas DataFrame mixes values of types "
                f"{', '.join(types)} (e.g. {odd!r} at index {label!r}): a column holds one type. "
                f"Convert it first (e.g. df[{name!r}].astype(str), or pandas.to_numeric)"
            )
        return DataValidationError(
            f"column {name!r} of the pandas DataFrame cannot be converted to Arrow: "
            f"{first_line(exc)}"
        )
    return DataValidationError(f"the pandas DataFrame cannot be converted to Arrow: {exc}")
