"""Forced interleavings: one regression test per way the old protocol lost or duplicated data.

Each test parks a thread at a named failpoint (``failpoints.hold``), runs the competing
operation at exactly that moment, releases the thread, and checks who won and that nothing
published was lost, duplicated or made unreadable. Numbers refer to the review that found
the interleavings (the issue "Transactions that never lose or duplicate published data").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    InvalidArgumentError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    OutcomeUnknown,
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
    TransactionClosed,
)
from airflow_provider_lance.namespace.format.manifest import CLAIM, Manifest
from airflow_provider_lance.namespace.format.schema import field_id
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from airflow_provider_lance.namespace.txn import lifecycle
from tests.support import (
    BY_PART,
    TAGGED,
    Worker,
    all_readable,
    claims,
    crashing,
    ids,
    leaf_files,
    no_duplicates,
    other,
    state_of,
    tagged_rows,
)


def row_ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def sealed(ns: PartitionedNamespace, monkeypatch, txn_id: str, rows: pa.Table) -> None:
    """Stage ``rows`` as ``txn_id`` and crash its commit right after the seal: the
    transaction is COMMITTING, holding its claims, with no live committer."""
    ns.begin("append", txn_id).stage(rows)
    with crashing(monkeypatch, "commit.after_claim"), pytest.raises(FailpointError):
        ns.commit(txn_id)
    assert state_of(ns, txn_id) == "committing"


SEED = tagged_rows("seed", [1, 2], 2, first_id=0)
X = tagged_rows("x", [1, 2, 3], 2, first_id=100)  # two existing partitions and a new one


# -- 1 and 11: abort or recover racing a live commit ---------------------------------------
def test_1_abort_fences_a_commit_parked_before_its_publish(tagged, monkeypatch) -> None:
    tagged.write(SEED)
    tagged.begin("append", "X").stage(X)
    with hold("commit.before_publish") as point:
        committer = Worker(other(tagged).commit, "X")
        committer.start()
        point.wait_reached()
        tagged.abort("X")  # the fence wins: X can never publish
    with pytest.raises(TransactionAborted):
        committer.outcome()
    assert ids(tagged) == [0, 1, 2, 3]
    assert state_of(tagged, "X") == "aborted"
    assert claims(tagged) == []
    all_readable(tagged)
    tagged.write(tagged_rows("after", [1, 3], 1, first_id=500))  # the partitions stay writable
    assert ids(tagged) == [0, 1, 2, 3, 500, 501]


@pytest.mark.parametrize("operator", ["abort", "recover"])
def test_1_11_a_publish_between_abort_read_and_fence_wins(tagged, monkeypatch, operator) -> None:
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", X)  # a committer died after its claim
    act = (lambda h: h.abort("X")) if operator == "abort" else (lambda h: h.recover(0))
    with hold("abort.before_fence") as point:
        aborter = Worker(act, other(tagged))
        aborter.start()
        point.wait_reached()  # it read X as committing, unpublished
        result = tagged.commit("X")  # the retry publishes first
    if operator == "abort":
        with pytest.raises(InvalidArgumentError, match="published; it cannot be aborted"):
            aborter.outcome()
    else:
        assert aborter.outcome() == []
    assert result.rows == 6
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])
    assert state_of(tagged, "X") == "published"
    all_readable(tagged)
    for p in tagged.partitions():  # 11: never rolled back below what is published
        assert lance.dataset(p.location).version >= p.read_version
    tagged.add_column(pa.field("note", pa.utf8()))  # the rewrite path stages against the leaf
    tagged.write(tagged_rows("later", [1, 2, 3], 1, first_id=900))
    assert len(ids(tagged)) == 13


# -- 2: a transaction id reused after an abort --------------------------------------------
def test_2_a_reused_id_after_a_failed_publish_never_publishes_deleted_files(
    tagged, monkeypatch
) -> None:
    tagged.write(SEED)
    with (
        crashing(monkeypatch, "commit.before_publish", "error"),
        pytest.raises(OSError, match="injected"),
    ):
        tagged.write(X, txn_id="X")  # fails transiently: write() aborts incarnation 1
    assert state_of(tagged, "X") == "aborted"
    result = tagged.write(X, txn_id="X")  # incarnation 2
    assert result.rows == 6
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])
    all_readable(tagged)
    assert [t.incarnation for t in tagged.transactions() if t.txn_id == "X"] == [2]


def test_2_crash_recover_retry_with_the_same_id(tagged, monkeypatch) -> None:
    tagged.write(SEED)
    with crashing(monkeypatch, "commit.leaf_committed"), pytest.raises(FailpointError):
        tagged.write(X, txn_id="X")  # dies with leaf versions committed, unpublished
    assert tagged.recover(lease_seconds=0) == ["X"]
    assert tagged.write(X, txn_id="X").rows == 6
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])
    all_readable(tagged)


# -- 3: a zombie committer and its retry ----------------------------------------------------
@pytest.mark.parametrize("point", ["commit.before_seal", "commit.before_publish"])
def test_3_a_zombie_and_its_retry_publish_once(tagged, point) -> None:
    tagged.write(SEED)
    tagged.begin("append", "X").stage(X)
    with hold(point) as parked:
        zombie = Worker(other(tagged).commit, "X")
        zombie.start()
        parked.wait_reached()  # the first committer stalls (lost heartbeat)
        retried = other(tagged).commit("X")  # its retry takes over and publishes
    assert zombie.outcome() == retried  # the loser returns the result
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])
    assert tagged.commit("X") == retried


def test_3_a_leaf_commit_rebased_onto_a_zombie_append_is_not_published(tagged) -> None:
    tagged.write(SEED)
    tagged.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    part = tagged.partition({"part": 1})
    stray = lance.fragment.write_fragments(
        tagged_rows("zombie", [1], 3, first_id=700), part.location, mode="append"
    )
    with hold("leaf.before_commit") as point:
        committer = Worker(other(tagged).commit, "X")
        committer.start()
        point.wait_reached()
        # a zombie appends to the leaf between the committer's restore and its commit:
        # Lance rebases the committer's Append onto it silently
        base = lance.dataset(part.location).version
        lance.LanceDataset.commit(
            part.location, lance.Transaction(base, lance.LanceOperation.Append(stray))
        )
    committer.outcome()
    assert ids(tagged) == [0, 1, 2, 3, 100, 101]  # the zombie's rows were never published


# -- 4 and 12: concurrent schema and spec evolution --------------------------------------------
def test_4_12_concurrent_add_columns_both_apply_with_distinct_field_ids(tagged) -> None:
    with hold("evolve.before_commit") as point:
        first = Worker(other(tagged).add_column, pa.field("a", pa.utf8()))
        first.start()
        point.wait_reached()  # computed from the old schema, not yet committed
        second = other(tagged)
        second.add_column(pa.field("b", pa.utf8()))
        rows = tagged_rows("b", [1], 2, first_id=0).append_column("b", pa.array(["B0", "B1"]))
        second.write(rows)  # rows written under the schema with "b"
    first.outcome()  # no raw "Incompatible transaction", no lost update
    fresh = other(tagged)
    assert fresh.schema.names == ["id", "part", "tag", "b", "a"]
    assert field_id(fresh.schema.field("a")) != field_id(fresh.schema.field("b"))
    table = fresh.to_table()
    assert table.column("b").to_pylist() == ["B0", "B1"]  # not read as "a"
    assert table.column("a").to_pylist() == [None, None]


def test_4_concurrent_spec_evolutions_get_distinct_versions(tagged) -> None:
    with hold("evolve.before_commit") as point:
        first = Worker(other(tagged).evolve_partition_spec, [PartitionField("tag", "tag")])
        first.start()
        point.wait_reached()
        second = other(tagged).evolve_partition_spec([PartitionField("id_bucket", "id", "col % 4")])
    assert sorted([first.outcome(), second]) == [2, 3]
    fresh = other(tagged)
    assert {v: [f.name for f in fresh.partition_spec(v)] for v in (1, 2, 3)} in (
        {1: ["part"], 2: ["id_bucket"], 3: ["tag"]},
        {1: ["part"], 2: ["tag"], 3: ["id_bucket"]},
    )


def test_12_a_stale_metadata_commit_is_a_project_conflict(tagged) -> None:
    stale = tagged.version
    tagged.add_column(pa.field("a", pa.utf8()))
    with pytest.raises(CommitConflict, match="concurrent change to the namespace metadata"):
        Manifest(tagged.storage).commit_metadata({"schema": tagged.state().schema.to_json()}, stale)


# -- 5: claims that stayed forever -----------------------------------------------------------
def test_5_a_commit_waiting_for_a_claim_is_aborted_cleanly(tagged, monkeypatch) -> None:
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))
    tagged.begin("append", "Y").stage(tagged_rows("y", [1], 1, first_id=200))
    with hold("commit.claim_blocked") as point:
        waiting = Worker(other(tagged).commit, "Y", claim_timeout=60)
        waiting.start()
        point.wait_reached()  # Y waits for X's claim
        tagged.abort("Y")
    with pytest.raises(TransactionAborted):
        waiting.outcome()
    assert claims(tagged) == ["X#1"]  # Y claimed nothing on its way out
    tagged.commit("X")
    assert claims(tagged) == []
    assert ids(tagged) == [0, 1, 2, 3, 100]


def test_5_a_failed_create_partitions_releases_its_claims(tagged, monkeypatch) -> None:
    tagged.write(SEED)
    with (
        crashing(monkeypatch, "commit.leaf_committed", "error"),
        pytest.raises(OSError, match="injected"),
    ):
        tagged.create_partitions([{"part": 1}, {"part": 7}])
    assert claims(tagged) == []
    tagged.begin("append", "next").stage(tagged_rows("n", [1, 7], 1, first_id=300))
    tagged.commit("next", claim_timeout=0.5)  # nothing to wait for
    assert ids(tagged) == [0, 1, 2, 3, 300, 301]


def test_5_recover_releases_claims_of_missing_and_finished_transactions(tagged) -> None:
    tagged.write(SEED)
    state = tagged.state()
    [row] = state.full_rows([tagged.partition({"part": 1}).object_id]).to_pylist()
    Manifest(tagged.storage).commit(Swap(state.view, [dict(row, **{CLAIM: "vanished#1"})]))
    assert claims(tagged) == ["vanished#1"]
    tagged.recover(lease_seconds=3600)  # nothing idle, but the claim is dead
    assert claims(tagged) == []
    tagged.write(tagged_rows("z", [1], 1, first_id=400))
    assert ids(tagged) == [0, 1, 2, 3, 400]


# -- 6: write(txn_id) resumes like commit(txn_id) ---------------------------------------------
@pytest.mark.parametrize(
    "point", ["commit.after_claim", "commit.leaf_committed", "commit.after_publish"]
)
def test_6_write_with_the_same_id_resumes_after_a_crash(tagged, monkeypatch, point) -> None:
    tagged.write(SEED)
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        tagged.write(X, txn_id="X")
    first = tagged.write(X, txn_id="X")  # resumes (or returns what was published)
    assert first.rows == 6
    assert tagged.write(X, txn_id="X") == first
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])


# -- 7: a crash inside create -----------------------------------------------------------------
@pytest.mark.parametrize("point", ["create.after_table", "create.after_metadata"])
def test_7_create_is_crash_safe_and_idempotent(root: Path, monkeypatch, point) -> None:
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    if point == "create.after_table":
        with pytest.raises(NamespaceNotFoundError, match="interrupted"):
            PartitionedNamespace.open(root)
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    again = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    assert again.version == ns.version  # the same namespace, nothing rewritten
    indexed = [i.field_names for i in lance.dataset(ns.uri + "/__manifest").describe_indices()]
    # each once: create() again adds none
    assert sorted(indexed) == [["object_id"], ["object_type"], ["part"]]
    with pytest.raises(NamespaceExistsError, match="different schema or partition spec"):
        PartitionedNamespace.create(
            root, schema=TAGGED, partition_fields=[PartitionField("tag", "tag")]
        )
    ns.write(SEED)
    assert ids(ns) == [0, 1, 2, 3]


BY_TAG = [PartitionField("tag", "tag")]


def test_7_a_create_that_lost_the_race_never_replaces_the_winner(root: Path) -> None:
    """Creator A (by part) has written its first manifest rows and is about to commit
    version 1; creator B (by tag) creates the namespace and publishes a write. A's commit
    must lose: it says the root holds another namespace, and B's write stays. (Lance's
    ``write_dataset(mode="create")``, used before, rebased the loser into an overwrite of
    the winner's table: B's namespace was unreadable, its write lost.)"""
    with hold("storage.before_create") as a_parked:
        a = Worker(PartitionedNamespace.create, root, schema=TAGGED, partition_fields=BY_PART)
        a.start()
        a_parked.wait_reached()  # (the hold parks one thread: B passes freely)
        b = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_TAG)
        b.write(SEED)
    with pytest.raises(NamespaceExistsError, match="different schema or partition spec"):
        a.outcome()
    reopened = PartitionedNamespace.open(root)
    assert [f.name for f in reopened.partition_spec()] == ["tag"]
    assert ids(reopened) == [0, 1, 2, 3]


def test_7_a_create_never_adopts_another_specs_unfinished_table(root: Path) -> None:
    """Creator A (by part) created its manifest table and is about to set its metadata;
    creator B (by tag) finds that table. B must not finish it as its own (its partition
    column is not there: the namespace would be unreadable): it says a create of another
    spec is under way, and A's create then completes and works."""
    with hold("create.after_table") as a_parked:
        a = Worker(PartitionedNamespace.create, root, schema=TAGGED, partition_fields=BY_PART)
        a.start()
        a_parked.wait_reached()
        with pytest.raises(NamespaceExistsError, match="another partition spec"):
            PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_TAG)
    ns = a.outcome()
    ns.write(SEED)
    assert [f.name for f in ns.partition_spec()] == ["part"]
    assert ids(PartitionedNamespace.open(root)) == [0, 1, 2, 3]


