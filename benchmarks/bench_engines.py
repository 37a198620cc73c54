"""DuckDB, Polars and DataFusion querying a namespace (issue 40): ours beside delta-rs and
beside the bare Lance scans of the same leaves, and planning at a million partitions.

    .venv/bin/python benchmarks/bench_engines.py                      # ~15 min, builds included
    .venv/bin/python benchmarks/bench_engines.py --reps 3 --plan-partitions 100000
    .venv/bin/python benchmarks/bench_engines.py --plan-partitions 0  # the queries only

The same Arrow data (``--partitions`` dates x ``--rows`` rows, ``bench_floor.rows``) goes to
a namespace (identity on ``event_date``) and to a delta-rs table partitioned by it, built
once under ``benchmarks/.data/``. Queries, for one date and for a 1% range of dates:

* **DuckDB** ``count(*)``, ``sum(value)`` and the projection ``id, value``: ours through
  ``ns.to_pyarrow_dataset()``, delta-rs through ``DeltaTable.to_pyarrow_dataset()``, both
  registered in one DuckDB connection (which pushes its filter and columns into them);
* **Polars** the same three: ours ``ns.to_polars()``, delta-rs ``pl.scan_delta``;
* **DataFusion** the same three: ours ``ctx.register_dataset(ns.to_pyarrow_dataset())``,
  delta-rs its own ``QueryBuilder`` (its DataFusion table provider);
* **floor**: the bare Lance scans the query needs: the leaves it reads (found once, outside
  the timing), opened at their versions and scanned for the columns DuckDB asks for
  (``id`` for a count), 8 at a time, the aggregate in pyarrow.

Every call opens a fresh handle (``PartitionedNamespace.open``, ``DeltaTable``), as a
scheduled query would; samples are interleaved (the order rotates per round); every
system's answer is checked equal. Targets: no slower than delta-rs, or within 1.1x of the
floor of the same run. Beside the wall time, the CPU time of the process (every thread) per
call: on a machine shared with other work, it shows what each system costs.

**Planning at a million partitions**: a namespace of ``--plan-partitions`` ``__manifest``
rows (built as ``bench_million.py`` builds its own, with real leaves for 10 dates only:
planning opens none) in a fresh interpreter per call, as ``bench_million.py`` measures
``prune``: ``prune`` of one date, and the plan a dataset scan makes for DuckDB's filter on
that date (``ds.scanner(filter=...).plan``); both in one process too, warm. Target: the
dataset's plan under 50 ms, as ``prune``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: F401  (quiets pylance's log before it is imported)
import duckdb
import lance
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
from _common import (
    DATA_DIR,
    cpu_jiffies,
    fmt_ms,
    print_environment,
    print_table,
    steal_pct,
    summarize,
    write_results,
)
from _peers import Delta, Ours
from bench_floor import EPOCH, parallel, rows
from datafusion import SessionContext

from airflow_provider_lance.namespace import PartitionedNamespace

QUERIES = {  # name: (DuckDB/DataFusion select list, the columns the floor scans)
    "count(*)": ("count(*)", ["id"]),
    "sum(value)": ("sum(value)", ["value"]),
    "id, value": ("id, value", ["id", "value"]),
}


def where(first: dt.date, last: dt.date) -> str:
    return f"event_date BETWEEN DATE '{first}' AND DATE '{last}'"


def build(kind: str, n: int, per: int, rebuild: bool) -> Path:
    """Ours or delta-rs with ``n`` dates x ``per`` rows, built once."""
    root = DATA_DIR / f"engines-{kind}-{n}x{per}"
    marker = root.parent / f"{root.name}.BUILT"
    if marker.exists() and not rebuild:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    system = Ours(str(root)) if kind == "ours" else Delta(str(root))
    system.load(rows(0, n, per))
    if kind == "ours":
        PartitionedNamespace.open(root).maintain()
    marker.write_text("built")
    print(f"  built {kind} {n:,} x {per:,} in {time.perf_counter() - started:.0f}s", flush=True)
    return root


# -- the systems -----------------------------------------------------------------------------
class Systems:
    """One call per (engine, system, query): each returns a comparable answer."""

    def __init__(self, ours: Path, delta: Path) -> None:
        self.ours, self.delta = ours, delta
        self.con = duckdb.connect()
        self.leaves: dict[tuple[dt.date, dt.date], list[tuple[str, int | None]]] = {}

    def duckdb(self, system: str, select: str, first: dt.date, last: dt.date) -> Any:
        if system == "ours":
            dataset = PartitionedNamespace.open(self.ours).to_pyarrow_dataset()
        else:
            from deltalake import DeltaTable

            dataset = DeltaTable(str(self.delta)).to_pyarrow_dataset()
        self.con.register("t", dataset)
        try:
            return answer(self.con.sql(f"SELECT {select} FROM t WHERE {where(first, last)}"))
        finally:
            self.con.unregister("t")

    def datafusion(self, system: str, select: str, first: dt.date, last: dt.date) -> Any:
        sql = f"SELECT {select} FROM t WHERE {where(first, last)}"
        if system == "ours":
            ctx = SessionContext()
            ctx.register_dataset("t", PartitionedNamespace.open(self.ours).to_pyarrow_dataset())
            return answer(pa.Table.from_batches(ctx.sql(sql).collect()))
        return answer(Delta(str(self.delta)).query(sql))

    def polars(self, system: str, select: str, first: dt.date, last: dt.date) -> Any:
        frame = (
            PartitionedNamespace.open(self.ours).to_polars()
            if system == "ours"
            else pl.scan_delta(str(self.delta))
        )
        frame = frame.filter(pl.col("event_date").is_between(first, last))
        picked = {
            "count(*)": frame.select(pl.len()),
            "sum(value)": frame.select(pl.col("value").sum()),
            "id, value": frame.select("id", "value"),
        }[select]
        return answer(picked.collect().to_arrow())

    def floor(self, columns: list[str], select: str, first: dt.date, last: dt.date) -> Any:
        """The bare Lance scans of the leaves the query reads (found once, untimed)."""
        leaves = self.leaves_of(first, last)
        tables = parallel(
            lambda leaf: lance.dataset(leaf[0], version=leaf[1]).to_table(columns=columns),
            leaves,
        )
        table = pa.concat_tables(tables)
        if select == "count(*)":
            return table.num_rows
        if select == "sum(value)":
            return pc.sum(table.column("value")).as_py()
        return answer(table)

    def leaves_of(self, first: dt.date, last: dt.date) -> list[tuple[str, int | None]]:
        key = (first, last)
        if key not in self.leaves:
            plan = PartitionedNamespace.open(self.ours).plan_scan(where(first, last))
            self.leaves[key] = [(t.location, t.read_version) for t in plan.tasks]
        return self.leaves[key]


def answer(result: Any) -> Any:
    """A query's result in one comparable shape: a number, or the sorted (id, value) rows."""
    table = result.to_arrow_table() if isinstance(result, duckdb.DuckDBPyRelation) else result
    if table.num_columns == 1 and table.num_rows == 1:
        return table.column(0)[0].as_py()
    return table.select(["id", "value"]).sort_by("id").combine_chunks()


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, pa.Table):
        return bool(a.equals(b.cast(a.schema)))
    return bool(a == b)


