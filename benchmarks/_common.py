"""Shared helpers for the benchmark scripts: timing, statistics, tables, JSON results.

Not a test module: nothing here asserts on timings. Each benchmark prints a table and writes
its raw figures to ``benchmarks/results/<name>.json`` (git-ignored).
"""

from __future__ import annotations

import contextlib
import cProfile
import datetime as dt
import functools
import gc
import io
import json
import os
import platform
import pstats
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

# pylance reads its log level when it is imported; its WARN lines (e.g. "No existing dataset
# ..., it will be created" for every new leaf table) would interleave with the tables.
# LANCE_LOG=warn (or info) in the environment brings them back.
os.environ.setdefault("LANCE_LOG", "error")
import lance

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
DATA_DIR = BENCH_DIR / ".data"
BASE_DATE = dt.date(1800, 1, 1)  # 100k consecutive days end in 2073


class Key:
    """The partition column: its schema, its values and SQL literals for filters.

    ``date``: identity partitioning on ``event_date date32`` (value i = BASE_DATE + i days);
    ``int``: identity partitioning on ``day int64`` (value i = i).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.column = "event_date" if kind == "date" else "day"
        self.type = pa.date32() if kind == "date" else pa.int64()

    def value(self, i: int) -> Any:
        return BASE_DATE + dt.timedelta(days=i) if self.kind == "date" else i

    def array(self, indices: np.ndarray) -> pa.Array:
        """The values of many indices at once (for building write data)."""
        if self.kind == "date":
            base = (BASE_DATE - dt.date(1970, 1, 1)).days
            return pa.array(indices.astype(np.int32) + base, pa.int32()).cast(pa.date32())
        return pa.array(indices.astype(np.int64), pa.int64())

    def literal(self, i: int) -> str:
        return f"DATE '{self.value(i).isoformat()}'" if self.kind == "date" else str(i)

    def schema(self) -> pa.Schema:
        return pa.schema(
            [
                pa.field("id", pa.int64(), False),
                pa.field(self.column, self.type),
                pa.field("value", pa.float64()),
            ]
        )

    def point(self, i: int) -> str:
        return f"{self.column} = {self.literal(i)}"

    def between(self, lo: int, hi: int) -> str:
        return f"{self.column} BETWEEN {self.literal(lo)} AND {self.literal(hi)}"


def library_revision() -> str:
    """Which library code is imported: the git commit of this checkout (``+dirty`` if the
    library has uncommitted changes), or, for a copy put first on ``PYTHONPATH`` (e.g. a
    ``git archive`` snapshot), its path and the content of a ``REVISION`` file next to it.
    """
    import subprocess

    import airflow_provider_lance

    root = BENCH_DIR.parent
    package = Path(airflow_provider_lance.__file__).resolve().parent
    if package.parent != root:
        marker = package.parent / "REVISION"
        label = marker.read_text().strip() if marker.exists() else "unknown"
        return f"{label} (snapshot at {package.parent})"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "airflow_provider_lance"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head


@functools.lru_cache(maxsize=1)
def environment() -> dict[str, Any]:
    """Versions and machine facts recorded next to every result.

    Cached: the scripts call it when they start, so ``library_revision`` names the code that
    was imported (the checkout may change while a long benchmark runs).
    """
    import datafusion

    return {
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "pylance": lance.__version__,
        "pyarrow": pa.__version__,
        "datafusion": datafusion.__version__,
        "library_revision": library_revision(),
        "argv": sys.argv[1:],
    }


def print_environment() -> dict[str, Any]:
    """Print (and return) which library revision and versions are being measured."""
    env = environment()
    print(
        f"library {env['library_revision']}, pylance {env['pylance']}, "
        f"pyarrow {env['pyarrow']}, {env['cpus']} CPUs",
        flush=True,
    )
    return env


def cpu_jiffies() -> tuple[int, int]:
    """(all, steal) CPU jiffies from /proc/stat; (0, 0) where it does not exist."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields[:8]), fields[7] if len(fields) > 7 else 0


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """Share of CPU time the hypervisor stole between two :func:`cpu_jiffies` readings.

    On a shared VM a high value means the timings in that window are inflated by other
    tenants, not by the code under test.
    """
    total = after[0] - before[0]
    if total <= 0:
        return None
    return 100.0 * (after[1] - before[1]) / total


def summarize(samples_s: Sequence[float]) -> dict[str, Any]:
    """Median / p95 / min / mean / max in milliseconds of samples given in seconds."""
    ms = np.asarray(samples_s, dtype=float) * 1000.0
    return {
        "n": int(ms.size),
        "median_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
        "min_ms": float(ms.min()),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
    }


def measure(
    fn: Callable[[], Any],
    *,
    reps: int,
    warmup: int = 3,
    max_seconds: float = 30.0,
    min_reps: int = 10,
    check: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Time ``fn()`` ``reps`` times (fewer if ``max_seconds`` runs out, but >= ``min_reps``).

    The garbage collector runs before the loop, not inside it, so one rep does not pay for
    the garbage of the previous ones in a burst; it stays enabled (like in real use).
    """
    result = None
    for _ in range(warmup):
        result = fn()
    if check is not None and result is not None:
        check(result)
    gc.collect()
    samples: list[float] = []
    jiffies = cpu_jiffies()
    deadline = time.perf_counter() + max_seconds
    for i in range(reps):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
        if i + 1 >= min_reps and time.perf_counter() > deadline:
            break
    steal = steal_pct(jiffies, cpu_jiffies())
    if check is not None:
        check(result)
    return {**summarize(samples), "steal_pct": steal}


def measure_split(
    fn: Callable[[], tuple[float, ...]],
    names: Sequence[str],
    *,
    reps: int,
    warmup: int = 2,
    max_seconds: float = 30.0,
    min_reps: int = 10,
) -> dict[str, dict[str, Any]]:
    """Like :func:`measure` for a ``fn`` that returns its own phase durations (seconds)."""
    for _ in range(warmup):
        fn()
    gc.collect()
    samples: list[tuple[float, ...]] = []
    jiffies = cpu_jiffies()
    deadline = time.perf_counter() + max_seconds
    for i in range(reps):
        samples.append(fn())
        if i + 1 >= min_reps and time.perf_counter() > deadline:
            break
    steal = steal_pct(jiffies, cpu_jiffies())
    return {
        name: {**summarize([s[k] for s in samples]), "steal_pct": steal}
        for k, name in enumerate(names)
    }


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fmt_pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """Print (and return) a plain-text table; numbers are right-aligned."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(r):
            out.append(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    text = "\n".join(
        ([title] if title else [])
        + [line(cells[0]), "  ".join("-" * w for w in widths)]
        + [line(r) for r in cells[1:]]
    )
    print(text, flush=True)
    print(flush=True)
    return text


def write_results(name: str, payload: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    finished = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    env = {**environment(), "finished": finished}
    path.write_text(json.dumps({"environment": env, **payload}, indent=2, default=str))
    print(f"results written to {path}", flush=True)
    return path


def profile_call(
    fn: Callable[[], Any], dump_to: Path, *, top: int = 25, sort: str = "cumulative"
) -> tuple[Any, str]:
    """Run ``fn`` under cProfile; dump the stats to ``dump_to`` and return the top lines."""
    profiler = cProfile.Profile()
    result = profiler.runcall(fn)
    dump_to.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(dump_to))
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf).strip_dirs()
    stats.sort_stats(sort).print_stats(top)
    buf.write("\n--- by own time (tottime) ---\n")
    stats.sort_stats("tottime").print_stats(top)
    return result, buf.getvalue()


def dir_size(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, f))
    return total
