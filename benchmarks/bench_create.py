"""The cost of creating many partitions at once.

Two operations, each on a fresh namespace identity-partitioned on ``event_date date32``
(``--key int``: ``day int64``), for N new partitions (default 100, 1000, 10000):

* ``create_partitions``: one call creating N empty partitions;
* ``write``: one ``write(table, mode="append")`` of a table whose rows span N new partitions
  (``--rows-per-partition`` rows each, default 10, rows interleaved across partitions).

Reported per case: wall time, time per partition, the number of ``__manifest`` commits
(``ns.version`` after minus before; it must not depend on N), the number of leaf-table
Lance commits, and a split of the wall time by phase. The split is measured by wrapping the
library's internal functions in this process (exclusive time: a phase does not include the
instrumented phases it calls); the library itself is not modified. ``--existing M`` first
starts from a namespace that already lists M other partitions (bench_prune's cached namespace
of that size, or one built once under ``benchmarks/.data``; only its ``__manifest`` is copied)
to show costs that grow with the size of the namespace rather than with N.

    .venv/bin/python benchmarks/bench_create.py                      # N = 100, 1000, 10000
    .venv/bin/python benchmarks/bench_create.py --sizes 100 1000 --repeat 3
    .venv/bin/python benchmarks/bench_create.py --existing 10000     # into a 10k namespace
    .venv/bin/python benchmarks/bench_create.py --profile            # + cProfile, largest N
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import pkgutil
import shutil
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from _common import (
    DATA_DIR,
    RESULTS_DIR,
    Key,
    print_environment,
    print_table,
    profile_call,
    write_results,
)

import airflow_provider_lance.namespace as package
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

NAME = "bench_create"
WORK_DIR = DATA_DIR / "create-work"
OPS = ("create_partitions", "write")


# -- phase accounting -----------------------------------------------------------------------
WORKER_SUFFIX = " [worker threads, summed]"


class Phases:
    """Exclusive wall time and call counts of instrumented functions (only while enabled).

    Each thread keeps its own call stack. Time spent in threads other than the one that
    started the measured call (e.g. a pool committing leaf tables in parallel) is reported
    under a label ending in :data:`WORKER_SUFFIX`: it is summed over the threads and overlaps
    the main thread's time, so it is not part of the wall-time split.
    """

    def __init__(self) -> None:
        self.enabled = False
        self.main_thread: int | None = None
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._patches: list[tuple[Any, str, Any]] = []

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self._local = threading.local()
        self.main_thread = threading.get_ident()

    def _stack(self) -> list[float]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _enter(self) -> float:
        self._stack().append(0.0)
        return time.perf_counter()

    def _exit(self, label: str, t0: float) -> None:
        elapsed = time.perf_counter() - t0
        stack = self._stack()
        children = stack.pop()
        if threading.get_ident() != self.main_thread:
            label += WORKER_SUFFIX
        with self._lock:
            self.seconds[label] += elapsed - children
            self.calls[label] += 1
        if stack:
            stack[-1] += elapsed

    def main_seconds(self) -> float:
        return sum(v for k, v in self.seconds.items() if not k.endswith(WORKER_SUFFIX))

    def count(self, label: str) -> int:
        return self.calls.get(label, 0) + self.calls.get(label + WORKER_SUFFIX, 0)

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        static = inspect.getattr_static(owner, attr)
        kind = type(static) if isinstance(static, (classmethod, staticmethod)) else None
        func = static.__func__ if kind else static
        phases = self

        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                it = func(*args, **kwargs)
                if not phases.enabled:
                    yield from it
                    return
                while True:
                    t0 = phases._enter()
                    try:
                        item = next(it)
                    except StopIteration:
                        phases._exit(label, t0)
                        return
                    phases._exit(label, t0)
                    yield item

        else:

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not phases.enabled:
                    return func(*args, **kwargs)
                t0 = phases._enter()
                try:
                    return func(*args, **kwargs)
                finally:
                    phases._exit(label, t0)

        self._patches.append((owner, attr, static))
        setattr(owner, attr, kind(wrapper) if kind else wrapper)

    def unwrap_all(self) -> None:
        for owner, attr, static in reversed(self._patches):
            setattr(owner, attr, static)
        self._patches.clear()


PHASES = Phases()


#: (module, attribute path, phase label). Targets are looked up by name, so a refactor of the
#: library only drops the phases it renamed (they are listed as "not instrumented").
TARGETS = [
    # shared
    ("catalog", "NamespaceState.load", "load manifest state (NamespaceState.load)"),
    ("manifest", "Manifest.open", "open __manifest (lance.dataset)"),
    ("lance", "LanceDataset.to_table", "scan __manifest (LanceDataset.to_table)"),
    ("catalog", "NamespaceState.plan_partitions", "plan manifest rows (plan_partitions)"),
    ("catalog", "NamespaceState.leaf_id", "leaf ids (leaf_id)"),
    ("catalog", "NamespaceState.find", "look up partitions (NamespaceState.find)"),
    ("catalog", "NamespaceState.full_rows", "read full manifest rows (full_rows)"),
    ("catalog", "NamespaceState.partitions_from_rows", "build Partition objects"),
    ("catalog", "NamespaceState.rows_table", "manifest rows -> Arrow (rows_table)"),
    # create_partitions
    ("namespace", "PartitionedNamespace.partition_values", "type values (partition_values)"),
    ("leaves", "create_leaf", "create leaf tables (create_leaf)"),
    ("manifest", "Manifest.insert_absent", "manifest commit (insert_absent merge_insert)"),
    # write
    ("schema", "NamespaceSchema.conform_input", "conform input (conform_input)"),
    ("splitting", "split", "route rows (split: group, take, slices)"),
    ("splitting", "partition_values", "evaluate partition expr (DataFusion)"),
    ("schema", "NamespaceSchema.to_leaf", "shape to leaf schema (to_leaf)"),
    ("leaves", "stage_fragments", "write data files (stage_fragments)"),
    ("leaves", "commit_leaf", "commit leaves (commit_leaf)"),
    ("manifest", "Manifest.commit", "manifest commit (compare-and-swap merge_insert)"),
]


def _package_modules() -> list[Any]:
    """Every module of the namespace package (imported), to find re-bound functions."""
    out = []
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        try:
            out.append(importlib.import_module(info.name))
        except Exception:  # a module that does not import is not on the measured path
            continue
    return out


def instrument() -> list[str]:
    """Wrap the functions whose time makes up create_partitions and write.

    A module-level function is also patched in every package module that imported it by
    name (``from .leaves import create_leaf`` binds its own reference). Returns the labels
    that could not be instrumented.
    """
    modules = _package_modules()
    missing = []
    for module_name, path, label in TARGETS:
        name = module_name if module_name == "lance" else f"{package.__name__}.{module_name}"
        try:
            owner: Any = importlib.import_module(name)
            *parents, attr = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            target = inspect.getattr_static(owner, attr)
        except (ImportError, AttributeError):
            missing.append(f"{label} [{module_name}.{path}]")
            continue
        PHASES.wrap(owner, attr, label)
        if not parents:  # a function: patch the names other modules bound to it as well
            for module in modules:
                if module is not owner and module.__dict__.get(attr) is target:
                    PHASES.wrap(module, attr, label)
    return missing


# -- namespaces ---------------------------------------------------------------------------
def template(existing: int, key: Key) -> Path | None:
    """A namespace holding ``existing`` partitions (values 0..existing-1), or None.

    Reuses bench_prune's cached namespace of that size when there is one (same values),
    else builds one under ``benchmarks/.data/create-base-*``.
    """
    if existing <= 0:
        return None
    for root in (
        DATA_DIR / f"prune-{key.kind}-{existing}",
        DATA_DIR / f"create-base-{key.kind}-{existing}",
    ):
        if root.with_suffix(".json").exists() and root.exists():
            print(f"  base namespace with {existing:,} partitions: {root}", flush=True)
            return root
    shutil.rmtree(root, ignore_errors=True)
    print(f"  building a base namespace with {existing:,} partitions in {root}", flush=True)
    t0 = time.perf_counter()
    ns = PartitionedNamespace.create(
        root, schema=key.schema(), partition_fields=[PartitionField(key.column, key.column)]
    )
    for lo in range(0, existing, 10_000):
        hi = min(existing, lo + 10_000)
        ns.create_partitions([{key.column: key.value(i)} for i in range(lo, hi)])
    root.with_suffix(".json").write_text(
        json.dumps({"existing": existing, "build_s": time.perf_counter() - t0})
    )
    return root


def fresh(name: str, key: Key, base: Path | None) -> PartitionedNamespace:
    """A new namespace to measure on: empty, or a copy of ``base``'s ``__manifest``.

    Only ``__manifest`` is copied: creating partitions never opens the leaf tables of the
    existing ones, and copying 100k leaf directories would dominate the run. The copy is a
    scratch namespace whose old partitions have no leaf tables; it is deleted afterwards.
    """
    root = WORK_DIR / name
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    if base is not None:
        shutil.copytree(base / "__manifest", root / "__manifest")
        return PartitionedNamespace.open(root)
    return PartitionedNamespace.create(
        root, schema=key.schema(), partition_fields=[PartitionField(key.column, key.column)]
    )


def settle() -> None:
    """Flush dirty pages before a timed case, so it does not pay for the previous one's I/O."""
    if hasattr(os, "sync"):
        os.sync()
    time.sleep(0.5)


