"""Reading partitions at their ``read_version``, in the namespace schema, with the residual."""

from __future__ import annotations

import logging
import numbers
import re
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import lance
import pyarrow as pa
from lance.dataset import Session  # type: ignore[attr-defined]

from airflow_provider_lance.namespace.errors import (
    DataValidationError,
    ExpressionError,
    FilterError,
    InvalidArgumentError,
    LanceNamespaceError,
    TableNotFoundError,
    VersionCleanedUp,
)
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, ReadPlan
from airflow_provider_lance.namespace.format.state import (
    Partition,
    is_missing,
    removed_by_retention,
)
from airflow_provider_lance.namespace.io.storage import Storage

log = logging.getLogger(__name__)


def open_leaf(
    storage: Storage, partition: Partition, session: Session | None = None
) -> lance.LanceDataset:
    """The partition's table at its ``read_version`` (NULL: latest), in Lance ``session``
    (None: its own); :class:`VersionCleanedUp`."""
    try:
        return storage.table(partition.location, partition.read_version, session=session)
    except TableNotFoundError as exc:
        gone = leaf_cleaned_up(storage, partition, exc)
        if gone is not None:
            raise gone from exc
        raise TableNotFoundError(
            f"partition {partition.object_id} cannot be read at {partition.location} "
            f"version {partition.read_version}: {exc}"
        ) from exc


def leaf_cleaned_up(
    storage: Storage, partition: Partition, exc: BaseException
) -> VersionCleanedUp | None:
    """The error for a read of ``partition`` that failed with ``exc`` because retention
    removed its ``read_version``; None if that version is still there (``exc`` stands)."""
    missing = isinstance(exc, TableNotFoundError) or is_missing(exc)
    if partition.read_version is None or not missing:
        return None
    try:
        kept = [int(v["version"]) for v in storage.table(partition.location).versions()]
    except (LanceNamespaceError, OSError, ValueError):
        return None  # no table at all: not a version retention removed
    if partition.read_version in kept:
        return None
    read_at = partition.read_at
    by = "" if read_at is None else f", which __manifest version {read_at.version} reads,"
    what = f"version {partition.read_version} of the table of partition {partition.object_id}"
    return removed_by_retention(
        f"{what} ({partition.location}){by}", kept, "versions of that table", read_at
    )


def read_columns(output: pa.Schema, residual: BoundExpression | None) -> list[str]:
    """The columns a read of ``output`` filtered by ``residual`` needs, ``output``'s first."""
    names = list(output.names)
    extra = () if residual is None else residual.columns
    return names + [c for c in extra if c not in names]


