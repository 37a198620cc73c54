"""Rows with a vector column for the index tests, and what the published leaves index."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace

DIM = 8
VECTORS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("txt", pa.utf8()),
        pa.field("vec", pa.list_(pa.float32(), DIM)),
    ]
)


def vector_rows(parts: list[int], per_part: int, first_id: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed + first_id)
    n = len(parts) * per_part
    values = rng.standard_normal(n * DIM).astype("float32")
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "part": pa.array([p for p in parts for _ in range(per_part)], pa.int32()),
            "txt": [f"word{i % 7} common" for i in range(n)],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(values), DIM),
        },
        schema=VECTORS,
    )


def leaf_indices(ns: PartitionedNamespace, version: int | None = None) -> dict[int, list[str]]:
    """Partition ``part`` -> the index names its published leaf version has."""
    return {
        p.values["part"]: sorted(
            d.name for d in lance.dataset(p.location, version=p.read_version).describe_indices()
        )
        for p in ns.state(version).partitions()
    }
