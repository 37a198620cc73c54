"""Routing rows to partitions: ``split``'s grouping, against a take per partition.

    python benchmarks/bench_split.py                     # 1M rows; 1, 1,000, 10,000 partitions
    python benchmarks/bench_split.py --rows 200000 --partitions 100 1000 --reps 9

A write groups its input by partition values before anything reaches Lance. ``split``
lists each partition's row numbers with Arrow's hash grouping, takes the table once in that
order and slices it, zero-copy, into the partitions; input of one partition passes through
uncopied. The reference is what it did before: the same grouping, then one ``take`` per
partition. Both run on the same keys in the same process, alternating sample by sample;
both are checked to yield the same partitions with the same rows. The partition values
themselves (DataFusion) are evaluated once, outside the timed part.

Keys: ``date`` (a ``date32`` identity key, rows in random order), ``date-sorted`` (the
same, input already ordered by date) and ``bucket-string`` (two fields: an ``int32``
bucket and a string).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_provider_lance.namespace.write.splitting import PartitionChunk, group_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_jiffies, fmt_ms, print_environment, print_table, steal_pct, summarize
from _common import write_results as write_json

EPOCH_DAYS = (dt.date(2020, 1, 1) - dt.date(1970, 1, 1)).days


def take_per_partition(table: pa.Table, keys: Sequence[pa.Array]) -> Iterator[PartitionChunk]:
    """The grouping ``split`` used before: one ``take`` of the table per partition."""
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
        yield PartitionChunk(tuple(v[i] for v in values), table.take(rows[i].values))


def case(kind: str, rows: int, partitions: int, seed: int = 0) -> tuple[pa.Table, list[pa.Array]]:
    """A 4-column input of ``rows`` rows and the partition values of ``kind``."""
    rng = np.random.default_rng(seed)
    part = rng.integers(0, partitions, rows)
    if kind == "date-sorted":
        part.sort()
    days = pa.array((part + EPOCH_DAYS).astype(np.int32)).cast(pa.date32())
    table = pa.table(
        {
            "id": pa.array(np.arange(rows, dtype=np.int64)),
            "event_date": days,
            "value": pa.array(rng.random(rows)),
            "name": pa.array(np.char.add("n", (part % 97).astype(str)).tolist()),
        }
    )
    if kind == "bucket-string":  # a bucket of 16 and a string of partitions / 16 values
        bucket = pa.array((part % 16).astype(np.int32))
        text = pa.array(np.char.add("s", (part // 16).astype(str)).tolist())
        return table, [bucket, text]
    return table, [days]


def same_chunks(a: list[PartitionChunk], b: list[PartitionChunk]) -> None:
    assert [c.values for c in a] == [c.values for c in b], "different partitions"
    for x, y in zip(a, b, strict=True):
        assert x.data.column("id").equals(y.data.column("id")), f"rows differ in {x.values}"


def compare(
    table: pa.Table, keys: list[pa.Array], reps: int
) -> tuple[dict[str, Any], dict[str, Any], float | None]:
    """Median timings of both groupings, samples alternating (first one alternating too)."""
    ways: dict[str, Callable[[], list[PartitionChunk]]] = {
        "take per partition": lambda: list(take_per_partition(table, keys)),
        "split (one take, slices)": lambda: list(group_rows(table, keys)),
    }
    same_chunks(*(fn() for fn in ways.values()))  # also the warm-up
    samples: dict[str, list[float]] = {name: [] for name in ways}
    jiffies = cpu_jiffies()
    for rep in range(reps):
        order = list(ways) if rep % 2 == 0 else list(reversed(ways))
        for name in order:
            t0 = time.perf_counter()
            ways[name]()
            samples[name].append(time.perf_counter() - t0)
    steal = steal_pct(jiffies, cpu_jiffies())
    old, new = (summarize(samples[name]) for name in ways)
    return old, new, steal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 1_000, 10_000])
    parser.add_argument(
        "--keys", nargs="+", default=["date", "date-sorted", "bucket-string"],
        choices=["date", "date-sorted", "bucket-string"],
    )  # fmt: skip
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    env = print_environment()
    table_rows: list[list[str]] = []
    results: dict[str, Any] = {}
    for kind in args.keys:
        for partitions in args.partitions:
            table, keys = case(kind, args.rows, partitions)
            old, new, steal = compare(table, keys, args.reps)
            label = f"{kind}, {args.rows:,} rows x {partitions:,} partitions"
            results[label] = {"take_per_partition": old, "split": new, "steal_pct": steal}
            table_rows.append(
                [
                    label,
                    fmt_ms(old["median_ms"]),
                    fmt_ms(new["median_ms"]),
                    f"{old['median_ms'] / new['median_ms']:.1f}x",
                    "-" if steal is None else f"{steal:.0f}%",
                ]
            )
            print(f"  {label}: {table_rows[-1][1]} -> {table_rows[-1][2]} ms", flush=True)
    print_table(
        ["input", "take per partition", "split", "speed-up", "steal"],
        table_rows,
        title=f"grouping rows by partition values, medians of {args.reps} in ms",
    )
    write_json("split", {"environment_summary": env, "cases": results})


if __name__ == "__main__":
    main()
