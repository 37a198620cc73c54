"""Transactions: staging from many processes, one atomic publish, idempotency, conflicts."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing as mp
import time
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    CommitResult,
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    StaleStage,
    TransactionAborted,
)
from airflow_provider_lance.namespace.errors import is_retryable
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from tests.support import Worker, ids, leaf_files, other, tagged_rows, tree
from tests.workers import stage_in_process


def test_stages_from_many_processes_publish_at_once(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("seed", [0, 1], 2, first_id=0))
    txn = tagged.begin("append", "batch-1")
    tables = [tagged_rows(f"s{i}", [0, 1, 2 + i], 3, first_id=100 * (i + 1)) for i in range(3)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(3) as pool:
        stages = pool.starmap(
            stage_in_process,
            [
                (tagged.uri, "batch-1", f"task-{i}", json.dumps(t.to_pylist()))
                for i, t in enumerate(tables)
            ],
        )
    assert [s["stage_id"] for s in stages] == ["task-0", "task-1", "task-2"]
    assert ids(tagged) == [0, 1, 2, 3]  # nothing visible before the commit
    assert len(txn.stages()) == 3
    result = tagged.commit("batch-1")
    assert result.txn_id == "batch-1"
    assert result.rows == 27
    assert ids(tagged) == sorted(
        [0, 1, 2, 3, *(i for t in tables for i in t.column("id").to_pylist())]
    )
    assert {p.object_id for p in result.created} == {
        p.object_id for p in tagged.partitions() if p.values["part"] in (2, 3, 4)
    }


def test_commit_twice_returns_the_same_result(tagged: PartitionedNamespace) -> None:
    txn = tagged.begin("append", "t1")
    txn.stage(tagged_rows("a", [1, 2], 2, 0))
    first = tagged.commit(txn)
    version = tagged.version
    again = tagged.commit("t1")
    assert again == first
    assert tagged.version == version
    assert ids(tagged) == [0, 1, 2, 3]
    # a retried write with the same id is a no-op too
    assert tagged.write(tagged_rows("a", [1, 2], 2, 0), txn_id="t1") == first
    assert ids(tagged) == [0, 1, 2, 3]


def test_restaging_under_the_same_id_replaces_the_attempt(
    tagged: PartitionedNamespace, root: Path
) -> None:
    txn = tagged.begin("append", "t1")
    txn.stage(tagged_rows("a", [1], 5, 0), stage_id="task-7")
    leaf_files = lambda: {  # noqa: E731
        f for f in tree(root) if "/data/" in f and not f.startswith("__manifest/")
    }
    files_after_first = leaf_files()
    txn.stage(tagged_rows("a", [1], 5, 0), stage_id="task-7")  # a retried task
    files_after_second = leaf_files()
    assert files_after_second.isdisjoint(files_after_first)
    assert len(files_after_second) == len(files_after_first)  # the first attempt's files went
    tagged.commit(txn)
    assert ids(tagged) == [0, 1, 2, 3, 4]


def test_overwrite_whose_base_moved_fails_and_publishes_nothing(
    tagged: PartitionedNamespace,
) -> None:
    tagged.write(tagged_rows("seed", [1, 2], 2, 0))
    txn = tagged.begin("overwrite", "ow")
    txn.stage(tagged_rows("new", [1, 2], 1, 100))
    tagged.write(tagged_rows("late", [2], 1, 200))  # moves partition 2 under the overwrite
    before = tagged.to_table()
    with pytest.raises(CommitConflict, match="another writer published") as info:
        tagged.commit(txn)
    [moved] = info.value.partitions
    assert moved == tagged.partition({"part": 2}).object_id
    assert tagged.to_table().equals(before)
    tagged.abort("ow")
    assert {t.txn_id: t.state for t in tagged.transactions()}["ow"] == "aborted"
    with pytest.raises(TransactionAborted):
        tagged.commit("ow")


def test_disjoint_and_overlapping_transactions_both_commit(tagged: PartitionedNamespace) -> None:
    a, b, c = tagged.begin("append", "a"), tagged.begin("append", "b"), tagged.begin("append", "c")
    a.stage(tagged_rows("a", [1], 2, 0))
    b.stage(tagged_rows("b", [2], 2, 10))
    c.stage(tagged_rows("c", [1, 2], 1, 20))  # overlaps both
    for txn in (a, b, c):
        tagged.commit(txn)
    assert ids(tagged) == [0, 1, 10, 11, 20, 21]
    assert sorted(p.read_version for p in tagged.partitions()) == [2, 2]


def test_a_claimed_partition_blocks_until_recovery(
    tagged: PartitionedNamespace, monkeypatch
) -> None:
    tagged.write(tagged_rows("seed", [1], 1, 0))
    stuck = tagged.begin("append", "stuck")
    stuck.stage(tagged_rows("s", [1], 1, 10))
    monkeypatch.setenv(ENV, "commit.after_claim=raise")
    with pytest.raises(FailpointError):
        tagged.commit(stuck)  # dies holding the claim on partition 1
    monkeypatch.delenv(ENV)
    time.sleep(1.5)
    other = tagged.begin("append", "other")
    other.stage(tagged_rows("o", [1], 1, 20))
    with pytest.raises(
        CommitConflict,
        match=(
            r"held by other transactions \['stuck#1 \(committing for \d+s\)'\] "
            r"for longer than the claim timeout \(0.3s\)"
        ),
    ):
        tagged.commit(other, claim_timeout=0.3)
    assert tagged.recover(lease_seconds=3600) == []  # not expired yet
    assert tagged.recover(lease_seconds=1.2) == ["stuck"]  # idle 1.5 s; "other" just tried
    tagged.commit(other)
    assert ids(tagged) == [0, 20]


LEASE = 3.0  # seconds: real time, no clock is mocked (a margin for a loaded host)


def test_the_lease_runs_from_a_transactions_last_activity_not_its_creation(
    tagged: PartitionedNamespace,
) -> None:
    """``active`` and ``idle`` both begin and stage, then wait past the lease; ``active`` then
    stages again. ``recover`` aborts only ``idle``: ``active`` was created more than a lease
    ago but is idle for less (a long Spark job whose tasks still record stages), and it
    commits everything it staged."""
    tagged.write(tagged_rows("seed", [1], 1, 0))
    active = tagged.begin("append", "active")
    active.stage(tagged_rows("a", [1], 1, 10), stage_id="first")
    tagged.begin("append", "idle").stage(tagged_rows("i", [2], 1, 20))
    time.sleep(LEASE + 1.0)
    active.stage(tagged_rows("a", [2], 1, 11), stage_id="second")
    assert tagged.recover(lease_seconds=LEASE) == ["idle"]
    states = {t.txn_id: t.state for t in tagged.transactions()}
    assert (states["active"], states["idle"]) == ("staged", "aborted")
    tagged.commit("active")
    assert ids(tagged) == [0, 10, 11]
    # and once idle past the lease itself, it would have gone too
    later = tagged.begin("append", "later")
    later.stage(tagged_rows("l", [1], 1, 30))
    assert tagged.recover(lease_seconds=LEASE) == []
    time.sleep(LEASE + 1.0)
    assert tagged.recover(lease_seconds=LEASE) == ["later"]


def test_abort_removes_staged_files_and_the_id_can_begin_again(
    tagged: PartitionedNamespace, root: Path
) -> None:
    tagged.write(tagged_rows("seed", [1], 1, 0))
    before = leaf_files(root)
    txn = tagged.begin("append", "again")
    txn.stage(tagged_rows("x", [1, 5], 3, 10))
    tagged.abort("again")
    after = leaf_files(root)
    assert after == before
    with pytest.raises(TransactionAborted):
        txn.stage(tagged_rows("x", [1], 1, 10))
    fresh = tagged.begin("append", "again")
    fresh.stage(tagged_rows("y", [1], 1, 30))
    tagged.commit(fresh)
    assert ids(tagged) == [0, 30]


def test_transaction_listing_and_bad_arguments(tagged: PartitionedNamespace) -> None:
    tagged.begin("append", "listed").stage(tagged_rows("x", [1, 2], 2, 0))
    [info] = tagged.transactions()
    assert (info.txn_id, info.state, info.stages, info.rows, info.partitions) == (
        "listed",
        "staged",
        1,
        4,
        2,
    )
    with pytest.raises(InvalidArgumentError, match="must be 1-200 characters"):
        tagged.begin("append", "has/slash")
    assert tagged.begin("append", "listed").state == "staged"  # resumes the same one
    with pytest.raises(InvalidArgumentError, match="mode"):
        tagged.begin("overwrite", "listed")
    with pytest.raises(InvalidArgumentError, match="no transaction"):
        tagged.transaction("missing")


def test_plain_writes_leave_no_transaction_records(
    tagged: PartitionedNamespace, root: Path
) -> None:
    tagged.write(tagged_rows("x", [1], 1, 0))
    tagged.create_partitions([{"part": 9}])
    assert not [f for f in tree(root) if f.startswith("_transactions/")]
    assert tagged.transactions() == []


def test_new_partition_created_while_staged_is_appended_to(tagged: PartitionedNamespace) -> None:
    txn = tagged.begin("append", "late")
    txn.stage(tagged_rows("late", [7], 2, 0))
    tagged.write(tagged_rows("first", [7], 1, 100))  # creates partition 7 meanwhile
    result = tagged.commit(txn)
    assert [p.created for p in result.partitions] == [False]
    assert ids(tagged) == [0, 1, 100]


def test_commit_records_the_txn_on_leaf_versions(tagged: PartitionedNamespace) -> None:
    import lance

    from airflow_provider_lance.namespace.format.leaf_version import committed_by

    result = tagged.write(tagged_rows("x", [1], 1, 0), txn_id="named")
    [p] = tagged.partitions()
    assert committed_by(lance.dataset(p.location), p.read_version) == "named#1"  # incarnation 1
    assert result.partitions[0].read_version == p.read_version


def test_unpublished_versions_of_a_crashed_writer_are_rolled_back(
    tagged: PartitionedNamespace, monkeypatch
) -> None:
    tagged.write(tagged_rows("seed", [1], 1, 0))
    crashed = tagged.begin("append", "crashed")
    crashed.stage(tagged_rows("c", [1], 3, 10))
    monkeypatch.setenv(ENV, "commit.before_publish=raise")
    with pytest.raises(FailpointError):
        tagged.commit(crashed)  # its leaf version exists, unpublished
    monkeypatch.delenv(ENV)
    assert ids(tagged) == [0]
    tagged.recover(lease_seconds=0)
    tagged.write(tagged_rows("next", [1], 1, 50))
    assert ids(tagged) == [0, 50]  # the orphan rows never became visible


def test_schema_mismatch_in_stage_table_is_rejected(tagged: PartitionedNamespace) -> None:
    txn = tagged.begin("append", "bad")
    with pytest.raises(Exception, match="not in the namespace schema"):
        txn.stage(pa.table({"nope": [1]}))
    assert txn.stages() == {}


def staged(ns: PartitionedNamespace, txn_id: str, table: pa.Table, mode: str = "append") -> None:
    ns.begin(mode, txn_id).stage(table, stage_id="s")


def test_several_transactions_commit_as_one(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("seed", [0], 1, first_id=0))
    staged(tagged, "map.0", tagged_rows("m0", [0, 1], 2, first_id=10))
    staged(tagged, "map.1", tagged_rows("m1", [1, 2], 2, first_id=20))
    before = tagged.version
    result = tagged.commit(["map.0", "map.1"], txn_id="publish")
    assert tagged.version == before + 2  # claim + one publish for both
    assert result.txn_id == "publish"
    assert result.rows == 8
    assert sorted(p.values["part"] for p in result.partitions) == [0, 1, 2]
    assert ids(tagged) == [0, 10, 11, 12, 13, 20, 21, 22, 23]
    states = {t.txn_id: t.state for t in tagged.transactions()}
    assert states == {"map.0": "merged", "map.1": "merged", "publish": "published"}
    # retries, by the combined id, by the same list, or by a source: the same result
    assert tagged.commit("publish") == result
    assert tagged.commit(["map.1", "map.0"], txn_id="publish") == result
    assert tagged.commit("map.0") == result
    assert ids(tagged) == [0, 10, 11, 12, 13, 20, 21, 22, 23]


def test_combined_overwrite_replaces_each_partition_with_all_its_staged_rows(
    tagged: PartitionedNamespace,
) -> None:
    tagged.write(tagged_rows("old", [0, 1], 3, first_id=0))
    staged(tagged, "ow.0", tagged_rows("n0", [0], 1, first_id=100), mode="overwrite")
    staged(tagged, "ow.1", tagged_rows("n1", [0], 1, first_id=200), mode="overwrite")
    result = tagged.commit(["ow.0", "ow.1"])  # the default combined id is derived from theirs
    assert result.txn_id.startswith("combined-")
    assert tagged.commit(["ow.1", "ow.0"]) == result
    assert ids(tagged) == [3, 4, 5, 100, 200]


def test_combining_refuses_bad_sets_and_publishes_nothing(tagged: PartitionedNamespace) -> None:
    staged(tagged, "a", tagged_rows("a", [0], 1, first_id=0))
    staged(tagged, "o", tagged_rows("o", [1], 1, first_id=10), mode="overwrite")
    with pytest.raises(InvalidArgumentError, match="mix modes"):
        tagged.commit(["a", "o"], txn_id="p")
    with pytest.raises(InvalidArgumentError, match="no transaction 'missing'"):
        tagged.commit(["a", "missing"], txn_id="p2")
    tagged.commit("o")
    with pytest.raises(InvalidArgumentError, match="o is published"):
        tagged.commit(["a", "o"], txn_id="p3")
    assert ids(tagged) == [10]
    staged(tagged, "b", tagged_rows("b", [2], 1, first_id=20))
    tagged.commit(["a", "b"], txn_id="ab")
    with pytest.raises(InvalidArgumentError, match="combines"):
        tagged.commit(["a"], txn_id="ab")
    with pytest.raises(InvalidArgumentError, match="merged into ab"):
        tagged.transaction("a").stage(tagged_rows("a", [0], 1, first_id=0))
    assert ids(tagged) == [0, 10, 20]


def test_aborting_a_combined_transaction_aborts_its_sources(
    tagged: PartitionedNamespace, root: Path, monkeypatch
) -> None:
    before = leaf_files(root)
    staged(tagged, "x.0", tagged_rows("x", [0], 2, first_id=0))
    staged(tagged, "x.1", tagged_rows("x", [1], 2, first_id=10))
    monkeypatch.setenv(ENV, "commit.after_claim=raise")
    with pytest.raises(FailpointError):  # sealed: the sources are merged, nothing published
        tagged.commit(["x.0", "x.1"], txn_id="xx")
    monkeypatch.delenv(ENV)
    states = {t.txn_id: t.state for t in tagged.transactions()}
    assert states == {"x.0": "merged", "x.1": "merged", "xx": "committing"}
    with pytest.raises(InvalidArgumentError, match="merged into xx#1; abort that one"):
        tagged.abort("x.0")
    tagged.abort("xx")
    assert {t.txn_id: t.state for t in tagged.transactions()} == dict.fromkeys(
        ["x.0", "x.1", "xx"], "aborted"
    )
    assert leaf_files(root) == before
    assert ids(tagged) == []


def test_discarding_stages_deletes_their_files(tagged: PartitionedNamespace, root: Path) -> None:
    before = leaf_files(root)
    txn = tagged.begin("append", "d")
    txn.stage(tagged_rows("a", [0], 2, first_id=0), stage_id="attempt-0")
    txn.stage(tagged_rows("b", [1], 2, first_id=10), stage_id="attempt-1")
    assert txn.discard(["attempt-0"]) == ["attempt-0"]
    assert list(txn.stages()) == ["attempt-1"]
    assert txn.info().rows == 2
    assert txn.discard() == ["attempt-1"]
    assert leaf_files(root) == before
    assert tagged.commit("d").rows == 0


def test_finished_anonymous_transactions_leave_no_rows_behind(tagged: PartitionedNamespace) -> None:
    import lance

    from airflow_provider_lance.namespace.format.manifest import OBJECT_ID, TXN_PREFIX

    def txn_rows() -> list[str]:
        table = lance.dataset(tagged.uri + "/__manifest").to_table(columns=[OBJECT_ID])
        return [i for i in table.column(OBJECT_ID).to_pylist() if i.startswith(TXN_PREFIX)]

    def fragments() -> int:
        return len(lance.dataset(tagged.uri + "/__manifest").get_fragments())

    tagged.write(tagged_rows("named", [0], 1, first_id=1000), txn_id="named")
    seen = []  # txn rows after each publish: anonymous ones as a Spark driver leaves them
    for i in range(20):  # enough publishes for an automatic compaction
        txn = tagged.begin("append", anonymous=True)
        txn.stage(tagged_rows(f"t{i}", [i % 3], 1, first_id=i))
        before = fragments()
        tagged.commit(txn.txn_id)
        seen.append(len(txn_rows()))
        if fragments() < before:  # this publish compacted: and collected, from what it made
            assert seen[-1] == 1, seen  # only the named one is left
    assert max(seen) > 1, seen  # there were rows to collect
    assert fragments() < 16  # and a publish compacted
    tagged.maintain()
    assert txn_rows() == [TXN_PREFIX + "named"]  # a named one stays: its retry must find it
    assert tagged.write(tagged_rows("named", [0], 1, first_id=1000), txn_id="named").rows == 1
    assert len(ids(tagged)) == 21


def test_full_rows_finds_every_kind_of_row_however_many_ids_are_asked(
    tagged: PartitionedNamespace,
) -> None:
    """A publish asks for its transaction row together with all its partitions: above 1,000
    ids the lookup takes another path, which once saw only leaf rows."""
    from airflow_provider_lance.namespace.format.txn_row import row_id

    tagged.write(tagged_rows("seed", [0], 1, first_id=0))
    txn = tagged.begin("append", "many")
    txn.stage(tagged_rows("m", [1], 1, first_id=10))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "commit.after_claim=raise")
        with pytest.raises(FailpointError):
            tagged.commit("many")  # sealed: the transaction has a row now
    leaf = tagged.partition({"part": 0}).object_id
    wanted = [row_id("many"), leaf, "v1", *(f"absent-{i}" for i in range(1200))]
    for ids_asked in (wanted[:3], wanted):
        found = tagged.state().full_rows(ids_asked).column("object_id").to_pylist()
        assert sorted(found) == sorted([row_id("many"), leaf, "v1"])


def test_every_lookup_path_of_a_state_gives_the_same_answers(tagged: PartitionedNamespace) -> None:
    """A state looks ids up through an ``IN`` list, one scan of the whole table (its first
    lookup of a small ``__manifest``, which also answers the commit's and the parents'
    questions), or the loaded partition rows: all give what a state asked nothing else
    gives. 1,100 partitions: lookups of a few ids take the ``IN`` list, larger ones the
    scan, more than 1,000 the loaded rows. A pending partition (claimed, never published)
    is no partition, but is a row."""
    tagged.write(tagged_rows("seed", list(range(1100)), 1, first_id=0))
    txn = tagged.begin("append", "pending")
    txn.stage(tagged_rows("p", [5000], 1, first_id=10_000))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, "commit.after_claim=raise")
        with pytest.raises(FailpointError):
            tagged.commit("pending")  # its new partition's row exists now, claimed
    state = tagged.state()
    present = [state.leaf_id((i,)) for i in range(1100)]
    absent = [state.leaf_id((i,)) for i in range(2000, 2600)]
    pending = state.leaf_id((5000,))
    for size in (4, 60, 300, 1200):
        asked = [*present[: size // 2], *absent[: size - size // 2 - 1], pending]
        parents = sorted({p for i in asked for p in (i.rsplit("$", 1)[0], "v1")})
        fresh = tagged.state(version=state.version)
        found = fresh.find(asked)  # first: whichever path its size takes
        rows = fresh.full_rows(asked).to_pylist()
        exist = fresh.existing([*asked, *parents])

        loaded = tagged.state(version=state.version)
        assert loaded.tables.num_rows == 1100  # loaded: a lookup of any size filters them
        assert found == loaded.find(asked)
        assert pending not in found
        assert len(found) == size // 2
        alone = tagged.state(version=state.version)  # nothing asked before
        assert rows == alone.full_rows(asked).to_pylist()
        assert {r["object_id"] for r in rows} == {*present[: size // 2], pending}
        everything = tagged.state(version=state.version)
        assert exist == everything.view.object_ids & {*asked, *parents}
        assert pending in exist


def test_a_collected_anonymous_transaction_never_looks_staged_again(
    tagged: PartitionedNamespace,
) -> None:
    """An anonymous transaction (a Spark driver's, or a handed-over write whose process was
    killed after its publish) keeps its records; compaction collects its finished row. A
    header without a row reads as staged, so ``recover`` would abort it and delete the
    files its published version reads. Found by the chaos test: the records go first."""
    txn = tagged.begin("append", anonymous=True)
    txn.stage(tagged_rows("a", [1, 2], 2, first_id=100))
    tagged.commit(txn.txn_id)
    tagged.maintain()  # collects finished anonymous rows (as compaction after a publish does)
    assert txn.txn_id not in {t.txn_id for t in tagged.transactions()}
    assert tagged.recover(lease_seconds=0) == []
    with pytest.raises(InvalidArgumentError, match="no transaction"):
        tagged.abort(txn.txn_id)
    assert ids(tagged) == [100, 101, 102, 103]  # reads every published file


# -- stale stages: a commit that can never succeed says so, and is not retried forever ----------
def test_a_commit_into_a_partition_dropped_after_staging_fails_for_good(
    tagged: PartitionedNamespace,
) -> None:
    """Issue 24: staged into partition 1, which is then dropped. The commit used to raise a
    *retryable* CommitConflict on every attempt (a commit task retried it forever). The
    stage can never be published (its rows belong to the dropped partition's leaf), so the
    commit fails for good, naming the stage and the remedy, and publishes nothing; after
    the remedy the commit publishes, creating partition 1 afresh."""
    tagged.write(tagged_rows("seed", [1, 2], 2, 0))
    txn = tagged.begin("append", "t")
    txn.stage(tagged_rows("a", [1, 2], 1, 100), stage_id="s1")
    dropped = tagged.partition({"part": 1}).object_id
    tagged.drop_partitions("part = 1")
    before = tagged.to_table()
    for handle in (tagged, PartitionedNamespace.open(tagged.uri)):  # the task, and its retry
        with pytest.raises(StaleStage, match="no longer exist") as info:
            handle.commit("t")
        assert not is_retryable(info.value)
        assert "part=1" in str(info.value)
        assert "ns.transaction('t').discard(['s1'])" in str(info.value)
        assert "ns.abort('t')" in str(info.value)
        assert info.value.partitions == [dropped]
        assert tagged.to_table().equals(before)
    tagged.abort("t")  # the remedy: a new incarnation, staged against the partitions as they are
    again = tagged.begin("append", "t")
    again.stage(tagged_rows("a", [1, 2], 1, 100), stage_id="s1")
    result = tagged.commit("t")
    assert sorted((p.values["part"], p.created) for p in result.partitions) == [
        (1, True),
        (2, False),
    ]
    assert ids(tagged) == [2, 3, 100, 101]


def test_a_task_retry_that_stages_under_a_new_id_is_told_which_stage_to_discard(
    tagged: PartitionedNamespace,
) -> None:
    """Issue 24: the staging task ran (stage "try-1" into partition 1), partition 1 was
    dropped, and the task's retry staged the same rows under a new stage id ("try-2":
    partition 1 as a new one). The two stages saw partition 1 differently, so they can
    never be merged: the commit used to say "retryable, stage again" forever. It now fails
    for good naming the stage made before the drop; discarding it lets the commit publish
    the retry's rows once."""
    tagged.write(tagged_rows("seed", [1, 2], 2, 0))
    tagged.begin("append", "t").stage(tagged_rows("a", [1, 2], 1, 100), stage_id="try-1")
    tagged.drop_partitions("part = 1")
    retry = PartitionedNamespace.open(tagged.uri)
    retry.begin("append", "t").stage(tagged_rows("a", [1, 2], 1, 100), stage_id="try-2")
    for _ in range(2):
        with pytest.raises(StaleStage, match="differently") as info:
            retry.commit("t")
        assert not is_retryable(info.value)
        assert "ns.transaction('t').discard(['try-1'])" in str(info.value)
    assert ids(tagged) == [2, 3]
    retry.transaction("t").discard(["try-1"])
    assert retry.commit("t").rows == 2
    assert ids(tagged) == [2, 3, 100, 101]


