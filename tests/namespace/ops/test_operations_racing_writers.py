"""Table operations racing writers on the same partitions, each interleaving forced.

A delete, drop, merge or optimize is parked at a named failpoint (with its leaf versions
committed, right before its one ``__manifest`` swap) while another writer publishes over
the same partitions: an append, an overwrite, another table operation, a named
transaction. Checked every time, on real Lance datasets: nothing acknowledged is lost or
duplicated, each operation is all-or-nothing at every ``__manifest`` version, the later
publish wins in serial order, every published leaf is readable at its ``read_version``
with raw pylance and no claim is left behind.
"""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace
from airflow_provider_lance.namespace.testing import hold
from tests.support import (
    TAGGED,
    Worker,
    all_readable,
    by_id,
    claims,
    ids,
    no_duplicates,
    other,
    state_of,
    tagged_rows,
)


def versions_since(ns: PartitionedNamespace, since: int) -> list[int]:
    found = lance.dataset(ns.uri + "/__manifest").versions()
    return [int(v["version"]) for v in found if int(v["version"]) >= since]


def ids_at(ns: PartitionedNamespace, version: int) -> list[int]:
    return sorted(ns.to_table(columns=["id"], version=version).column("id").to_pylist())


def serial_states_only(ns: PartitionedNamespace, since: int, *states: set[int]) -> None:
    """Every ``__manifest`` version since ``since`` shows exactly one of ``states`` (the
    rows before and after each operation, in the serial order the race must produce):
    no operation is ever half visible, and none is visible out of order."""
    allowed = [sorted(s) for s in states]
    for version in versions_since(ns, since):
        assert ids_at(ns, version) in allowed, f"v{version} shows {ids_at(ns, version)}"
    assert ids(ns) == allowed[-1]


def healthy(ns: PartitionedNamespace) -> None:
    """No claim left, every published leaf readable with raw pylance at its version."""
    assert claims(ns) == []
    for p in ns.partitions():
        lance.dataset(p.location, version=p.read_version).to_table()
    all_readable(ns)


# -- delete against writers ---------------------------------------------------------------------
FILTER = "id % 2 = 0"  # even ids: seed 0,2,...,10 and the even ids of later writes


@pytest.mark.parametrize(
    "point", ["delete.selected", "leaf.before_commit", "delete.before_publish"]
)
def test_a_delete_parked_while_an_append_publishes_deletes_the_appended_rows_too(
    three_parts, point
) -> None:
    """The delete parks (having read S, before its leaf commit, or with its leaves
    committed right before its swap); an append of rows 100-103 into partitions 1 and 2
    publishes. The delete's swap fails (their rows changed since S) and it computes again
    on the append's versions: serially it comes after the append, so its even ids go too.
    Relies on the swap against S and on ``commit_change`` committing on exactly the
    published version (rolling back the delete's own first versions)."""
    since = three_parts.version
    with hold(point) as parked:
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("a", [1, 2], 2, first_id=100))
    result = deleter.outcome()
    assert no_duplicates(three_parts) == [1, 3, 5, 7, 9, 11, 101, 103]
    assert result.rows_removed == 8
    seed = set(range(12))
    appended = seed | {100, 101, 102, 103}
    serial_states_only(three_parts, since, seed, appended, {i for i in appended if i % 2})
    healthy(three_parts)


def test_a_delete_parked_while_an_overwrite_publishes_applies_to_the_overwrite(three_parts) -> None:
    with hold("delete.before_publish") as parked:
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("o", [1], 3, first_id=200), "overwrite")
    deleter.outcome()
    assert no_duplicates(three_parts) == [5, 7, 9, 11, 201]
    healthy(three_parts)


def test_an_append_parked_before_its_swap_lands_after_a_delete(three_parts) -> None:
    """The append commits its leaf version and parks before its swap; a delete runs
    whole (rolling the append's unpublished version back). The append's swap fails, it
    commits again on the delete's version and publishes: serially after the delete, so
    its even ids stay."""
    since = three_parts.version
    with hold("direct.before_publish") as parked:
        writer = Worker(other(three_parts).write, tagged_rows("a", [1, 2], 2, first_id=100))
        writer.start()
        parked.wait_reached()
        other(three_parts).delete(FILTER)
    writer.outcome()
    assert no_duplicates(three_parts) == [1, 3, 5, 7, 9, 11, 100, 101, 102, 103]
    seed = set(range(12))
    deleted = {i for i in seed if i % 2}
    serial_states_only(three_parts, since, seed, deleted, deleted | {100, 101, 102, 103})
    healthy(three_parts)