@pytest.mark.slow
def test_7_concurrent_creators_of_different_specs_agree_on_one(tmp_path: Path) -> None:
    """Six threads create one root at once, half by part, half by tag, and each writes its
    own row once created. Every creator that returned has the winner's spec, every
    acknowledged write is readable, and the losers only ever see NamespaceExistsError.
    (Before the exclusive create this failed in most rounds.)"""
    for round_ in range(6):
        root = tmp_path / f"ns{round_}"
        start = threading.Barrier(6)

        def create(i: int, root: Path = root, start: threading.Barrier = start) -> str:
            spec = BY_PART if i % 2 else BY_TAG
            start.wait()
            ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=spec)
            ns.write(tagged_rows(f"c{i}", [i % 2], 1, first_id=100 + i))
            return spec[0].name

        workers = [Worker(create, i) for i in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        created = {i: w.result for i, w in enumerate(workers) if w.error is None}
        errors = [w.error for w in workers if w.error is not None]
        assert all(isinstance(e, NamespaceExistsError) for e in errors), [repr(e) for e in errors]
        final = PartitionedNamespace.open(root)
        assert set(created.values()) == {final.partition_spec()[0].name}, (created, errors)
        assert ids(final) == sorted(100 + i for i in created)


# -- 8: the claim timeout is honoured and names the holder --------------------------------------
def test_8_claim_timeout_waits_the_full_time_and_names_the_holder(tagged, monkeypatch) -> None:
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))
    tagged.begin("append", "Y").stage(tagged_rows("y", [1], 1, first_id=200))
    started = time.monotonic()
    with pytest.raises(CommitConflict, match=r"\['X#1 \(committing for \d+s\)'\]"):
        tagged.commit("Y", claim_timeout=2.0)
    assert time.monotonic() - started >= 2.0
    assert claims(tagged) == ["X#1"]


