"""A namespace of up to a million partitions (goal 3 of issue 26): what a scheduled task pays,
in a fresh process each time, as the namespace grows.

    .venv/bin/python benchmarks/bench_million.py                          # 1k 10k 100k 1M
    .venv/bin/python benchmarks/bench_million.py --sizes 1000 100000 --reps 3

For each size N (dates, one partition each, identity-partitioned on ``event_date``):

* **build** (cached under ``benchmarks/.data/million-<N>/``): ``__manifest`` rows for all N
  partitions, planned by the format's own code (``NamespaceState.plan_partitions``) and
  appended in batches of 100,000; real leaf tables, written through ``ns.write`` (1,000 rows
  per date), only for the last 1% of the dates (at least 10): the dates the benchmark reads.
  The other rows name leaves that were never created: nothing measured here opens them
  (planning reads ``__manifest`` only), and creating a million empty Lance tables would
  cost ~15 minutes and 12 GB of small files without changing what is measured;
* **plan one date**, **read one date** (a real one), **read a 1% range** (the real dates)
  and **a daily append** (1,000 rows of the next new date), each the one call of a fresh
  interpreter after its imports (as an Airflow task runs), medians over ``--reps``; and the
  **peak RSS of the planning process** (``VmHWM``, imports included; ``ru_maxrss`` would
  carry the parent's size over the ``execve``);
* **the floor**: the bare Lance calls each operation needs (``floor-*`` in the probe: open
  ``__manifest`` and find the date's row through its index; read that leaf; write a leaf
  and publish two rows with one conditional ``merge_insert``), in a fresh process too; for
  the append also with the lookup a writer must make before it writes a leaf (is the date
  there, at which version: the floor's own plan on the handle it publishes with), since
  the floor without it could not append to an existing date;
* **delta-rs** beside it for the 1% range read, at the sizes up to ``--delta-max`` (one
  Parquet file per date: building more is the limit of this machine, not of delta-rs),
  reported per partition read.

Targets of the issue: at 1M, planning one date < 50 ms, reading one date < 50 ms, a daily
append < 100 ms, peak memory of planning < 500 MB; from 1,000 to 100,000 partitions none
grows more than 2x; the 1% range read costs no more per partition than delta-rs's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: F401  (quiets pylance's log before it is imported)
import lance
import numpy as np
import pyarrow as pa
from _common import DATA_DIR, print_environment, print_table, write_results

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

BASE = dt.date(1800, 1, 1)
ROWS = 1_000
BATCH = 100_000
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("event_date", pa.date32()),
        pa.field("amount", pa.float64()),
    ]
)

PROBE = r"""
import json, resource, sys, time
op, uri, first, last, rows = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
import datetime as dt
import pyarrow as pa
if op.startswith("delta"):
    import deltalake
else:
    from airflow_provider_lance.namespace import PartitionedNamespace
t0 = time.perf_counter()
if op == "plan":
    out = len(PartitionedNamespace.open(uri).prune(f"event_date = DATE '{first}'"))
elif op == "read":
    out = PartitionedNamespace.open(uri).to_table(
        filter=f"event_date BETWEEN DATE '{first}' AND DATE '{last}'"
    ).num_rows
elif op == "append":
    day = dt.date.fromisoformat(first)
    data = pa.table(
        {
            "id": pa.array(range(rows), pa.int64()),
            "event_date": pa.array([day] * rows, pa.date32()),
            "amount": pa.array([1.0] * rows, pa.float64()),
        }
    )
    out = PartitionedNamespace.open(uri).write(data).rows