def test_two_deletes_racing_both_apply(three_parts) -> None:
    since = three_parts.version
    with hold("delete.before_publish") as parked:
        first = Worker(other(three_parts).delete, FILTER)
        first.start()
        parked.wait_reached()
        other(three_parts).delete("id IN (1, 3, 4)")
    first.outcome()
    assert no_duplicates(three_parts) == [5, 7, 9, 11]
    seed = set(range(12))
    serial_states_only(three_parts, since, seed, seed - {1, 3, 4}, {5, 7, 9, 11})
    healthy(three_parts)


def test_a_delete_waits_for_a_transaction_committing_its_partition(three_parts) -> None:
    """X (named append to partition 1) holds its claim, parked before its publish: the
    delete waits instead of publishing over it, then runs after X, deleting X's even
    rows too."""
    three_parts.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(three_parts).commit, "X")
        committer.start()
        parked.wait_reached()
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        deleter.join(1.0)
        assert deleter.is_alive()  # waiting for X's claim
    committer.outcome()
    deleter.outcome()
    assert no_duplicates(three_parts) == [1, 3, 5, 7, 9, 11, 101]
    assert state_of(three_parts, "X") == "published"
    healthy(three_parts)


def test_a_transaction_sealing_while_a_delete_is_parked_wins_the_race(three_parts) -> None:
    """The delete parks before its swap; X seals (claims partition 1), commits its leaf
    (rolling the delete's unpublished version back) and publishes. The delete's swap
    fails on the changed row and it runs again after X."""
    three_parts.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("delete.before_publish") as parked:
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        parked.wait_reached()
        assert other(three_parts).commit("X").rows == 2
    deleter.outcome()
    assert no_duplicates(three_parts) == [1, 3, 5, 7, 9, 11, 101]
    healthy(three_parts)


# -- drop_partitions against writers ---------------------------------------------------------------
def test_a_drop_parked_while_an_append_publishes_drops_the_appended_rows_too(three_parts) -> None:
    since = three_parts.version
    with hold("drop_partitions.before_publish") as parked:
        dropper = Worker(other(three_parts).drop_partitions, "part = 1")
        dropper.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("a", [1, 2], 1, first_id=100))
    result = dropper.outcome()
    assert result.rows_removed == 5  # the seed's 4 and the append's 1
    assert no_duplicates(three_parts) == [*range(4, 12), 101]
    seed = set(range(12))
    serial_states_only(three_parts, since, seed, seed | {100, 101}, set(range(4, 12)) | {101})
    healthy(three_parts)


def test_an_append_to_a_partition_dropped_meanwhile_fails_cleanly(three_parts) -> None:
    """The append was staged into partition 1 and parks before its swap; the partition is
    dropped. Appending to a partition that no longer exists would bring rows into a new
    partition the writer never saw: it fails, publishing nothing. The same rule as a
    commit's (``check_staged_against``), but retryable: the write's retry stages afresh,
    and the error says to write again."""
    with hold("direct.before_publish") as parked:
        writer = Worker(other(three_parts).write, tagged_rows("a", [1], 1, first_id=100))
        writer.start()
        parked.wait_reached()
        other(three_parts).drop_partitions("part = 1")
    with pytest.raises(CommitConflict, match=r"no longer exist.*part=1.*write again") as info:
        writer.outcome()
    assert info.value.retryable
    assert no_duplicates(three_parts) == list(range(4, 12))
    three_parts.write(tagged_rows("again", [1], 1, first_id=100))  # a retry creates it afresh
    assert no_duplicates(three_parts) == [*range(4, 12), 100]
    healthy(three_parts)


def test_a_delete_and_a_drop_of_the_same_partition(three_parts) -> None:
    with hold("delete.before_publish") as parked:
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        parked.wait_reached()
        other(three_parts).drop_partitions("part = 2")
    result = deleter.outcome()
    assert no_duplicates(three_parts) == [1, 3, 9, 11]
    assert sorted(p.values["part"] for p in result.partitions) == [1, 3]
    healthy(three_parts)


# -- merge against writers -------------------------------------------------------------------
def upserts(pairs: list[tuple[int, int]], tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i for i, _ in pairs], pa.int64()),
            "part": pa.array([p for _, p in pairs], pa.int32()),
            "tag": [tag] * len(pairs),
        },
        schema=TAGGED,
    )


