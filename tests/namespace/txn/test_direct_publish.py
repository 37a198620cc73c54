"""Writes without a txn id publish in one swap (``namespace/txn/direct.py``), next to the claim
protocol: forced interleavings with committing transactions and other writers, crashes on
each side of the swap, a swap whose outcome is unknown, and failures that must leave no
staged file behind."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace, StorageError
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.testing import FailpointError, hold
from airflow_provider_lance.namespace.txn import direct
from airflow_provider_lance.namespace.write.leaf_commit import fragment_text
from airflow_provider_lance.namespace.write.staging import Stage, Stager, discard_stage
from tests.support import (
    Worker,
    all_readable,
    claims,
    crashing,
    data_files,
    ids,
    leaf_of,
    other,
    referenced_files,
    state_of,
    tagged_rows,
    tree,
)


def test_a_write_is_one_manifest_commit_and_leaves_no_records(seeded) -> None:
    before = seeded.version
    result = seeded.write(tagged_rows("a", [1, 2, 3], 2, first_id=100))
    assert seeded.version == before + 1 == result.manifest_version
    assert [p.created for p in result.partitions] == [False, False, True]
    assert ids(seeded) == [0, 1, 2, 3, *range(100, 106)]
    assert not [f for f in tree(Path(seeded.uri.removeprefix("file://"))) if f.startswith("_trans")]
    assert seeded.transactions() == []


@pytest.mark.parametrize(("part", "created"), [(1, False), (9, True)], ids=["existing", "new"])
def test_a_write_waits_for_a_transaction_committing_its_partition(seeded, part, created) -> None:
    """X holds its claims (parked before its publish): the write sees them, hands its
    files to the claim protocol and publishes after X, both exactly once. A partition X
    creates (9) exists only as X's claimed, unpublished row: invisible to readers (and to
    the write's staging), but the write must not publish over it."""
    seeded.begin("append", "X").stage(tagged_rows("x", [part], 2, first_id=100))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(seeded).commit, "X")
        committer.start()
        parked.wait_reached()
        writer = Worker(other(seeded).write, tagged_rows("w", [part], 2, first_id=200))
        writer.start()
        writer.join(1.0)
        assert writer.is_alive()  # waiting for X's claim, not racing it
    x, w = committer.outcome(), writer.outcome()
    assert [p.created for p in x.partitions] == [created]
    assert [p.created for p in w.partitions] == [False]
    assert w.partitions[0].read_version > x.partitions[0].read_version
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201]
    assert claims(seeded) == []
    assert state_of(seeded, "X") == "published"
    all_readable(seeded)


def test_a_claim_placed_after_the_write_read_its_rows_makes_it_publish_later(seeded) -> None:
    """The write committed its leaf and is parked before its swap; X claims, rolls the
    write's unpublished leaf version back, commits and publishes. The write's swap then
    fails (the row changed) and it commits again on X's published version."""
    with hold("direct.before_publish") as parked:
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        parked.wait_reached()
        seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
        x = seeded.commit("X")
    w = writer.outcome()
    assert w.partitions[0].read_version > x.partitions[0].read_version
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201]
    all_readable(seeded)


def test_a_write_released_while_a_claim_is_live_waits_for_it(seeded) -> None:
    """Parked before its swap while X seals and parks before its publish: the write's
    swap fails, its retry sees X's live claim and waits for X instead of racing it."""
    with hold("direct.before_publish") as write_parked:
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        write_parked.wait_reached()
        seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
        with hold("commit.before_publish") as x_parked:
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()
            write_parked.release()
            writer.join(1.0)
            assert writer.is_alive()
    x, w = committer.outcome(), writer.outcome()
    assert w.partitions[0].read_version > x.partitions[0].read_version
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201]
    assert claims(seeded) == []
    all_readable(seeded)


def test_two_writes_racing_for_one_new_partition_both_publish_once(seeded) -> None:
    with hold("direct.before_publish") as parked:
        first = Worker(other(seeded).write, tagged_rows("a", [7], 2, first_id=100))
        first.start()
        parked.wait_reached()
        second = seeded.write(tagged_rows("b", [7], 2, first_id=200))
    a = first.outcome()
    assert [p.created for p in second.partitions] == [True]
    assert [p.created for p in a.partitions] == [False]
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201]
    all_readable(seeded)


