"""This project side by side with delta-rs and pyiceberg, and with the Lance floor under it.

    python benchmarks/bench_peers.py                  # 1,000 x 1,000 and 10,000 x 100 (~10 min)
    python benchmarks/bench_peers.py --quick          # 1,000 x 1,000 only, fewer samples
    python benchmarks/bench_peers.py --systems ours floor delta

The same Arrow data goes to every system: ``--partitions`` dates x ``--rows`` rows, one
partition per date (identity partitioning on ``event_date``). Every operation opens a fresh
handle, as a scheduled task would (a new ``PartitionedNamespace.open``, ``DeltaTable`` or
SQLite catalog). Samples are interleaved across systems (the order rotates each round) so
that a slow minute of a shared machine hits them alike, and after each phase every system
must hold exactly the same rows (checked, not assumed).

Operations: the initial load (one write creating every partition), a daily append (one new
partition), a dynamic overwrite of 100 partitions (Delta: ``mode="overwrite"`` with the
predicate of the replaced dates; Iceberg: ``dynamic_partition_overwrite``), planning one date
cold (which files/leaves to read), reading one date and a 1% range, and at 10,000 partitions
the initial load and a publish touching every partition (one row appended to each).

"floor" is the bare Lance work underneath (``bench_floor.py``): leaves written in parallel
and one ``merge_insert`` into a reduced ``__manifest``, no transactions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from _peers import Delta, Iceberg, Ours, System, canonical
from bench_floor import EPOCH, Floor, dates, rows


class FloorSystem(Floor):
    name = "floor"


SYSTEMS: dict[str, Callable[[Path], System]] = {
    "ours": lambda root: Ours(str(root)),
    "floor": FloorSystem,
    "delta": lambda root: Delta(str(root)),
    "iceberg": Iceberg,
}
LABELS = {
    "ours": Ours.name,
    "floor": FloorSystem.name,
    "delta": Delta.name,
    "iceberg": Iceberg.name,
}


class Run:
    """Times operations across systems, interleaved, and checks that they agree."""

    def __init__(self, systems: list[str], tmp: Path) -> None:
        self.names = systems
        self.tmp = tmp
        self.samples: dict[str, dict[str, list[float]]] = {}
        self.steal: dict[str, float | None] = {}
        self.rounds = 0

    def system(self, name: str, label: str) -> System:
        return SYSTEMS[name](self.tmp / f"{name}-{label}")

    def time(
        self,
        operation: str,
        reps: int,
        call: Callable[[System, int], Any],
        systems: Callable[[str, int], System],
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``reps`` rounds of ``call`` on every system, the order rotating per round."""
        jiffies = cpu_jiffies()
        for rep in range(reps):
            order = (
                self.names[self.rounds % len(self.names) :]
                + self.names[: self.rounds % len(self.names)]
            )
            self.rounds += 1
            outputs: dict[str, Any] = {}
            for name in order:
                target = systems(name, rep)
                t0 = time.perf_counter()
                outputs[name] = call(target, rep)
                self.samples.setdefault(operation, {}).setdefault(name, []).append(
                    time.perf_counter() - t0
                )
            if check is not None:
                check(outputs)
        self.steal[operation] = steal_pct(jiffies, cpu_jiffies())
        medians = {n: fmt_ms(summarize(s)["median_ms"]) for n, s in self.samples[operation].items()}
        print(f"  {operation}: " + ", ".join(f"{n} {m} ms" for n, m in medians.items()), flush=True)

    def same_rows(self, live: dict[str, System], what: str) -> None:
        """Every system holds exactly the same rows (read back whole)."""
        first, last = EPOCH - dt.timedelta(days=1), EPOCH + dt.timedelta(days=100_000)
        tables = {name: canonical(s.read(first, last)) for name, s in live.items()}
        reference_name, reference = next(iter(tables.items()))
        for name, table in tables.items():
            if not table.equals(reference):
                raise AssertionError(
                    f"after {what}: {name} holds {table.num_rows} rows, {reference_name} "
                    f"{reference.num_rows}, and they differ"
                )
        print(f"  checked: all systems hold the same {reference.num_rows:,} rows", flush=True)

    def report(self, title: str, operations: list[str]) -> list[list[str]]:
        others = [n for n in self.names if n != "ours"]
        headers = ["operation", *[LABELS[n] for n in self.names]]
        headers += [f"ours/{LABELS[n]}" for n in others] if "ours" in self.names else []
        table: list[list[str]] = []
        for operation in operations:
            med = {n: summarize(s)["median_ms"] for n, s in self.samples[operation].items()}
            row = [operation, *[fmt_ms(med.get(n)) for n in self.names]]
            if "ours" in med:
                row += [f"{med['ours'] / med[n]:.2f}x" for n in others if n in med]
            table.append(row)
        print_table(headers, table, title=title)
        return table


