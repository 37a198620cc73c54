"""The orphan sweep keeps the staged files of a COMMITTING transaction (``admin/sweep.py:
live_staged_partitions``): sealed, it is about to commit them into its leaves, and until it
does no leaf version references them. Deleted, the commit could only fail, or publish rows
whose files are gone.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from tests.workers import TAGGED, tagged_rows

X_ROWS = tagged_rows("x", [1, 3], 2, first_id=100)  # an append to partition 1, a new 3
AFTER = [0, 1, 2, 3, 100, 101, 102, 103]


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3
    return ns


def ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(ns.to_table(columns=["id"]).column("id").to_pylist())


def sweep_everything_old(ns: PartitionedNamespace) -> dict[str, object]:
    """A sweep that takes every file nothing protects, however young (another handle)."""
    report = PartitionedNamespace.open(ns.uri).maintain(
        compact=False, sweep_orphans=True, orphan_min_age=dt.timedelta(0), enforce_min_age=False
    )
    assert report.orphans is not None
    return report.orphans


def state_of(ns: PartitionedNamespace, txn_id: str) -> str:
    return {t.txn_id: t.state for t in ns.transactions()}[txn_id]


def test_the_sweep_keeps_a_crashed_committers_files_for_its_take_over(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X's committer dies right after the seal: X is COMMITTING, its plan and stage
    records name its files in partitions 1 and 3. The sweep keeps both; the commit that
    takes X over then publishes them whole."""
    ns.begin("append", "X").stage(X_ROWS)
    monkeypatch.setenv(ENV, "commit.after_claim=raise")
    with pytest.raises(FailpointError):
        ns.commit("X")
    monkeypatch.delenv(ENV)
    assert state_of(ns, "X") == "committing"
    swept = sweep_everything_old(ns)
    assert (swept["files_removed"], swept["kept_staged"]) == (0, 2)
    assert ns.commit("X").rows == 4
    assert ids(ns) == AFTER


def test_the_sweep_keeps_a_live_anonymous_commits_files(ns: PartitionedNamespace) -> None:
    """An anonymous transaction (no plan: only its stage records name its files) is
    COMMITTING, its committer parked right after the seal, while the sweep runs; resumed,
    its commit publishes every row."""
    txn = ns.begin(anonymous=True)
    txn.stage(X_ROWS)
    with ThreadPoolExecutor(1) as pool, hold("commit.after_claim") as sealed:
        committing = pool.submit(ns.commit, txn)
        sealed.wait_reached()
        assert state_of(ns, txn.txn_id) == "committing"
        swept = sweep_everything_old(ns)
        sealed.release()
        result = committing.result(timeout=120)
    assert (swept["files_removed"], swept["kept_staged"]) == (0, 2)
    assert result.rows == 4
    assert ids(ns) == AFTER
