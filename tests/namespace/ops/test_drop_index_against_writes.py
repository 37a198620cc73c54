"""``drop_index`` against writes into the partitions that carry the index, both orders
(issue 41, the attack matrix): a direct write and a transaction's commit spanning an
indexed partition and a new one. Whichever publishes first, every row written is kept
once, and afterwards no published leaf carries the dropped index (``whole``)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import btree, race, whole
from tests.support import Worker, claims, no_duplicates, other

#: Where drop_index parks: leaf changes computed; leaf versions committed, not published.
POINTS = ["drop_index.computed", "drop_index.before_publish"]
WRITTEN = [*range(1200), *range(8000, 8020)]


def drop(ns: PartitionedNamespace) -> Any:
    return ns.drop_index("id_idx")


def direct_write(ns: PartitionedNamespace) -> Any:
    return ns.write(vector_rows([2], 20, first_id=8000))


def transaction_commit(ns: PartitionedNamespace) -> Any:
    """A transaction staged before the race (partitions 2 and 5, 10 rows each)."""
    return ns.commit("t1")


def staged(ns: PartitionedNamespace) -> None:
    txn = ns.begin("append", "t1")
    txn.stage(vector_rows([2, 5], 10, first_id=8000))


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("writer", [direct_write, transaction_commit])
def test_a_write_while_drop_index_runs(
    vectors: PartitionedNamespace, point: str, writer: Any
) -> None:
    """The write publishes a leaf version of partition 2 on top of the indexed one (it
    keeps the index) meanwhile: drop_index's retry removes the index from that version."""
    btree(vectors)
    staged(vectors)
    result, error, written = race(vectors, point, drop, writer)
    assert error is None
    assert written.rows == 20
    assert no_duplicates(vectors) == WRITTEN
    assert whole(vectors) == {}
    assert sorted(p.values["part"] for p in result.partitions) == [1, 2, 3, 4]
    assert vectors.to_table(filter="id = 8003").num_rows == 1


@pytest.mark.parametrize("point", ["direct.staged", "direct.before_publish"])
def test_drop_index_while_a_direct_write_runs(vectors: PartitionedNamespace, point: str) -> None:
    """The write parks with its files staged, or with its leaf version committed (on the
    indexed version); drop_index publishes meanwhile. The write's retry commits on the
    version without the index."""
    btree(vectors)
    written, error, dropped = race(vectors, point, direct_write, drop)
    assert error is None
    assert written.rows == 20
    assert sorted(p.values["part"] for p in dropped.partitions) == [1, 2, 3, 4]
    assert no_duplicates(vectors) == WRITTEN
    assert whole(vectors) == {}


def test_drop_index_waits_for_a_transaction_committing_into_the_indexed_partition(
    vectors: PartitionedNamespace,
) -> None:
    """The commit has claimed partitions 2 and 5 and parks before its swap; drop_index
    waits on the claim (parked once there to see it waits), then drops the index from the
    version the commit published."""
    btree(vectors)
    staged(vectors)
    with hold("commit.before_publish") as committing:
        commit = Worker(other(vectors).commit, "t1")
        commit.start()
        committing.wait_reached()
        with hold("drop_index.claim_blocked") as blocked:
            dropping = Worker(drop, other(vectors))
            dropping.start()
            blocked.wait_reached()
    assert commit.outcome().rows == 20
    result = dropping.outcome()
    assert sorted(p.values["part"] for p in result.partitions) == [1, 2, 3, 4]
    assert no_duplicates(vectors) == WRITTEN
    assert whole(vectors) == {}
    assert claims(vectors) == []
