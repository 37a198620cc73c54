"""Leaf versions committed outside the namespace (issue 41, item 2): one that changes no rows
(an index built on the leaf with pylance) is kept and published by the next commit to that
partition, whatever commits it; one that changes rows is rolled back as before, with a
warning that names it and the namespace call that does it (the orphan sweep of ``maintain``
follows the same rule: tests/namespace/admin/test_unpublished_foreign_versions.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import logged, no_duplicates, tagged_rows

LEAF_COMMIT = "airflow_provider_lance.namespace.write.leaf_commit"


def leaf(ns: PartitionedNamespace, part: int) -> lance.LanceDataset:
    """Partition ``part``'s leaf at its published version."""
    p = ns.partition({"part": part})
    return lance.dataset(p.location, version=p.read_version)


def latest_leaf(ns: PartitionedNamespace, part: int) -> lance.LanceDataset:
    return lance.dataset(ns.partition({"part": part}).location)


def index_names(ds: lance.LanceDataset) -> list[str]:
    return sorted(d.name for d in ds.describe_indices())


NEXT_COMMITS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "direct write": lambda ns: ns.write(tagged_rows("next", [1], 2, first_id=100)),
    "named write": lambda ns: ns.write(tagged_rows("next", [1], 2, first_id=100), txn_id="w1"),
    "delete": lambda ns: ns.delete("id = 0"),
    "merge": lambda ns: ns.merge(tagged_rows("next", [1], 2, first_id=100), ["id", "part"]),
    "create_index": lambda ns: ns.create_scalar_index("tag", "BITMAP"),
}


@pytest.mark.parametrize("commit", sorted(NEXT_COMMITS))
def test_an_index_built_on_a_leaf_with_pylance_survives_the_next_namespace_commit(
    seeded: PartitionedNamespace, commit: str
) -> None:
    """Before: the next commit logged "rolling back 1 unpublished version(s)" and the
    published version had no index."""
    lance.dataset(seeded.partition({"part": 1}).location).create_scalar_index("id", "BTREE")
    before = set(no_duplicates(seeded))
    with logged(LEAF_COMMIT) as warnings:
        NEXT_COMMITS[commit](seeded)
    assert [r.getMessage() for r in warnings if "rolling back" in r.getMessage()] == []
    published = leaf(seeded, 1)
    assert "id_idx" in index_names(published)
    assert "ScalarIndexQuery" in published.scanner(filter="id = 1").explain_plan()
    after = set(no_duplicates(seeded))
    if commit == "delete":
        assert after == before - {0}
    elif commit in ("direct write", "named write", "merge"):
        assert after == before | {100, 101}
    else:
        assert after == before


def test_several_index_versions_are_kept_and_published_together(
    seeded: PartitionedNamespace,
) -> None:
    location = seeded.partition({"part": 1}).location
    lance.dataset(location).create_scalar_index("id", "BTREE")
    lance.dataset(location).create_scalar_index("tag", "BITMAP")
    seeded.write(tagged_rows("next", [1], 1, first_id=100))
    assert index_names(leaf(seeded, 1)) == ["id_idx", "tag_idx"]
    assert 100 in no_duplicates(seeded)


def test_a_foreign_append_is_rolled_back_with_a_warning_that_names_it(
    seeded: PartitionedNamespace,
) -> None:
    location = seeded.partition({"part": 1}).location
    lance.write_dataset(tagged_rows("foreign", [1], 2, first_id=700), location, mode="append")
    foreign = int(lance.dataset(location).version)
    with logged(LEAF_COMMIT) as warnings:
        seeded.write(tagged_rows("next", [1], 1, first_id=100))
    got = no_duplicates(seeded)
    assert 100 in got
    assert 700 not in got
    named = [r.getMessage() for r in warnings if f"version {foreign} " in r.getMessage()]
    assert len(named) == 1
    assert "Append" in named[0]
    assert "PartitionedNamespace.write(data)" in named[0]


def test_an_index_built_on_rows_that_are_rolled_back_goes_with_them(
    seeded: PartitionedNamespace,
) -> None:
    """An append outside the namespace, then an index over it: both change (or describe)
    rows no namespace commit published, so both are rolled back."""
    location = seeded.partition({"part": 1}).location
    lance.write_dataset(tagged_rows("foreign", [1], 2, first_id=700), location, mode="append")
    lance.dataset(location).create_scalar_index("id", "BTREE")
    with logged(LEAF_COMMIT) as warnings:
        seeded.write(tagged_rows("next", [1], 1, first_id=100))
    assert 700 not in no_duplicates(seeded)
    assert index_names(leaf(seeded, 1)) == []
    messages = " ".join(r.getMessage() for r in warnings)
    assert "a Append committed" in messages
    assert "a CreateIndex committed" in messages


def test_an_index_above_a_foreign_append_kept_below_is_rolled_back_but_one_below_is_kept(
    seeded: PartitionedNamespace,
) -> None:
    """Index (kept), then an append outside the namespace (rolled back): the next commit
    restores the index version, not the published one."""
    location = seeded.partition({"part": 1}).location
    lance.dataset(location).create_scalar_index("id", "BTREE")
    lance.write_dataset(tagged_rows("foreign", [1], 2, first_id=700), location, mode="append")
    seeded.write(tagged_rows("next", [1], 1, first_id=100))
    got = no_duplicates(seeded)
    assert 700 not in got
    assert 100 in got
    assert index_names(leaf(seeded, 1)) == ["id_idx"]


def test_optimize_remaps_an_index_built_with_pylance_that_is_not_published_yet(
    seeded: PartitionedNamespace,
) -> None:
    """The compaction is planned on the kept index version and committed by Lance, which
    remaps that index too (before: the leaf was left alone, as ``indexed``)."""
    seeded.write(tagged_rows("more", [1], 2, first_id=50))  # a second fragment to compact
    lance.dataset(seeded.partition({"part": 1}).location).create_scalar_index("id", "BTREE")
    result = seeded.optimize()
    assert seeded.partition({"part": 1}).object_id not in result.skipped
    compacted = {f.fragment_id for f in leaf(seeded, 1).get_fragments()}
    seeded.write(tagged_rows("next", [1], 1, first_id=100))
    published = leaf(seeded, 1)
    (index,) = published.describe_indices()
    covered = {int(f) for s in index.segments for f in s.fragment_ids}
    assert covered == compacted  # every compacted row indexed, the new one not yet
    assert {f.fragment_id for f in published.get_fragments()} - covered  # the new one