@pytest.mark.parametrize("txn_id", [None, "W"])
def test_8_write_honours_its_claim_timeout(tagged, monkeypatch, txn_id) -> None:
    """``write(claim_timeout=)``, direct (handed to the claim protocol at the claim) or
    named, waits that long for a partition X holds, then fails naming X, with nothing of
    it published and X's claim untouched."""
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))
    before = ids(tagged)
    started = time.monotonic()
    with pytest.raises(CommitConflict, match=r"\['X#1 \(committing for \d+s\)'\]"):
        other(tagged).write(
            tagged_rows("w", [1, 3], 1, first_id=200), txn_id=txn_id, claim_timeout=1.0
        )
    assert 1.0 <= time.monotonic() - started < 60  # its own timeout, not the default 120 s
    assert (ids(tagged), claims(tagged)) == (before, ["X#1"])
    assert {t.txn_id for t in tagged.transactions()} == ({"X"} if txn_id is None else {"X", "W"})


def handed_over(
    ns: PartitionedNamespace,
    meanwhile: Callable[[Worker], object],
    rows: pa.Table | None = None,
) -> Worker:
    """A direct write W of id 200 to partition 1 (or of ``rows``, partition 1 among them),
    handed to the claim protocol: named Y (id 300) holds partition 1 while W looks;
    ``meanwhile(W)`` runs then (to make W die or park once it has sealed), and Y publishes.
    W goes on as an anonymous transaction. Returns W's worker."""
    ns.begin("append", "Y").stage(tagged_rows("y", [1], 1, first_id=300))
    with hold("commit.before_publish") as y_parked:  # Y holds partition 1 while W looks
        committer = Worker(other(ns).commit, "Y")
        committer.start()
        y_parked.wait_reached()
        with hold("commit.claim_blocked") as w_blocked:
            w_rows = tagged_rows("w", [1], 1, first_id=200) if rows is None else rows
            writer = Worker(other(ns).write, w_rows)
            writer.start()
            w_blocked.wait_reached()  # handed to the claim protocol, waiting for Y
            meanwhile(writer)
    committer.outcome()
    return writer


