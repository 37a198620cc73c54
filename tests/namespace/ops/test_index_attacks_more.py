"""Index operations against what the first attack matrix (test_index_attacks.py) left
out (issue 41): a leaf commit of another operation landing on a build's committed, not
yet published, leaf versions, and a declaration changing under an upkeep that has
committed its leaves."""

from __future__ import annotations

from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import btree, race, whole
from tests.support import Worker, no_duplicates, other, settle


def test_a_delete_never_publishes_the_leaf_versions_of_a_build_that_is_then_aborted(
    vectors: PartitionedNamespace,
) -> None:
    """The build has committed its ``CreateIndex`` on every leaf and parks before its
    swap; a delete publishes deletion files into partition 1 meanwhile, then the build's
    transaction is aborted. The delete must have rolled back the build's leaf version,
    not published it under its own: no leaf carries an index nobody declared."""
    with hold("create_index.before_publish") as parked:
        build = Worker(other(vectors).create_scalar_index, "id", "BTREE", txn_id="b1")
        build.start()
        parked.wait_reached()
        assert other(vectors).delete("id < 10").rows_removed == 10
        other(vectors).abort("b1")
    _, error = settle(build)
    assert error is not None
    assert "b1" in str(error)
    assert no_duplicates(vectors) == list(range(10, 1200))
    assert whole(vectors) == {}


@pytest.mark.parametrize(
    "point", ["optimize_indices.leaf_committed", "optimize_indices.before_publish"]
)
@pytest.mark.parametrize("replace", [False, True])
def test_drop_or_replace_while_optimize_indices_has_committed_its_leaves(
    vectors: PartitionedNamespace, point: str, replace: bool
) -> None:
    """The upkeep's leaf versions (a BTREE on new partition 5) are committed when the
    index is dropped, or replaced by a BITMAP over partitions 1-4: its swap loses (the
    declaration changed, not a sibling's rewrite) and its retry builds nothing of the old
    index, so no leaf publishes a segment its declaration does not name."""
    btree(vectors)
    vectors.write(vector_rows([5], 100, first_id=5000))

    def change(ns: PartitionedNamespace) -> Any:
        if replace:
            return ns.create_scalar_index(
                "id", "BITMAP", "id_idx", filter="part <= 4", replace=True
            )
        return ns.drop_index("id_idx")

    result, error, _ = race(vectors, point, lambda ns: ns.optimize_indices(), change)
    assert error is None
    assert result.rows_indexed == 0
    assert whole(vectors) == ({"id_idx": (4, 1200, 0)} if replace else {})
    p = vectors.partition({"part": 5})
    assert lance.dataset(p.location, version=p.read_version).describe_indices() == []
    assert no_duplicates(vectors) == [*range(1200), *range(5000, 5100)]
