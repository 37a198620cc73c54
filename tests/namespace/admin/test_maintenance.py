"""Manifest upkeep: automatic compaction, and cleanup that keeps what readers need."""

from __future__ import annotations

import datetime as dt
import json
import time

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import InvalidArgumentError
from airflow_provider_lance.namespace.format import manifest_compaction
from airflow_provider_lance.namespace.format.manifest_compaction import (
    AUTO_COMPACT_FRAGMENTS,
    indexed_fragments,
)
from airflow_provider_lance.namespace.testing import ENV, FailpointError
from tests.support import tagged_rows


def fragments(ns: PartitionedNamespace) -> int:
    return len(lance.dataset(ns.uri + "/__manifest").get_fragments())


def test_publishes_keep_the_manifest_compact(tagged: PartitionedNamespace) -> None:
    for i in range(AUTO_COMPACT_FRAGMENTS + 10):
        tagged.write(tagged_rows(f"t{i}", [i % 3], 1, first_id=i))
        assert fragments(tagged) <= AUTO_COMPACT_FRAGMENTS
    assert tagged.count_rows() == AUTO_COMPACT_FRAGMENTS + 10
    indexed = {
        tuple(i.field_names) for i in lance.dataset(tagged.uri + "/__manifest").describe_indices()
    }
    assert indexed == {("object_type",), ("object_id",), ("part",)}