def test_an_overwrite_whose_partition_moved_fails_and_deletes_its_files(seeded) -> None:
    before = data_files(seeded)
    with hold("direct.staged") as parked:
        writer = Worker(other(seeded).write, tagged_rows("o", [1], 3, first_id=300), "overwrite")
        writer.start()
        parked.wait_reached()
        seeded.write(tagged_rows("a", [1], 1, first_id=100))
    with pytest.raises(CommitConflict, match="published after it was staged"):
        writer.outcome()
    assert ids(seeded) == [0, 1, 2, 3, 100]
    # The append's file is new; the overwrite's are gone (its leaf commit on its stale
    # base stays an unpublished version above the published one: nothing reads it).
    assert len(data_files(seeded) - before) == 1
    assert data_files(seeded) <= referenced_files(seeded)
    all_readable(seeded)


def test_a_crash_before_the_swap_publishes_nothing_and_the_partition_stays_writable(
    seeded, monkeypatch
) -> None:
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("lost", [1, 5], 2, first_id=100))
    assert ids(seeded) == [0, 1, 2, 3]
    assert [p.values["part"] for p in seeded.partitions()] == [1, 2]
    all_readable(seeded)
    # The leaf of partition 1 has an unpublished version above its published one: the next
    # write rolls it back and commits on the published version.
    seeded.write(tagged_rows("after", [1, 5], 1, first_id=200))
    assert ids(seeded) == [0, 1, 2, 3, 200, 201]
    all_readable(seeded)


def test_a_crash_right_after_the_swap_has_published_the_write(seeded, monkeypatch) -> None:
    with crashing(monkeypatch, "direct.after_publish"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("kept", [1, 5], 2, first_id=100))
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert claims(seeded) == []
    all_readable(seeded)


def test_a_swap_that_committed_but_reported_a_failure_is_a_success(seeded, monkeypatch) -> None:
    monkeypatch.setenv("LANCE_PNS_FAILPOINTS", "manifest.after_swap=error")
    result = seeded.write(tagged_rows("a", [1, 5], 2, first_id=100))
    monkeypatch.delenv("LANCE_PNS_FAILPOINTS")
    assert result.manifest_version == seeded.version
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 102, 103]
    all_readable(seeded)


def test_a_swap_that_failed_deletes_the_staged_files(seeded, monkeypatch) -> None:
    """Its leaf versions stay unpublished (the next commit of each leaf rolls them back)."""
    before = data_files(seeded)
    monkeypatch.setenv("LANCE_PNS_FAILPOINTS", "manifest.before_swap=error")
    with pytest.raises(StorageError, match="injected failure"):
        seeded.write(tagged_rows("a", [1, 5], 2, first_id=100))
    monkeypatch.delenv("LANCE_PNS_FAILPOINTS")
    assert ids(seeded) == [0, 1, 2, 3]
    assert data_files(seeded) == before
    all_readable(seeded)
    seeded.write(tagged_rows("b", [1, 5], 1, first_id=200))
    assert ids(seeded) == [0, 1, 2, 3, 200, 201]
    all_readable(seeded)


# -- new partitions: the leaf table is created while staging --------------------------------
def test_a_new_partition_is_published_as_the_version_its_stager_created(seeded) -> None:
    """A write into new partitions creates each leaf table while staging, files and
    version 1 in one Lance call, and publishes version 1 without another leaf commit."""
    result = other(seeded).write(tagged_rows("a", [3, 4], 2, first_id=100))
    created = {p.values["part"]: p for p in seeded.partitions() if p.values["part"] in (3, 4)}
    for partition in created.values():
        leaf = lance.dataset(partition.location)
        assert (partition.read_version, [v["version"] for v in leaf.versions()]) == (1, [1])
        assert leaf.to_table().num_rows == 2
    assert [p.created for p in result.partitions] == [True, True]
    assert ids(seeded) == [0, 1, 2, 3, *range(100, 104)]