def abandoned_anonymous_commit(ns: PartitionedNamespace, monkeypatch) -> str:
    """W of :func:`handed_over`, dead right after its seal: an anonymous transaction
    committing, holding partition 1, that no process will finish. Returns its id."""
    # Y is past it (parked before its publish): only W dies there
    writer = handed_over(ns, lambda _: monkeypatch.setenv(ENV, "commit.after_claim=raise"))
    with pytest.raises(FailpointError):
        writer.outcome()
    monkeypatch.delenv(ENV)
    [w_txn] = [t.txn_id for t in ns.transactions() if t.state == "committing" and t.txn_id != "X"]
    assert f"{w_txn}#1" in claims(ns)
    return w_txn


def test_8_an_abandoned_anonymous_commit_says_how_it_is_released(tagged, monkeypatch) -> None:
    """A direct write handed to the claim protocol whose process died after its seal
    leaves an anonymous transaction committing, with no plan for others: committing it
    says so (not "committing without a plan"), and recovery releases its claims."""
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))
    other(tagged).abort("X")
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    with pytest.raises(InvalidArgumentError, match="anonymous write committing in its own process"):
        other(tagged).commit(w_txn)
    assert claims(tagged) == [f"{w_txn}#1"]
    assert other(tagged).recover(lease_seconds=0) == [w_txn]
    assert claims(tagged) == []
    other(tagged).write(tagged_rows("z", [1], 1, first_id=400))
    assert 200 not in ids(tagged)
    assert {300, 400} <= set(no_duplicates(tagged))


