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
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

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
from bench_floor import EPOCH, SCHEMA, Floor, dates, rows

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField


class System(Protocol):
    """One table format driven through the measured operations (a fresh handle each)."""

    name: str

    def load(self, data: pa.Table) -> None: ...
    def append(self, data: pa.Table) -> None: ...
    def overwrite(self, data: pa.Table) -> None: ...
    def plan(self, day: dt.date) -> int: ...
    def read(self, first: dt.date, last: dt.date) -> pa.Table: ...


class Ours:
    name = "ours"

    def __init__(self, root: Path) -> None:
        self.uri = str(root)

    def load(self, data: pa.Table) -> None:
        ns = PartitionedNamespace.create(
            self.uri, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
        )
        ns.write(data)

    def append(self, data: pa.Table) -> None:
        PartitionedNamespace.open(self.uri).write(data)

    def overwrite(self, data: pa.Table) -> None:
        PartitionedNamespace.open(self.uri).write(data, "overwrite")

    def plan(self, day: dt.date) -> int:
        return len(PartitionedNamespace.open(self.uri).prune(f"event_date = DATE '{day}'"))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        where = f"event_date BETWEEN DATE '{first}' AND DATE '{last}'"
        return PartitionedNamespace.open(self.uri).to_table(filter=where)


class FloorSystem(Floor):
    name = "floor"


class Delta:
    name = "delta-rs"

    def __init__(self, root: Path) -> None:
        self.uri = str(root)

    def load(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, data, partition_by=["event_date"], mode="error")

    def append(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, data, mode="append")

    def overwrite(self, data: pa.Table) -> None:
        """Replace exactly the dates in ``data`` (a contiguous range here)."""
        from deltalake import write_deltalake

        low, high = pc.min_max(data.column("event_date")).values()
        where = f"event_date >= '{low.as_py()}' AND event_date <= '{high.as_py()}'"
        write_deltalake(self.uri, data, mode="overwrite", predicate=where)

    def plan(self, day: dt.date) -> int:
        from deltalake import DeltaTable

        where = [("event_date", "=", day.isoformat())]
        return len(DeltaTable(self.uri).file_uris(file_pruning_predicate=where))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        """Through delta-rs's DataFusion ``QueryBuilder``: its fastest read here (pruned by
        the partition values; ``to_pyarrow_table(filters=...)`` takes 8x longer)."""
        from deltalake import DeltaTable, QueryBuilder

        sql = f"SELECT * FROM t WHERE event_date BETWEEN DATE '{first}' AND DATE '{last}'"
        return pa.table(QueryBuilder().register("t", DeltaTable(self.uri)).execute(sql))


class Iceberg:
    name = "pyiceberg"
    TABLE = "bench.events"

    def __init__(self, root: Path) -> None:
        self.root = root

    def catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(
            "bench",
            uri=f"sqlite:///{self.root}/catalog.db",
            warehouse=f"file://{self.root}/warehouse",
        )

    def load(self, data: pa.Table) -> None:
        self.root.mkdir(parents=True)
        catalog = self.catalog()
        catalog.create_namespace("bench")
        table = catalog.create_table(self.TABLE, schema=SCHEMA)
        with table.update_spec() as spec:
            spec.add_identity("event_date")
        table.append(data)

    def append(self, data: pa.Table) -> None:
        self.catalog().load_table(self.TABLE).append(data)

    def overwrite(self, data: pa.Table) -> None:
        self.catalog().load_table(self.TABLE).dynamic_partition_overwrite(data)

    def plan(self, day: dt.date) -> int:
        from pyiceberg.expressions import EqualTo

        table = self.catalog().load_table(self.TABLE)
        return len(list(table.scan(row_filter=EqualTo("event_date", day.isoformat())).plan_files()))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

        table = self.catalog().load_table(self.TABLE)
        where = And(
            GreaterThanOrEqual("event_date", first.isoformat()),
            LessThanOrEqual("event_date", last.isoformat()),
        )
        return table.scan(row_filter=where).to_arrow()


SYSTEMS: dict[str, Callable[[Path], System]] = {
    "ours": Ours,
    "floor": FloorSystem,
    "delta": Delta,
    "iceberg": Iceberg,
}


def canonical(table: pa.Table) -> pa.Table:
    """The rows in one shape and order, to compare systems."""
    return table.select(SCHEMA.names).cast(SCHEMA).sort_by("id").combine_chunks()


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
        headers = ["operation", *[SYSTEMS[n].name for n in self.names]]
        headers += [f"ours/{SYSTEMS[n].name}" for n in others] if "ours" in self.names else []
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
