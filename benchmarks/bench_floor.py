"""The floor under a partitioned write: the Lance primitives a write is made of, bare.

    python benchmarks/bench_floor.py                       # 1,000 x 1,000 and 10,000 x 100
    python benchmarks/bench_floor.py --partitions 1000 --rows 1000

A write into a partitioned namespace is, at the least: the data files of every touched leaf
and one commit per leaf (one ``write_dataset`` call each, in parallel: the cheapest way
Lance has; files first and a separate commit, as a transaction does, is measured next to
it), and one ``merge_insert`` into ``__manifest`` at the namespace's size. A read is one
filtered scan of ``__manifest`` and one open and scan per leaf. Nothing here knows about
transactions, claims, plans or retries: each figure is what Lance itself takes for the
same work, so ``bench_peers.py`` can report every operation of this project as ours / floor.

The functions are imported by ``bench_peers.py`` (measured in the same run); run alone, the
script prints the floor of each operation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation
from lance.fragment import write_fragments

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fmt_ms, print_environment, print_table, summarize, write_results

#: The bare writes use as many threads as the project's leaf work does by default.
THREADS = 8
EPOCH = dt.date(2020, 1, 1)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("event_date", pa.date32()),
        pa.field("value", pa.float64()),
    ]
)
#: A ``__manifest`` reduced to what a publish touches: the leaf's id, its partition value
#: and its ``read_version``.
MANIFEST_SCHEMA = pa.schema(
    [
        pa.field("object_id", pa.string(), False),
        pa.field("event_date", pa.date32()),
        pa.field("read_version", pa.int64()),
    ]
)


def dates(first: int, count: int) -> list[dt.date]:
    return [EPOCH + dt.timedelta(days=first + i) for i in range(count)]


def rows(
    first_date: int, n_dates: int, per_date: int, *, first_id: int = 0, seed: int = 0
) -> pa.Table:
    """``per_date`` rows for each of ``n_dates`` consecutive dates, ids from ``first_id``."""
    n = n_dates * per_date
    days = np.repeat(np.arange(first_date, first_date + n_dates, dtype=np.int32), per_date)
    base = (EPOCH - dt.date(1970, 1, 1)).days
    return pa.table(
        {
            "id": pa.array(np.arange(first_id, first_id + n, dtype=np.int64)),
            "event_date": pa.array(days + base, pa.int32()).cast(pa.date32()),
            "value": pa.array(np.random.default_rng(seed).random(n)),
        },
        schema=SCHEMA,
    )


def by_date(table: pa.Table) -> list[tuple[dt.date, pa.Table]]:
    """The table split per date (sorted), as a writer that routes rows would."""
    table = table.sort_by("event_date")
    keys = table.column("event_date")
    bounds = np.flatnonzero(np.diff(keys.cast(pa.int32()).to_numpy())) + 1
    starts = [0, *bounds.tolist()]
    ends = [*bounds.tolist(), table.num_rows]
    return [(keys[s].as_py(), table.slice(s, e - s)) for s, e in zip(starts, ends, strict=True)]


def leaf_uri(root: Path | str, day: dt.date) -> str:
    """The leaf of ``day`` under ``root`` (a directory or an object-store URI)."""
    return f"{root}/event_date={day.isoformat()}.lance"


def parallel(fn: Any, items: Sequence[Any], threads: int = THREADS) -> list[Any]:
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(items)))) as pool:
        return list(pool.map(fn, items))


# -- the primitives ---------------------------------------------------------------------
def write_leaves(root: Path, parts: list[tuple[dt.date, pa.Table]], mode: str) -> dict[str, int]:
    """One ``write_dataset`` per leaf (create, append or overwrite), in parallel."""

    def one(part: tuple[dt.date, pa.Table]) -> tuple[str, int]:
        uri = leaf_uri(root, part[0])
        ds = lance.write_dataset(part[1], uri, mode=mode)
        return uri, int(ds.version)

    return dict(parallel(one, parts))


def stage_then_commit_leaves(root: Path, parts: list[tuple[dt.date, pa.Table]]) -> dict[str, int]:
    """``write_fragments`` per leaf, then one ``Append`` commit per leaf, both in parallel:
    the two steps a transaction keeps apart."""

    def one(part: tuple[dt.date, pa.Table]) -> tuple[str, int]:
        uri = leaf_uri(root, part[0])
        ds = lance.dataset(uri)
        fragments = write_fragments(part[1], ds)
        committed = lance.LanceDataset.commit(
            uri, LanceOperation.Append(fragments), read_version=ds.version
        )
        return uri, int(committed.version)

    return dict(parallel(one, parts))


def manifest_rows(versions: dict[str, int]) -> pa.Table:
    names = sorted(versions)
    days = [dt.date.fromisoformat(Path(n).name[len("event_date=") : -len(".lance")]) for n in names]
    return pa.table(
        {
            "object_id": [Path(n).name for n in names],
            "event_date": pa.array(days, pa.date32()),
            "read_version": pa.array([versions[n] for n in names], pa.int64()),
        },
        schema=MANIFEST_SCHEMA,
    )


def create_manifest(root: Path, versions: dict[str, int]) -> None:
    lance.write_dataset(manifest_rows(versions), str(root / "__manifest"), mode="create")
    ds = lance.dataset(str(root / "__manifest"))
    ds.create_scalar_index("object_id", "BTREE")


def publish(root: Path, versions: dict[str, int]) -> None:
    """One ``merge_insert`` of the touched rows into ``__manifest`` (the publish)."""
    ds = lance.dataset(str(root / "__manifest"))
    (
        ds.merge_insert("object_id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute(manifest_rows(versions))
    )


def plan(root: Path, day: dt.date) -> pa.Table:
    """Which leaves (and versions) hold ``day``: one filtered scan of ``__manifest``."""
    ds = lance.dataset(str(root / "__manifest"))
    return ds.to_table(filter=pc.field("event_date") == pa.scalar(day, pa.date32()))


def read(root: Path, first: dt.date, last: dt.date) -> pa.Table:
    """The rows of ``first``..``last``: plan, then open each leaf at its version and scan."""
    ds = lance.dataset(str(root / "__manifest"))
    field = pc.field("event_date")
    leaves = ds.to_table(
        filter=(field >= pa.scalar(first, pa.date32())) & (field <= pa.scalar(last, pa.date32()))
    )

    def one(i: int) -> pa.Table:
        name = leaves.column("object_id")[i].as_py()
        version = leaves.column("read_version")[i].as_py()
        return lance.dataset(str(root / name), version=version).to_table()

    tables = parallel(one, list(range(leaves.num_rows)))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


# -- the floor of each operation ---------------------------------------------------------
class Floor:
    """A bare Lance layout (leaves + reduced ``__manifest``) driven through the operations
    ``bench_peers.py`` measures; each method returns what it wrote or read."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def load(self, data: pa.Table) -> None:
        self.root.mkdir(parents=True)
        versions = write_leaves(self.root, by_date(data), "create")
        create_manifest(self.root, versions)

    def append(self, data: pa.Table, *, two_steps: bool = False) -> None:
        """New or existing partitions: new leaves are created, existing ones appended to,
        files and commit in one ``write_dataset`` call (``two_steps``: files first, then
        the commit, as a transaction keeps them apart)."""
        parts = by_date(data)
        new = [p for p in parts if not Path(leaf_uri(self.root, p[0])).exists()]
        old = [p for p in parts if Path(leaf_uri(self.root, p[0])).exists()]
        versions = write_leaves(self.root, new, "create") if new else {}
        if old:
            if two_steps:
                versions |= stage_then_commit_leaves(self.root, old)
            else:
                versions |= write_leaves(self.root, old, "append")
        publish(self.root, versions)

    def overwrite(self, data: pa.Table) -> None:
        publish(self.root, write_leaves(self.root, by_date(data), "overwrite"))

    def plan(self, day: dt.date) -> int:
        return plan(self.root, day).num_rows

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        return read(self.root, first, last)


