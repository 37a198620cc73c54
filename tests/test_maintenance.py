"""Manifest upkeep: automatic compaction, and cleanup that keeps what readers need."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.failpoints import ENV, FailpointError
from airflow_provider_lance.namespace.maintenance import AUTO_COMPACT_FRAGMENTS

from .workers import TAGGED, tagged_rows


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )


def fragments(ns: PartitionedNamespace) -> int:
    return len(lance.dataset(ns.uri + "/__manifest").get_fragments())


def test_publishes_keep_the_manifest_compact(ns: PartitionedNamespace) -> None:
    for i in range(AUTO_COMPACT_FRAGMENTS + 10):
        ns.write(tagged_rows(f"t{i}", [i % 3], 1, first_id=i))
        assert fragments(ns) <= AUTO_COMPACT_FRAGMENTS
    assert ns.count_rows() == AUTO_COMPACT_FRAGMENTS + 10
    indexed = {
        tuple(i.field_names) for i in lance.dataset(ns.uri + "/__manifest").describe_indices()
    }
    assert indexed == {("object_type",)}


def test_cleanup_never_removes_what_readers_or_transactions_need(
    ns: PartitionedNamespace, monkeypatch
) -> None:
    for i in range(4):
        ns.write(tagged_rows(f"t{i}", [1, 2], 1, first_id=10 * i))
    # partition 2 gets an unpublished leaf version from a crashed commit
    crashed = ns.begin("append", "crashed")
    crashed.stage(tagged_rows("c", [2], 1, first_id=500))
    monkeypatch.setenv(ENV, "commit.before_publish=raise")
    with pytest.raises(FailpointError):
        ns.commit(crashed)
    monkeypatch.delenv(ENV)
    rows = sorted(ns.to_table().column("id").to_pylist())
    report = ns.maintain(older_than=dt.timedelta(seconds=0))
    assert report.manifest_fragments_after < report.manifest_fragments_before
    assert report.manifest_versions_removed > 0
    assert report.leaf_versions_removed > 0  # partition 1's history went
    assert len(report.leaves_skipped) == 1  # partition 2 is claimed: left alone
    assert sorted(ns.to_table().column("id").to_pylist()) == rows
    ns.recover(lease_seconds=0)
    ns.write(tagged_rows("after", [2], 1, first_id=900))
    assert sorted(ns.to_table().column("id").to_pylist()) == sorted([*rows, 900])