def test_an_overwrite_whose_base_moved_fails_for_good(tagged: PartitionedNamespace) -> None:
    """The same rule for a replaced base: the staged overwrite of partition 2 would lose
    the rows published over it since, now and on every retry, so it is not retryable."""
    tagged.write(tagged_rows("seed", [1, 2], 2, 0))
    tagged.begin("overwrite", "ow").stage(tagged_rows("new", [1, 2], 1, 100), stage_id="s")
    tagged.write(tagged_rows("late", [2], 1, 200))
    with pytest.raises(StaleStage, match="another writer published") as info:
        tagged.commit("ow")
    assert not is_retryable(info.value)
    assert "ns.transaction('ow').discard(['s'])" in str(info.value)
    assert ids(tagged) == [0, 1, 2, 3, 200]


def test_a_named_write_into_a_partition_dropped_meanwhile_is_retryable(
    tagged: PartitionedNamespace,
) -> None:
    """``write(txn_id=...)`` stages and commits itself, and aborts on failure: its retry
    stages the data again, so for it the stale stage is a retryable conflict that says to
    write again (not the commit's "discard the stages"), and the retry creates partition 1
    afresh."""
    tagged.write(tagged_rows("seed", [1, 2], 2, 0))
    with hold("commit.before_seal") as parked:
        writer = Worker(other(tagged).write, tagged_rows("w", [1], 1, 100), txn_id="w")
        writer.start()
        parked.wait_reached()
        other(tagged).drop_partitions("part = 1")
    with pytest.raises(CommitConflict, match="write again") as info:
        writer.outcome()
    assert not isinstance(info.value, StaleStage)
    assert is_retryable(info.value)
    assert ids(tagged) == [2, 3]
    result = tagged.write(tagged_rows("w", [1], 1, 100), txn_id="w")  # the task's retry
    assert [p.created for p in result.partitions] == [True]
    assert ids(tagged) == [2, 3, 100]