def cleanup() -> None:
    """Delete the scratch namespaces. Done once at the end: deleting thousands of leaf
    directories between cases makes the next case pay for the file system's work."""
    shutil.rmtree(WORK_DIR, ignore_errors=True)


def write_data(n: int, first: int, rows_per: int, key: Key) -> pa.Table:
    """``n * rows_per`` rows over the values first..first+n-1, interleaved across partitions."""
    total = n * rows_per
    idx = np.arange(total, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(idx),
            key.column: key.array(first + idx % n),
            "value": pa.array(np.random.default_rng(0).random(total)),
        },
        schema=key.schema(),
    )


def operation(
    op: str, ns: PartitionedNamespace, n: int, first: int, rows_per: int, key: Key
) -> Callable[[], int]:
    """A no-argument call doing the measured work; returns how many partitions it created."""
    if op == "create_partitions":
        values = [{key.column: key.value(first + i)} for i in range(n)]
        return lambda: len(ns.create_partitions(values))
    data = write_data(n, first, rows_per, key)
    return lambda: len(ns.write(data, mode="append").created)


def run_case(
    op: str, n: int, rep: int, key: Key, base: Path | None, args: argparse.Namespace
) -> dict[str, Any]:
    ns = fresh(f"{op}-{n}-{rep}", key, base)
    before_parts = len(ns.partitions())
    call = operation(op, ns, n, args.existing, args.rows_per_partition, key)
    v0 = ns.version
    settle()
    PHASES.reset()
    PHASES.enabled = not args.no_split
    t0 = time.perf_counter()
    created = call()
    wall = time.perf_counter() - t0
    PHASES.enabled = False
    v1 = ns.version
    after_parts = len(ns.partitions())
    if created != n or after_parts != before_parts + n:
        raise AssertionError(
            f"{op} {n}: created {created}, partitions {before_parts}->{after_parts}"
        )
    ranked = sorted(PHASES.seconds.items(), key=lambda kv: -kv[1])
    split = {k: v for k, v in ranked if not k.endswith(WORKER_SUFFIX)}
    split["other (unattributed)"] = max(0.0, wall - PHASES.main_seconds())
    split.update((k, v) for k, v in ranked if k.endswith(WORKER_SUFFIX))
    calls = dict(PHASES.calls)
    leaf_commits = PHASES.count("create leaf tables (create_leaf)") + PHASES.count(
        "commit leaves (commit_leaf)"
    )
    return {
        "op": op,
        "n": n,
        "rep": rep,
        "existing": args.existing,
        "rows": n * args.rows_per_partition if op == "write" else 0,
        "wall_s": wall,
        "ms_per_partition": wall / n * 1000,
        "manifest_version_before": v0,
        "manifest_version_after": v1,
        "manifest_commits": v1 - v0,
        "leaf_commits": leaf_commits,
        "split_s": split if not args.no_split else {},
        "calls": calls,
    }


