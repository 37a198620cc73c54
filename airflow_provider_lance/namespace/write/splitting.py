"""Routing rows to partitions: evaluate the current spec and group rows by partition values."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.format.hashing import hash_array
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.format.spec import PartitionField, evaluator


@dataclass(frozen=True)
class PartitionChunk:
    """The rows of one partition (in the active namespace schema) and its values."""

    values: tuple[Any, ...]
    data: pa.Table


def partition_values(
    table: pa.Table, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> list[pa.Array]:
    """The value of every partition field for every row (DataFusion-evaluated, typed)."""
    out = []
    for f in fields:
        source = schema.field_by_id(f.source_id)  # type: ignore[arg-type]
        out.append(evaluator(f, source.type).evaluate(table.column(source.name)))
    return out


def split(
    table: pa.Table, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> Iterator[PartitionChunk]:
    """Group ``table`` (already conformed to the namespace schema) by partition values."""
    if table.num_rows == 0:
        return
    yield from group_rows(table, partition_values(table, fields, schema))


def group_rows(table: pa.Table, keys: Sequence[pa.Array]) -> Iterator[PartitionChunk]:
    """The rows of ``table`` grouped by the values of ``keys`` (one array per partition
    field, aligned with the rows), each group keeping its rows in input order.

    Arrow's hash grouping defines the groups (NULL is a value of its own; floats are equal
    when their bits are: -0.0 is not 0.0); the order of the groups is unspecified.
    """
    if table.num_rows == 0:
        return
    if all(_constant(k) for k in keys):
        yield PartitionChunk(tuple(k[0].as_py() for k in keys), table)
        return
    runs = _runs(keys)
    if runs is not None:
        starts, firsts = runs
        values = [column.to_pylist() for column in firsts.columns]
        ends = [*starts[1:], table.num_rows]
        for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
            yield PartitionChunk(tuple(v[i] for v in values), table.slice(start, end - start))
        return
    names = [f"__p{i}" for i in range(len(keys))]
    row = pa.array(np.arange(table.num_rows, dtype=np.int64))
    key_table = pa.table({**dict(zip(names, keys, strict=True)), "__row": row})
    grouped = key_table.group_by(names, use_threads=False).aggregate([("__row", "list")])
    rows = grouped.column("__row_list").combine_chunks()
    offsets = rows.offsets.to_numpy()
    bounds = (offsets - offsets[0]).tolist()
    ordered = table.take(rows.flatten())
    values = [grouped.column(n).to_pylist() for n in names]
    for i in range(grouped.num_rows):
        chunk = ordered.slice(bounds[i], bounds[i + 1] - bounds[i])
        yield PartitionChunk(tuple(v[i] for v in values), chunk)


_FLOAT_BITS = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}


def _as_grouped(values: pa.Array) -> pa.Array:
    """``values`` as the hash grouping compares them: floats by their bits, dictionary
    entries by their index (a repeated or NULL entry is a group of its own)."""
    if pa.types.is_dictionary(values.type):
        values = values.indices
    if pa.types.is_floating(values.type):
        values = values.view(_FLOAT_BITS[values.type.bit_width])
    return values


def _runs(keys: Sequence[pa.Array]) -> tuple[list[int], pa.Table] | None:
    """The first row of each partition, and the keys there, if every partition's rows are
    one run (keys compared as the grouping compares them), else None."""
    rows = len(keys[0])
    changed: pa.Array | None = None
    try:
        for key in keys:
            values = _as_grouped(key)
            after, before = values.slice(1), values.slice(0, rows - 1)
            differs = pc.not_equal(after, before)
            if values.null_count:
                differs = pc.or_(
                    pc.fill_null(differs, False), pc.not_equal(after.is_valid(), before.is_valid())
                )
            changed = differs if changed is None else pc.or_(changed, differs)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # no equality: grouping decides
        return None
    assert changed is not None
    changes = np.flatnonzero(changed.to_numpy(zero_copy_only=False))
    if len(changes) >= rows // 8:  # short runs: unclustered, or too little to gain
        return None
    starts = [0, *(changes + 1).tolist()]
    # Runs are partitions only if no two share a key.
    at = pa.array(starts, pa.int64())
    firsts = pa.table({f"__p{i}": k.take(at) for i, k in enumerate(keys)})
    distinct = firsts.group_by(firsts.column_names, use_threads=False).aggregate([])
    return (starts, firsts) if distinct.num_rows == len(starts) else None


def _constant(values: pa.Array) -> bool:
    """Whether all of ``values`` fall in one group of Arrow's hash grouping."""
    if values.null_count == len(values):
        return True
    if values.null_count:
        return False
    values = _as_grouped(values)
    try:
        return bool(pc.all(pc.equal(values, values[0])).as_py())
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):  # no equality: grouping decides
        return False


_KEY_NULL = np.uint64(0x9E3779B97F4A7C15)
_KEY_MULTIPLIER = np.uint64(0x100000001B3)


def routing_keys(
    table: pa.Table, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> pa.Array:
    """A 64-bit key per row, equal for the rows of one partition (``table`` conformed):
    what a distributed engine shuffles on, so that one task gets a partition's rows."""
    key = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for values in partition_values(table, fields, schema):
            hashed = hash_array(values).fill_null(0).to_numpy(zero_copy_only=False)
            nulls = values.is_null().to_numpy(zero_copy_only=False)
            lane = np.where(nulls, _KEY_NULL, hashed.view(np.uint64))
            key = key * _KEY_MULTIPLIER ^ lane
    return pa.array(key.view(np.int64))
