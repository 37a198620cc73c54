"""``maintain(sweep_orphans=True)`` rolls back and removes the leaf versions a killed or
interrupted writer left above the published ``read_version``, and never those a writer in
flight may still publish (see namespace/admin/unpublished.py).

The interleavings park threads at named failpoints (``failpoints.hold``) on real Lance
datasets: a direct write parked before its swap, while ``maintain`` rolls back, fences and
removes; a transaction claiming or staging into the partition meanwhile. Each must end with
every write's rows read once or (for a retryable error) not at all, and every published
version's files on disk.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.admin.unpublished import version_of
from airflow_provider_lance.namespace.errors import LanceNamespaceError, is_retryable
from airflow_provider_lance.namespace.testing import FailpointError, hold
from tests.namespace.txn.test_interleavings import BY_PART, Worker, claims, crashing, other
from tests.support import no_duplicates
from tests.workers import TAGGED, tagged_rows

SEED = tagged_rows("seed", [1, 2], 2, first_id=0)  # ids 0-3 in partitions 1 and 2
NOW = dt.timedelta(0)


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(SEED)
    return ns


def sweep(ns: PartitionedNamespace, min_age: dt.timedelta = NOW, **kwargs: object):
    return ns.maintain(sweep_orphans=True, orphan_min_age=min_age, enforce_min_age=False, **kwargs)


def crash_a_write(ns: PartitionedNamespace, monkeypatch, parts: list[int], first_id: int) -> None:
    """A direct write to ``parts`` dies before its swap (its files kept, as after a kill):
    its leaf versions stay above the published ones."""
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        other(ns).write(tagged_rows("dead", parts, 2, first_id=first_id))


def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def above_published(ns: PartitionedNamespace) -> dict[int, int]:
    """Partition -> how many leaf versions lie above its published one."""
    out = {}
    for p in ns.partitions():
        latest = lance.dataset(p.location).version
        out[p.values["part"]] = latest - (p.read_version or 0)
    return out


def unreferenced_files(ns: PartitionedNamespace) -> list[str]:
    """Data files of the published partitions' leaves that no version of the leaf
    references (what the space goes to)."""
    out = []
    for p in ns.partitions():
        leaf = lance.dataset(p.location)
        referenced = {
            f.path
            for v in leaf.versions()
            for fragment in leaf.checkout_version(v["version"]).get_fragments()
            for f in fragment.data_files()
        }
        data = local(p.location) / "data"
        out += [f"{p.directory}/{f}" for f in os.listdir(data) if f not in referenced]
    return out


def leaf_bytes(ns: PartitionedNamespace) -> int:
    return sum(
        f.stat().st_size
        for p in ns.partitions()
        for f in local(p.location).rglob("*")
        if f.is_file()
    )


def published_files_exist(ns: PartitionedNamespace) -> None:
    for p in ns.partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        for fragment in leaf.get_fragments():
            for f in fragment.data_files():
                assert (local(p.location) / "data" / f.path).exists(), (p.values, f.path)
        leaf.to_table()


def test_fact_version_file_names_give_the_version(ns) -> None:
    """The listing of a leaf's ``_versions/`` names each of its versions (Lance's V2
    names: ``2**64 - 1 - version``), which is how the sweep finds unpublished ones without
    opening every leaf."""
    ns.write(tagged_rows("more", [1], 1, first_id=50))
    for p in ns.partitions():
        names = os.listdir(local(p.location) / "_versions")
        listed = {v for v in map(version_of, names) if v is not None}
        assert listed == {int(v["version"]) for v in lance.dataset(p.location).versions()}


def test_maintain_removes_what_a_killed_write_left(ns, monkeypatch) -> None:
    """Before: ``maintain`` only counted them (``leaves_kept_unpublished``) and freed
    nothing. Now the versions are rolled back and removed, with their data files, and the
    rows read are the same."""
    crash_a_write(ns, monkeypatch, [1, 2], first_id=100)
    assert above_published(ns) == {1: 1, 2: 1}
    assert len(unreferenced_files(ns)) == 0  # referenced by the unpublished versions
    before = leaf_bytes(ns)
    report = sweep(ns)
    assert above_published(ns) == {1: 0, 2: 0}
    assert unreferenced_files(ns) == []
    assert leaf_bytes(ns) < before
    assert report.unpublished is not None
    assert report.unpublished["leaves_reclaimed"] == 2
    assert report.unpublished["versions_removed"] == 2
    assert report.unpublished["bytes_freed"] > 0
    assert no_duplicates(ns) == [0, 1, 2, 3]
    published_files_exist(ns)
    ns.write(tagged_rows("after", [1, 2], 1, first_id=200))
    assert no_duplicates(ns) == [0, 1, 2, 3, 200, 201]


def test_a_dry_run_reports_them_and_changes_nothing(ns, monkeypatch) -> None:
    crash_a_write(ns, monkeypatch, [1, 2], first_id=100)
    report = ns.maintain(sweep_orphans=True, orphan_min_age=NOW, dry_run=True)
    assert report.unpublished is not None
    assert report.unpublished["leaves_reclaimed"] == 2
    assert above_published(ns) == {1: 1, 2: 1}


def test_versions_younger_than_the_age_are_kept(ns, monkeypatch) -> None:
    crash_a_write(ns, monkeypatch, [1, 2], first_id=100)
    report = sweep(ns, dt.timedelta(days=1))
    assert report.unpublished is not None
    assert report.unpublished["kept"] == {"young": 2}
    assert above_published(ns) == {1: 1, 2: 1}


def test_a_claimed_partition_keeps_the_versions_its_transaction_committed(ns) -> None:
    """X committed its leaves and parks before its publish: its versions lie above the
    published ones, claimed. ``maintain`` leaves them; X then publishes them."""
    ns.begin("append", "X").stage(tagged_rows("x", [1, 2], 2, first_id=100))
    with hold("commit.before_publish") as parked:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        parked.wait_reached()
        assert above_published(ns) == {1: 1, 2: 1}
        report = sweep(ns)
        assert report.unpublished is not None
        assert report.unpublished["kept"] == {"claimed": 2}
    committer.outcome()
    assert no_duplicates(ns) == [0, 1, 2, 3, 100, 101, 102, 103]
    assert claims(ns) == []
    published_files_exist(ns)


def test_a_leaf_a_transaction_staged_into_is_left_alone(ns, monkeypatch) -> None:
    crash_a_write(ns, monkeypatch, [1], first_id=100)
    ns.begin("append", "S").stage(tagged_rows("s", [1], 2, first_id=300))
    report = sweep(ns)
    assert report.unpublished is not None
    assert report.unpublished["kept"] == {"staged": 1}
    ns.commit("S")
    assert no_duplicates(ns) == [0, 1, 2, 3, 300, 301]
    published_files_exist(ns)


# -- a direct write in flight, its leaf version older than the age -------------------------
W_ROWS = tagged_rows("w", [1], 2, first_id=200)
W_IDS = [0, 1, 2, 3, 200, 201]


def settle(worker: Worker) -> LanceNamespaceError | None:
    try:
        worker.outcome()
    except LanceNamespaceError as exc:
        return exc
    return None


def test_a_direct_write_parked_before_its_swap_loses_to_the_fence(ns) -> None:
    """W committed leaf version R+1 and parks before its swap; ``maintain`` rolls it back,
    fences the partition (publishes R's content as N) and removes R+1 with W's files. W's
    swap fails (its row changed); its retry finds its files gone and fails retryably with
    nothing published, or publishes them once. Never a published version without files."""
    with hold("direct.before_publish") as parked:
        writer = Worker(other(ns).write, W_ROWS)
        writer.start()
        parked.wait_reached()
        report = sweep(ns)
        assert report.unpublished is not None
        assert report.unpublished["leaves_reclaimed"] == 1
    error = settle(writer)
    assert error is None or is_retryable(error), f"the write failed for good: {error}"
    assert no_duplicates(ns) == (W_IDS if error is None else [0, 1, 2, 3])
    published_files_exist(ns)
    if error is not None:  # its retry writes the rows once
        other(ns).write(W_ROWS)
        assert no_duplicates(ns) == W_IDS
        published_files_exist(ns)


def test_a_direct_swap_between_the_roll_back_and_the_fence_wins(ns) -> None:
    """``maintain`` restored R over W's version R+1 and parks before its fence; W's swap
    then publishes R+1 (the row is unchanged). The fence fails: nothing is removed, and
    W's rows stay readable."""
    with hold("direct.before_publish") as w_parked:
        writer = Worker(other(ns).write, W_ROWS)
        writer.start()
        w_parked.wait_reached()
        with hold("maintain.unpublished_rolled_back") as m_parked:
            maintainer = Worker(sweep, other(ns))
            maintainer.start()
            m_parked.wait_reached()
            w_parked.release()
            writer.outcome()
        report = maintainer.outcome()
    assert report.unpublished["kept"] == {"moved": 1}
    assert report.unpublished["versions_removed"] == 0
    assert no_duplicates(ns) == W_IDS
    published_files_exist(ns)
    ns.write(tagged_rows("after", [1], 1, first_id=400))
    assert no_duplicates(ns) == [*W_IDS, 400]
    published_files_exist(ns)


def test_a_direct_retry_between_the_fence_and_the_removal_keeps_its_files(ns) -> None:
    """``maintain`` fenced the partition (N published) and parks before removing R+1; W's
    swap fails, its retry commits its files again on N and publishes. The removal of R+1
    then keeps the files W's published version references."""
    with hold("direct.before_publish") as w_parked:
        writer = Worker(other(ns).write, W_ROWS)
        writer.start()
        w_parked.wait_reached()
        with hold("maintain.unpublished_fenced") as m_parked:
            maintainer = Worker(sweep, other(ns))
            maintainer.start()
            m_parked.wait_reached()
            w_parked.release()
            error = settle(writer)
        maintainer.outcome()
    assert error is None, error
    assert no_duplicates(ns) == W_IDS
    published_files_exist(ns)


def test_a_transaction_publishing_between_the_roll_back_and_the_fence(ns, monkeypatch) -> None:
    """A killed write left R+1 on partition 1; ``maintain`` restores R and parks before
    its fence; X (named) claims the partition, commits and publishes meanwhile. The fence
    fails on X's row and nothing of X is removed."""
    crash_a_write(ns, monkeypatch, [1], first_id=100)
    with hold("maintain.unpublished_rolled_back") as parked:
        maintainer = Worker(sweep, other(ns))
        maintainer.start()
        parked.wait_reached()
        other(ns).write(tagged_rows("x", [1], 2, first_id=300), txn_id="X")
    report = maintainer.outcome()
    assert report.unpublished["kept"] == {"moved": 1}
    assert no_duplicates(ns) == [0, 1, 2, 3, 300, 301]
    assert claims(ns) == []
    published_files_exist(ns)


def test_a_stage_recorded_while_maintain_rolls_back_is_kept(ns, monkeypatch) -> None:
    """A stage recorded after ``maintain`` read the live stages: its files are new and
    referenced by no version; the removal of the unpublished versions keeps them, and its
    commit publishes them."""
    crash_a_write(ns, monkeypatch, [1], first_id=100)
    with hold("maintain.unpublished_rolled_back") as parked:
        maintainer = Worker(sweep, other(ns))
        maintainer.start()
        parked.wait_reached()
        other(ns).begin("append", "S").stage(tagged_rows("s", [1], 2, first_id=300))
    report = maintainer.outcome()
    assert report.unpublished["leaves_reclaimed"] == 1
    ns.commit("S")
    assert no_duplicates(ns) == [0, 1, 2, 3, 300, 301]
    published_files_exist(ns)
