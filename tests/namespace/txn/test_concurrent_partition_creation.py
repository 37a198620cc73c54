"""Several OS processes creating the same partitions at once: one partition per value."""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import time
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.support import EVENTS_SCHEMA

DAYS = [dt.date(2025, 1, 1) + dt.timedelta(days=k) for k in range(6)]


def _create_all(root: str, start: float) -> list[str]:
    ns = PartitionedNamespace.open(root)
    while time.time() < start:  # line the processes up to maximise the overlap
        time.sleep(0.001)
    return [ns.create_partition({"event_date": day}).object_id for day in DAYS]


@pytest.mark.slow
def test_concurrent_creates_converge_on_one_partition_per_value(tmp_path: Path) -> None:
    root = str(tmp_path / "ns")
    PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    start = time.time() + 2.0
    with mp.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(_create_all, [(root, start)] * 4)
    ns = PartitionedNamespace.open(root)
    ids = [p.object_id for p in ns.partitions()]
    assert len(ids) == len(set(ids)) == len(DAYS)
    # every process got the same answer: the one partition that won
    assert all(r == results[0] for r in results)
    assert sorted(results[0]) == sorted(ids)
    # the losers' empty tables were removed: one leaf directory per partition
    leaf_dirs = [p for p in Path(root).iterdir() if p.name.endswith("$dataset")]
    assert len(leaf_dirs) == len(DAYS)


@pytest.mark.slow
def test_concurrent_multi_partition_writers_and_a_checking_reader(tmp_path: Path) -> None:
    """4 writer processes, overlapping partitions; a reader checks all-or-nothing meanwhile."""
    from tests.support import TAGGED
    from tests.workers import reader, writer

    root = str(tmp_path / "ns")
    PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ctx = mp.get_context("spawn")
    with ctx.Pool(5) as pool:
        checking = pool.apply_async(reader, (root, 25.0))
        writers = [pool.apply_async(writer, (root, w, 8, 1000 + w)) for w in range(4)]
        acknowledged = [tag for w in writers for tag in w.get(timeout=600)]
        report = checking.get(timeout=600)
    assert report["reads"] > 5
    assert report["violations"] == []
    assert len(acknowledged) == 32  # every transaction eventually committed
    ns = PartitionedNamespace.open(root)
    table = ns.to_table()
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids))  # no duplicates
    counts: dict[str, int] = {}
    for tag in table.column("tag").to_pylist():
        counts[tag] = counts.get(tag, 0) + 1
    assert sorted(counts) == sorted(acknowledged)
    assert all(count == int(tag.rsplit("-n", 1)[1]) for tag, count in counts.items())
