"""A handle remembers what a filter pruned to, and the plans of its reads, per ``__manifest``
version (``read/pruned.py``): a read repeated on a handle held open (a search service asking
for one date) skips the prune and the planning. What must hold: a publish is never hidden
(the key is the version), searches and plain reads see a write or a schema change made
between two of them, a plan is never served for other arguments, and the caches stay within
their bounds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.read.pruned import PlanCache, PruneCache, prune
from tests.support import tagged_rows

DIM = 4
VECTORS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("vec", pa.list_(pa.float32(), DIM)),
    ]
)
DAY = dt.date(2025, 3, 1)
ONE_DAY = "day = DATE '2025-03-01'"


def day_rows(ids: range, vector: float) -> pa.Table:
    flat = np.full(len(ids) * DIM, vector, dtype=np.float32)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([DAY] * len(ids), pa.date32()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(flat), DIM),
        },
        schema=VECTORS,
    )


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_a_write_between_two_searches_of_one_date_is_seen(tmp_path: Path) -> None:
    """The searching handle is held open; another handle writes the date between two
    identical searches, drops it and writes it again: each search sees the latest rows."""
    writer = PartitionedNamespace.create(tmp_path / "ns", VECTORS, [PartitionField("day", "day")])
    writer.write(day_rows(range(5), 9.0))
    searcher = PartitionedNamespace.open(tmp_path / "ns")
    nearest = {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 3}
    assert ids(searcher.to_table(nearest=nearest, filter=ONE_DAY)) == [0, 1, 2]
    writer.write(day_rows(range(100, 103), 0.0))  # nearer than every row before
    assert ids(searcher.to_table(nearest=nearest, filter=ONE_DAY)) == [100, 101, 102]
    writer.drop_partitions(ONE_DAY)
    assert searcher.to_table(nearest=nearest, filter=ONE_DAY).num_rows == 0
    writer.write(day_rows(range(200, 202), 5.0))  # the date again, in the same location
    assert ids(searcher.to_table(nearest=nearest, filter=ONE_DAY)) == [200, 201]


def test_plain_reads_of_one_filter_see_writes_by_the_handle_and_by_others(
    seeded: PartitionedNamespace,
) -> None:
    handle = PartitionedNamespace.open(seeded.uri)
    assert ids(handle.to_table(filter="part >= 2")) == [2, 3]
    seeded.write(tagged_rows("new", [2, 3], 1, first_id=10))  # another handle
    assert ids(handle.to_table(filter="part >= 2")) == [2, 3, 10, 11]
    assert handle.count_rows(filter="part >= 2") == 4
    handle.write(tagged_rows("own", [4], 1, first_id=20))  # this handle
    assert ids(handle.to_table(filter="part >= 2")) == [2, 3, 10, 11, 20]
    assert sorted(p.values["part"] for p in handle.prune("part >= 2")) == [2, 3, 4]


def test_a_past_version_keeps_its_own_prune(seeded: PartitionedNamespace) -> None:
    before = seeded.version
    assert ids(seeded.to_table(filter="part >= 2")) == [2, 3]
    seeded.write(tagged_rows("new", [3], 1, first_id=10))
    assert ids(seeded.to_table(filter="part >= 2", as_of=before)) == [2, 3]
    assert ids(seeded.to_table(filter="part >= 2")) == [2, 3, 10]
    assert ids(seeded.to_table(filter="part >= 2", as_of=before)) == [2, 3]


def test_the_cache_keeps_results_per_version_within_its_bounds(
    seeded: PartitionedNamespace,
) -> None:
    seeded.write(tagged_rows("more", [3, 4, 5], 1, first_id=10))
    state = seeded.state()
    cache = PruneCache(entries=2, partitions=3)
    assert cache.get(state, "part = 1") is None
    assert cache.prune(state, "part = 1") == prune(state, "part = 1")
    assert cache.get(state, "part = 1") == prune(state, "part = 1")
    assert len(cache) == 1
    assert len(cache.prune(state, "part >= 2")) == 4  # more than 3 partitions: not kept
    assert cache.get(state, "part >= 2") is None
    for f in ("part = 2", "part = 3", "part IN (4, 5)"):
        cache.prune(state, f)
    assert len(cache) <= 2
    assert cache.get(state, "part = 1") is None  # the least recently used went first
    assert cache.get(state, "part IN (4, 5)") is not None
    held = sum(len(cache.get(state, f) or []) for f in ("part = 2", "part = 3", "part IN (4, 5)"))
    assert held <= 3
    seeded.write(tagged_rows("later", [4], 1, first_id=30))
    assert cache.get(seeded.state(), "part IN (4, 5)") is None  # another version


def test_a_schema_change_between_two_reads_is_seen(seeded: PartitionedNamespace) -> None:
    """Another handle adds a column between two identical reads of every column."""
    handle = PartitionedNamespace.open(seeded.uri)
    assert handle.to_table(filter="part = 1").column_names == ["id", "part", "tag"]
    seeded.add_column(pa.field("score", pa.float64()))
    again = handle.to_table(filter="part = 1")
    assert again.column_names == ["id", "part", "tag", "score"]
    assert again.column("score").null_count == again.num_rows


def test_a_kept_plan_is_never_served_for_other_arguments(seeded: PartitionedNamespace) -> None:
    handle = PartitionedNamespace.open(seeded.uri)
    plan = handle.plan_scan("part = 1", ["id"])
    assert handle.plan_scan("part = 1", ["id"]) is plan  # the same read: kept
    assert handle.plan_scan("part = 1", ("id",)) is plan  # the same names
    assert handle.plan_scan("part = 1", ["id", "tag"]).schema.names == ["id", "tag"]
    assert handle.plan_scan("part = 2", ["id"]).tasks[0].partition.values == {"part": 2}
    assert handle.plan_scan(None, ["id"]).scan.filter is None
    listed = handle.plan_scan("part = 1", ["id"], fragments=True)
    assert listed is not plan
    assert listed.tasks[0].fragments
    split = handle.plan_scan("part = 1", ["id"], target_tasks=4)
    assert split is not plan
    before = handle.version
    seeded.write(tagged_rows("new", [1], 1, first_id=10))
    fresh = handle.plan_scan("part = 1", ["id"])
    assert fresh is not plan
    assert fresh.manifest_version == before + 1
    assert handle.plan_scan("part = 1", ["id"], as_of=before).manifest_version == before


def test_the_plan_cache_stays_within_its_bounds(seeded: PartitionedNamespace) -> None:
    seeded.write(tagged_rows("more", [3, 4, 5], 1, first_id=10))
    cache = PlanCache(entries=2, partitions=3)
    plans = {f: seeded.plan_scan(f) for f in ("part = 1", "part >= 2", "part = 2", "part = 3")}
    version = seeded.version
    cache.keep(plans["part = 1"])
    assert cache.get(version, "part = 1", None) is plans["part = 1"]
    assert cache.get(version + 1, "part = 1", None) is None
    assert cache.get(version, "part = 1", ["id"]) is None
    cache.keep(plans["part >= 2"])  # 4 tasks, more than 3: not kept
    assert cache.get(version, "part >= 2", None) is None
    cache.keep(plans["part = 2"])
    cache.keep(plans["part = 3"])
    assert len(cache) == 2
    assert cache.get(version, "part = 1", None) is None  # the least recently used went first
    assert cache.get(version, "part = 3", None) is plans["part = 3"]
    assert cache.get(version, "part = 3", iter(["id"])) is None  # an iterator is not read
