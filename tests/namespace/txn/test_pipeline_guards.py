"""The commit pipeline's guards and recoveries, each forced by the failure or interleaving
it exists for (the mutation audit of issue 38: rules no other test killed).

Each test names the rule it pins (``publish.py``, ``kernel.py``, ``commit.py``,
``direct.py``, ``ops/runner.py``); it fails when the rule is taken out.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    ManifestError,
    PartitionedNamespace,
    PartitionField,
    StorageError,
    TransactionAborted,
)
from airflow_provider_lance.namespace.format.manifest import CLAIM, Manifest
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from tests.namespace.txn.test_interleavings import Worker, crashing, other, sealed, state_of
from tests.support import TAGGED, no_duplicates, tagged_rows

BY_PART = [PartitionField("part", "part")]


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3
    return ns


def tags(ns: PartitionedNamespace) -> Counter[str]:
    return Counter(ns.to_table(columns=["tag"]).column("tag").to_pylist())


def manifest_version(ns: PartitionedNamespace) -> int:
    return int(lance.dataset(ns.uri + "/__manifest").latest_version)


# -- an interrupt once the swap may have committed -------------------------------------------
WRITER = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
sys.path.insert(0, {repo!r})
from tests.support import tagged_rows
from airflow_provider_lance.namespace import PartitionedNamespace
PartitionedNamespace.open(sys.argv[1]).write(tagged_rows("w", [1], 2, first_id=100))
print("finished", flush=True)
"""


@pytest.mark.parametrize("point", ["manifest.after_swap", "direct.after_publish"])
def test_ctrl_c_once_a_direct_writes_swap_committed_keeps_its_files(
    ns: PartitionedNamespace, point: str
) -> None:
    """A direct write gets SIGINT once its swap committed: while ``Manifest.commit``
    returns (``manifest.after_swap``: an interrupt that arrived while Lance committed is
    raised when the call returns) or in the step after the publish. The write is
    published, so its files are the partition's data: ``publish_stage`` must not delete
    them on the way out (``Prepared.published``; the interrupt is no ``Exception``, so
    ``best_effort`` lets it through). Deleted, the published partition no longer reads."""
    before = manifest_version(ns)
    repo = str(Path(__file__).resolve().parents[3])
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(repo=repo), ns.uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "LANCE_PNS_FAILPOINTS": f"{point}=sleep:120"},
    )
    deadline = time.monotonic() + 120
    while manifest_version(ns) == before:  # parked at the point once its swap committed
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the write never published"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert "finished" not in out
    assert "KeyboardInterrupt" in err, err[-2000:]
    reopened = PartitionedNamespace.open(ns.uri)
    assert tags(reopened) == Counter({"seed": 4, "w": 2})
    assert no_duplicates(reopened) == [0, 1, 2, 3, 100, 101]


# -- published_after_all: which rows say that a swap reported as failed committed -------------
def test_a_failed_swap_is_not_taken_for_another_writers_creation_of_its_partition(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W creates partition 9 and parks before its swap; V creates partition 9 too (its
    namespace row, without a ``read_version``, and its leaf row at version 2) and
    publishes. W's swap then fails before committing (a storage error). Later versions
    hold rows W's swap would have written, but none only W writes: a namespace row (no
    leaf version: ``Swap.made`` skips rows without one) and a leaf row at V's version, not
    W's. So W reports its failure (retryable) instead of a publish that never happened."""
    with hold("direct.before_publish") as parked:
        w = Worker(other(ns).write, tagged_rows("w", [9], 2, first_id=200))
        w.start()
        parked.wait_reached()
        other(ns).write(tagged_rows("v", [9], 2, first_id=300))
        monkeypatch.setenv(ENV, "manifest.before_swap=error")
    with pytest.raises(StorageError) as failed:
        w.outcome()
    monkeypatch.delenv(ENV)
    assert failed.value.retryable
    assert tags(ns) == Counter({"seed": 4, "v": 2})
    assert no_duplicates(ns) == [0, 1, 2, 3, 300, 301]


