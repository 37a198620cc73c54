"""Table operations beside delta-rs and the Lance floor: delete, merge, optimize, same data.

    python benchmarks/bench_table_ops.py            # ~6 min on 2 cores
    python benchmarks/bench_table_ops.py --quick    # fewer rounds, 30 appends

Scenario 1 (``--partitions`` dates x ``--rows`` rows, identity partitioning on
``event_date``, every system loaded with the same Arrow table; the floor is the bare Lance
calls under ours (``_peers.Floor``): a table per date, each changed by one Lance call in
parallel, then one ``merge_insert`` into a reduced ``__manifest``, goal 5 of issue 26):

* delete 1% of the rows, spread over every partition (``id % 100 = k``): ours writes
  deletion files on each leaf's published version and publishes them in one
  ``__manifest`` commit; delta-rs ``DeltaTable.delete`` rewrites the files it touches;
* merge 1% updates spread over every partition, keyed on ``(id, event_date)``: ours, one
  ``merge_insert`` per leaf and one publish; delta-rs ``DeltaTable.merge(...)
  .when_matched_update_all().when_not_matched_insert_all()``;
* delete one whole date: ours drops the partition as metadata; delta-rs removes its files
  by partition predicate; the floor deletes its ``__manifest`` row.

Scenario 2: ``--buckets`` partitions (``bucket = id % buckets``), ``--appends`` daily
appends each writing rows into every partition (a fragment, or a file, per partition per
append), then one ``optimize`` (delta-rs ``optimize.compact()``), files before and after
(ours and delta-rs only).

Every operation opens a fresh handle; samples are interleaved (the order alternates each
round); after each phase every system must hold exactly the same rows (checked).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    cpu_jiffies,
    fmt_ms,
    print_environment,
    print_table,
    steal_pct,
    summarize,
    write_results,
)
from _peers import Delta, Floor, Ours, canonical, updates
from bench_floor import SCHEMA, rows

BUCKET_SCHEMA = pa.schema([*SCHEMA, pa.field("bucket", pa.int32())])


SYSTEMS: dict[str, Callable[[Path, str], Any]] = {
    "ours": lambda root, by: Ours(str(root), by=by),
    "delta": lambda root, by: Delta(str(root), by=by),
    "floor": lambda root, by: Floor(str(root)),
}
#: Ratios reported when both systems ran.
RATIOS = (("ours", "delta"), ("floor", "delta"), ("ours", "floor"))
LABELS = {"delta": "delta-rs"}


class Run:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.steal: dict[str, float | None] = {}
        self.rounds = 0

    def time(
        self, operation: str, reps: int, call: Callable[[Any, int], Any], live: dict[str, Any]
    ) -> dict[str, Any]:
        jiffies = cpu_jiffies()
        outputs: dict[str, Any] = {}
        for rep in range(reps):
            shift = self.rounds % len(self.names)
            self.rounds += 1
            for name in [n for n in self.names[shift:] + self.names[:shift] if n in live]:
                t0 = time.perf_counter()
                outputs[name] = call(live[name], rep)
                self.samples.setdefault(operation, {}).setdefault(name, []).append(
                    time.perf_counter() - t0
                )
        self.steal[operation] = steal_pct(jiffies, cpu_jiffies())
        medians = {n: fmt_ms(summarize(s)["median_ms"]) for n, s in self.samples[operation].items()}
        print(
            f"  {operation}: " + ", ".join(f"{n} {m} ms" for n, m in medians.items()),
            f"(last: {outputs})",
            flush=True,
        )
        return outputs

    def report(self, title: str, operations: list[str]) -> list[list[str]]:
        ratios = [(a, b) for a, b in RATIOS if a in self.names and b in self.names]
        headers = [
            "operation",
            *(LABELS.get(n, n) for n in self.names),
            *(f"{a}/{LABELS.get(b, b)}" for a, b in ratios),
        ]
        table = []
        for operation in operations:
            med = {n: summarize(s)["median_ms"] for n, s in self.samples[operation].items()}
            row = [operation, *[fmt_ms(med.get(n)) for n in self.names]]
            for a, b in ratios:
                row.append(f"{med[a] / med[b]:.2f}x" if a in med and b in med else "-")
            table.append(row)
        print_table(headers, table, title=title)
        return table


def same_rows(live: dict[str, Any], schema: pa.Schema, what: str) -> int:
    tables = {n: canonical(s.rows(), schema) for n, s in live.items()}
    first_name, first = next(iter(tables.items()))
    for name, table in tables.items():
        if not table.equals(first):
            raise AssertionError(
                f"after {what}: {name} ({table.num_rows} rows) and {first_name} "
                f"({first.num_rows} rows) differ"
            )
    print(f"  checked: {', '.join(tables)} hold the same {first.num_rows:,} rows", flush=True)
    return first.num_rows


def scenario_rows(run: Run, tmp: Path, partitions: int, per: int, reps: int) -> list[str]:
    data = rows(0, partitions, per)
    live = {n: SYSTEMS[n](tmp / f"{n}-rows", "event_date") for n in run.names}
    load = f"load {partitions:,} dates x {per:,} rows"
    run.time(load, 1, lambda s, _: s.load(data), live)
    same_rows(live, SCHEMA, load)
    delete = f"delete 1% of rows across {partitions:,} partitions"
    run.time(delete, reps, lambda s, rep: s.delete(f"id % 100 = {rep}"), live)
    same_rows(live, SCHEMA, delete)
    merge = f"merge 1% updates across {partitions:,} partitions"
    run.time(merge, reps, lambda s, rep: s.merge(updates(data, 50 + rep)), live)
    same_rows(live, SCHEMA, merge)
    drop = "delete one whole date"
    first = data.column("event_date")[0].as_py()
    run.time(drop, reps, lambda s, rep: s.drop_date(first + dt.timedelta(days=rep)), live)
    same_rows(live, SCHEMA, drop)
    return [delete, merge, drop]


def scenario_optimize(run: Run, tmp: Path, buckets: int, appends: int, per: int) -> list[str]:
    def daily(k: int) -> pa.Table:
        base = rows(k, 1, buckets * per, first_id=k * buckets * per, seed=k)
        bucket = (base.column("id").to_numpy() % buckets).astype(np.int32)
        return base.append_column("bucket", pa.array(bucket))

    # The floor's layout is a table per date: it has no bucketed counterpart here.
    names = [n for n in run.names if n != "floor"]
    live = {n: SYSTEMS[n](tmp / f"{n}-optimize", "bucket") for n in names}
    started = time.perf_counter()
    for system in live.values():
        system.load(daily(0))
        for k in range(1, appends):
            system.append(daily(k))
    took = time.perf_counter() - started
    print(f"  {appends} daily appends to {buckets} partitions ({took:.0f}s, not timed)", flush=True)
    same_rows(live, BUCKET_SCHEMA, "appends")
    files = {n: s.files() for n, s in live.items()}
    optimize = f"optimize after {appends} daily appends ({buckets} partitions)"
    out = run.time(optimize, 1, lambda s, _: s.optimize(), live)
    same_rows(live, BUCKET_SCHEMA, optimize)
    after = {n: s.files() for n, s in live.items()}
    print(f"  files before {files}, after {after}; reported {out}", flush=True)
    return [optimize]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--buckets", type=int, default=100)
    parser.add_argument("--appends", type=int, default=100)
    parser.add_argument("--append-rows", type=int, default=10, help="rows per partition per append")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tmp", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.reps, args.appends = 2, 30
    os.environ.setdefault("LANCE_LOG", "error")
    env = print_environment()
    run = Run(args.systems)
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-table-ops-", dir=args.tmp) as tmp:
        ops = scenario_rows(run, Path(tmp), args.partitions, args.rows, args.reps)
        tables = {
            "rows": run.report(
                f"{args.partitions:,} dates x {args.rows:,} rows, medians in ms", ops
            )
        }
        ops = scenario_optimize(run, Path(tmp), args.buckets, args.appends, args.append_rows)
        tables["optimize"] = run.report("optimize, ms", ops)
    write_results(
        "table_ops",
        {
            "environment_summary": env,
            "samples": {
                op: {n: summarize(s) for n, s in by.items()} for op, by in run.samples.items()
            },
            "steal_pct": run.steal,
            "tables": tables,
        },
    )


if __name__ == "__main__":
    main()
