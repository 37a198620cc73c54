"""``list_indices`` and the create-index operator's "declared alike" lookup on a namespace
of N partitions (default 300, 100 rows each) with two declared indexes and one unindexed
new partition: ``list_indices()`` (every leaf opened) against ``list_indices(coverage=False)``
(the ``__index$<name>`` rows of ``__manifest`` alone), on one handle and on a fresh one.

    .venv/bin/python benchmarks/bench_list_indices.py [N]    # ~30 s, the build included
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("LANCE_LOG", "error")
import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

sys.path.insert(0, os.path.dirname(__file__))
from _common import DATA_DIR

SCHEMA = pa.schema(
    [pa.field("id", pa.int64()), pa.field("day", pa.int32()), pa.field("txt", pa.utf8())]
)


def rows(first: int, n: int, day: Callable[[int], int]) -> pa.Table:
    ids = range(first, first + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([day(i) for i in ids], pa.int32()),
            "txt": [f"w{i % 13}" for i in ids],
        },
        schema=SCHEMA,
    )


def build(root: str, n: int) -> None:
    ns = PartitionedNamespace.create(root, SCHEMA, [PartitionField("day", "day")])
    ns.write(rows(0, n * 100, lambda i: i % n))
    ns.create_scalar_index("id", "BTREE")
    ns.create_scalar_index("txt", "BITMAP")
    ns.write(rows(n * 100, 50, lambda i: n + 1))  # a new partition, not indexed yet


def median_ms(call: Callable[[], object], samples: int = 15) -> float:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    root = str(DATA_DIR / f"list_indices_{n}")
    if not os.path.exists(root):
        build(root, n)
    ns = PartitionedNamespace.open(root)
    cases: dict[str, Callable[[], object]] = {
        "list_indices(), one handle": ns.list_indices,
        "list_indices(), fresh handle": lambda: PartitionedNamespace.open(root).list_indices(),
        "coverage=False, one handle": lambda: ns.list_indices(coverage=False),
        "coverage=False, fresh handle": lambda: PartitionedNamespace.open(root).list_indices(
            coverage=False
        ),
    }
    print(f"{n} partitions, two indexes; medians of 15 (load {os.getloadavg()[0]:.1f})")
    for what, call in cases.items():
        print(f"  {what:32} {median_ms(call):8.1f} ms")


if __name__ == "__main__":
    main()
