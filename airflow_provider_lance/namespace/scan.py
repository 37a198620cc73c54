"""Reading partitions at their ``read_version``, in the namespace schema, with the residual."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import lance
import pyarrow as pa

from .catalog import Partition
from .errors import DataValidationError, ExpressionError, FilterError, LanceNamespaceError
from .expressions import BoundExpression, column_name, raw, walk
from .schema import NamespaceSchema

log = logging.getLogger(__name__)


def open_leaf(
    partition: Partition, storage_options: Mapping[str, str] | None
) -> lance.LanceDataset:
    """The partition's table at its published ``read_version`` (latest when NULL)."""
    try:
        return lance.dataset(
            partition.location,
            version=partition.read_version,
            storage_options=dict(storage_options) if storage_options else None,
        )
    except (ValueError, OSError) as exc:
        raise LanceNamespaceError(
            f"partition {partition.object_id} cannot be read at {partition.location} "
            f"version {partition.read_version}: {str(exc).splitlines()[0]}"
        ) from exc


def filter_columns(bound: BoundExpression) -> list[str]:
    names = {column_name(n) for n in walk(raw(bound.expr))}
    return sorted(n for n in names if n)


def scan_batches(
    partitions: Sequence[Partition],
    schema: NamespaceSchema,
    *,
    columns: Sequence[str] | None,
    residual: BoundExpression | None,
    storage_options: Mapping[str, str] | None,
    batch_size: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream every partition's rows, conformed to the namespace schema and filtered."""
    output = schema.project(columns)
    needed = list(output.names)
    if residual is not None:
        needed += [c for c in filter_columns(residual) if c not in needed]
    for partition in partitions:
        leaf = open_leaf(partition, storage_options)
        plan = schema.read_plan(leaf.schema, needed)
        for batch in _leaf_batches(leaf, plan.leaf_columns, batch_size):
            try:
                table = plan.apply(batch)
            except DataValidationError as exc:
                raise DataValidationError(f"partition {partition.object_id}: {exc}") from exc
            if residual is not None:
                try:
                    table = residual.filter(table)
                except ExpressionError as exc:
                    raise FilterError(str(exc)) from exc
            if table.num_rows:
                yield from table.select(output.names).cast(output).to_batches()


def _leaf_batches(
    leaf: lance.LanceDataset, columns: list[str], batch_size: int | None
) -> Iterator[pa.RecordBatch]:
    if columns:
        yield from leaf.scanner(columns=columns, batch_size=batch_size).to_batches()
        return
    # None of the wanted columns exist in this (older) leaf: only its row count matters.
    remaining = leaf.count_rows()
    step = batch_size or 65536
    while remaining > 0:
        n = min(step, remaining)
        yield pa.RecordBatch.from_arrays([pa.nulls(n)], names=["__rows"])
        remaining -= n