# -- timing ----------------------------------------------------------------------------------
def calls_of(
    systems: Systems, select: str, columns: list[str], first: dt.date, last: dt.date
) -> dict[str, Callable[[], Any]]:
    """The query on every system (and the floor), each a call of no arguments."""
    out: dict[str, Callable[[], Any]] = {}
    for engine in ("duckdb", "polars", "datafusion"):
        run = getattr(systems, engine)
        for system, label in (("ours", "ours"), ("delta", "delta-rs")):
            out[f"{engine} {label}"] = functools.partial(run, system, select, first, last)
    out["floor"] = functools.partial(systems.floor, columns, select, first, last)
    return out


def run_queries(
    systems: Systems, reps: int, ranges: dict[str, tuple[dt.date, dt.date]]
) -> dict[str, Any]:
    """Every query on every system, interleaved; medians, checked answers."""
    samples: dict[str, dict[str, list[float]]] = {}
    cpu: dict[str, dict[str, list[float]]] = {}
    steal: dict[str, float | None] = {}
    for span, (first, last) in ranges.items():
        for query, (select, columns) in QUERIES.items():
            case = f"{query}, {span}"
            calls = calls_of(systems, select, columns, first, last)
            jiffies = cpu_jiffies()
            names = list(calls)
            for rep in range(reps + 1):  # the first round warms up (imports, caches)
                shift = rep % len(names)
                answers = {}
                for name in names[shift:] + names[:shift]:
                    t0, c0 = time.perf_counter(), time.process_time()
                    answers[name] = calls[name]()
                    if rep:
                        elapsed = time.perf_counter() - t0
                        samples.setdefault(case, {}).setdefault(name, []).append(elapsed)
                        used = time.process_time() - c0
                        cpu.setdefault(case, {}).setdefault(name, []).append(used)
                reference = answers["floor"]
                for name, value in answers.items():
                    if not same(reference, value):
                        raise AssertionError(
                            f"{case}: {name} answered {value!r}, not {reference!r}"
                        )
            steal[case] = steal_pct(jiffies, cpu_jiffies())
            medians = {n: summarize(s)["median_ms"] for n, s in samples[case].items()}
            print(
                f"  {case}: " + ", ".join(f"{n} {fmt_ms(m)}" for n, m in medians.items()),
                flush=True,
            )
    return {"samples": samples, "cpu": cpu, "steal": steal}


