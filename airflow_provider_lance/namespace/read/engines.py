"""Polars and DuckDB over a :class:`~.dataset.NamespaceDataset` (optional packages).

Neither is imported until a function here needs it; a missing one raises
:class:`~..errors.InstallationError` naming the extra that installs it.

:func:`to_polars` is a Polars IO source (``register_io_source``): Polars hands it the
projection, the predicate and the row limit of a query. The predicate, in Polars' own
translation into a pyarrow expression (what its ``scan_pyarrow_dataset`` pushes down),
prunes partitions and is pushed into the leaves' scans; the rows are then filtered with
the Polars predicate itself, so they are exactly the ones Polars selects where the two
translations differ on NULLs (as for ``~is_in([..., None])``).
"""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import InstallationError

from .dataset import NamespaceDataset

if TYPE_CHECKING:
    import duckdb
    import polars as pl


def require(module: str, extra: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`InstallationError` naming the ``extra`` to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InstallationError(
            f"{what} needs the {module} package, which is not installed: "
            f"pip install 'airflow-provider-lance[{extra}]'"
        ) from exc


def to_polars(dataset: NamespaceDataset) -> pl.LazyFrame:
    """A lazy Polars frame over ``dataset`` (see the module docstring)."""
    polars = require("polars", "polars", "to_polars()")
    plugins = require("polars.io.plugins", "polars", "to_polars()")
    schema = polars.Schema(dataset.schema)

    def source(
        with_columns: list[str] | None,
        predicate: pl.Expr | None,
        n_rows: int | None,
        batch_size: int | None,
    ) -> Iterator[pl.DataFrame]:
        return _frames(dataset, schema, with_columns, predicate, n_rows, batch_size)

    frame: pl.LazyFrame = plugins.register_io_source(
        source,
        schema=schema,
        explain_name="lance_partitioned",
        explain_detail=f"{dataset.uri} at __manifest version {dataset.version}",
    )
    return frame


#: Rows gathered into one frame when Polars gives no batch size (a frame per leaf would
#: cost Polars' per-frame work once per partition read).
FRAME_ROWS = 65_536


def _frames(
    dataset: NamespaceDataset,
    schema: pl.Schema,
    with_columns: list[str] | None,
    predicate: pl.Expr | None,
    n_rows: int | None,
    batch_size: int | None,
) -> Iterator[pl.DataFrame]:
    import polars

    columns = list(schema.names()) if with_columns is None else list(with_columns)
    read = columns
    pushed = None
    if predicate is not None:
        needed = predicate.meta.root_names()
        read = columns + [c for c in needed if c not in columns]
        pushed = polars_predicate(predicate, schema)
    scanner = dataset.scanner(read, pushed)
    left = n_rows
    batches = scanner.to_batches()
    try:
        gather = min(batch_size or FRAME_ROWS, n_rows or FRAME_ROWS)  # a limit stops early
        for table in _gathered(batches, scanner.projected_schema, gather):
            frame = polars.from_arrow(table)
            assert isinstance(frame, polars.DataFrame)
            if predicate is not None:
                frame = frame.filter(predicate).select(columns)
            if left is not None:
                frame = frame.head(left)
                left -= frame.height
            if frame.height:
                yield frame
            if left is not None and left <= 0:
                return
    finally:
        batches.close()


def _gathered(
    batches: Iterator[pa.RecordBatch], schema: pa.Schema, rows: int
) -> Iterator[pa.Table]:
    """``batches`` as tables of at least ``rows`` rows (the last one smaller)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield pa.Table.from_batches(held, schema)
            held, count = [], 0
    if held:
        yield pa.Table.from_batches(held, schema)


def polars_predicate(predicate: pl.Expr, schema: pl.Schema) -> pc.Expression | None:
    """Polars' translation of ``predicate`` into a pyarrow expression (None if it has
    none: then nothing is pruned, and Polars' predicate still filters the rows)."""
    try:
        text = predicate._pyexpr.to_pyarrow_predicate(schema)
        if text is None:
            return None
        # Evaluated as Polars evaluates it for scan_pyarrow_dataset (with the builtins:
        # pyarrow imports modules while it converts the constants).
        names = {"pa": pa, **_polars_values()}
        expression = eval(compile(text, "<polars predicate>", "eval"), names)
    except Exception:  # Polars' private API moved, or a value pyarrow cannot hold exactly
        return None
    return expression if isinstance(expression, pc.Expression) else None


def _polars_values() -> dict[str, Callable[..., Any]]:
    """The functions Polars' pyarrow predicates call, refusing what Python's datetime
    would round (nanoseconds: a rounded bound could prune a partition that matches)."""
    from polars._utils.convert import to_py_date, to_py_datetime

    def exact_datetime(value: int, unit: str, *zone: Any) -> dt.datetime:
        if unit == "ns" and value % 1000:
            raise ValueError("nanoseconds")
        return to_py_datetime(value, unit, *zone)  # type: ignore[arg-type]

    return {"to_py_date": to_py_date, "to_py_datetime": exact_datetime}


def to_duckdb(
    dataset: NamespaceDataset, table_name: str, connection: duckdb.DuckDBPyConnection | None
) -> duckdb.DuckDBPyConnection:
    """``connection`` (a new in-memory one for None) with ``dataset`` registered as the
    view ``table_name``: its queries push filters and projections into the scans."""
    module = require("duckdb", "duckdb", "to_duckdb()")
    con: duckdb.DuckDBPyConnection = connection if connection is not None else module.connect()
    con.register(table_name, dataset)
    return con
