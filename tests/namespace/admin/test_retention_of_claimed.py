"""Retention keeps what a tagged ``__manifest`` version reads, also where that version
caught a partition claimed by a committing transaction: a claimed partition with a
``read_version`` is still published there (``ManifestView.published_leaves``), so the leaf
version it reads must survive ``maintain(older_than=...)`` for as long as the tag does.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import ENV, FailpointError
from tests.workers import TAGGED, tagged_rows


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3, each leaf at version 1
    return ns


def ids(ns: PartitionedNamespace, as_of: str | None = None) -> list[int]:
    return sorted(ns.to_table(columns=["id"], as_of=as_of).column("id").to_pylist())


def test_maintain_keeps_the_leaf_version_a_tagged_version_reads_under_a_claim(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X seals partition 1 (claimed, still published at leaf version 1) and its committer
    dies; that ``__manifest`` version is tagged. X is then finished by another commit and
    partition 1 written again (leaf versions 2 and 3). ``maintain`` removing every old
    version must keep leaf version 1, which the tag reads, and remove version 2."""
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    monkeypatch.setenv(ENV, "commit.after_claim=raise")
    with pytest.raises(FailpointError):
        ns.commit("X")
    monkeypatch.delenv(ENV)
    p1 = ns.partition({"part": 1})
    claimed = ns.state()
    assert p1.object_id in claimed.view.claimed_ids()
    assert p1.read_version == 1
    tagged = ns.tag("claimed").version
    assert tagged == claimed.version

    PartitionedNamespace.open(ns.uri).commit("X")  # takes the crashed commit over: v2
    ns.write(tagged_rows("later", [1], 1, first_id=300))  # v3
    assert ns.partition({"part": 1}).read_version == 3

    report = ns.maintain(older_than=dt.timedelta(0))
    assert ids(ns, as_of="claimed") == [0, 1, 2, 3]
    assert ids(ns) == [0, 1, 2, 3, 100, 101, 300]
    leaf = lance.dataset(p1.location)
    assert sorted(int(v["version"]) for v in leaf.versions()) == [1, 3]
    assert report.tagged_manifest_versions == {"claimed": tagged}
    assert report.leaves_kept_for_tags == {p1.object_id: [1]}