def report(results: dict[str, Any]) -> list[list[str]]:
    table = []
    for case, by_system in results["samples"].items():
        med = {n: summarize(s)["median_ms"] for n, s in by_system.items()}
        cpu = {n: summarize(s)["median_ms"] for n, s in results["cpu"][case].items()}
        for engine in ("duckdb", "polars", "datafusion"):
            ours, delta = med[f"{engine} ours"], med[f"{engine} delta-rs"]
            used = [cpu[f"{engine} ours"], cpu[f"{engine} delta-rs"], cpu["floor"]]
            table.append(
                [
                    engine,
                    case,
                    fmt_ms(ours),
                    fmt_ms(delta),
                    fmt_ms(med["floor"]),
                    f"{ours / delta:.2f}x",
                    f"{ours / med['floor']:.2f}x",
                    fmt_ms(summarize(by_system[f"{engine} ours"])["p95_ms"]),
                    " / ".join(fmt_ms(u) for u in used),
                ]
            )
    headers = [
        "engine",
        "query",
        "ours",
        "delta-rs",
        "floor",
        "ours/delta",
        "ours/floor",
        "ours p95",
        "CPU ours / delta-rs / floor",
    ]
    title = "median ms over the reps (fresh handle per query); CPU: all the process's threads"
    print_table(headers, table, title=title)
    return table


# -- planning at a million partitions --------------------------------------------------------
PROBE = r"""
import json, sys, time
op, uri, day = sys.argv[1], sys.argv[2], sys.argv[3]
import datetime as dt
import pyarrow.compute as pc
from airflow_provider_lance.namespace import PartitionedNamespace
day = dt.date.fromisoformat(day)
t0 = time.perf_counter()
ns = PartitionedNamespace.open(uri)
if op == "prune":
    out = len(ns.prune(f"event_date = DATE '{day}'"))
elif op == "dataset":
    out = len(ns.to_pyarrow_dataset().scanner(filter=pc.field("event_date") == day).plan)
else:
    raise SystemExit(op)
print(json.dumps({"seconds": time.perf_counter() - t0, "out": out}))
"""