WAITERS = {
    "write": lambda ns: ns.write(tagged_rows("z", [1], 1, first_id=400)),
    "transaction": lambda ns: ns.commit(ns.begin("append", "Z").stage(Z_ROWS).txn_id),
    "delete": lambda ns: ns.delete("id = 300"),
    "merge": lambda ns: ns.merge(Z_ROWS, on=["id", "part"]),
}
Z_ROWS = tagged_rows("z", [1], 1, first_id=400)


@pytest.mark.parametrize("waiter", sorted(WAITERS))
def test_8_a_writer_waiting_for_an_abandoned_anonymous_commit_aborts_it_after_its_lease(
    tagged, monkeypatch, waiter
) -> None:
    """Found by the table-operation chaos test: a direct write killed after its seal held
    its partitions until someone ran ``recover``, so every writer of them waited out its
    claim timeout and failed, for hours. Now a writer waiting for such a claim (a write, a
    commit, a table operation) aborts the dead anonymous transaction once it has been
    committing for longer than its lease, and goes on: W's row never appears."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    started = time.monotonic()
    WAITERS[waiter](other(tagged))
    assert time.monotonic() - started >= 0.5  # waited for it first (the lease, since its seal)
    assert state_of(tagged, w_txn) == "aborted"
    assert claims(tagged) == []
    found = no_duplicates(tagged)
    assert 200 not in found
    assert (300 in found, 400 in found) == {
        "write": (True, True),
        "transaction": (True, True),
        "delete": (False, False),
        "merge": (True, True),
    }[waiter]


def test_8_recover_aborts_an_abandoned_anonymous_commit_after_its_own_lease(
    tagged, monkeypatch
) -> None:
    """``recover()`` with its default lease (hours) aborts a dead anonymous commit once
    past the anonymous lease, and leaves a named transaction committing as long alone
    (its owner's retry may still finish it)."""
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [2], 1, first_id=100))
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    assert other(tagged).recover() == []  # within the anonymous lease (a minute)
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 0.0)
    assert other(tagged).recover() == [w_txn]
    assert (state_of(tagged, w_txn), state_of(tagged, "X")) == ("aborted", "committing")
    assert claims(tagged) == ["X#1"]


def test_8_an_anonymous_commit_within_its_lease_is_waited_for_not_aborted(
    tagged, monkeypatch
) -> None:
    """Within its lease, an anonymous commit's claims are a live writer's: a waiter gives
    up after its claim timeout, naming it, and leaves it alone."""
    tagged.write(SEED)
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    with pytest.raises(CommitConflict, match=rf"\['{w_txn}#1 \(committing for \d+s\)'\]"):
        other(tagged).write(Z_ROWS, claim_timeout=1.0)
    assert state_of(tagged, w_txn) == "committing"
    assert claims(tagged) == [f"{w_txn}#1"]


def test_8_a_live_anonymous_commit_aborted_past_its_lease_publishes_nothing(
    tagged, monkeypatch
) -> None:
    """The lease is a guess about a process it cannot see: W, alive but parked after its
    seal past its lease, is aborted by a waiting write Z, which publishes. W, released,
    cannot publish (its fence is gone) and fails retryably; none of its rows appear, no
    claim stays, and partition 1 reads Y's and Z's rows once each."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    with ExitStack() as stack:

        def park_after_seal(writer: Worker) -> None:
            is_w = lambda: threading.current_thread() is writer  # noqa: E731
            sealed_points.append(stack.enter_context(hold("commit.after_claim", when=is_w)))

        sealed_points: list[Any] = []
        writer = handed_over(tagged, park_after_seal)
        sealed_points[0].wait_reached()  # W sealed: it holds partition 1, alive
        [w_txn] = [t.txn_id for t in tagged.transactions() if t.state == "committing"]
        other(tagged).write(Z_ROWS)
        assert state_of(tagged, w_txn) == "aborted"
    with pytest.raises(CommitConflict) as failed:
        writer.outcome()
    assert failed.value.retryable
    assert claims(tagged) == []
    assert no_duplicates(tagged) == [0, 1, 2, 3, 300, 400]


def wait_hits(point: Any, hits: int, timeout: float = 60.0) -> None:
    """Block until ``hits`` threads are parked at ``point`` (a held failpoint)."""
    deadline = time.monotonic() + timeout
    while point.hits < hits:
        assert time.monotonic() < deadline, f"only {point.hits} threads reached {point.name}"
        time.sleep(0.01)


def test_8_two_waiters_abort_the_same_abandoned_anonymous_commit_at_once(
    tagged, monkeypatch
) -> None:
    """Attacked: a write and a delete, on two handles, both wait for the same dead
    anonymous commit W past its lease and abort it at the same moment (both parked before
    the fence, then both after it, so their clean-ups run together). Neither may fail (the
    loser of the fence finds W aborted), W's row never appears, no claim stays, and the
    write's rows are read once."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    with (
        hold("abort.before_fence", times=2) as fence,
        hold("abort.after_fence", times=2) as clean_up,
    ):
        waiters = [
            Worker(other(tagged).write, Z_ROWS),
            Worker(other(tagged).delete, "id = 300"),
        ]
        for waiter in waiters:
            waiter.start()
        wait_hits(fence, 2)  # both read W committing, both fence it now
        assert state_of(tagged, w_txn) == "committing"
        fence.release()
        wait_hits(clean_up, 2)  # both past the fence (one lost it, and found W aborted)
        assert state_of(tagged, w_txn) == "aborted"
        clean_up.release()
    for waiter in waiters:
        waiter.outcome()
    assert claims(tagged) == []
    assert no_duplicates(tagged) == [0, 1, 2, 3, 400]
    all_readable(tagged)


