"""``create_index`` against a partition spec evolution and against ``relocate``, both
orders (issue 41, the attack matrix). A new spec version changes no leaf: the build
publishes, and partitions created under the new spec are indexed by the next
``optimize_indices`` if the declaration's filter covers them. ``relocate`` rewrites the
partitions it moves rows between (a Lance ``Overwrite``, which carries no index): a build
parked across it builds those anew; one that published first loses them there until the
next ``optimize_indices``."""

from __future__ import annotations

from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.format.swap import Swap
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import race, whole
from tests.support import no_duplicates

BUCKETED = [PartitionField("part", "part"), PartitionField("bucket", "id", "abs(hash(col)) % 2")]


def low_parts(ns: PartitionedNamespace) -> Any:
    """A BTREE on ``id`` of the partitions with ``part <= 2`` (under any spec)."""
    return ns.create_scalar_index("id", "BTREE", filter="part <= 2")


def evolve(ns: PartitionedNamespace) -> int:
    return ns.evolve_partition_spec(BUCKETED)


def after_the_new_spec(ns: PartitionedNamespace) -> None:
    """Rows of parts 2 and 5 written under spec 2 (new partitions, two buckets each),
    indexed by optimize_indices where the filter covers them (part 2)."""
    ns.write(vector_rows([2, 5], 20, first_id=8000))
    assert {p.spec_version for p in ns.state().partitions()} == {1, 2}
    assert whole(ns) == {"id_idx": (2, 600, 20)}
    result = ns.optimize_indices()
    assert result.rows_indexed == 20
    assert sorted((p.values["part"], p.values["bucket"]) for p in result.partitions) == [
        (2, 0),
        (2, 1),
    ]
    assert whole(ns) == {"id_idx": (4, 620, 0)}
    assert no_duplicates(ns) == [*range(1200), *range(8000, 8040)]


@pytest.mark.parametrize("point", ["create_index.computed", "create_index.before_publish"])
def test_a_new_partition_spec_while_the_index_builds(
    vectors: PartitionedNamespace, point: str
) -> None:
    result, error, version = race(vectors, point, low_parts, evolve)
    assert error is None
    assert version == 2
    assert result.rows_indexed == 600
    assert whole(vectors) == {"id_idx": (2, 600, 0)}
    after_the_new_spec(vectors)


def test_a_build_while_a_new_partition_spec_commits(vectors: PartitionedNamespace) -> None:
    """The evolution parks before its metadata commit; the build publishes meanwhile."""
    version, error, result = race(vectors, "evolve.before_commit", evolve, low_parts)
    assert error is None
    assert version == 2
    assert result.rows_indexed == 600
    after_the_new_spec(vectors)


def misplace(ns: PartitionedNamespace) -> None:
    """Five rows of part 3 (ids 7000-7004) appended straight to partition 1's leaf with
    pylance, published as that leaf's latest (as a foreign writer leaves them)."""
    state = ns.state()
    target = ns.partition({"part": 1})
    row = state.full_rows([target.object_id]).to_pylist()[0]
    row["read_version"] = None
    ns._manifest.commit(Swap(state.view, [row]))
    leaf = lance.dataset(target.location)
    rows = vector_rows([3], 5, first_id=7000)
    lance.write_dataset(rows.cast(leaf.schema), target.location, mode="append")
    assert ns.verify().misplaced_rows == 5


def relocate(ns: PartitionedNamespace) -> Any:
    return ns.relocate()


def btree(ns: PartitionedNamespace) -> Any:
    return ns.create_scalar_index("id", "BTREE")


ALL = [*range(1200), *range(7000, 7005)]


@pytest.mark.parametrize("point", ["create_index.computed", "create_index.before_publish"])
def test_relocate_while_the_index_builds(vectors: PartitionedNamespace, point: str) -> None:
    """The rows move from partition 1 to 3 meanwhile: the build's retry indexes both
    rewritten leaves, so every row is indexed where it now lies."""
    misplace(vectors)
    result, error, moved = race(vectors, point, btree, relocate)
    assert error is None
    assert moved.rows_inserted == 5
    assert sorted(p.values["part"] for p in moved.partitions) == [1, 3]
    assert result.rows_indexed == 1205
    assert vectors.verify().ok
    assert no_duplicates(vectors) == ALL
    assert whole(vectors) == {"id_idx": (4, 1205, 0)}
    assert vectors.to_table(filter="id = 7002").column("part").to_pylist() == [3]


@pytest.mark.parametrize("point", ["relocate.computed", "relocate.before_publish"])
def test_a_build_while_relocate_runs(vectors: PartitionedNamespace, point: str) -> None:
    """The build publishes first (partition 1's index covers the misplaced rows); the
    relocation's retry rewrites partitions 1 and 3 without it, and optimize_indices
    indexes them again."""
    misplace(vectors)
    moved, error, result = race(vectors, point, relocate, btree)
    assert error is None
    assert result.rows_indexed == 1205
    assert moved.rows_inserted == 5
    assert vectors.verify().ok
    assert no_duplicates(vectors) == ALL
    assert whole(vectors) == {"id_idx": (2, 600, 605)}
    assert vectors.optimize_indices().rows_indexed == 605
    assert whole(vectors) == {"id_idx": (4, 1205, 0)}
    assert vectors.to_table(filter="id = 7002").column("part").to_pylist() == [3]
