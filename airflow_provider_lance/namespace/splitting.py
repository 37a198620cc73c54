"""Routing rows to partitions: evaluate the current spec and group rows by partition values."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .hashing import hash_array
from .schema import NamespaceSchema
from .spec import PartitionField, evaluator


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
    keys = partition_values(table, fields, schema)
    names = [f"__p{i}" for i in range(len(keys))]
    key_table = pa.table(
        {
            **dict(zip(names, keys, strict=True)),
            "__row": pa.array(np.arange(table.num_rows, dtype=np.int64)),
        }
    )
    grouped = key_table.group_by(names, use_threads=False).aggregate([("__row", "list")])
    rows = grouped.column("__row_list")
    values = [grouped.column(n).to_pylist() for n in names]
    for i in range(grouped.num_rows):
        indices = rows[i].values
        yield PartitionChunk(tuple(v[i] for v in values), table.take(indices))


_KEY_NULL = np.uint64(0x9E3779B97F4A7C15)
_KEY_MULTIPLIER = np.uint64(0x100000001B3)


def routing_keys(
    table: pa.Table, fields: Sequence[PartitionField], schema: NamespaceSchema
) -> pa.Array:
    """A 64-bit key per row, equal for the rows of one partition (``table`` conformed).

    Lets a distributed engine send every partition's rows to one task while the partition
    values themselves are still computed here, by the same DataFusion code as the core.
    """
    key = np.zeros(table.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for values in partition_values(table, fields, schema):
            hashed = hash_array(values).fill_null(0).to_numpy(zero_copy_only=False)
            nulls = values.is_null().to_numpy(zero_copy_only=False)
            lane = np.where(nulls, _KEY_NULL, hashed.view(np.uint64))
            key = key * _KEY_MULTIPLIER ^ lane
    return pa.array(key.view(np.int64))
