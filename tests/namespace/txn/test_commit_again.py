"""Committing a transaction again: a named one returns the result of its publish, even one
whose committer crashed right after the publish (the result is then rebuilt from its plan,
``txn/publish_result.py: rebuilt_result``); an anonymous one keeps no records, so it says
it was published and that its result is not kept, instead of a result that lists nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
)
from airflow_provider_lance.namespace.errors import is_retryable
from airflow_provider_lance.namespace.testing import ENV, FailpointError
from tests.workers import TAGGED, tagged_rows

X_ROWS = tagged_rows("x", [1, 3], 2, first_id=100)  # an append to partition 1, a new 3


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3
    return ns


def ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(ns.to_table(columns=["id"]).column("id").to_pylist())


def test_a_named_commit_that_crashed_right_after_its_publish_returns_its_result_again(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X publishes partitions 1 (existing) and 3 (new), and its committer dies right after
    the swap, before it recorded its result. Committed again, X's result is rebuilt: the
    version it published, each partition's read_version and rows, and which partition it
    created (3, whose row the seal inserted unpublished, and only 3)."""
    ns.begin("append", "X").stage(X_ROWS)
    monkeypatch.setenv(ENV, "commit.after_publish=raise")
    with pytest.raises(FailpointError):
        ns.commit("X")
    monkeypatch.delenv(ENV)
    again = PartitionedNamespace.open(ns.uri).commit("X")
    [entry] = [e for e in ns.history() if e.txn_id == "X"]
    assert again.manifest_version == entry.version
    published = {int(p.values["part"]): p.read_version for p in ns.partitions()}
    assert {
        int(p.values["part"]): (p.rows, p.created, p.read_version) for p in again.partitions
    } == {1: (2, False, published[1]), 3: (2, True, published[3])}
    assert {int(p.values["part"]): p.created for p in entry.partitions} == {1: False, 3: True}
    assert ns.commit("X") == again  # recorded now: the same again
    assert ids(ns) == [0, 1, 2, 3, 100, 101, 102, 103]


def test_committing_an_anonymous_transaction_again_says_it_was_published(
    ns: PartitionedNamespace,
) -> None:
    """An anonymous transaction keeps no records (no result, no plan): committed again it
    cannot return its result, so it says it was published and changes nothing; once its
    records were collected, committing it is still an error that is not retried, and
    never "aborted" (which would invite writing the rows again)."""
    txn = ns.begin(anonymous=True)
    txn.stage(X_ROWS)
    first = ns.commit(txn)
    assert len(first.partitions) == 2
    with pytest.raises(InvalidArgumentError, match="published already") as info:
        ns.commit(txn)
    message = str(info.value)
    assert txn.txn_id in message
    assert "not kept" in message
    assert f"version {first.manifest_version}" in message
    assert not is_retryable(info.value)
    assert ids(ns) == [0, 1, 2, 3, 100, 101, 102, 103]

    ns.maintain()  # collects finished anonymous transactions' records and rows
    assert ns.transactions() == []
    with pytest.raises(InvalidArgumentError) as collected:
        ns.commit(txn)
    assert not isinstance(collected.value, TransactionAborted)
    assert ids(ns) == [0, 1, 2, 3, 100, 101, 102, 103]
