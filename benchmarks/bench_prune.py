"""Partition pruning latency versus the number of partitions.

For each size (default 1k, 10k, 100k partitions) a namespace identity-partitioned on one
column (``event_date date32`` by default, or ``day int64`` with ``--key int``) is built once
with ``create_partitions`` in batches and cached under ``benchmarks/.data/``; reruns reuse it.

Measured at each size (median and p95 over many repetitions, in ms):

* the baseline: a raw scan of the ``__manifest`` table,
  ``lance.dataset(root + "/__manifest").to_table(filter="object_type = 'table'")``
  (and the same scan on an already opened dataset);
* ``PartitionedNamespace.open(root)`` alone;
* ``prune`` with a point filter (equality on one value) and a 1% range filter (a BETWEEN
  covering 1% of the partitions), warm (the same namespace object, nothing changed) and cold
  (a freshly opened namespace each time: open + prune, with the open share reported);
* ``partitions()`` warm and cold.

"Cold" means a new ``PartitionedNamespace`` (so new pylance dataset objects and no cached
manifest rows); the OS page cache stays warm, as it would for a scheduler process that
plans many queries.

    .venv/bin/python benchmarks/bench_prune.py                     # 1k, 10k, 100k
    .venv/bin/python benchmarks/bench_prune.py --sizes 1000 10000 --reps 200
    .venv/bin/python benchmarks/bench_prune.py --build-only        # just build the caches
    .venv/bin/python benchmarks/bench_prune.py --profile           # + cProfile of the largest size
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import (
    DATA_DIR,
    RESULTS_DIR,
    Key,
    cpu_jiffies,
    dir_size,
    fmt_ms,
    fmt_pct,
    lance,
    library_revision,
    measure,
    measure_split,
    print_environment,
    print_table,
    profile_call,
    steal_pct,
    write_results,
)

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

NAME = "bench_prune"
SCAN_FILTER = "object_type = 'table'"

#: Targets for prune latency (median, ms) by size; the growth target is checked separately.
TARGETS_MS = {10_000: 10.0, 100_000: 50.0}
#: Reference: pyiceberg 0.12 + SQLite catalog at 10k partitions (measured on this machine).
PYICEBERG_10K_MS = {"point": 34.0, "range_1pct": 65.0}


# -- the namespace under test -------------------------------------------------------------
def manifest_uri(root: Path) -> str:
    return str(root / "__manifest")


def manifest_facts(root: Path) -> dict[str, Any]:
    ds = lance.dataset(manifest_uri(root))
    return {
        "manifest_version": int(ds.version),
        "manifest_rows": ds.count_rows(),
        "manifest_fragments": len(ds.get_fragments()),
        "leaf_rows": ds.count_rows(filter=SCAN_FILTER),
        "manifest_bytes": dir_size(root / "__manifest"),
    }


def build(n: int, key: Key, batch: int, rebuild: bool) -> dict[str, Any]:
    """Build (or reuse) the cached namespace with ``n`` partitions; returns its build facts."""
    root = DATA_DIR / f"prune-{key.kind}-{n}"
    meta_path = DATA_DIR / f"prune-{key.kind}-{n}.json"
    if not rebuild and meta_path.exists() and root.exists():
        meta = json.loads(meta_path.read_text())
        try:
            facts = manifest_facts(root)
        except Exception as exc:  # a broken cache is rebuilt
            print(f"  cache {root} unreadable ({exc}); rebuilding", flush=True)
        else:
            if facts["leaf_rows"] == n:
                meta.update(facts, cached=True)
                built_by = meta.get("library_revision", "unknown")
                print(f"  reusing {root} (built in {meta['build_s']:.1f}s)", flush=True)
                if built_by != library_revision():
                    print(
                        f"  note: built by library revision {built_by}, now "
                        f"{library_revision()}; pass --rebuild if the format changed",
                        flush=True,
                    )
                return meta
            print(f"  cache {root} has {facts['leaf_rows']} partitions; rebuilding", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    meta_path.unlink(missing_ok=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    print(f"  building {n:,} partitions in {root} (batches of {batch:,})", flush=True)
    started = time.perf_counter()
    ns = PartitionedNamespace.create(
        root, schema=key.schema(), partition_fields=[PartitionField(key.column, key.column)]
    )
    batches = []
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        v0, t0, j0 = ns.version, time.perf_counter(), cpu_jiffies()
        created = ns.create_partitions([{key.column: key.value(i)} for i in range(lo, hi)])
        seconds = time.perf_counter() - t0
        steal = steal_pct(j0, cpu_jiffies())
        batches.append(
            {
                "from": lo,
                "to": hi,
                "seconds": seconds,
                "manifest_commits": ns.version - v0,
                "steal_pct": steal,
            }
        )
        assert len(created) == hi - lo
        print(
            f"    {hi:>9,} / {n:,}: batch {seconds:6.1f}s "
            f"({seconds / (hi - lo) * 1000:.2f} ms/partition, "
            f"{ns.version - v0} manifest commit(s), cpu steal {fmt_pct(steal)})",
            flush=True,
        )
    meta = {
        "size": n,
        "key": key.kind,
        "batch": batch,
        "build_s": time.perf_counter() - started,
        "library_revision": library_revision(),
        "batches": batches,
    }
    meta_path.write_text(json.dumps(meta, indent=2))
    meta.update(manifest_facts(root), cached=False)
    return meta


# -- measurements -------------------------------------------------------------------------
def expect(count: int):  # type: ignore[no-untyped-def]
    def check(result: Any) -> None:
        got = result.num_rows if isinstance(result, pa.Table) else len(result)
        if got != count:
            raise AssertionError(f"expected {count} partitions, got {got}")

    return check


def run_size(n: int, key: Key, args: argparse.Namespace) -> dict[str, Any]:
    root = DATA_DIR / f"prune-{key.kind}-{n}"
    uri = manifest_uri(root)
    width = max(1, n // 100)
    # Rotate through values spread over the whole key range (not one hot value).
    starts = [(k * 7919) % (n - width + 1) for k in range(64)]
    points = itertools.cycle([key.point(s) for s in starts])
    ranges = itertools.cycle([key.between(s, s + width - 1) for s in starts])
    common = {"reps": args.reps, "max_seconds": args.max_seconds, "min_reps": args.min_reps}
    out: dict[str, Any] = {"range_width": width, "example_filters": {}}
    out["example_filters"] = {"point": key.point(starts[1]), "range": key.between(0, width - 1)}

    def timed(label: str, fn: Any, **kw: Any) -> None:
        print(f"  {label} ...", end="", flush=True)
        out[label] = measure(fn, **common, **kw)
        print(f" median {fmt_ms(out[label]['median_ms'])} ms", flush=True)

    def timed_split(label: str, fn: Any, names: list[str]) -> None:
        print(f"  {label} ...", end="", flush=True)
        res = measure_split(fn, names, **common)
        for name, stats in res.items():
            out[name] = stats
        print(f" median {fmt_ms(res[names[-1]]['median_ms'])} ms", flush=True)

    # Baseline: the raw manifest scan (open + scan, as a reader without caching would do).
    timed(
        "manifest_scan",
        lambda: lance.dataset(uri).to_table(filter=SCAN_FILTER),
        check=expect(n),
    )
    ds = lance.dataset(uri)
    timed("manifest_scan_opened", lambda: ds.to_table(filter=SCAN_FILTER), check=expect(n))

    timed("open", lambda: PartitionedNamespace.open(root))

    def cold(filters: Any, count: int):  # type: ignore[no-untyped-def]
        def run() -> tuple[float, float, float]:
            flt = next(filters)
            t0 = time.perf_counter()
            ns = PartitionedNamespace.open(root)
            t1 = time.perf_counter()
            got = ns.prune(flt)
            t2 = time.perf_counter()
            if len(got) != count:
                raise AssertionError(f"{flt}: expected {count} partitions, got {len(got)}")
            return t1 - t0, t2 - t1, t2 - t0

        return run

    timed_split(
        "cold_point",
        cold(points, 1),
        ["cold_point_open", "cold_point_prune_after_open", "cold_point"],
    )
    timed_split(
        "cold_range",
        cold(ranges, width),
        ["cold_range_open", "cold_range_prune_after_open", "cold_range"],
    )

    ns = PartitionedNamespace.open(root)
    ns.partitions()  # load the manifest rows once
    timed("warm_point", lambda: ns.prune(next(points)), check=expect(1))
    timed("warm_range", lambda: ns.prune(next(ranges)), check=expect(width))
    timed("warm_partitions", ns.partitions, check=expect(n))
    timed("cold_partitions", lambda: PartitionedNamespace.open(root).partitions(), check=expect(n))
    return out


def profile_largest(n: int, key: Key, reps: int, top: int) -> dict[str, str]:
    """cProfile of warm and cold prune (point + range) at the largest size."""
    root = DATA_DIR / f"prune-{key.kind}-{n}"
    width = max(1, n // 100)
    point, rng = key.point(n // 2), key.between(n // 2, n // 2 + width - 1)
    ns = PartitionedNamespace.open(root)
    ns.partitions()
    cases = {
        "warm_point": lambda: [ns.prune(point) for _ in range(reps)],
        "warm_range": lambda: [ns.prune(rng) for _ in range(reps)],
        "cold_point": lambda: [PartitionedNamespace.open(root).prune(point) for _ in range(reps)],
        "cold_range": lambda: [PartitionedNamespace.open(root).prune(rng) for _ in range(reps)],
    }
    texts = {}
    for case, fn in cases.items():
        dump = RESULTS_DIR / f"{NAME}_{case}_{n}.prof"
        _, text = profile_call(fn, dump, top=top)
        texts[case] = text
        print(f"===== cProfile {case} at {n:,} partitions ({reps} calls) -> {dump}")
        print(text)
    return texts


# -- reporting --------------------------------------------------------------------------
ROWS = [
    ("manifest_scan", "manifest scan: lance.dataset+to_table (baseline)"),
    ("manifest_scan_opened", "manifest scan, dataset already open"),
    ("open", "PartitionedNamespace.open"),
    ("warm_point", "prune point, warm"),
    ("warm_range", "prune 1% range, warm"),
    ("cold_point", "open + prune point (cold)"),
    ("cold_point_prune_after_open", "  of which prune after open"),
    ("cold_range", "open + prune 1% range (cold)"),
    ("cold_range_prune_after_open", "  of which prune after open"),
    ("warm_partitions", "partitions(), warm"),
    ("cold_partitions", "open + partitions() (cold)"),
]


def _max_steal(result: dict[str, Any]) -> float | None:
    values = [
        v["steal_pct"]
        for v in result.values()
        if isinstance(v, dict) and v.get("steal_pct") is not None
    ]
    return max(values) if values else None


def _build_steal(meta: dict[str, Any]) -> float | None:
    values = [b["steal_pct"] for b in meta.get("batches", []) if b.get("steal_pct") is not None]
    if not values:
        return None
    weights = [b["seconds"] for b in meta["batches"] if b.get("steal_pct") is not None]
    return sum(v * w for v, w in zip(values, weights, strict=True)) / sum(weights)


def report(sizes: list[int], results: dict[int, dict[str, Any]], builds: dict[int, Any]) -> None:
    print_table(
        [
            "size",
            "build s",
            "ms/partition",
            "manifest rows",
            "fragments",
            "manifest MB",
            "cpu steal",
            "cached",
        ],
        [
            [
                f"{n:,}",
                f"{builds[n]['build_s']:.1f}",
                f"{builds[n]['build_s'] / n * 1000:.2f}",
                f"{builds[n]['manifest_rows']:,}",
                builds[n]["manifest_fragments"],
                f"{builds[n]['manifest_bytes'] / 1e6:.1f}",
                fmt_pct(_build_steal(builds[n])),
                "yes" if builds[n]["cached"] else "no",
            ]
            for n in sizes
        ],
        title="Build (create_partitions in batches; cached builds report their original time)",
    )
    print_table(
        ["metric (median / p95 ms)", *(f"{n:,}" for n in sizes)],
        [
            [label]
            + [
                f"{fmt_ms(results[n][key]['median_ms'])} / {fmt_ms(results[n][key]['p95_ms'])}"
                for n in sizes
            ]
            for key, label in ROWS
        ],
        title="Latency by number of partitions",
    )
    steal = ", ".join(f"{n:,}: {fmt_pct(_max_steal(results[n]))}" for n in sizes)
    print(
        f"max CPU steal during the measurements: {steal} (time the hypervisor gave to other "
        "tenants; high values inflate the figures)\n"
    )
    if len(sizes) > 1:
        first = sizes[0]
        growth_keys = [
            "manifest_scan",
            "manifest_scan_opened",
            "warm_point",
            "warm_range",
            "cold_point",
            "cold_range",
            "warm_partitions",
        ]
        print_table(
            ["median growth vs " + f"{first:,}", *(f"{n:,}" for n in sizes[1:])],
            [
                [k]
                + [
                    f"x{results[n][k]['median_ms'] / results[first][k]['median_ms']:.1f}"
                    for n in sizes[1:]
                ]
                for k in growth_keys
            ],
            title="Growth (ratio of medians; partitions grow x10 per step)",
        )
    rows = []
    for n in sizes:
        if n not in TARGETS_MS:
            continue
        for k in ("warm_point", "warm_range", "cold_point", "cold_range"):
            median = results[n][k]["median_ms"]
            rows.append(
                [
                    f"{n:,}",
                    k,
                    fmt_ms(median),
                    f"< {TARGETS_MS[n]:.0f}",
                    "met" if median < TARGETS_MS[n] else "MISSED",
                ]
            )
    if rows:
        print_table(["size", "prune", "median ms", "target ms", "verdict"], rows, title="Targets")
    if 10_000 in results:
        r = results[10_000]
        print(
            "Reference at 10k partitions, pyiceberg 0.12 + SQLite catalog: point "
            f"{PYICEBERG_10K_MS['point']:.0f} ms, 1% range {PYICEBERG_10K_MS['range_1pct']:.0f} ms"
            f"; here cold {fmt_ms(r['cold_point']['median_ms'])} / "
            f"{fmt_ms(r['cold_range']['median_ms'])} ms, warm "
            f"{fmt_ms(r['warm_point']['median_ms'])} / {fmt_ms(r['warm_range']['median_ms'])} ms."
        )
    if 10_000 in results and 100_000 in results:
        a, b = results[10_000], results[100_000]
        scan = b["manifest_scan"]["median_ms"] / a["manifest_scan"]["median_ms"]
        for k in ("warm_point", "warm_range", "cold_point", "cold_range"):
            g = b[k]["median_ms"] / a[k]["median_ms"]
            verdict = "ok" if g <= scan * 1.1 else "GROWS FASTER"
            print(f"growth 10k->100k: {k} x{g:.1f} vs manifest scan x{scan:.1f}: {verdict}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--key", choices=["date", "int"], default="date")
    parser.add_argument("--batch", type=int, default=10_000, help="partitions per build call")
    parser.add_argument("--reps", type=int, default=200, help="repetitions per measurement")
    parser.add_argument("--min-reps", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=20.0, help="time cap per measurement")
    parser.add_argument("--rebuild", action="store_true", help="ignore cached namespaces")
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument("--profile-reps", type=int, default=50)
    parser.add_argument("--top", type=int, default=25, help="profile lines to print")
    args = parser.parse_args()
    print_environment()
    key = Key(args.key)
    sizes = sorted(set(args.sizes))

    builds: dict[int, Any] = {}
    for n in sizes:
        print(f"[build] {n:,} partitions", flush=True)
        builds[n] = build(n, key, args.batch, args.rebuild)
    if args.build_only:
        print(json.dumps(builds, indent=2, default=str))
        return

    results: dict[int, dict[str, Any]] = {}
    for n in sizes:
        print(f"[measure] {n:,} partitions", flush=True)
        results[n] = run_size(n, key, args)
    report(sizes, results, builds)
    profiles = profile_largest(sizes[-1], key, args.profile_reps, args.top) if args.profile else {}
    write_results(
        NAME if args.key == "date" else f"{NAME}_{args.key}",
        {
            "key": key.kind,
            "sizes": sizes,
            "targets_ms": TARGETS_MS,
            "reference_pyiceberg_10k_ms": PYICEBERG_10K_MS,
            "builds": builds,
            "results": results,
            "profiles": profiles,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