def operations(floor: Floor, data: pa.Table, n: int, per: int) -> list[tuple[str, Any]]:
    """The measured operations on ``floor``, in order (the load first)."""
    return [
        ("initial load", lambda: floor.load(data)),
        ("append 1 new partition", lambda: floor.append(rows(n + 1, 1, per))),
        (f"append to all {n}", lambda: floor.append(rows(0, n, 1, first_id=10**9))),
        (
            f"append to all {n}, files then commits",
            lambda: floor.append(rows(0, n, 1, first_id=2 * 10**9), two_steps=True),
        ),
        ("overwrite 100", lambda: floor.overwrite(rows(0, 100, per, seed=1))),
        ("plan one date", lambda: floor.plan(EPOCH)),
        ("read one date", lambda: floor.read(EPOCH, EPOCH)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 100])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    env = print_environment()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for n, per in zip(args.partitions, args.rows, strict=True):
            data = rows(0, n, per)
            figures: dict[str, list[float]] = {}
            for rep in range(args.reps):
                root = Path(tmp) / f"floor-{n}-{rep}"
                floor = Floor(root)
                for name, call in operations(floor, data, n, per):
                    t0 = time.perf_counter()
                    call()
                    figures.setdefault(name, []).append(time.perf_counter() - t0)
                shutil.rmtree(root)
            results[f"{n}x{per}"] = {k: summarize(v) for k, v in figures.items()}
            print_table(
                ["operation", "median ms", "min ms"],
                [
                    [k, fmt_ms(v["median_ms"]), fmt_ms(v["min_ms"])]
                    for k, v in results[f"{n}x{per}"].items()
                ],
                title=f"Lance floor, {n:,} partitions x {per:,} rows ({THREADS} threads)",
            )
    write_results("floor", {"environment_summary": env, "floor": results})


if __name__ == "__main__":
    main()