def read_partition(
    storage: Storage,
    partition: Partition,
    schema: NamespaceSchema,
    *,
    columns: Sequence[str] | None,
    residual: BoundExpression | None,
    batch_size: int | None = None,
    fragment_ids: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """One partition's rows (optionally of some fragments only), in the namespace schema,
    filtered by ``residual`` (in Lance where :func:`lance_filter` allows, else here)."""
    output = schema.project(columns)
    needed = read_columns(output, residual)
    leaf = open_leaf(storage, partition)
    with _retention_checked(storage, partition):
        plan = schema.read_plan(leaf.schema, needed)
        fragments = None if fragment_ids is None else [leaf.get_fragment(i) for i in fragment_ids]
        batches, pushed = None, False
        pushdown = None if residual is None else lance_filter(residual, plan, leaf.schema)
        if pushdown is not None:
            try:
                batches = _leaf_batches(leaf, plan.leaf_columns, batch_size, pushdown, fragments)
                pushed = True
            except ValueError as exc:  # Lance's planner is stricter (e.g. int column vs 2.5)
                log.debug("filter %r not pushed down to Lance: %s", pushdown, exc)
        if batches is None:
            batches = _leaf_batches(leaf, plan.leaf_columns, batch_size, None, fragments)
        for batch in batches:
            try:
                table = plan.apply(batch)
            except DataValidationError as exc:
                raise DataValidationError(f"partition {partition.object_id}: {exc}") from exc
            yield from output_batches(table, None if pushed else residual, output)


@contextmanager
def _retention_checked(storage: Storage, partition: Partition) -> Iterator[None]:
    """Raise :class:`~.errors.VersionCleanedUp` for a data file retention removed meanwhile."""
    try:
        yield
    except (OSError, ValueError) as exc:
        gone = leaf_cleaned_up(storage, partition, exc)
        if gone is not None:
            raise gone from exc
        raise


def first_rows(
    batches: Iterator[pa.RecordBatch], limit: int | None
) -> Generator[pa.RecordBatch, None, None]:
    """The first ``limit`` rows of ``batches`` (all of them for None, none for 0), as they
    come. ``batches`` is closed (if it can be) once they are had, or when this generator is
    closed first, so that nothing more is read. A ``limit`` that is no whole number >= 0 is
    :class:`InvalidArgumentError`."""
    return _first_rows(
        batches, None if limit is None else whole_number(limit, "the number of rows", 0)
    )


def whole_number(value: object, what: str, minimum: int) -> int:
    """``value`` as an int (numpy's integers too, never a bool); :class:`InvalidArgumentError`
    naming ``what`` if it is no whole number of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise InvalidArgumentError(
            f"{what} must be a whole number of at least {minimum}, got {value!r}"
        )
    return int(value)


def _first_rows(
    batches: Iterator[pa.RecordBatch], limit: int | None
) -> Generator[pa.RecordBatch, None, None]:
    try:
        left = limit
        while left is None or left > 0:
            batch = next(batches, None)
            if batch is None:
                return
            if left is not None:
                batch = batch.slice(0, left) if batch.num_rows > left else batch
                left -= batch.num_rows
            yield batch
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


def output_batches(
    table: pa.Table, residual: BoundExpression | None, output: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """``table`` (namespace schema) filtered by ``residual`` and projected to ``output``."""
    if residual is not None:
        try:
            table = residual.filter(table)
        except ExpressionError as exc:
            raise FilterError(str(exc)) from exc
    if table.num_rows:
        selected = table.select(output.names)  # (a cast to no column would drop the rows)
        yield from (selected.cast(output) if output.names else selected).to_batches()


_HASH_CALL = re.compile(r"\bhash\s*\(", re.IGNORECASE)


def lance_filter(residual: BoundExpression, plan: ReadPlan, leaf: pa.Schema) -> str | None:
    """``residual`` as a filter Lance can evaluate on the leaf itself (every column it
    names stored under its namespace name and type, no ``hash()``, no IN lists Lance's
    DataFusion would merge against SQL's NULL logic: see :mod:`..format.expressions`), or
    None."""
    if residual.merges_lists:
        return None
    return _backtick_identifiers(residual.sql) if _pushable(residual, plan, leaf) else None


def _backtick_identifiers(sql: str) -> str | None:
    """``sql`` with its double-quoted identifiers in backticks, or None if one cannot be
    (pylance fact: test_fact_lance_filter_reads_a_double_quoted_name_as_a_string)."""
    out: list[str] = []
    i = 0
    while i < len(sql):
        char = sql[i]
        if char not in "'\"":
            out.append(char)
            i += 1
            continue
        end = i + 1
        while True:  # the closing quote; a doubled quote is an escaped one
            end = sql.find(char, end)
            if end < 0:
                return None
            if sql[end + 1 : end + 2] != char:
                break
            end += 2
        body = sql[i + 1 : end]
        if char == "'":
            out.append(sql[i : end + 1])
        elif "`" in body:
            return None
        else:
            out.append("`" + body.replace('""', '"') + "`")
        i = end + 1
    return "".join(out)


def _pushable(residual: BoundExpression, plan: ReadPlan, leaf: pa.Schema) -> bool:
    if _HASH_CALL.search(residual.sql):
        return False
    return all(
        plan.sources.get(n) == n
        and n in leaf.names
        and leaf.field(n).type == plan.target.field(n).type
        for n in residual.columns
    )


def _leaf_batches(
    leaf: lance.LanceDataset,
    columns: list[str],
    batch_size: int | None,
    filter_sql: str | None,
    fragments: list[Any] | None,
) -> Iterator[pa.RecordBatch]:
    """The leaf's batches; the scan is planned here, so a filter Lance rejects raises now."""
    if columns:
        scanner = leaf.scanner(
            columns=columns, filter=filter_sql, batch_size=batch_size, fragments=fragments
        )
        return iter(scanner.to_reader())
    # None of the wanted columns exist in this (older) leaf: only its row count matters
    parts = [leaf] if fragments is None else fragments
    remaining = sum(f.count_rows(filter_sql) for f in parts)
    return null_batches(remaining, batch_size or 65536)


def null_batches(rows: int, step: int) -> Iterator[pa.RecordBatch]:
    """``rows`` rows of one NULL column (for a leaf lacking every wanted column)."""
    while rows > 0:
        n = min(step, rows)
        yield pa.RecordBatch.from_arrays([pa.nulls(n)], names=["__rows"])
        rows -= n
