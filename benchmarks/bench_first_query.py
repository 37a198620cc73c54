"""The first query of a process: planning and reading one date in a fresh interpreter,
this project against delta-rs and the bare Lance calls, on local disk (goal 4 of issue 26).

    python benchmarks/bench_first_query.py                  # 1,000 dates x 1,000 rows, 7 reps
    python benchmarks/bench_first_query.py --partitions 200 --rows 100 --reps 5

An Airflow task is a new process: whatever a library caches at module level (schemas,
sessions, parsed specs, lazily imported modules) is empty at its first query. Each sample
here is a new interpreter that first imports what a user's code imports (``from
airflow_provider_lance.namespace import PartitionedNamespace``; ``import deltalake``), then
times one call from after the imports to its result: ``first`` is that call, ``second``
the same call again in the same process (a fresh handle, warm module state), the figure
``bench_peers.py`` reports. Modules that the first call imports itself (lazy imports) are
part of its cost; they are listed, and the variant ``preloaded`` imports them before the
clock starts, so that the difference is their import time. Samples interleave the systems
(the order alternates per sample); medians.

The floor (``floor``) is the bare Lance calls the same query needs, in the same kind of fresh
interpreter: one filtered scan of a ``__manifest`` that holds a row per date, then (to read)
the leaf opened at the version that row names and scanned (``bench_floor.plan`` /
``bench_floor.read``, on the tables of ``_peers.Floor``). It is what any layout of
partitions as Lance tables pays for its first query: opening a Lance dataset and its first
scan start Lance's runtime in the process.

The tables are built once (``benchmarks/.data/first-query-<dates>x<rows>/``) with the
drivers of ``_peers.py`` and reused.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATA_DIR, print_environment, print_table, write_results
from _peers import Delta, Floor, Ours
from bench_floor import dates, rows

BENCH = Path(__file__).resolve().parent
HEAVY = ("lance", "datafusion", "pyarrow.dataset", "pyarrow.compute", "numpy", "deltalake")

PROBE = """
import importlib, json, sys, time
sys.path.insert(0, BENCH)
system, root, op, day, preload = sys.argv[1:6]
if system == "ours":
    from airflow_provider_lance.namespace import PartitionedNamespace
elif system == "delta":
    import deltalake
else:
    import lance
for name in json.loads(preload):
    try:
        importlib.import_module(name)
    except Exception:
        pass
from _peers import Delta, Ours  # the drivers: a call each, as in bench_peers
import bench_floor
import datetime as dt
import pathlib
day = dt.date.fromisoformat(day)
if system == "floor":
    floor = pathlib.Path(root)
    call = (lambda: bench_floor.plan(floor, day)) if op == "plan" else (
        lambda: bench_floor.read(floor, day, day))
else:
    target = (Ours if system == "ours" else Delta)(root)
    call = (lambda: target.plan(day)) if op == "plan" else (lambda: target.read(day, day))
before = set(sys.modules)
t0 = time.perf_counter()
first = call()
t1 = time.perf_counter()
loaded = sorted(set(sys.modules) - before)
second_t0 = time.perf_counter()
call()
t2 = time.perf_counter()
size = first if isinstance(first, int) else first.num_rows
print(json.dumps({"first": t1 - t0, "second": t2 - second_t0, "loaded": loaded, "size": size}))
""".replace("BENCH", repr(str(BENCH)))


def build(root: Path, partitions: int, per: int) -> dict[str, str]:
    """The tables of ``partitions`` dates x ``per`` rows (built once, then reused)."""
    marker = root / "BUILT-3"
    locations = {s: str(root / s) for s in ("ours", "delta", "floor")}
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        data = rows(0, partitions, per)
        Ours(locations["ours"]).load(data)
        Delta(locations["delta"]).load(data)
        Floor(locations["floor"]).load(data)
        marker.write_text("built\n")
        print(f"built {root}", flush=True)
    return locations


def probe(system: str, root: str, op: str, day: dt.date, preload: list[str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, system, root, op, day.isoformat(), json.dumps(preload)],
        capture_output=True,
        text=True,
        env={**os.environ, "LANCE_LOG": "error"},
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=7, help="fresh processes per figure")
    parser.add_argument("--data", type=Path, default=DATA_DIR, help="where the tables go")
    args = parser.parse_args()
    env = print_environment()
    locations = build(
        args.data / f"first-query-{args.partitions}x{args.rows}", args.partitions, args.rows
    )
    day = dates(args.partitions // 2, 1)[0]
    systems = list(locations)
    # which modules each first call imports lazily (one untimed probe each)
    lazy = {
        (s, op): probe(s, locations[s], op, day, [])["loaded"]
        for s in systems
        for op in ("plan", "read")
    }
    samples: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, set[int]] = {}
    for rep in range(args.reps):
        order = systems if rep % 2 == 0 else systems[::-1]
        for op in ("plan", "read"):
            for variant in ("first", "preloaded"):
                for s in order:
                    preload = lazy[(s, op)] if variant == "preloaded" else []
                    out = probe(s, locations[s], op, day, preload)
                    key = f"{op} one date"
                    by = samples.setdefault(f"{key}, {variant}", {})
                    by.setdefault(s, []).append(out["first"])
                    if variant == "first":
                        samples.setdefault(f"{key}, second call", {}).setdefault(s, []).append(
                            out["second"]
                        )
                    sizes.setdefault(f"{op} {s}", set()).add(out["size"])
        print(f"  sample {rep + 1}/{args.reps} done", flush=True)
    table, medians = [], {}
    for key, by in samples.items():
        med = {s: statistics.median(v) * 1000 for s, v in by.items()}
        low = {s: min(v) * 1000 for s, v in by.items()}
        medians[key] = med
        table.append(
            [
                key,
                f"{med['ours']:.1f} ({low['ours']:.1f})",
                f"{med['delta']:.1f} ({low['delta']:.1f})",
                f"{med['floor']:.1f} ({low['floor']:.1f})",
                f"{med['ours'] / med['delta']:.2f}x ({low['ours'] / low['delta']:.2f}x)",
                f"{med['floor'] / med['delta']:.2f}x ({low['floor'] / low['delta']:.2f}x)",
                f"{med['ours'] / med['floor']:.2f}x ({low['ours'] / low['floor']:.2f}x)",
            ]
        )
    print_table(
        [
            "fresh interpreter, imports excluded",
            "ours ms (min)",
            "delta-rs ms (min)",
            "Lance floor ms (min)",
            "ours/delta-rs (of mins)",
            "floor/delta-rs",
            "ours/floor",
        ],
        table,
        title=f"{args.partitions:,} dates x {args.rows:,} rows, local disk, medians of {args.reps}",
    )
    for (s, op), loaded in lazy.items():
        heavy = sorted({m for m in loaded if m.startswith(HEAVY)})
        print(f"  {s} {op}: the first call imports {len(loaded)} modules; heavy: {heavy}")
    print(f"  results per system (partitions planned / rows read): {sizes}")
    write_results(
        "first_query",
        {
            "environment_summary": env,
            "medians_ms": medians,
            "samples_s": samples,
            "lazy_imports": {f"{s} {op}": v for (s, op), v in lazy.items()},
        },
    )


if __name__ == "__main__":
    main()