# -- a retried commit returns the first one's result ------------------------------------------
TYPED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("n", pa.int32()),
        pa.field("country", pa.utf8()),
    ]
)


def typed_rows(first_id: int) -> pa.Table:
    """Rows in three partitions: a date, an int and a string value each, one of them NULL."""
    day = dt.date(2025, 12, 10)
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + 3), pa.int64()),
            "day": [day, day, None],
            "n": pa.array([1, None, 3], pa.int32()),
            "country": ["US", "DE", None],
        },
        schema=TYPED,
    )


def same_types(a: CommitResult, b: CommitResult) -> bool:
    def typed(r: CommitResult) -> list[dict[str, type]]:
        return [{k: type(v) for k, v in p.values.items()} for p in r.partitions]

    return typed(a) == typed(b)


def test_a_retried_commit_returns_an_equal_result_typed_the_same(root: Path) -> None:
    """Issue 25: the README promises "again = same result", but a commit retried after the
    publish returned the recorded result with every partition value a string (dates and
    ints included). Retried in this process, from a new handle (as a task retry is) and as
    a retried ``write``, the result equals the first one's, value types included."""
    ns = PartitionedNamespace.create(
        root,
        schema=TYPED,
        partition_fields=[PartitionField(c, c) for c in ("day", "n", "country")],
    )
    ns.begin("append", "t").stage(typed_rows(0))
    first = ns.commit("t")
    values = sorted((tuple(p.values.values()) for p in first.partitions), key=repr)
    assert values == sorted(
        [(dt.date(2025, 12, 10), 1, "US"), (dt.date(2025, 12, 10), None, "DE"), (None, 3, None)],
        key=repr,
    )
    retried = [ns.commit("t"), PartitionedNamespace.open(root).commit("t")]
    written = PartitionedNamespace.open(root).write(typed_rows(10), txn_id="w")
    retried_write = PartitionedNamespace.open(root).write(typed_rows(10), txn_id="w")
    for again, original in [*((r, first) for r in retried), (retried_write, written)]:
        assert again == original
        assert same_types(again, original)