def test_a_failed_publish_is_not_taken_for_its_own_seal(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X is sealed and its committer parks before the publish; an unrelated write makes
    a later ``__manifest`` version, which holds X's row as the seal left it (COMMITTING).
    The publish fails before committing: that row is not the one the publish writes
    (``Swap.made`` compares the state and incarnation moved to), so the commit reports
    its failure, X stays COMMITTING, and committing again publishes it once."""
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        parked.wait_reached()
        other(ns).write(tagged_rows("w", [2], 2, first_id=200))
        monkeypatch.setenv(ENV, "manifest.before_swap=error")
    with pytest.raises(StorageError):
        committer.outcome()
    monkeypatch.delenv(ENV)
    assert state_of(ns, "X") == "committing"
    assert tags(ns) == Counter({"seed": 4, "w": 2})
    ns.commit("X")
    assert tags(ns) == Counter({"seed": 4, "w": 2, "x": 2})
    assert no_duplicates(ns) == [0, 1, 2, 3, 100, 101, 200, 201]


def test_an_empty_publish_reported_failed_is_found_by_its_transaction_rows(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction that staged nothing, combined with another that staged nothing, is
    published by a swap of transaction rows alone (E -> PUBLISHED, S -> MERGED), through
    the kernel like any publish. That swap commits and reports a storage error: the rows
    it moved say it committed (``published_after_all``, ``Swap.made``'s moves), so the
    commit returns the result, and committing again returns the same one."""
    ns.begin("append", "S")
    monkeypatch.setenv(ENV, "manifest.after_swap=error")
    result = ns.commit(["S"], txn_id="E")
    monkeypatch.delenv(ENV)
    assert result.partitions == []
    assert (state_of(ns, "E"), state_of(ns, "S")) == ("published", "merged")
    assert ns.commit("E") == result
    assert tags(ns) == Counter({"seed": 4})


# -- the claim publish's swap: against the row as it is now ------------------------------------
def test_a_commit_fenced_by_an_abort_after_its_seal_publishes_nothing(
    ns: PartitionedNamespace,
) -> None:
    """X seals and parks; an abort fences X (ABORTED, claims released) and parks before
    deleting its files. The committer goes on: the staged files are still there, so its
    leaf commits succeed, but its swap reads X's row again (``__manifest`` moved since the
    seal: the rows the seal wrote are stale) and finds it ABORTED: nothing is published
    (TransactionAborted). A swap built on the sealed rows would publish over the fence,
    and the abort would then delete the files of a published partition."""
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("commit.after_claim") as sealed, hold("abort.after_fence") as fenced:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        sealed.wait_reached()
        aborter = Worker(other(ns).abort, "X")
        aborter.start()
        fenced.wait_reached()
        sealed.release()
        with pytest.raises(TransactionAborted):
            committer.outcome()
        fenced.release()
        aborter.outcome()
    assert state_of(ns, "X") == "aborted"
    assert tags(ns) == Counter({"seed": 4})
    assert no_duplicates(ns) == [0, 1, 2, 3]


def test_a_committer_whose_claim_another_tool_removed_stops(ns: PartitionedNamespace) -> None:
    """X seals and parks; another tool rewrites ``__manifest``, clearing X's claim on
    partition 1 while X is COMMITTING. The committer, still the row's owner, finds at its
    swap that it does not hold its claims: a ManifestError that names the partition, at
    once (the swap's ClaimedBy requirement alone would lose the race again and again until
    the swap timeout)."""
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("commit.after_claim") as sealed:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        sealed.wait_reached()
        state = ns.state()
        part = ns.partition({"part": 1}).object_id
        [row] = state.full_rows([part]).to_pylist()
        assert row[CLAIM] == "X#1"
        Manifest(ns.storage).commit(Swap(state.view, [dict(row, **{CLAIM: None})]))
    with pytest.raises(ManifestError, match=re.escape(f"lost its claim on {part}")):
        committer.outcome(timeout=60)
    assert state_of(ns, "X") == "committing"
    assert tags(ns) == Counter({"seed": 4})


# -- a table operation with a txn_id: its row through the lifecycle -----------------------------
def test_a_named_operation_aborted_while_it_runs_publishes_nothing(
    ns: PartitionedNamespace,
) -> None:
    """A delete with ``txn_id`` D commits its leaf and parks before its swap;
    ``recover(lease_seconds=0)`` aborts D meanwhile (its row: ABORTED, incarnation 1). The
    delete's swap loses (D's row was written since its base) and its next attempt finds
    its own incarnation aborted: TransactionAborted, nothing deleted
    (``OperationRunner._published``). Its swap alone would not refuse: it writes D's row
    PUBLISHED as "sealed and published at once", whatever row is there now."""
    with hold("delete.before_publish") as parked:
        deleting = Worker(other(ns).delete, "id = 0", txn_id="D")
        deleting.start()
        parked.wait_reached()
        assert other(ns).recover(lease_seconds=0) == ["D"]
    with pytest.raises(TransactionAborted, match="aborted while it ran"):
        deleting.outcome()
    assert state_of(ns, "D") == "aborted"
    assert no_duplicates(ns) == [0, 1, 2, 3]


# -- taking over: the claims are read after the steal -----------------------------------------
def test_a_committer_whose_take_over_was_taken_over_returns_the_result(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """X's committer died after its seal. T takes X over (its steal committed) and parks
    before it reads the claimed rows; B takes X over from T and publishes it. T then finds
    the claims released by a publish that is not its own: it waits for the outcome
    (TAKEN_OVER) and returns B's result, committing nothing (``ClaimPublish._check_claims``:
    neither a ManifestError nor a second leaf version of X's files)."""
    sealed(ns, monkeypatch, "X", tagged_rows("x", [1], 2, first_id=100))
    thief: list[threading.Thread] = []
    with hold("manifest.after_swap", when=lambda: threading.current_thread() in thief) as stole:
        t = Worker(other(ns).commit, "X")
        thief.append(t)
        t.start()
        stole.wait_reached()
        b = other(ns).commit("X")
    assert t.outcome() == b
    published = ns.partition({"part": 1})
    assert int(lance.dataset(published.location).version) == published.read_version
    assert tags(ns) == Counter({"seed": 4, "x": 2})
    assert no_duplicates(ns) == [0, 1, 2, 3, 100, 101]


# -- leaf commits: a roll-back is used only if nothing landed on it ----------------------------
def test_a_roll_back_another_commit_landed_on_is_made_again(
    ns: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A killed direct write left a version above partition 1's published one. X's
    committer rolls it back (restores the published version on top) and parks right after
    the restore; a foreign writer (plain Lance, none of ours) appends to the leaf, on the
    restored version. X must roll back again, not commit on it (``_roll_back`` checks the
    restored content): the foreign rows were never published and must not be by X."""
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        ns.write(tagged_rows("killed", [1], 2, first_id=50))
    location = ns.partition({"part": 1}).location
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("leaf.rolled_back") as rolled:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        rolled.wait_reached()
        leaf = lance.dataset(location)
        foreign = pa.Table.from_pylist([{"id": 300, "tag": "foreign"}], schema=leaf.schema)
        lance.write_dataset(foreign, location, mode="append")
        rolled.release()
        committer.outcome()
    assert tags(ns) == Counter({"seed": 4, "x": 2})
    assert no_duplicates(ns) == [0, 1, 2, 3, 100, 101]