@pytest.mark.parametrize("waits_for", [1, 9])
def test_8_an_abandoned_anonymous_commit_creating_a_partition_leaves_none(
    tagged, monkeypatch, waits_for
) -> None:
    """Attacked: W (rows in partition 1 and in new partition 9, handed to the claim
    protocol) died after committing a leaf, holding partition 1 and the invisible row it
    inserted for 9. A waiter for partition 1 (or one creating 9 itself) aborts it past its
    lease: partition 9 never appears to readers with W's rows, W's row never appears, no
    claim stays, and writing partition 9 afresh creates it with only the new rows."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    w_rows = tagged_rows("w", [1, 9], 1, first_id=200)
    writer = handed_over(
        tagged, lambda _: monkeypatch.setenv(ENV, "commit.leaf_committed=raise"), w_rows
    )
    with pytest.raises(FailpointError):
        writer.outcome()
    monkeypatch.delenv(ENV)
    [w_txn] = [t.txn_id for t in tagged.transactions() if t.state == "committing"]
    assert sorted(claims(tagged)) == [f"{w_txn}#1", f"{w_txn}#1"]
    assert 9 not in {p.values["part"] for p in tagged.partitions()}
    other(tagged).write(tagged_rows("z", [waits_for], 1, first_id=400))
    assert state_of(tagged, w_txn) == "aborted"
    assert claims(tagged) == []
    assert (9 in {p.values["part"] for p in tagged.partitions()}) == (waits_for == 9)
    assert no_duplicates(tagged) == [0, 1, 2, 3, 300, 400]
    other(tagged).write(tagged_rows("v", [9], 2, first_id=500))
    assert no_duplicates(tagged) == [0, 1, 2, 3, 300, 400, 500, 501]
    assert sorted(tagged.to_table(filter="part = 9").column("id").to_pylist()) == (
        [400, 500, 501] if waits_for == 9 else [500, 501]
    )
    all_readable(tagged)


@pytest.mark.parametrize("collect", [False, True])
def test_8_a_live_anonymous_commit_aborted_after_its_leaf_commits_fails_retryably(
    tagged, monkeypatch, root: Path, collect
) -> None:
    """Attacked: W, alive, past its lease, parked after committing its leaves (right
    before its publish). A waiting write Z fences it and parks before its clean-up; W,
    released, fails its own publish, aborts itself (``own_write``) and cleans up while
    Z's clean-up is pending (and, with ``collect``, ``maintain`` collects W's records in
    between). W fails retryably; Z publishes; W's rows never appear, no claim stays, and
    no data file of W is left behind."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))  # holds partition 1
    before = {f for f in leaf_files(root) if "/data/" in f}
    with hold("commit.before_publish") as w_parked:
        writer = Worker(other(tagged).write, tagged_rows("w", [1], 2, first_id=200))
        with hold("commit.claim_blocked") as w_blocked:
            writer.start()
            w_blocked.wait_reached()  # handed to the claim protocol, waiting for X
        other(tagged).abort("X")
        w_parked.wait_reached()  # W sealed, its leaf committed: alive, holding partition 1
        [w_txn] = [t.txn_id for t in tagged.transactions() if t.state == "committing"]
        with hold("abort.after_fence") as fenced:
            waiter = Worker(other(tagged).write, Z_ROWS)
            waiter.start()
            fenced.wait_reached()  # Z fenced W (past its lease), its clean-up pending
            assert state_of(tagged, w_txn) == "aborted"
            w_parked.release()
            with pytest.raises(CommitConflict) as failed:
                writer.outcome()
            assert failed.value.retryable
            if collect:
                other(tagged).maintain(compact=False)
    waiter.outcome()
    assert claims(tagged) == []
    assert no_duplicates(tagged) == [0, 1, 2, 3, 400]
    all_readable(tagged)
    z_files = {f for f in leaf_files(root) if "/data/" in f} - before
    assert len(z_files) == 1, z_files  # Z's file only: W's were deleted