def scenario_1000(run: Run, n: int, per: int, reps: int) -> list[str]:
    """Load, daily appends, overwrites, planning and reads at ``n`` partitions."""
    data = rows(0, n, per)
    live = {name: run.system(name, f"{n}") for name in run.names}

    def fresh(name: str, rep: int) -> System:  # rep 0 is the table the later phases use
        return live[name] if rep == 0 else run.system(name, f"{n}-load{rep}")

    load = f"initial load, {n:,} partitions"
    run.time(load, reps, lambda s, _: s.load(data), fresh)
    for name in run.names:
        for rep in range(1, reps):
            shutil.rmtree(run.tmp / f"{name}-{n}-load{rep}", ignore_errors=True)
    run.same_rows(live, load)

    append = "daily append, 1 new partition"
    run.time(
        append,
        reps * 4,
        lambda s, rep: s.append(rows(n + rep, 1, per, first_id=10**9 + rep * per, seed=rep)),
        lambda name, _: live[name],
    )
    overwrite = "dynamic overwrite, 100 partitions"
    run.time(
        overwrite,
        reps * 2,
        lambda s, rep: s.overwrite(rows(0, 100, per, first_id=2 * 10**9 + rep * 10**6, seed=rep)),
        lambda name, _: live[name],
    )
    run.same_rows(live, "appends and overwrites")

    def agree(outputs: dict[str, Any]) -> None:
        values = {k: v if isinstance(v, int) else canonical(v) for k, v in outputs.items()}
        first = next(iter(values.values()))
        for name, value in values.items():
            same = value == first if isinstance(value, int) else value.equals(first)
            if not same and not isinstance(value, int):
                raise AssertionError(f"{name} read other rows than the others")

    day = dates(500, 1)[0]
    plan = "plan one date, cold"
    run.time(plan, reps * 4, lambda s, _: s.plan(day), lambda name, _: live[name])
    one = "read one date"
    run.time(one, reps * 4, lambda s, _: s.read(day, day), lambda name, _: live[name], agree)
    span = max(1, n // 100)
    last = dates(500 + span - 1, 1)[0]
    ranged = f"read a 1% range ({span} dates)"
    run.time(ranged, reps * 4, lambda s, _: s.read(day, last), lambda name, _: live[name], agree)
    return [load, append, overwrite, plan, one, ranged]


def scenario_large(run: Run, n: int, per: int, reps: int) -> list[str]:
    """The initial load and a publish that touches every one of ``n`` partitions."""
    data = rows(0, n, per)
    live = {name: run.system(name, f"{n}") for name in run.names}
    load = f"initial load, {n:,} partitions"
    run.time(load, 1, lambda s, _: s.load(data), lambda name, _: live[name])
    publish = f"append to all {n:,} partitions"
    run.time(
        publish,
        reps,
        lambda s, rep: s.append(rows(0, n, 1, first_id=10**9 + rep * n, seed=rep)),
        lambda name, _: live[name],
    )
    run.same_rows(live, publish)
    return [load, publish]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=list(SYSTEMS))
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--large", type=int, default=10_000, help="0 skips the large scenario")
    parser.add_argument("--large-rows", type=int, default=100)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="no large scenario, 2 rounds")
    parser.add_argument("--tmp", type=Path, default=None, help="where the tables go")
    args = parser.parse_args()
    if args.quick:
        args.large, args.reps = 0, 2
    os.environ.setdefault("LANCE_LOG", "error")
    env = print_environment()
    results: dict[str, Any] = {}
    if args.tmp:
        os.makedirs(args.tmp, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-peers-", dir=args.tmp) as tmp:
        run = Run(args.systems, Path(tmp))
        print(f"{args.partitions:,} partitions x {args.rows:,} rows", flush=True)
        ops = scenario_1000(run, args.partitions, args.rows, args.reps)
        tables = {
            "small": run.report(
                f"{args.partitions:,} dates x {args.rows:,} rows, medians in ms", ops
            )
        }
        if args.large:
            print(f"{args.large:,} partitions x {args.large_rows:,} rows", flush=True)
            large = scenario_large(run, args.large, args.large_rows, max(1, args.reps - 1))
            tables["large"] = run.report(
                f"{args.large:,} dates x {args.large_rows:,} rows, medians in ms", large
            )
    results = {
        "samples": {op: {n: summarize(s) for n, s in by.items()} for op, by in run.samples.items()},
        "steal_pct": run.steal,
        "tables": tables,
        "versions": versions(),
    }
    write_results("peers", {"environment_summary": env, **results})


def versions() -> dict[str, str]:
    out = {}
    for module in ("deltalake", "pyiceberg"):
        try:
            out[module] = __import__(module).__version__
        except ImportError:
            out[module] = "not installed"
    return out


if __name__ == "__main__":
    main()