def tags(ns: PartitionedNamespace) -> dict[int, str]:
    return by_id(ns.to_table(columns=["id", "tag"]), "tag")


MERGE = upserts([(0, 1), (5, 2), (100, 2), (101, 8)], "m")  # 2 updates, 2 inserts (8 new)


@pytest.mark.parametrize("point", ["merge.selected", "merge.before_publish"])
def test_a_merge_parked_while_an_append_publishes_applies_after_it(three_parts, point) -> None:
    since = three_parts.version
    with hold(point) as parked:
        merger = Worker(other(three_parts).merge, MERGE, ["id", "part"])
        merger.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("a", [1, 2], 1, first_id=200))
    result = merger.outcome()
    assert result.rows_updated == 2
    assert result.rows_inserted == 2
    assert no_duplicates(three_parts) == [*range(12), 100, 101, 200, 201]
    assert {i: t for i, t in tags(three_parts).items() if t != "seed"} == {
        0: "m",
        5: "m",
        100: "m",
        101: "m",
        200: "a",
        201: "a",
    }
    seed = set(range(12))
    serial_states_only(three_parts, since, seed, seed | {200, 201}, seed | {100, 101, 200, 201})
    healthy(three_parts)


def test_a_merge_creating_a_partition_a_write_creates_first(three_parts) -> None:
    """Both create partition 8: the write publishes first, the merge's swap fails on the
    inserted row and it merges into the partition the write created."""
    with hold("merge.before_publish") as parked:
        merger = Worker(other(three_parts).merge, MERGE, ["id", "part"])
        merger.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("w", [8], 2, first_id=300))
    merger.outcome()
    assert no_duplicates(three_parts) == [*range(12), 100, 101, 300, 301]
    p8 = three_parts.partition({"part": 8})
    leaf = lance.dataset(p8.location, version=p8.read_version)
    assert sorted(leaf.to_table().column("id").to_pylist()) == [101, 300, 301]
    healthy(three_parts)


def test_a_merge_parked_while_an_overwrite_replaces_its_partition(three_parts) -> None:
    """The overwrite removes row 0, which the merge updated: computed again on the
    overwrite's version, row 0 is an insert."""
    with hold("merge.before_publish") as parked:
        merger = Worker(other(three_parts).merge, MERGE, ["id", "part"])
        merger.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("o", [1], 1, first_id=400), "overwrite")
    result = merger.outcome()
    assert result.rows_updated == 1
    assert result.rows_inserted == 3
    assert no_duplicates(three_parts) == [0, *range(4, 12), 100, 101, 400]
    healthy(three_parts)


def test_two_merges_of_the_same_keys_serialise(three_parts) -> None:
    with hold("merge.before_publish") as parked:
        first = Worker(other(three_parts).merge, MERGE, ["id", "part"])
        first.start()
        parked.wait_reached()
        other(three_parts).merge(upserts([(0, 1), (100, 2)], "second"), ["id", "part"])
    result = first.outcome()
    assert result.rows_updated == 3  # 0, 5 and the second's 100
    assert no_duplicates(three_parts) == [*range(12), 100, 101]
    assert tags(three_parts)[0] == "m"
    assert tags(three_parts)[100] == "m"
    healthy(three_parts)


def test_a_merge_waits_for_a_transaction_committing_its_partition(three_parts) -> None:
    three_parts.begin("append", "X").stage(tagged_rows("x", [2], 1, first_id=500))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(three_parts).commit, "X")
        committer.start()
        parked.wait_reached()
        merger = Worker(other(three_parts).merge, MERGE, ["id", "part"])
        merger.start()
        merger.join(1.0)
        assert merger.is_alive()
    committer.outcome()
    merger.outcome()
    assert no_duplicates(three_parts) == [*range(12), 100, 101, 500]
    healthy(three_parts)


# -- optimize against writers ----------------------------------------------------------------
@pytest.fixture
def fragmented(three_parts) -> PartitionedNamespace:
    """Four fragments per leaf."""
    for k in range(1, 4):
        three_parts.write(tagged_rows(f"day{k}", [1, 2, 3], 1, first_id=100 * k))
    return three_parts


def fragment_counts(ns: PartitionedNamespace) -> dict[int, int]:
    return {
        p.values["part"]: len(lance.dataset(p.location, version=p.read_version).get_fragments())
        for p in ns.partitions()
    }