def test_8_an_abandoned_anonymous_commit_collected_between_fence_and_clean_up(
    tagged, monkeypatch, root: Path
) -> None:
    """Attacked: a waiter fences a dead anonymous commit W, and ``maintain`` collects the
    records of W (finished: aborted) before the waiter's clean-up reads them. The waiter
    must still publish, and W's staged data files must not be left behind."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    before = {f for f in leaf_files(root) if "/data/" in f}
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    assert len({f for f in leaf_files(root) if "/data/" in f} - before) == 2  # Y's, W's
    with hold("abort.after_fence") as fenced:
        waiter = Worker(other(tagged).write, Z_ROWS)
        waiter.start()
        fenced.wait_reached()
        other(tagged).maintain(compact=False)
        assert w_txn not in {t.txn_id for t in tagged.transactions()}
    waiter.outcome()
    assert claims(tagged) == []
    assert no_duplicates(tagged) == [0, 1, 2, 3, 300, 400]
    assert len({f for f in leaf_files(root) if "/data/" in f} - before) == 2  # Y's, Z's


def test_8_a_failed_clean_up_of_an_abandoned_anonymous_commit_does_not_fail_the_waiter(
    tagged, monkeypatch
) -> None:
    """Attacked: the waiter's abort of a dead anonymous commit W fences it, then its
    clean-up fails (a transient storage error right after the fence). That is W's clean-up,
    not the waiter's write: the waiter goes on (W is aborted, its claim dead) and
    publishes, instead of failing with the storage error of someone else's abort."""
    monkeypatch.setattr(lifecycle, "ANONYMOUS_LEASE_SECONDS", 1.0)
    tagged.write(SEED)
    w_txn = abandoned_anonymous_commit(tagged, monkeypatch)
    with crashing(monkeypatch, "abort.after_fence", "error"):
        other(tagged).write(Z_ROWS)
    assert state_of(tagged, w_txn) == "aborted"
    assert claims(tagged) == []
    assert no_duplicates(tagged) == [0, 1, 2, 3, 300, 400]
    all_readable(tagged)


@pytest.mark.parametrize(
    ("abort_at", "collect_at"),
    [
        ("stage.recorded", "stage.recorded"),  # its commit reads the namespace after both
        ("commit.before_seal", "commit.before_seal"),  # it read it before: its seal conflicts
        ("stage.recorded", "commit.before_seal"),  # it reads the ABORTED row, then no row
    ],
)
def test_an_anonymous_write_aborted_and_collected_while_committing_is_not_acknowledged(
    tagged, monkeypatch, abort_at, collect_at
) -> None:
    """Found by the chaos test in CI: a direct write handed to the claim protocol is
    aborted by an operator, and the aborted row of its anonymous transaction collected,
    while it commits. Without a row, the header its process still held in memory made it
    look staged again, with no stages left (the abort deleted them): it published that
    empty plan and reported success with none of its rows."""
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))  # holds partition 1
    operator = other(tagged)
    aborted: list[str] = []
    with ExitStack() as stack:
        points = {p: stack.enter_context(hold(p)) for p in dict.fromkeys([abort_at, collect_at])}
        writer = Worker(other(tagged).write, tagged_rows("w", [1, 2], 1, first_id=200))
        writer.start()  # handed to the claim protocol: it records its stage, then commits
        for point, parked in points.items():
            parked.wait_reached()
            if point == abort_at:
                aborted += [t.txn_id for t in operator.transactions() if t.state == "staged"]
                operator.abort(aborted[0], reason="chaos operator")
            if point == collect_at:
                operator.maintain(compact=False)  # collects finished anonymous transactions
                assert aborted[0] not in {t.txn_id for t in operator.transactions()}
            parked.release()
    with pytest.raises(CommitConflict, match="aborted while this write ran") as info:
        writer.outcome()
    assert info.value.retryable
    assert aborted[0] not in {t.txn_id for t in tagged.transactions()}  # no PUBLISHED row of it
    assert ids(tagged) == [0, 1, 2, 3]
    other(tagged).abort("X")
    assert other(tagged).write(tagged_rows("w", [1, 2], 1, first_id=200)).rows == 2
    assert ids(tagged) == [0, 1, 2, 3, 200, 201]
    all_readable(tagged)


def test_an_anonymous_write_aborted_and_collected_before_it_recorded_leaves_no_files(
    tagged, monkeypatch, root: Path
) -> None:
    """The same, before the write recorded its stage: the abort's clean-up had nothing to
    delete, so the write's own abort deletes the files of the stage it recorded late."""
    tagged.write(SEED)
    sealed(tagged, monkeypatch, "X", tagged_rows("x", [1], 1, first_id=100))  # holds partition 1
    before = {f for f in leaf_files(root) if "/data/" in f}
    with hold("direct.handing_over") as parked:
        writer = Worker(other(tagged).write, tagged_rows("w", [1, 9], 1, first_id=200))
        writer.start()
        parked.wait_reached()  # its transaction begun, its stage not recorded yet
        [w_txn] = [t.txn_id for t in tagged.transactions() if t.state == "staged"]
        operator = other(tagged)
        operator.abort(w_txn, reason="chaos operator")
        operator.maintain(compact=False)
    with pytest.raises(CommitConflict, match="aborted while this write ran"):
        writer.outcome()
    assert {f for f in leaf_files(root) if "/data/" in f} == before
    assert ids(tagged) == [0, 1, 2, 3]


