"""The orphan sweep of ``maintain`` keeps and publishes leaf versions made outside the
namespace that change no rows (an index built with pylance), and rolls back, with a warning
naming it, one that changes rows: the rule every commit follows (issue 41, item 2)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import lance

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.support import logged, no_duplicates, tagged_rows

LEAF_COMMIT = "airflow_provider_lance.namespace.write.leaf_commit"


def leaf(ns: PartitionedNamespace, part: int) -> lance.LanceDataset:
    """Partition ``part``'s leaf at its published version."""
    p = ns.partition({"part": part})
    return lance.dataset(p.location, version=p.read_version)


def index_names(ds: lance.LanceDataset) -> list[str]:
    return sorted(d.name for d in ds.describe_indices())


def sweep(ns: PartitionedNamespace) -> dict[str, Any]:
    report = ns.maintain(sweep_orphans=True, orphan_min_age=dt.timedelta(0), enforce_min_age=False)
    assert report.unpublished is not None
    return report.unpublished


def test_the_sweep_publishes_an_index_built_with_pylance_instead_of_removing_it(
    seeded: PartitionedNamespace,
) -> None:
    location = seeded.partition({"part": 1}).location
    lance.dataset(location).create_scalar_index("id", "BTREE")
    built = int(lance.dataset(location).version)
    rows = no_duplicates(seeded)
    sweep(seeded)
    assert seeded.partition({"part": 1}).read_version == built
    assert index_names(leaf(seeded, 1)) == ["id_idx"]
    assert no_duplicates(seeded) == rows
    seeded.write(tagged_rows("next", [1], 1, first_id=100))
    assert index_names(leaf(seeded, 1)) == ["id_idx"]


def test_the_sweep_rolls_back_a_foreign_append_above_an_index_and_keeps_the_index(
    seeded: PartitionedNamespace,
) -> None:
    location = seeded.partition({"part": 1}).location
    lance.dataset(location).create_scalar_index("id", "BTREE")
    lance.write_dataset(tagged_rows("foreign", [1], 2, first_id=700), location, mode="append")
    rows = no_duplicates(seeded)
    with logged(LEAF_COMMIT) as warnings:
        report = sweep(seeded)
    assert report["leaves_reclaimed"] == 1
    assert no_duplicates(seeded) == rows
    assert index_names(leaf(seeded, 1)) == ["id_idx"]
    assert any("a Append committed" in r.getMessage() for r in warnings)
    assert len(lance.dataset(location).versions()) < 5  # the foreign append's version is gone