def test_a_publish_folds_only_the_fragments_no_index_covers(
    tagged: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rewriting an indexed fragment makes Lance remap every index over it (220 ms at a
    million partitions): a publish's compaction leaves those fragments and their indices
    alone, until the rows outside the indices reach REINDEX_ROWS."""
    manifest = tagged.uri + "/__manifest"
    writes = 0

    def publish_until_compacted() -> None:
        nonlocal writes
        before = fragments(tagged)
        while True:
            tagged.write(tagged_rows(f"t{writes}", [writes % 50], 1, first_id=writes))
            writes += 1
            if fragments(tagged) < before + 1 and writes > 1:
                return
            before = fragments(tagged)

    indexed = indexed_fragments(lance.dataset(manifest))
    assert indexed  # create indexed its rows
    for _ in range(2):  # the second fold takes the first's fragment too
        publish_until_compacted()
        ds = lance.dataset(manifest)
        assert indexed_fragments(ds) == indexed  # not rewritten, nor their indices
        assert indexed < {f.fragment_id for f in ds.get_fragments()}
        assert len(ds.get_fragments()) == len(indexed) + 1  # the publishes' rows, folded
    monkeypatch.setattr(manifest_compaction, "REINDEX_ROWS", 1)
    publish_until_compacted()
    ds = lance.dataset(manifest)
    assert indexed_fragments(ds) == {f.fragment_id for f in ds.get_fragments()} != indexed
    assert tagged.count_rows() == writes
    assert sorted(tagged.to_table(filter="part = 7").column("id").to_pylist()) == [
        i for i in range(writes) if i % 50 == 7
    ]


def test_cleanup_never_removes_what_readers_or_transactions_need(
    tagged: PartitionedNamespace, monkeypatch
) -> None:
    for i in range(4):
        tagged.write(tagged_rows(f"t{i}", [1, 2], 1, first_id=10 * i))
    # partition 2 gets an unpublished leaf version from a crashed commit
    crashed = tagged.begin("append", "crashed")
    crashed.stage(tagged_rows("c", [2], 1, first_id=500))
    monkeypatch.setenv(ENV, "commit.before_publish=raise")
    with pytest.raises(FailpointError):
        tagged.commit(crashed)
    monkeypatch.delenv(ENV)
    rows = sorted(tagged.to_table().column("id").to_pylist())
    report = tagged.maintain(older_than=dt.timedelta(seconds=0))
    assert report.manifest_fragments_after < report.manifest_fragments_before
    assert report.manifest_versions_removed > 0
    assert report.leaf_versions_removed > 0  # partition 1's history went
    assert len(report.leaves_skipped) == 1  # partition 2 is claimed: left alone
    assert sorted(tagged.to_table().column("id").to_pylist()) == rows
    tagged.recover(lease_seconds=0)
    tagged.write(tagged_rows("after", [2], 1, first_id=900))
    assert sorted(tagged.to_table().column("id").to_pylist()) == sorted([*rows, 900])


def test_cleanup_keeps_leaf_versions_that_retained_manifest_versions_read(
    tagged: PartitionedNamespace,
) -> None:
    """Issue: maintain removed a leaf version a manifest version inside the window reads."""
    for i in range(3):  # partition 1: leaf versions 1..3, partition 2: 1..2, all old soon
        tagged.write(tagged_rows(f"a{i}", [1], 1, first_id=i))
    for i in range(2):
        tagged.write(tagged_rows(f"b{i}", [2], 1, first_id=100 + i))
    time.sleep(2.0)
    tagged.write(tagged_rows("b-young", [2], 1, first_id=200))  # partition 1 untouched
    v = tagged.version  # young, but reads partition 1 at its old leaf version 3
    at_v = {p.values["part"]: p for p in tagged.prune(version=v)}
    old = at_v[1]
    assert old.read_version == 3
    rows_at_v = sorted(tagged.to_table(version=v).column("id").to_pylist())
    tagged.write(tagged_rows("a-young", [1], 1, first_id=300))  # partition 1 moves on to 4
    tagged.write(tagged_rows("c-new", [3], 1, first_id=400))  # created inside the window
    created = next(p for p in tagged.prune() if p.values["part"] == 3)

    # below the sleep: what came before it is old, v (and all after it) stays in the window
    report = tagged.maintain(older_than=dt.timedelta(seconds=1.5))

    assert sorted(tagged.to_table(version=v).column("id").to_pylist()) == rows_at_v
    retained = report.retained_manifest_versions
    assert retained is not None
    assert retained[0] <= v <= retained[1]
    assert report.manifest_versions_removed > 0
    assert lance.dataset(old.location, version=3).count_rows() == 3
    # leaf versions no retained manifest version reads are really gone
    assert leaf_versions(old.location) == [3, 4]
    assert report.leaves_kept_for_readers[old.object_id] == 3
    young = at_v[2]
    assert young.read_version is not None
    kept = report.leaves_kept_for_readers[young.object_id]
    assert kept <= young.read_version
    assert leaf_versions(young.location) == list(range(kept, young.read_version + 1))
    assert report.leaf_versions_removed == 2 + (kept - 1)
    assert report.leaves_skipped_by_reason == {"created_in_window": [created.object_id]}
    assert report.leaves_skipped == [created.object_id]
    assert report.to_dict() == json.loads(json.dumps(report.to_dict()))


def test_cleanup_keeps_leaf_versions_not_yet_published(tagged: PartitionedNamespace) -> None:
    for i in range(3):
        tagged.write(tagged_rows(f"t{i}", [1], 1, first_id=i))
    (partition,) = tagged.prune()
    assert partition.read_version == 3
    # a leaf version nothing published yet (an in-flight commit's, or a crashed one's)
    lance.write_dataset(
        tagged_rows("in-flight", [1], 1, first_id=99), partition.location, mode="append"
    )
    rows = sorted(tagged.to_table().column("id").to_pylist())
    report = tagged.maintain(older_than=dt.timedelta(0))
    assert leaf_versions(partition.location) == [3, 4]
    assert report.leaves_kept_for_readers == {partition.object_id: 3}
    assert report.leaves_kept_unpublished == {partition.object_id: 1}
    assert report.leaf_versions_removed == 2
    assert sorted(tagged.to_table().column("id").to_pylist()) == rows == [0, 1, 2]


def test_negative_retention_is_refused(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("t", [1], 1, first_id=0))
    with pytest.raises(InvalidArgumentError, match="older_than"):
        tagged.maintain(older_than=dt.timedelta(seconds=-1))
    assert tagged.count_rows() == 1


def leaf_versions(location: str) -> list[int]:
    return [int(v["version"]) for v in lance.dataset(location).versions()]