def build_planning(n: int, rebuild: bool) -> tuple[Path, dt.date]:
    """``n`` ``__manifest`` rows, real leaves for the last 10 dates (see bench_million)."""
    from bench_million import BATCH, SCHEMA, data, day

    root = DATA_DIR / f"engines-plan-{n}"
    marker = root.parent / f"{root.name}.BUILT"
    real = 10
    if marker.exists() and not rebuild:
        return root, day(n - 1)
    shutil.rmtree(root, ignore_errors=True)
    started = time.perf_counter()
    from airflow_provider_lance.namespace import PartitionField

    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    synthetic = n - real
    for lo in range(0, synthetic, BATCH):
        hi = min(synthetic, lo + BATCH)
        state = ns.state()
        planned = state.plan_partitions([(day(i),) for i in range(lo, hi)], read_version=1)
        lance.write_dataset(state.rows_table(planned.rows), f"{root}/__manifest", mode="append")
        print(f"    {hi:,} manifest rows", flush=True)
    ns = PartitionedNamespace.open(root)
    ns.write(data(synthetic, real, 1_000))
    ns.maintain()
    marker.write_text("built")
    print(f"  built {n:,} partitions in {time.perf_counter() - started:.0f}s", flush=True)
    return root, day(n - 1)


def planning(n: int, reps: int, rebuild: bool) -> dict[str, Any]:
    root, last = build_planning(n, rebuild)
    fresh: dict[str, list[float]] = {"prune": [], "dataset": []}
    for rep in range(reps):
        for op in ["prune", "dataset"] if rep % 2 == 0 else ["dataset", "prune"]:
            out = subprocess.run(
                [sys.executable, "-c", PROBE, op, str(root), last.isoformat()],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["out"] == 1, result
            fresh[op].append(result["seconds"])
    ns = PartitionedNamespace.open(root)
    sql, expr = f"event_date = DATE '{last}'", pc.field("event_date") == last
    warm: dict[str, list[float]] = {"prune": [], "dataset": []}
    for rep in range(reps * 4 + 1):
        for op in ("prune", "dataset"):
            t0 = time.perf_counter()
            if op == "prune":
                assert len(ns.prune(sql)) == 1
            else:
                assert len(ns.to_pyarrow_dataset().scanner(filter=expr).plan) == 1
            if rep:
                warm[op].append(time.perf_counter() - t0)
    table = [
        [
            f"{n:,}",
            how,
            fmt_ms(summarize(s["prune"])["median_ms"]),
            fmt_ms(summarize(s["dataset"])["median_ms"]),
        ]
        for how, s in (("fresh process", fresh), ("warm, one process", warm))
    ]
    print_table(
        ["partitions", "", "prune one date", "dataset scan's plan"],
        table,
        title="planning one date, median ms",
    )
    return {"fresh": fresh, "warm": warm, "table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--rows", type=int, default=1_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument(
        "--plan-partitions", type=int, default=1_000_000, help="0: no planning benchmark"
    )
    parser.add_argument("--plan-reps", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    env = print_environment()
    print(f"load average: {os.getloadavg()}", flush=True)
    ours = build("ours", args.partitions, args.rows, args.rebuild)
    delta = build("delta", args.partitions, args.rows, args.rebuild)
    middle = EPOCH + dt.timedelta(days=args.partitions // 2)
    span = max(1, args.partitions // 100)
    ranges = {
        "one date": (middle, middle),
        "1% range": (middle, middle + dt.timedelta(days=span - 1)),
    }
    results = run_queries(Systems(ours, delta), args.reps, ranges)
    table = report(results)
    print(f"load average: {os.getloadavg()}", flush=True)
    plan = None
    if args.plan_partitions:
        plan = planning(args.plan_partitions, args.plan_reps, args.rebuild)
        print(f"load average: {os.getloadavg()}", flush=True)
    write_results(
        "engines",
        {"environment": env, "queries": results, "table": table, "planning": plan},
    )


if __name__ == "__main__":
    main()