def test_two_writes_creating_one_partition_while_one_is_parked(seeded) -> None:
    """W created partition 9's table (version 1, its rows) while staging and parks before
    its swap; V writes partition 9 too: its stager finds the table there, stages files,
    commits them on top and publishes. W's swap then fails, and its retry appends its
    rows onto V's published version: both exactly once, W's version 1 never published."""
    with hold("direct.before_publish") as parked:
        writer = Worker(other(seeded).write, tagged_rows("w", [9], 2, first_id=200))
        writer.start()
        parked.wait_reached()
        v = other(seeded).write(tagged_rows("v", [9], 2, first_id=300))
    w = writer.outcome()
    assert [p.read_version for p in v.partitions] == [2]  # on top of W's unpublished v1
    assert w.partitions[0].read_version > 2
    assert ids(seeded) == [0, 1, 2, 3, 200, 201, 300, 301]
    all_readable(seeded)


def test_a_leftover_table_of_a_killed_write_is_built_over_not_published(
    seeded, monkeypatch
) -> None:
    """A write killed after creating partition 9's table (its rows in version 1, never
    published) leaves that table behind; the next write to partition 9 publishes only
    its own rows."""
    root = Path(seeded.uri.removeprefix("file://"))
    before = {p.name for p in root.iterdir()}
    with crashing(monkeypatch, "direct.staged"), pytest.raises(FailpointError):
        other(seeded).write(tagged_rows("dead", [9], 2, first_id=200))
    [leftover] = [p for p in root.iterdir() if p.name not in before]
    assert lance.dataset(str(leftover)).to_table().column("id").to_pylist() == [200, 201]
    other(seeded).write(tagged_rows("w", [9], 2, first_id=300))
    [partition] = [p for p in seeded.partitions() if p.values["part"] == 9]
    assert (Path(partition.location.removeprefix("file://")), partition.read_version) == (
        leftover,
        2,
    )
    assert ids(seeded) == [0, 1, 2, 3, 300, 301]
    all_readable(seeded)


def test_a_new_partition_flushed_twice_publishes_every_row(seeded) -> None:
    """A new partition whose rows are flushed in several parts: its stager creates the
    table from the first and appends each later one to the version it made, so the
    publish takes the last of them, which holds every row, without another commit."""
    batches = [tagged_rows("b", [9], 2, first_id=400 + 10 * i) for i in range(3)]
    result = other(seeded).write(iter(batches), flush_bytes=1)
    assert result.rows == 6
    assert ids(seeded) == sorted(
        [0, 1, 2, 3, *(400 + 10 * i + j for i in range(3) for j in (0, 1))]
    )
    [partition] = [p for p in seeded.partitions() if p.values["part"] == 9]
    assert partition.read_version == 3  # one version per flush, the last holds them all
    leaf = lance.dataset(partition.location, version=3)
    assert sorted(leaf.to_table().column("id").to_pylist()) == [400, 401, 410, 411, 420, 421]
    all_readable(seeded)


@pytest.mark.slow
def test_many_writes_creating_one_partition_at_once_all_publish_once(seeded) -> None:
    """Six writers start together, each into the same new partitions (9 and 10): their
    stagers race to create the tables (one gets version 1, others are rebased by Lance
    or lose with a conflict and stage files instead). Every write succeeds and every
    row is published exactly once."""
    for round_ in range(4):
        start = threading.Barrier(6)
        first, parts = 1000 * (round_ + 1), [9 + round_ * 2, 10 + round_ * 2]

        def write(
            i: int, start: threading.Barrier = start, first: int = first, parts: list[int] = parts
        ) -> None:
            start.wait()
            other(seeded).write(tagged_rows(f"r{i}", parts, 1, first + 2 * i))

        workers = [Worker(write, i) for i in range(6)]
        for w in workers:
            w.start()
        for w in workers:
            w.outcome()
    expected = [0, 1, 2, 3, *(1000 * (r + 1) + k for r in range(4) for k in range(12))]
    assert ids(seeded) == sorted(expected)
    all_readable(seeded)


def test_an_append_is_published_as_the_version_its_stager_committed(seeded) -> None:
    """An append to an existing partition commits its leaf while staging (files and
    version in one Lance call, on the published version) and publishes that version
    without another leaf commit."""
    location, before = leaf_of(seeded, 1)
    other(seeded).write(tagged_rows("a", [1], 2, first_id=100))
    assert leaf_of(seeded, 1) == (location, before + 1)
    assert lance.dataset(location).version == before + 1  # no second commit, no rollback
    assert ids(seeded) == [0, 1, 2, 3, 100, 101]
    all_readable(seeded)


