"""Merging a leaf's index segments (issue 41, ``optimize_indices``' upkeep) with pylance's
``merge_existing_index_segments``, against rebuilding the index over every fragment (what
``ops/indexing.py`` does once a leaf holds ``MAX_SEGMENTS`` segments of one index).

    .venv/bin/python benchmarks/bench_index_merge.py                  # 100k rows, ~5 min
    .venv/bin/python benchmarks/bench_index_merge.py --rows 200000 --kinds BTREE IVF_PQ

Bare pylance, no namespace code. One leaf per index type (``--kinds``) of ``--rows`` rows in
``--segments`` + 1 fragments: the first ``--segments`` fragments each get a committed segment
of the index, then rows are deleted in the first and the last fragment (``--deleted`` of
each), and the last fragment is the new one to index. ``--layout equal``: equal fragments,
indexed once all are written (each segment covers part of the leaf: PQ codes row-major);
``--layout namespace``: as the namespace grows a leaf, 80% of the rows indexed first (over
the whole leaf: PQ codes transposed, which pylance refuses to merge), then daily deltas.
Two copies of that leaf; per sample (``--samples``, interleaved, medians), written and not
committed:

* **rebuild**: ``create_index_uncommitted`` over every fragment (staging merged for INVERTED);
* **merge**: the delta over the new fragment (the same), then
  ``merge_existing_index_segments`` of the committed segments and the delta (the committed
  segments given the delta's ``index_details``: ``describe_indices`` has none), timed apart.

The IVF types use one model trained on the leaf (untimed), as the namespace's shared model:
``ivf_centroids`` (and ``pq_codebook``), ``--lists`` lists, ``dim / 16`` sub-vectors.

Then each copy commits its last result as ``CreateIndex`` (replacing the committed
segments) and both answer ``--queries`` queries: scalar types the same rows as a scan without
the index (``id =``, ``id BETWEEN``, ``cat =``); INVERTED the same (id, ``_score``) list;
IVF the same (id, ``_distance``) top 10 at ``nprobes`` 1 and 8 (IVF_PQ with
``refine_factor=10``), with recall@10 against
exact search. Sizes of the two segments too.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: F401  (quiets pylance's log before it is imported)
import lance
import numpy as np
import pyarrow as pa
from _common import DATA_DIR, print_environment, print_table, write_results
from lance import LanceOperation, Transaction
from lance.dataset import Index
from lance.indices import IndicesBuilder

from airflow_provider_lance.namespace.ops.indexing import default_sub_vectors, leaf_segments

COLUMNS = {"BTREE": "id", "BITMAP": "cat", "INVERTED": "txt", "IVF_FLAT": "vec", "IVF_PQ": "vec"}
NAME = "i"
WORDS = 2000


def rows(first: int, n: int, dim: int) -> pa.Table:
    rng = np.random.default_rng(first)
    ids = np.arange(first, first + n)
    zipf = np.minimum(rng.zipf(1.3, size=(n, 8)), WORDS) - 1
    centres = np.random.default_rng(0).standard_normal((64, dim)).astype("float32")
    vec = centres[rng.integers(0, 64, n)] + 0.3 * rng.standard_normal((n, dim)).astype("float32")
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "cat": pa.array(ids % 50, pa.int64()),
            "txt": [" ".join(f"w{w}" for w in doc) for doc in zipf],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
        }
    )


def commit(ds: lance.LanceDataset, operation: Any) -> lance.LanceDataset:
    txn = Transaction(int(ds.version), operation)
    return lance.LanceDataset.commit(ds.uri, txn, max_retries=0)


def fragment_ids(ds: lance.LanceDataset) -> list[int]:
    return [f.fragment_id for f in ds.get_fragments()]


def build(ds: lance.LanceDataset, kind: str, ids: list[int], params: dict[str, Any]) -> Index:
    segment = ds.create_index_uncommitted(
        COLUMNS[kind], kind, NAME, replace=True, fragment_ids=ids, **params
    )
    if any(f.path.startswith("staging/") for f in segment.files or ()):
        segment = ds.merge_existing_index_segments([segment])
    return segment


def model(ds: lance.LanceDataset, kind: str, lists: int, dim: int) -> dict[str, Any]:
    if not kind.startswith("IVF"):
        return {}
    builder = IndicesBuilder(ds, "vec")
    ivf = builder.train_ivf(lists, distance_type="l2")
    out: dict[str, Any] = {"ivf_centroids": ivf.centroids}
    if kind == "IVF_PQ":
        sub = default_sub_vectors(pa.list_(pa.float32(), dim))
        out |= {"pq_codebook": builder.train_pq(ivf, sub).codebook, "num_sub_vectors": sub}
    return out


def setup(root: Path, kind: str, args: argparse.Namespace) -> tuple[Path, Path, dict[str, Any]]:
    """The leaf (two copies) with ``segments`` committed segments and one new fragment."""
    base = root / f"{kind}-base"
    shutil.rmtree(root, ignore_errors=True)
    if args.layout == "namespace":
        ds, params = namespace_layout(base, kind, args)
    else:
        per = args.rows // (args.segments + 1)
        ds = lance.write_dataset(rows(0, per, args.dim), base)
        for i in range(1, args.segments + 1):
            ds = lance.write_dataset(rows(i * per, per, args.dim), base, mode="append")
        params = model(ds, kind, args.lists, args.dim)
        for f in fragment_ids(ds)[:-1]:
            ds = commit(ds, LanceOperation.CreateIndex([build(ds, kind, [f], params)], []))
    if args.deleted:
        d = args.deleted
        n = ds.count_rows()
        ds.delete(f"id < {d} OR id >= {n - d}")
    copies = (root / f"{kind}-rebuild", root / f"{kind}-merge")
    for copy in copies:
        shutil.copytree(base, copy)
    return copies[0], copies[1], params


def namespace_layout(
    base: Path, kind: str, args: argparse.Namespace
) -> tuple[lance.LanceDataset, dict[str, Any]]:
    """A leaf as the namespace grows one: 80% of the rows indexed first (over the whole
    leaf), then ``segments - 1`` daily deltas and the new day, 20% between them."""
    day = args.rows // 5 // args.segments
    first = args.rows - day * args.segments
    ds = lance.write_dataset(rows(0, first, args.dim), base)
    params = model(ds, kind, args.lists, args.dim)
    ds = commit(ds, LanceOperation.CreateIndex([build(ds, kind, fragment_ids(ds), params)], []))
    for i in range(args.segments):
        ds = lance.write_dataset(rows(first + i * day, day, args.dim), base, mode="append")
        if i < args.segments - 1:
            delta = build(ds, kind, fragment_ids(ds)[-1:], params)
            ds = commit(ds, LanceOperation.CreateIndex([delta], []))
    return ds, params


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = call()
    return time.perf_counter() - start, out


def drop(uri: Path, *segments: Index) -> None:
    for s in segments:
        shutil.rmtree(uri / "_indices" / s.uuid, ignore_errors=True)


def compare(kind: str, a: lance.LanceDataset, b: lance.LanceDataset, args: Any) -> dict[str, Any]:
    """Whether the rebuilt leaf ``a`` and the merged leaf ``b`` answer alike."""
    rng = np.random.default_rng(7)
    if kind in ("BTREE", "BITMAP"):
        if kind == "BTREE":
            xs = rng.integers(0, args.rows, args.queries)
            filters = [f"id = {x}" for x in xs] + [f"id BETWEEN {x} AND {x + 500}" for x in xs]
        else:
            filters = [f"cat = {c}" for c in range(50)] + ["cat IN (3, 7, 11)"]
        same = scan = 0
        for f in filters:
            got = [sorted(d.to_table(filter=f, columns=["id"])["id"].to_pylist()) for d in (a, b)]
            scanned = a.to_table(filter=f, columns=["id"], use_scalar_index=False)
            truth = sorted(scanned["id"].to_pylist())
            same += got[0] == got[1]
            scan += got[1] == truth
        plan = b.scanner(filter=filters[0]).explain_plan()
        return {
            "queries": len(filters),
            "merged_equals_rebuilt": same,
            "merged_equals_scan": scan,
            "merged_uses_index": "ScalarIndexQuery" in plan or "MaterializeIndex" in plan,
        }
    if kind == "INVERTED":
        words = [f"w{w}" for w in rng.integers(0, 200, args.queries)]
        same = 0
        for w in words:
            got = [
                sorted(
                    zip(
                        (round(s, 4) for s in t["_score"].to_pylist()),
                        t["id"].to_pylist(),
                        strict=True,
                    )
                )
                for t in (
                    d.to_table(full_text_query=w, columns=["id"], with_row_id=False) for d in (a, b)
                )
            ]
            same += got[0] == got[1]
        return {"queries": len(words), "merged_equals_rebuilt": same}
    queries = rows(10**7, args.queries, args.dim)["vec"]
    out: dict[str, Any] = {"queries": args.queries}
    for nprobes in (1, 8):
        same = hits = 0
        for q in queries:
            qv = q.values.to_numpy()
            nearest = {"column": "vec", "q": qv, "k": 10, "nprobes": nprobes}
            if kind == "IVF_PQ":
                nearest["refine_factor"] = 10
            found = [d.to_table(nearest=nearest, columns=["id"]) for d in (a, b)]
            pairs = [
                list(zip(t["id"].to_pylist(), t["_distance"].to_pylist(), strict=True))
                for t in found
            ]
            same += pairs[0] == pairs[1]
            exact = a.to_table(
                nearest={"column": "vec", "q": qv, "k": 10, "use_index": False}, columns=["id"]
            )
            hits += len(set(exact["id"].to_pylist()) & set(found[1]["id"].to_pylist()))
        out[f"nprobes={nprobes}: merged_equals_rebuilt"] = same
        out[f"nprobes={nprobes}: merged_recall@10"] = hits / (10 * args.queries)
    return out


def size(uri: Path, segment: Index) -> int:
    return sum(p.stat().st_size for p in (uri / "_indices" / segment.uuid).rglob("*"))


def one_kind(root: Path, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    ra, ma, params = setup(root, kind, args)
    a, b = lance.dataset(ra), lance.dataset(ma)
    every = fragment_ids(a)
    existing = leaf_segments(b, NAME)
    assert len(existing) == args.segments, existing
    times: dict[str, list[float]] = {"rebuild": [], "delta": [], "merge": []}
    rebuilt = merged = None
    for i in range(args.samples):
        last = i == args.samples - 1
        t, rebuilt_now = timed(lambda: build(a, kind, every, params))
        times["rebuild"].append(t)
        t, delta = timed(lambda: build(b, kind, every[-1:], params))
        times["delta"].append(t)
        given = [dataclasses.replace(s, index_details=delta.index_details) for s in existing]
        inputs = [*given, delta]
        try:
            t, merged_now = timed(functools.partial(b.merge_existing_index_segments, inputs))
        except (ValueError, RuntimeError) as exc:  # e.g. transposed PQ codes
            drop(ra, rebuilt_now)
            drop(ma, delta)
            refused = str(exc).split(",")[0]
            return {"kind": kind, "refused": refused, "rebuild_s": times["rebuild"][-1]}
        times["merge"].append(t)
        drop(ma, delta)
        if last:
            rebuilt, merged = rebuilt_now, merged_now
        else:
            drop(ra, rebuilt_now)
            drop(ma, merged_now)
    assert rebuilt is not None
    assert merged is not None
    assert sorted(merged.fragment_ids) == every, (sorted(merged.fragment_ids), every)
    sizes = {"rebuilt_bytes": size(ra, rebuilt), "merged_bytes": size(ma, merged)}
    old = leaf_segments(a, NAME)
    a = commit(a, LanceOperation.CreateIndex([rebuilt], old))
    b = commit(b, LanceOperation.CreateIndex([merged], existing))
    assert [len(d.segments) for d in b.describe_indices()] == [1]
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "kind": kind,
        "rebuild_s": med["rebuild"],
        "delta_s": med["delta"],
        "merge_s": med["merge"],
        "ratio": (med["delta"] + med["merge"]) / med["rebuild"],
        "samples": times,
        **sizes,
        **compare(kind, a, b, args),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--segments", type=int, default=4, help="committed segments")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--lists", type=int, default=64)
    parser.add_argument("--deleted", type=int, default=100)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--kinds", nargs="+", default=list(COLUMNS), choices=list(COLUMNS))
    parser.add_argument(
        "--layout",
        choices=["equal", "namespace"],
        default="equal",
        help="equal fragments, each segment built over one of several (row-major PQ), or "
        "the namespace's: 80%% indexed whole first, then daily deltas",
    )
    args = parser.parse_args()
    env = print_environment()
    root = DATA_DIR / "index_merge"
    results = []
    for kind in args.kinds:
        found = one_kind(root / kind, kind, args)
        results.append(found)
        print({k: v for k, v in found.items() if k != "samples"}, flush=True)
    shutil.rmtree(root, ignore_errors=True)
    print_table(
        ["type", "rebuild", "delta", "merge", "(delta+merge)/rebuild", "equal results"],
        [
            [r["kind"], f"{r['rebuild_s'] * 1000:.0f} ms", "-", "-", "-", r["refused"]]
            if "refused" in r
            else [
                r["kind"],
                f"{r['rebuild_s'] * 1000:.0f} ms",
                f"{r['delta_s'] * 1000:.0f} ms",
                f"{r['merge_s'] * 1000:.0f} ms",
                f"{r['ratio']:.2f}",
                "; ".join(f"{k} {v}" for k, v in r.items() if "equals" in k or "recall" in k),
            ]
            for r in results
        ],
        title=f"{args.rows} rows, {args.segments} committed segments + 1 new fragment "
        f"({args.layout} layout), "
        f"medians of {args.samples}",
    )
    write_results("index_merge", {"environment": env, "args": vars(args), "results": results})


if __name__ == "__main__":
    main()