def test_a_collected_anonymous_transaction_this_process_published_is_not_called_aborted(
    tagged, monkeypatch
) -> None:
    """Found by review: records of finished anonymous transactions are collected whether
    they were published or aborted. A commit retried after its publish (here one whose
    step after the swap failed: the commit still returns its result), once they are gone,
    must not say "aborted" (a caller would write the rows again): it says the outcome
    cannot be told."""
    tagged.write(SEED)
    txn = tagged.begin("append", anonymous=True)
    txn.stage(tagged_rows("a", [1], 2, first_id=100))
    with crashing(monkeypatch, "commit.after_publish", "error"):
        assert tagged.commit(txn.txn_id).rows == 2  # published; the error after it is logged
    assert ids(tagged) == [0, 1, 2, 3, 100, 101]
    other(tagged).maintain(compact=False)  # collects it
    with pytest.raises(OutcomeUnknown, match="read the data") as info:
        tagged.commit(txn.txn_id)
    assert not info.value.retryable
    assert ids(tagged) == [0, 1, 2, 3, 100, 101]


# -- 10: a read sees one manifest version ---------------------------------------------------
def test_10_a_read_during_add_column_uses_one_manifest_version(tagged) -> None:
    tagged.write(SEED)
    before = tagged.to_table()
    with hold("read.resolved") as point:
        reader = Worker(other(tagged).to_table)
        reader.start()
        point.wait_reached()  # the read resolved its manifest version
        writer = other(tagged)
        writer.add_column(pa.field("extra", pa.utf8()))
        writer.write(tagged_rows("e", [1], 1, first_id=50).append_column("extra", pa.array(["E"])))
    assert reader.outcome().equals(before)


# -- staging against a commit (the stager fence) -------------------------------------------------
def test_a_stage_recorded_while_a_commit_seals_is_in_its_plan(tagged) -> None:
    txn = tagged.begin("append", "S")
    txn.stage(tagged_rows("s0", [1], 1, first_id=0), stage_id="first")
    with hold("stage.recorded") as point:
        stager = Worker(
            other(tagged).transaction("S").stage, tagged_rows("s1", [2], 1, first_id=10), "late"
        )
        stager.start()
        point.wait_reached()  # its record is written, its epoch bump not yet
        result = tagged.commit("S")
    stager.outcome()  # included: the seal listed it, so the stager returns normally
    assert result.rows == 2
    assert ids(tagged) == [0, 10]


def test_a_stage_recorded_after_the_seal_is_refused_and_removed(tagged, root: Path) -> None:
    txn = tagged.begin("append", "S")
    txn.stage(tagged_rows("s0", [1], 1, first_id=0), stage_id="first")
    with hold("stage.written") as point:
        stager = Worker(
            other(tagged).transaction("S").stage, tagged_rows("s1", [2], 1, first_id=10), "late"
        )
        stager.start()
        point.wait_reached()  # its data files are written, its record not yet
        result = tagged.commit("S")
    with pytest.raises(TransactionClosed, match="not part of it"):
        stager.outcome()
    assert result.rows == 1
    assert ids(tagged) == [0]
    assert [p.values["part"] for p in tagged.partitions()] == [1]
    kept = tagged.partition({"part": 1}).directory
    data = [f for f in leaf_files(root) if "/data/" in f]
    assert data
    assert all(f.startswith(kept + "/") for f in data)  # the late files are gone


def test_a_write_aborted_by_recovery_meanwhile_is_a_retryable_conflict(tagged) -> None:
    tagged.write(SEED)
    with hold("commit.before_publish") as point:
        writer = Worker(other(tagged).write, X, txn_id="W")
        writer.start()
        point.wait_reached()
        assert tagged.recover(lease_seconds=0) == ["W"]  # an aggressive operator
    with pytest.raises(CommitConflict, match="aborted while this write ran") as info:
        writer.outcome()
    assert info.value.retryable
    assert ids(tagged) == [0, 1, 2, 3]
    assert tagged.write(X, txn_id="W").rows == 6  # the retry: a new incarnation
    assert ids(tagged) == sorted([0, 1, 2, 3, *X.column("id").to_pylist()])


def test_a_stage_recorded_while_its_transaction_is_merged_is_in_the_combined_plan(tagged) -> None:
    tagged.begin("append", "S").stage(tagged_rows("s0", [1], 1, first_id=0), stage_id="first")
    tagged.begin("append", "T").stage(tagged_rows("t0", [2], 1, first_id=10))
    with hold("stage.recorded") as point:
        stager = Worker(
            other(tagged).transaction("S").stage, tagged_rows("s1", [3], 1, first_id=20), "late"
        )
        stager.start()
        point.wait_reached()  # its record is written, its epoch bump not yet
        result = tagged.commit(["S", "T"], txn_id="ST")  # the seal merges S, taking "late"
    stager.outcome()  # included through the combined transaction's plan
    assert result.rows == 3
    assert ids(tagged) == [0, 10, 20]