def test_an_append_flushed_several_times_adds_each_flush_to_the_last_version(seeded) -> None:
    location, before = leaf_of(seeded, 1)
    batches = [tagged_rows("b", [1], 2, first_id=400 + 10 * i) for i in range(3)]
    other(seeded).write(iter(batches), flush_bytes=1)
    assert leaf_of(seeded, 1) == (location, before + 3)
    assert lance.dataset(location).version == before + 3
    assert ids(seeded) == sorted(
        [0, 1, 2, 3, *(400 + 10 * i + j for i in range(3) for j in (0, 1))]
    )
    all_readable(seeded)


def test_an_overwrite_is_published_as_the_version_its_stager_committed(seeded) -> None:
    location, before = leaf_of(seeded, 1)
    other(seeded).write(tagged_rows("o", [1], 3, first_id=300), mode="overwrite")
    assert leaf_of(seeded, 1) == (location, before + 1)
    leaf = lance.dataset(location)
    assert leaf.version == before + 1
    assert sorted(leaf.to_table().column("id").to_pylist()) == [300, 301, 302]
    assert ids(seeded) == [2, 3, 300, 301, 302]  # partition 2 (ids 2 and 3) untouched
    all_readable(seeded)


def test_a_leaf_with_a_version_above_its_published_one_gets_staged_files(
    seeded, monkeypatch
) -> None:
    """A killed write left a version above partition 1's published one: the next write
    does not write onto it (Lance would rebase the write onto that version and the files
    would be written for nothing); it stages files, and its publish rolls the leftover
    back. Each row is written once."""
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        other(seeded).write(tagged_rows("lost", [1], 2, first_id=100))
    location, published = leaf_of(seeded, 1)
    assert lance.dataset(location).version == published + 1  # the killed write's
    files = data_files(seeded)
    other(seeded).write(tagged_rows("w", [1], 2, first_id=200))
    assert len(data_files(seeded) - files) == 1
    assert ids(seeded) == [0, 1, 2, 3, 200, 201]
    all_readable(seeded)


def test_a_version_made_over_another_writers_unpublished_one_is_never_published(seeded) -> None:
    """Writer A opened partition 1's leaf at its published version P. Before A's Lance
    call commits, writer B commits its own version P+1 of that leaf and parks before its
    swap. Lance rebases A's call onto B's version: A's version holds B's rows too, and
    A's swap would succeed (the row has not moved). A must not publish it: then B's retry
    would add B's rows a second time. A stages its rows again and publishes P + A; B's
    swap fails, and its retry publishes on A's version: every row once."""
    location, published = leaf_of(seeded, 1)
    a_thread: list[threading.Thread] = []
    b_thread: list[threading.Thread] = []
    with (
        hold("leaf.before_commit", when=lambda: threading.current_thread() in a_thread) as a,
        hold("direct.before_publish", when=lambda: threading.current_thread() in b_thread) as b,
    ):
        first = Worker(other(seeded).write, tagged_rows("a", [1], 2, first_id=100))
        a_thread.append(first)
        first.start()
        a.wait_reached()
        second = Worker(other(seeded).write, tagged_rows("b", [1], 2, first_id=200))
        b_thread.append(second)
        second.start()
        b.wait_reached()
        assert lance.dataset(location).version == published + 1  # B's, unpublished
        a.release()
        first.outcome()
        assert ids(seeded) == [0, 1, 2, 3, 100, 101]  # A alone: not B's rows with it
    second.outcome()
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201]
    all_readable(seeded)


def test_an_append_made_while_staging_whose_partition_moved_adds_only_its_own_files(
    seeded,
) -> None:
    """Writer A committed its append to partition 1 while staging (version P+1) and parks
    before its swap; writer B finds A's version above P, stages files, rolls A's version
    back and publishes. A's swap fails (the row moved), and A commits the fragments it
    recorded for its rows onto B's version: those must be its own files alone (the leaf's
    earlier fragments, taken along, would be read twice)."""
    for i in range(3):  # partition 1's leaf gets several fragments
        seeded.write(tagged_rows("more", [1], 1, first_id=50 + i))
    location, published = leaf_of(seeded, 1)
    a_thread: list[threading.Thread] = []
    with hold("direct.staged", when=lambda: threading.current_thread() in a_thread) as parked:
        first = Worker(other(seeded).write, tagged_rows("a", [1], 2, first_id=100))
        a_thread.append(first)
        first.start()
        parked.wait_reached()
        assert lance.dataset(location).version == published + 1  # A's, made while staging
        seeded.write(tagged_rows("b", [1], 2, first_id=200))
    first.outcome()
    assert ids(seeded) == [0, 1, 2, 3, 50, 51, 52, 100, 101, 200, 201]
    all_readable(seeded)


