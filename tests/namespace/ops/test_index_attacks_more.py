"""Index operations against what the first attack matrix (test_index_attacks.py) left
out (issue 41): a leaf commit of another operation landing on a build's committed, not
yet published, leaf versions."""

from __future__ import annotations

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.ops.test_index_attacks import whole
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