def test_an_optimize_parked_while_an_append_publishes_compacts_again(fragmented) -> None:
    """The optimize parks with its compactions committed; an append to partition 1
    publishes. The swap fails; partition 1 is compacted again on the append's version
    (partitions 2 and 3 reuse their committed compactions): nothing appended is lost."""
    ns, since = fragmented, fragmented.version
    before = set(ids(ns))
    with hold("optimize.before_publish") as parked:
        optimizer = Worker(other(ns).optimize)
        optimizer.start()
        parked.wait_reached()
        other(ns).write(tagged_rows("a", [1], 1, first_id=900))
    result = optimizer.outcome()
    assert len(result.rewritten) == 3
    assert fragment_counts(ns) == {1: 1, 2: 1, 3: 1}
    assert no_duplicates(ns) == sorted(before | {900})
    serial_states_only(ns, since, before, before | {900})
    healthy(ns)


def test_an_append_parked_before_its_swap_lands_after_an_optimize(fragmented) -> None:
    ns = fragmented
    before = set(ids(ns))
    with hold("direct.before_publish") as parked:
        writer = Worker(other(ns).write, tagged_rows("a", [1], 1, first_id=900))
        writer.start()
        parked.wait_reached()
        other(ns).optimize()
    writer.outcome()
    assert no_duplicates(ns) == sorted(before | {900})
    assert fragment_counts(ns) == {1: 2, 2: 1, 3: 1}
    healthy(ns)


def test_optimize_skips_a_partition_a_transaction_is_committing(fragmented) -> None:
    ns = fragmented
    ns.begin("append", "X").stage(tagged_rows("x", [1], 1, first_id=800))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        parked.wait_reached()
        result = other(ns).optimize()  # does not wait for X
    committer.outcome()
    p1 = ns.partition({"part": 1})
    assert result.skipped == {p1.object_id: "claimed"}
    assert sorted(p.values["part"] for p in result.rewritten) == [2, 3]
    assert 800 in ids(ns)
    healthy(ns)


def test_optimize_skips_a_partition_that_keeps_moving(fragmented) -> None:
    """Every time the optimize reaches its swap, a writer has just published partition 1
    again: after two moves the optimize leaves it alone and publishes the others."""
    ns = fragmented
    writer = other(ns)
    appended: list[int] = []

    def append_first() -> bool:
        first_id = 900 + len(appended)
        writer.write(tagged_rows("busy", [1], 1, first_id=first_id))
        appended.append(first_id)
        return False  # never parks: the point only runs this

    with hold("optimize.before_publish", times=None, when=append_first):
        result = other(ns).optimize()
    p1 = ns.partition({"part": 1})
    assert result.skipped == {p1.object_id: "kept_moving"}
    assert sorted(p.values["part"] for p in result.rewritten) == [2, 3]
    assert set(appended) <= set(no_duplicates(ns))
    healthy(ns)


def restored(ns: PartitionedNamespace, part: int) -> list[int]:
    """The versions the roll-backs (Restore commits) of a partition's leaf restored."""
    leaf = lance.dataset(ns.partition({"part": part}).location)
    out = []
    for v in leaf.versions():
        txn = leaf.read_transaction(int(v["version"]))
        if txn is not None and isinstance(txn.operation, LanceOperation.Restore):
            out.append(int(txn.operation.version))
    return out


def test_a_delete_never_rolls_back_a_version_a_transaction_is_publishing(three_parts) -> None:
    """The delete has computed its change on read_version R (no claim then) and parks;
    X seals partition 1 and commits its leaf version R+1, parked before its publish.
    The delete's commit on R lands above X's version (Lance rebases it: R+2, never
    published) and its next attempt finds the row claimed: it does not roll X's version
    back (X is about to publish it), loses the attempt, waits for X, then applies on X's
    version (rolling back only its own R+2)."""
    base = three_parts.partition({"part": 1}).read_version
    three_parts.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("delete.computed") as deleting:
        deleter = Worker(other(three_parts).delete, FILTER)
        deleter.start()
        deleting.wait_reached()
        with hold("commit.before_publish") as publishing:
            committer = Worker(other(three_parts).commit, "X")
            committer.start()
            publishing.wait_reached()
            deleting.release()
            deleter.join(1.0)
            assert deleter.is_alive()  # waiting for X's claim
        committer.outcome()
    deleter.outcome()
    assert all(version > base for version in restored(three_parts, 1))  # X's R+1 never undone
    assert no_duplicates(three_parts) == [1, 3, 5, 7, 9, 11, 101]
    healthy(three_parts)