def staged_while_committing(ns: PartitionedNamespace, batches: list) -> Stage:
    """What a direct write's stager returns: leaves committed while staging."""
    state = ns.state()
    stage = Stage("t", "write", "append", state.spec_version)
    return Stager(state, stage, Storage(ns.uri), 1, create_leaves_as="t#1").write(iter(batches))


def test_the_fragments_of_versions_made_while_staging_are_listed_only_when_asked(seeded) -> None:
    """A publish that takes the versions as they are needs none of their fragments; a
    fallback (a race lost, a hand-over to the claim protocol, a failure) lists them from
    the version: the fragments each flush added, in order, none of the leaf's older ones."""
    batches = [tagged_rows("b", [1, 9], 1, first_id=400 + 10 * i) for i in range(3)]
    stage = staged_while_committing(seeded, batches)
    location, published = leaf_of(seeded, 1)
    part = stage.partitions[seeded.partition({"part": 1}).object_id]
    assert (part.committed_version, part.listed) == (published + 3, [])  # one per flush
    older = {f.fragment_id for f in lance.dataset(location, version=published).get_fragments()}
    made = lance.dataset(location, version=published + 3).get_fragments()
    added = [fragment_text(f.metadata) for f in made if f.fragment_id not in older]
    assert len(added) == 3
    assert part.fragments == added
    assert part.unlisted is None
    [new] = [p for p in stage.partitions.values() if not p.existed]
    assert (new.committed_version, new.listed) == (3, [])
    created = lance.dataset(seeded.uri + "/" + new.directory, version=3)
    assert new.fragments == [fragment_text(f.metadata) for f in created.get_fragments()]


def test_fragments_of_a_version_removed_before_they_were_listed_are_a_conflict(seeded) -> None:
    """Versions above the published one are never removed, but one rolled back by another
    writer lies below its publish, where ``maintain`` may remove it: a fallback that needs
    its fragments then fails as a retryable conflict (nothing was published), and
    discarding the stage leaves its files to the orphan sweep instead of failing."""
    stage = staged_while_committing(seeded, [tagged_rows("b", [1], 2, first_id=400)])
    location, _ = leaf_of(seeded, 1)
    [part] = stage.partitions.values()
    lance.write_dataset(lance.dataset(location).to_table(), location, mode="overwrite")
    lance.dataset(location).cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    with pytest.raises(CommitConflict, match="was removed meanwhile") as info:
        part.fragments  # noqa: B018
    assert info.value.retryable
    assert part.unlisted is not None
    discard_stage(stage, Storage(seeded.uri))  # logs, does not raise


def test_a_handed_over_write_whose_commit_failed_after_its_publish_reports_it(
    seeded, monkeypatch
) -> None:
    """Found while reviewing: a write handed to the claim protocol whose publish committed
    but whose commit then failed (the store failed mid-swap, or after it) was reported as a
    retryable failure, and a retry wrote its rows twice. Its abort finds it published; the
    write now returns what it published, from the stage it holds."""
    monkeypatch.setattr(direct, "DIRECT_ATTEMPTS", 0)  # every write takes the claim protocol
    with crashing(monkeypatch, "commit.after_publish", "error"):
        result = other(seeded).write(tagged_rows("w", [1, 9], 2, first_id=100))
    assert result.rows == 4
    assert {int(p.values["part"]): (p.rows, p.created) for p in result.partitions} == {
        1: (2, False),
        9: (2, True),
    }
    [row] = [p for p in seeded.partitions() if p.values["part"] == 9]
    assert [p.read_version for p in result.partitions if p.created] == [row.read_version]
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert seeded.transactions() == []  # no record kept of it
    all_readable(seeded)