elif op.startswith("floor"):
    # The bare Lance calls the operation needs, from a fresh process: open __manifest and
    # find the date's leaf row by its (indexed) partition column; for a read, then read
    # the leaf; for an append, write the leaf and publish its rows with one conditional
    # merge_insert (rows outside every spec-version namespace: the format ignores them).
    import lance
    import pyarrow.compute as pc
    day = dt.date.fromisoformat(first)
    manifest = lance.dataset(f"{uri}/__manifest")
    if op == "floor-append-lookup":  # what a writer must learn first: is the date there?
        found = manifest.to_table(
            columns=["object_id", "read_version"], filter=pc.field("event_date") == pc.scalar(day)
        )
        assert found.num_rows == 0, found
    if op.startswith("floor-append"):
        leaf = f"{uri}/floor-{first}"
        lance.write_dataset(
            pa.table({"id": pa.array(range(rows), pa.int64())}), leaf, mode="overwrite"
        )
        row = {f.name: None for f in manifest.schema}
        ids = [f"__floor${first}", f"__floor${first}$dataset"]
        new = [{**row, "object_id": i, "object_type": "namespace", "location": leaf} for i in ids]
        (
            manifest.merge_insert("object_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .conflict_retries(0)
            .execute(pa.Table.from_pylist(new, schema=manifest.schema))
        )
        out = rows
    else:
        found = manifest.to_table(
            columns=["object_id", "object_type", "location", "read_version"],
            filter=pc.field("event_date") == pc.scalar(day),
        )
        found = found.filter(pc.equal(found.column("object_type"), "table"))
        out = found.num_rows
        if op == "floor-read":
            location = found.column("location")[0].as_py()
            out = lance.dataset(f"{uri}/{location}").to_table().num_rows
elif op == "delta-read":  # its fastest read (see _peers.Delta.read)
    sql = f"SELECT * FROM t WHERE event_date BETWEEN DATE '{first}' AND DATE '{last}'"
    table = deltalake.DeltaTable(uri)
    out = pa.table(deltalake.QueryBuilder().register("t", table).execute(sql)).num_rows
else:
    raise SystemExit(f"unknown op {op}")
seconds = time.perf_counter() - t0
# VmHWM, the peak of this process's own memory: ru_maxrss is kept across execve, so it
# would report the parent's size at the fork when that is larger.
with open("/proc/self/status") as status:
    hwm = [line for line in status if line.startswith("VmHWM:")]
usage = resource.getrusage(resource.RUSAGE_SELF)
peak_mb = int(hwm[0].split()[1]) / 1024 if hwm else usage.ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "out": out, "peak_mb": peak_mb}))
"""


def day(i: int) -> dt.date:
    return BASE + dt.timedelta(days=i)


def data(first: int, dates: int, rows: int) -> pa.Table:
    """``rows`` rows per date for dates ``first`` .. ``first + dates - 1``."""
    n = dates * rows
    base = (BASE - dt.date(1970, 1, 1)).days + first
    days = (np.arange(n, dtype=np.int32) // rows) + base
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.int64) + first * rows),
            "event_date": pa.array(days, pa.int32()).cast(pa.date32()),
            "amount": pa.array(np.random.default_rng(first).random(n)),
        },
        schema=SCHEMA,
    )


def real_dates(n: int) -> int:
    return max(10, n // 100)


def build(n: int, rebuild: bool) -> Path:
    """The namespace of ``n`` dates (see the module docstring), built once."""
    root = DATA_DIR / f"million-{n}"
    marker = root / "BUILT"
    if marker.exists() and not rebuild:
        print(f"  reusing {root} (maintained: compacted and indexed, as upkeep keeps it)")
        PartitionedNamespace.open(root).maintain()  # the appends of earlier runs
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    real = real_dates(n)
    synthetic = n - real
    manifest_uri = f"{root}/__manifest"
    for lo in range(0, synthetic, BATCH):
        hi = min(synthetic, lo + BATCH)
        state = ns.state()
        rows = state.plan_partitions([(day(i),) for i in range(lo, hi)], read_version=1).rows
        lance.write_dataset(state.rows_table(rows), manifest_uri, mode="append")
        print(f"    {hi:,} manifest rows", flush=True)
    ns = PartitionedNamespace.open(root)
    ns.write(data(synthetic, real, ROWS))
    ns.maintain()  # one compacted __manifest, as upkeep keeps it
    marker.write_text(json.dumps({"seconds": time.perf_counter() - started}))
    print(f"  built {n:,} partitions in {time.perf_counter() - started:.0f}s", flush=True)
    return root


def new_date(root: Path, n: int) -> dt.date:
    """A date no run appended to the namespace of ``n`` dates at ``root`` yet (each is
    marked with an ``APPENDED-<date>`` file: the build is reused across runs)."""
    marks = root.glob("APPENDED-*")
    used = [dt.date.fromisoformat(p.name.removeprefix("APPENDED-")) for p in marks]
    new = max([day(n - 1), *used]) + dt.timedelta(days=1)
    (root / f"APPENDED-{new}").touch()
    return new


def build_delta(n: int, rebuild: bool) -> Path:
    """delta-rs with ``n`` dates, one Parquet file each (1 row per date outside the range
    the benchmark reads, ``ROWS`` inside it)."""
    from deltalake import write_deltalake

    root = DATA_DIR / f"million-delta-{n}"
    marker = root / "BUILT"
    if marker.exists() and not rebuild:
        return root
    shutil.rmtree(root, ignore_errors=True)
    real = real_dates(n)
    write_deltalake(str(root), data(0, n - real, 1), partition_by=["event_date"])
    write_deltalake(str(root), data(n - real, real, ROWS), mode="append")
    marker.write_text("built")
    return root


def probe(op: str, uri: Path, first: dt.date, last: dt.date, rows: int = ROWS) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, op, str(uri), first.isoformat(), last.isoformat(), str(rows)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(samples: list[dict[str, Any]], key: str) -> float:
    return statistics.median(s[key] for s in samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000, 1_000_000])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--delta-max", type=int, default=100_000)
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    env = print_environment()
    results: dict[str, Any] = {"environment": env, "sizes": {}}
    table = []
    for n in args.sizes:
        print(f"{n:,} partitions", flush=True)
        root = build(n, args.rebuild)
        real = real_dates(n)
        first, last = day(n - real), day(n - 1)
        one = day(n - 1)
        samples: dict[str, list[dict[str, Any]]] = {
            "plan": [],
            "read": [],
            "range": [],
            "append": [],
            "floor-plan": [],
            "floor-read": [],
            "floor-append": [],
            "floor-append-lookup": [],
        }
        delta: list[dict[str, Any]] = []
        delta_root = build_delta(n, args.rebuild) if n <= args.delta_max else None
        for _ in range(args.reps):
            samples["plan"].append(probe("plan", root, one, one))
            samples["floor-plan"].append(probe("floor-plan", root, one, one))
            samples["read"].append(probe("read", root, one, one))
            samples["floor-read"].append(probe("floor-read", root, one, one))
            samples["range"].append(probe("read", root, first, last))
            if delta_root is not None:
                delta.append(probe("delta-read", delta_root, first, last))
            new = new_date(root, n)
            samples["append"].append(probe("append", root, new, new))
            samples["floor-append"].append(probe("floor-append", root, new, new))
            new = new_date(root, n)
            samples["floor-append-lookup"].append(probe("floor-append-lookup", root, new, new))
        assert all(s["out"] == 1 for s in samples["plan"] + samples["floor-plan"]), samples
        assert all(s["out"] == ROWS for s in samples["read"] + samples["floor-read"]), samples
        assert all(s["out"] == ROWS * real for s in samples["range"]), samples["range"]
        assert all(s["out"] == ROWS * real for s in delta), delta
        row = {
            "partitions": n,
            "plan one date ms": 1000 * median(samples["plan"], "seconds"),
            "plan floor ms": 1000 * median(samples["floor-plan"], "seconds"),
            "read one date ms": 1000 * median(samples["read"], "seconds"),
            "read floor ms": 1000 * median(samples["floor-read"], "seconds"),
            "daily append ms": 1000 * median(samples["append"], "seconds"),
            "append floor ms": 1000 * median(samples["floor-append"], "seconds"),
            "+ lookup ms": 1000 * median(samples["floor-append-lookup"], "seconds"),
            "plan peak MB": median(samples["plan"], "peak_mb"),
            "1% range ms": 1000 * median(samples["range"], "seconds"),
            "1% range us/partition": 1e6 * median(samples["range"], "seconds") / real,
            "delta-rs 1% us/partition": (
                1e6 * median(delta, "seconds") / real if delta else float("nan")
            ),
        }
        table.append(row)
        results["sizes"][str(n)] = {"summary": row, "samples": samples, "delta": delta}
        print(json.dumps(row), flush=True)
    headers = list(table[0])
    print_table(
        headers,
        [[f"{r[h]:,.0f}" if h == "partitions" else f"{r[h]:,.1f}" for h in headers] for r in table],
        title="fresh process per call, medians",
    )
    write_results("million", results)


if __name__ == "__main__":
    main()
