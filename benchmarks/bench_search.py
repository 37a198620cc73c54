"""Search across partitions (issue 41): vector and full-text search on a namespace, beside
one Lance table holding the same rows and the bare fan-out over the same leaves.

    .venv/bin/python benchmarks/bench_search.py           # ~6 min, builds included
    .venv/bin/python benchmarks/bench_search.py --full    # the issue's sizes (~1 h on 2 cores)

**Vector search.** Per case (``--cases``; default 30 dates x 2,000 rows and 200 x 500, with
``--full`` 30 x 10,000 and 1,000 x 1,000; 128 dimensions, vectors drawn around 64 centres),
the rows go to a namespace identity-partitioned on ``event_date`` and to one Lance table,
both indexed IVF_PQ with the same parameters (``num_partitions`` lists, ``dim / 8``
sub-vectors): the namespace through ``ns.create_index`` (one model trained on a sample of all
partitions, shared by every leaf), the table by ``create_index``. Built once under
``benchmarks/.data/`` (``--rebuild``). Queries (``--queries``, near data points) for one
date, a range of 30 dates (fewer when the case has fewer) and every partition:

* **recall@10** against exact (flat) search of the one table with the same date filter, for
  a few (``nprobes``, ``refine_factor``) settings: ours, one table (prefiltered), the floor;
* **latency** at ``--nprobes`` / ``--refine`` (the README's setting): ours
  (``ns.to_table(nearest=..., filter=...)`` on a handle held open, as a search service
  holds it, which keeps the leaf versions it searched open), one table (open) with the date
  prefilter, one table with no filter, and the **floor**: the leaves of the plan (found and
  opened once, untimed) searched with bare pylance, 8 at a time, the top k merged in pyarrow
  (for one date: the one leaf's ``to_table(nearest=...)``, called on the caller's thread).
  Samples interleave the systems; medians, and ratios to the floor and to one table.

**Indexing a new daily partition**: a new date's rows written to the namespace, then
``ns.optimize_indices(<that date>)`` timed (the new leaf indexed with the shared model, as
the upkeep task after a daily publish does), against
``create_index`` with the same parameters on one Lance table of the same rows (training
its own model); the new partition is dropped again afterwards.

**Full text.** A skewed corpus (``--fts-parts`` partitions x ``--fts-docs`` documents of 5
to 30 words from a Zipf vocabulary; each partition has a word of its own in 30% of its
documents and 0.3% of the others'), INVERTED-indexed in the namespace and in one table.
For ``--queries`` queries (a partition's own word and one or two common words): how many
of the namespace's top 10 one table's top 10 holds (or could: ties with its 10th score
count), the same for the plain merge of every leaf's own top 10 (the bare fan-out), and
the latency of the three; ours also on a fresh handle per call (``PartitionedNamespace.open``:
the leaves opened and the words counted afresh, where a handle held open keeps the counts of
the leaf versions it searched).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import resource
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: F401  (quiets pylance's log before it is imported)
import lance
import numpy as np
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
from bench_floor import parallel
from lance.query import MatchQuery

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

EPOCH = dt.date(2025, 1, 1)
CENTRES = 64
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("vec", pa.list_(pa.float32(), 128)),
    ]
)


@dataclass(frozen=True)
class Case:
    partitions: int
    rows: int
    dim: int = 128

    @property
    def name(self) -> str:
        return f"{self.partitions}x{self.rows}x{self.dim}"

    @property
    def lists(self) -> int:
        """IVF lists of both indexes: about sqrt(all rows), a power of two, 16 to 256."""
        total = self.partitions * self.rows
        return int(min(256, max(16, 2 ** round(np.log2(np.sqrt(total))))))

    @property
    def schema(self) -> pa.Schema:
        return SCHEMA.set(2, pa.field("vec", pa.list_(pa.float32(), self.dim)))


def parse_case(text: str) -> Case:
    parts, rows, *dim = (int(x) for x in text.split("x"))
    return Case(parts, rows, *(dim or [128]))


# -- data ------------------------------------------------------------------------------------
def centres(dim: int) -> np.ndarray:
    return np.random.default_rng(7).standard_normal((CENTRES, dim)).astype(np.float32) * 3


def vectors(n: int, dim: int, seed: int) -> np.ndarray:
    """``n`` vectors around the shared centres (as embeddings cluster)."""
    rng = np.random.default_rng(seed)
    near = centres(dim)[rng.integers(0, CENTRES, n)]
    return near + rng.standard_normal((n, dim)).astype(np.float32)


def day_rows(case: Case, day: int, first_id: int) -> pa.Table:
    values = vectors(case.rows, case.dim, seed=10_000 + day).reshape(-1)
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + case.rows), pa.int64()),
            "event_date": pa.array([EPOCH + dt.timedelta(days=day)] * case.rows, pa.date32()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(values), case.dim),
        },
        schema=case.schema,
    )


def index_params(case: Case) -> dict[str, Any]:
    return {"num_partitions": case.lists, "num_sub_vectors": case.dim // 8}


def build(case: Case, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    """The namespace and the one table of ``case``, indexed; built once (timings kept)."""
    root = DATA_DIR / f"search-{case.name}"
    marker = root / "BUILT.json"
    if marker.exists() and not rebuild:
        return root, json.loads(marker.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    ns = PartitionedNamespace.create(
        root / "ns", case.schema, [PartitionField("event_date", "event_date")]
    )
    step = max(1, 100_000 // case.rows)  # about 100k rows per write
    one: lance.LanceDataset | None = None
    for start in range(0, case.partitions, step):
        days = range(start, min(case.partitions, start + step))
        data = pa.concat_tables([day_rows(case, d, d * case.rows) for d in days])
        ns.write(data)
        mode = "create" if one is None else "append"
        one = lance.write_dataset(data, root / "one", mode=mode, max_rows_per_file=1 << 20)
    assert one is not None
    timings = {}
    started = time.perf_counter()
    ns.create_index("vec", "IVF_PQ", **index_params(case))
    timings["namespace_index_s"] = time.perf_counter() - started
    started = time.perf_counter()
    one.create_index("vec", "IVF_PQ", **index_params(case))
    timings["one_table_index_s"] = time.perf_counter() - started
    ns.maintain()
    marker.write_text(json.dumps(timings))
    print(
        f"  built {case.name}: index {timings['namespace_index_s']:.1f}s (namespace) vs "
        f"{timings['one_table_index_s']:.1f}s (one table)",
        flush=True,
    )
    return root, timings


# -- searches --------------------------------------------------------------------------------
def scenarios(case: Case) -> dict[str, str | None]:
    """Filters: one date, a range of (up to) 30 dates, every partition."""
    mid = case.partitions // 2
    first = max(0, min(mid - 15, case.partitions - 30))
    last = min(case.partitions - 1, first + 29)
    day = lambda i: f"DATE '{EPOCH + dt.timedelta(days=i)}'"  # noqa: E731
    return {
        "one date": f"event_date = {day(mid)}",
        f"{last - first + 1} dates": f"event_date BETWEEN {day(first)} AND {day(last)}",
        "all": None,
    }


class Searches:
    """One call per system; each returns the ids of the top k, best first."""

    def __init__(self, root: Path, k: int) -> None:
        self.ns = PartitionedNamespace.open(root / "ns")
        self.one = lance.dataset(root / "one")
        self.k = k
        self.leaves: dict[str | None, list[lance.LanceDataset]] = {}

    def nearest(self, q: np.ndarray, settings: dict[str, Any]) -> dict[str, Any]:
        return {"column": "vec", "q": q, "k": self.k, **settings}

    def ours(self, q: np.ndarray, where: str | None, settings: dict[str, Any]) -> list[int]:
        found = self.ns.to_table(nearest=self.nearest(q, settings), filter=where, columns=["id"])
        return found.column("id").to_pylist()

    def one_table(self, q: np.ndarray, where: str | None, settings: dict[str, Any]) -> list[int]:
        found = self.one.to_table(
            nearest=self.nearest(q, settings),
            filter=where,
            prefilter=where is not None,
            columns=["id", "_distance"],
            disable_scoring_autoprojection=True,
        )
        return found.column("id").to_pylist()

    def exact(self, q: np.ndarray, where: str | None) -> list[int]:
        return self.one_table(q, where, {"use_index": False})

    def floor(self, q: np.ndarray, where: str | None, settings: dict[str, Any]) -> list[int]:
        """The leaves the plan reads (found and opened once, untimed), searched with bare
        pylance, 8 at a time (one leaf: one call, on this thread); the top k merged in
        pyarrow."""
        nearest = self.nearest(q, settings)

        def one(leaf: lance.LanceDataset) -> pa.Table:
            return leaf.to_table(
                nearest=nearest, columns=["id", "_distance"], disable_scoring_autoprojection=True
            )

        leaves = self.leaves_of(where)
        if len(leaves) == 1:
            return one(leaves[0]).column("id").to_pylist()
        merged = pa.concat_tables(parallel(one, leaves))
        order = pc.sort_indices(merged, [("_distance", "ascending")])
        return merged.take(order).slice(0, self.k).column("id").to_pylist()

    def leaves_of(self, where: str | None) -> list[lance.LanceDataset]:
        if where not in self.leaves:
            plan = self.ns.plan_scan(where)
            self.leaves[where] = [lance.dataset(t.location, t.read_version) for t in plan.tasks]
        return self.leaves[where]


def recall(found: Sequence[int], truth: Sequence[int]) -> float:
    return len(set(found) & set(truth)) / max(1, len(truth))


def queries(case: Case, n: int) -> list[np.ndarray]:
    """Points near random rows (the row, moved by half the noise)."""
    rng = np.random.default_rng(99)
    base = vectors(n, case.dim, seed=12_345)
    return [v + 0.5 * rng.standard_normal(case.dim).astype(np.float32) for v in base]


def measure_recall(
    searches: Searches, case: Case, qs: list[np.ndarray], sweep: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    out = []
    for name, where in scenarios(case).items():
        truths = [searches.exact(q, where) for q in qs]
        for settings in sweep:
            row: dict[str, Any] = {"scenario": name, **settings}
            for system in ("ours", "one_table", "floor"):
                run = getattr(searches, system)
                row[system] = float(
                    np.mean(
                        [
                            recall(run(q, where, settings), t)
                            for q, t in zip(qs, truths, strict=True)
                        ]
                    )
                )
            out.append(row)
    return out


def interleaved(calls: dict[str, Callable[[int], Any]], reps: int, n: int) -> dict[str, Any]:
    """Each call ``reps`` times per query index (rotating), systems interleaved."""
    names = list(calls)
    for name in names:  # warm-up
        calls[name](0)
    samples: dict[str, list[float]] = {name: [] for name in names}
    jiffies = cpu_jiffies()
    for rep in range(reps):
        for i in range(n):
            for name in names[rep % len(names) :] + names[: rep % len(names)]:
                started = time.perf_counter()
                calls[name](i)
                samples[name].append(time.perf_counter() - started)
    steal = steal_pct(jiffies, cpu_jiffies())
    return {name: {**summarize(s), "steal_pct": steal} for name, s in samples.items()}


def measure_latency(
    searches: Searches,
    case: Case,
    qs: list[np.ndarray],
    settings: dict[str, Any],
    reps: int,
) -> dict[str, Any]:
    out = {}
    for name, where in scenarios(case).items():
        calls: dict[str, Callable[[int], Any]] = {
            "ours": lambda i, w=where: searches.ours(qs[i], w, settings),
            "one table + prefilter": lambda i, w=where: searches.one_table(qs[i], w, settings),
            "one table, no filter": lambda i: searches.one_table(qs[i], None, settings),
            "floor": lambda i, w=where: searches.floor(qs[i], w, settings),
        }
        if where is None:
            del calls["one table + prefilter"]
        out[name] = interleaved(calls, reps, len(qs))
    return out


def new_day_indexing(root: Path, case: Case, reps: int) -> dict[str, Any]:
    """``optimize_indices`` of a new daily partition vs ``create_index`` on a table of it."""
    ns = PartitionedNamespace.open(root / "ns")
    ours, table = [], []
    day = case.partitions + 1
    for rep in range(reps):
        data = day_rows(case, day, 10_000_000 + rep * case.rows)
        where = f"event_date = DATE '{EPOCH + dt.timedelta(days=day)}'"
        ns.write(data)
        started = time.perf_counter()
        result = ns.optimize_indices(where)  # the day just published, as an upkeep task does
        ours.append(time.perf_counter() - started)
        assert any(p.rows_indexed == case.rows for p in result.partitions), result
        ns.drop_partitions(where)
        scratch = root / f"new-day-{rep}"
        one = lance.write_dataset(data, scratch, mode="overwrite")
        started = time.perf_counter()
        one.create_index("vec", "IVF_PQ", **index_params(case))
        table.append(time.perf_counter() - started)
        shutil.rmtree(scratch)
    return {"ours": summarize(ours), "one table of its rows": summarize(table)}


def vector_case(case: Case, args: argparse.Namespace) -> dict[str, Any]:
    print(f"\n== vector search, {case.partitions:,} dates x {case.rows:,} rows x {case.dim}")
    root, build_timings = build(case, args.rebuild)
    searches = Searches(root, args.k)
    qs = queries(case, args.queries)
    chosen = {"nprobes": args.nprobes, "refine_factor": args.refine}
    sweep = [
        {"nprobes": 1},
        {"nprobes": args.nprobes},
        chosen,
        {**chosen, "nprobes": 2 * args.nprobes},
    ]
    recalls = measure_recall(searches, case, qs, sweep)
    print_table(
        ["scenario", "nprobes", "refine", "ours", "one table", "floor"],
        [
            [
                r["scenario"],
                r.get("nprobes"),
                r.get("refine_factor", "-"),
                f"{r['ours']:.3f}",
                f"{r['one_table']:.3f}",
                f"{r['floor']:.3f}",
            ]
            for r in recalls
        ],
        title=f"recall@{args.k} against exact search ({len(qs)} queries, {case.lists} lists)",
    )
    latency = measure_latency(searches, case, qs, chosen, args.reps)
    rows = []
    for scenario, figures in latency.items():
        med = {name: f["median_ms"] for name, f in figures.items()}
        one = med.get("one table + prefilter", med["one table, no filter"])
        rows.append(
            [
                scenario,
                *(fmt_ms(med.get(n)) for n in ("ours", "one table + prefilter")),
                fmt_ms(med["one table, no filter"]),
                fmt_ms(med["floor"]),
                f"{med['ours'] / med['floor']:.2f}",
                f"{med['ours'] / one:.2f}",
                f"{figures['ours']['steal_pct'] or 0:.0f}%",
            ]
        )
    print_table(
        [
            "scenario",
            "ours",
            "one+prefilter",
            "one, no filter",
            "floor",
            "ours/floor",
            "ours/one",
            "steal",
        ],
        rows,
        title=f"latency, median ms (nprobes={args.nprobes}, refine_factor={args.refine})",
    )
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS so far: {peak_mib:,.0f} MiB", flush=True)
    indexing = new_day_indexing(root, case, args.index_reps)
    print_table(
        ["index one new daily partition", "median ms"],
        [[name, fmt_ms(f["median_ms"])] for name, f in indexing.items()],
    )
    return {
        "case": case.name,
        "lists": case.lists,
        "build": build_timings,
        "recall": recalls,
        "latency": latency,
        "new_day_indexing": indexing,
        "peak_rss_mib": peak_mib,
    }


# -- full text --------------------------------------------------------------------------------
FTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("text", pa.utf8()),
    ]
)
VOCABULARY = [f"t{i}" for i in range(5_000)]


def own_word(part: int) -> str:
    return f"own{part}"


def fts_corpus(parts: int, docs: int) -> pa.Table:
    rng = np.random.default_rng(3)
    weights = 1.0 / np.arange(1, len(VOCABULARY) + 1)
    weights /= weights.sum()
    out: dict[str, list[Any]] = {"id": [], "part": [], "text": []}
    for part in range(parts):
        for _ in range(docs):
            size = int(rng.integers(5, 31))
            words = list(rng.choice(VOCABULARY, size, p=weights))
            if rng.random() < 0.3:
                words[int(rng.integers(size))] = own_word(part)
            for other in rng.choice(parts, max(1, parts // 10), replace=False):
                if other != part and rng.random() < 0.03:
                    words[int(rng.integers(size))] = own_word(int(other))
            out["id"].append(len(out["id"]))
            out["part"].append(part)
            out["text"].append(" ".join(words))
    return pa.table(out, schema=FTS_SCHEMA)


def fts_build(parts: int, docs: int, rebuild: bool) -> Path:
    root = DATA_DIR / f"search-fts-{parts}x{docs}"
    marker = root / "BUILT"
    if marker.exists() and not rebuild:
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    data = fts_corpus(parts, docs)
    ns = PartitionedNamespace.create(root / "ns", FTS_SCHEMA, [PartitionField("part", "part")])
    ns.write(data)
    ns.create_scalar_index("text", "INVERTED")
    one = lance.write_dataset(data, root / "one")
    one.create_scalar_index("text", "INVERTED")
    marker.write_text("built")
    return root


def tie_aware_overlap(found: Sequence[int], scores: dict[int, float], k: int) -> int:
    """How many of ``found``'s first k one table's top k holds or could hold (a row tied
    with its k-th score could be any of them)."""
    kth = sorted(scores.values(), reverse=True)[min(k, len(scores)) - 1]
    return sum(scores.get(i, -1.0) >= kth * (1 - 1e-6) for i in list(found)[:k])


def fts_queries(parts: int, n: int) -> list[str]:
    rng = np.random.default_rng(5)
    common = VOCABULARY[5:60]
    return [
        " ".join([own_word(int(rng.integers(parts))), *rng.choice(common, int(rng.integers(1, 3)))])
        for _ in range(n)
    ]


def full_text(args: argparse.Namespace) -> dict[str, Any]:
    parts, docs = args.fts_parts, args.fts_docs
    print(f"\n== full text, {parts} partitions x {docs:,} documents (skewed words)")
    root = fts_build(parts, docs, args.rebuild)
    ns = PartitionedNamespace.open(root / "ns")
    one = lance.dataset(root / "one")
    leaves = [lance.dataset(t.location, t.read_version) for t in ns.plan_scan().tasks]
    k = args.k

    def ours(text: str, handle: PartitionedNamespace | None = None) -> list[int]:
        found = (handle or ns).to_table(full_text_query=text, columns=["id"], limit=k)
        return found.column("id").to_pylist()

    def one_table(text: str, limit: int | None = k) -> pa.Table:
        return one.to_table(
            full_text_query=text,
            columns=["id", "_score"],
            limit=limit,
            disable_scoring_autoprojection=True,
        )

    def floor(text: str) -> list[int]:
        def leaf(table: lance.LanceDataset) -> pa.Table:
            return table.to_table(
                full_text_query=MatchQuery(text, "text"),
                columns=["id", "_score"],
                limit=k,
                disable_scoring_autoprojection=True,
            )

        merged = pa.concat_tables(parallel(leaf, leaves))
        order = pc.sort_indices(merged, [("_score", "descending")])
        return merged.take(order).slice(0, k).column("id").to_pylist()

    texts = fts_queries(parts, args.queries)
    overlaps: dict[str, list[int]] = {"ours": [], "floor (leaves' own scores)": []}
    for text in texts:
        every = one_table(text, None)
        scores = dict(zip(every["id"].to_pylist(), every["_score"].to_pylist(), strict=True))
        overlaps["ours"].append(tie_aware_overlap(ours(text), scores, k))
        overlaps["floor (leaves' own scores)"].append(tie_aware_overlap(floor(text), scores, k))
    print_table(
        ["system", "mean", "min", "queries >= 9"],
        [
            [name, f"{np.mean(v):.2f}", min(v), sum(x >= 9 for x in v)]
            for name, v in overlaps.items()
        ],
        title=f"top {k} shared with one table's top {k} ({len(texts)} queries)",
    )
    calls: dict[str, Callable[[int], Any]] = {
        "ours": lambda i: ours(texts[i]),
        "ours, fresh handle": lambda i: ours(texts[i], PartitionedNamespace.open(root / "ns")),
        "one table": lambda i: one_table(texts[i]),
        "floor": lambda i: floor(texts[i]),
    }
    latency = interleaved(calls, args.reps, len(texts))
    print_table(
        ["system", "median ms", "p95 ms"],
        [[n, fmt_ms(f["median_ms"]), fmt_ms(f["p95_ms"])] for n, f in latency.items()],
        title="full-text search latency",
    )
    return {"parts": parts, "docs": docs, "overlap": overlaps, "latency": latency}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="the issue's sizes")
    parser.add_argument("--cases", nargs="*", help="PARTITIONSxROWS[xDIM], e.g. 30x10000")
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--index-reps", type=int, default=3)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--nprobes", type=int, default=16)
    parser.add_argument("--refine", type=int, default=10)
    parser.add_argument("--fts-parts", type=int, default=30)
    parser.add_argument("--fts-docs", type=int, default=None)
    parser.add_argument("--skip-fts", action="store_true")
    parser.add_argument("--rebuild", action="store_true")
    args = parser.parse_args()
    env = print_environment()
    default = ["30x10000", "1000x1000"] if args.full else ["30x2000", "200x500"]
    cases = [parse_case(c) for c in (args.cases or default)]
    args.fts_docs = args.fts_docs or (5_000 if args.full else 1_000)
    results: dict[str, Any] = {"vector": [vector_case(c, args) for c in cases]}
    if not args.skip_fts:
        results["full_text"] = full_text(args)
    write_results("bench_search", {"environment_seen": env, "args": vars(args), **results})


if __name__ == "__main__":
    main()