def profile_case(op: str, n: int, key: Key, base: Path | None, args: argparse.Namespace) -> str:
    ns = fresh(f"profile-{op}-{n}", key, base)
    call = operation(op, ns, n, args.existing, args.rows_per_partition, key)
    settle()
    dump = RESULTS_DIR / f"{NAME}_{op}_{n}.prof"
    _, text = profile_call(call, dump, top=args.top)
    print(f"===== cProfile {op} N={n:,} (existing {args.existing:,}) -> {dump}")
    print(text, flush=True)
    return text


# -- reporting --------------------------------------------------------------------------
def report(cases: list[dict[str, Any]], args: argparse.Namespace) -> None:
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for c in cases:
        grouped[(c["op"], c["n"])].append(c)
    rows = []
    for (op, n), cs in grouped.items():
        wall = statistics.median(c["wall_s"] for c in cs)
        commits = sorted({c["manifest_commits"] for c in cs})
        label = op if op != "write" else f"write ({args.rows_per_partition} rows/partition)"
        rows.append(
            [
                label,
                f"{n:,}",
                len(cs),
                f"{wall:.2f}",
                f"{wall / n * 1000:.2f}",
                ",".join(map(str, commits)),
                cs[0]["leaf_commits"] if not args.no_split else "-",
            ]
        )
    print_table(
        ["operation", "N", "runs", "wall s", "ms/partition", "__manifest commits", "leaf commits"],
        rows,
        title=(
            f"Creating N new partitions in one call (namespace already holding "
            f"{args.existing:,} partitions; median of runs)"
        ),
    )
    commits = {(c["op"], c["manifest_commits"]) for c in cases}
    per_op = {op: sorted({m for o, m in commits if o == op}) for op in OPS}
    for op, values in per_op.items():
        if values:
            verdict = "O(1), independent of N" if len(values) == 1 else "DEPENDS ON N"
            print(f"__manifest commits for {op}: {values} -> {verdict}")
    print()
    if args.no_split:
        return
    for (op, n), cs in grouped.items():
        c = cs[0]
        print_table(
            ["phase (exclusive time)", "s", "% of wall", "calls"],
            [
                [
                    name,
                    f"{sec:.3f}",
                    f"{sec / c['wall_s'] * 100:.1f}" if not name.endswith(WORKER_SUFFIX) else "-",
                    c["calls"].get(name, "-"),
                ]
                for name, sec in c["split_s"].items()
                if sec >= 0.0005 or name in c["calls"]
            ],
            title=f"Time split: {op}, N={n:,} (run 1, wall {c['wall_s']:.2f}s)",
        )
        if any(name.endswith(WORKER_SUFFIX) for name in c["split_s"]):
            print(
                "  rows marked [worker threads, summed] ran in a thread pool, concurrently with\n"
                "  the main thread (which waits inside one of the phases above or 'other');\n"
                "  they are summed over threads and not part of the wall-time split.\n"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1_000, 10_000])
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--key", choices=["date", "int"], default="date")
    parser.add_argument("--rows-per-partition", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1, help="runs per (operation, N)")
    parser.add_argument("--existing", type=int, default=0, help="partitions already present")
    parser.add_argument("--no-split", action="store_true", help="no phase instrumentation")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest N per op")
    parser.add_argument("--top", type=int, default=25, help="profile lines to print")
    parser.add_argument(
        "--keep", action="store_true", help="keep the namespaces written (until the next run)"
    )
    args = parser.parse_args()
    print_environment()
    key = Key(args.key)
    sizes = sorted(set(args.sizes))
    cleanup()  # leftovers of an earlier --keep run
    base = template(args.existing, key)
    missing = instrument() if not args.no_split else []
    for label in missing:
        print(f"  not instrumented (not found in the library): {label}", flush=True)
    cases = []
    try:
        for op in args.ops:
            for n in sizes:
                for rep in range(args.repeat):
                    print(f"[{op}] N={n:,} run {rep + 1}/{args.repeat} ...", end="", flush=True)
                    case = run_case(op, n, rep, key, base, args)
                    cases.append(case)
                    print(
                        f" {case['wall_s']:.2f}s, {case['manifest_commits']} manifest commit(s)",
                        flush=True,
                    )
    finally:
        PHASES.unwrap_all()
    print()
    report(cases, args)
    profiles = {}
    if args.profile:
        for op in args.ops:
            profiles[f"{op}_{sizes[-1]}"] = profile_case(op, sizes[-1], key, base, args)
    if not args.keep:
        cleanup()
    suffix = "" if args.existing == 0 else f"_existing{args.existing}"
    write_results(
        f"{NAME}{suffix}" if args.key == "date" else f"{NAME}_{args.key}{suffix}",
        {
            "key": key.kind,
            "sizes": sizes,
            "rows_per_partition": args.rows_per_partition,
            "existing": args.existing,
            "cases": cases,
            "profiles": profiles,
        },
    )


if __name__ == "__main__":
    sys.exit(main())
