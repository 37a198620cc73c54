"""The orphan sweep (``maintain(sweep_orphans=True)``) on real namespaces: it removes what
crashed writers and dropped partitions left behind, and nothing anything reads or a live
transaction will commit."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

import lance
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import InvalidArgumentError, PartitionedNamespace
from airflow_provider_lance.namespace.admin.sweep import (
    DEFAULT_MIN_AGE,
    MIN_SAFE_ORPHAN_AGE,
    sweep_orphans,
)
from airflow_provider_lance.namespace.errors import StagedFilesMissing, is_retryable
from airflow_provider_lance.namespace.testing import FailpointError, hold
from tests.support import Worker, all_readable, crashing, ids, other, tagged_rows, tree

NOW = dt.timedelta(0)


def data_files(root: Path) -> set[str]:
    return {f for f in tree(root) if "/data/" in f and not f.startswith("__manifest/")}


def referenced(ns: PartitionedNamespace) -> set[str]:
    """Data files (root-relative) any version of any published leaf references."""
    out = set()
    for p in ns.partitions():
        ds = lance.dataset(p.location)
        for v in ds.versions():
            for fragment in ds.checkout_version(v["version"]).get_fragments():
                out.update(f"{p.directory}/data/{f.path}" for f in fragment.data_files())
    return out


def test_the_sweep_removes_a_crashed_writes_files_but_not_a_staged_transactions(
    seeded, root, monkeypatch
) -> None:
    seeded.begin("append", "S").stage(tagged_rows("s", [1, 3], 1, first_id=100))
    staged = data_files(root) - referenced(seeded)
    tables_before = {p.name for p in root.iterdir()}
    # A stager killed after writing its files, before recording them (a Spark task
    # killed there): files nothing references, in partition 1.
    with crashing(monkeypatch, "stage.written"), pytest.raises(FailpointError):
        seeded.begin("append", "K").stage(tagged_rows("killed", [1], 1, first_id=300))
    # A write killed before its swap: it created partition 4's table while staging (its
    # version 1, never published): the sweep removes that table whole, its version
    # files too. (Its rows for partition 1 are an unpublished version of that leaf, which
    # the next commit to it rolls back: not the sweep's.)
    with crashing(monkeypatch, "direct.staged"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("crashed", [1, 4], 1, first_id=200))
    orphans = data_files(root) - referenced(seeded) - staged
    assert len(orphans) == 2  # the killed stager's in partition 1, one in the new 4
    [unpublished] = [p for p in root.iterdir() if p.name not in tables_before]
    whole_table = len([f for f in tree(root) if f.startswith(f"{unpublished.name}/")])
    expected = 1 + whole_table  # partition 1's staged file, and partition 4's table

    dry = seeded.maintain(compact=False, sweep_orphans=True, orphan_min_age=NOW, dry_run=True)
    assert dry.orphans is not None
    assert dry.orphans["dry_run"] is True
    assert (dry.orphans["files_removed"], dry.orphans["leaf_tables_removed"]) == (expected, 1)
    assert dry.orphans["bytes_freed"] > 0
    assert dry.orphans["kept_staged"] == 2
    assert data_files(root) - referenced(seeded) - staged == orphans  # nothing removed

    report = seeded.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
    assert report.orphans is not None
    assert report.orphans["files_removed"] == expected
    assert not [f for f in tree(root) if f.startswith(f"{unpublished.name}/")]
    assert report.orphans["bytes_freed"] == dry.orphans["bytes_freed"]
    assert data_files(root) - referenced(seeded) == staged
    all_readable(seeded)
    seeded.commit("S")  # the staged transaction's files were kept: it publishes whole
    assert ids(seeded) == [0, 1, 2, 3, 100, 101]
    all_readable(seeded)


def test_the_sweep_keeps_young_files(seeded, root, monkeypatch) -> None:
    with crashing(monkeypatch, "stage.written"), pytest.raises(FailpointError):
        seeded.begin("append", "K").stage(tagged_rows("killed", [1], 1, first_id=200))
    before = data_files(root)
    report = seeded.maintain(sweep_orphans=True)  # default safety age: one day
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 0
    assert report.orphans["kept_young"] == 1
    assert data_files(root) == before


def test_the_sweep_removes_files_a_crashed_merge_wrote(seeded, root, monkeypatch) -> None:
    before = data_files(root)
    with crashing(monkeypatch, "leaf.before_commit"), pytest.raises(FailpointError):
        seeded.merge(tagged_rows("m", [1, 5], 1, first_id=300), on=["id", "part"])
    assert len(data_files(root) - before) == 2  # merge_insert's and the new partition's
    report = seeded.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 2
    assert data_files(root) == before
    seeded.merge(tagged_rows("m", [1, 5], 1, first_id=300), on=["id", "part"])
    assert ids(seeded) == [0, 1, 2, 3, 300, 301]


def test_a_dropped_partitions_leaf_goes_once_no_retained_version_reads_it(seeded, root) -> None:
    dropped = seeded.partition({"part": 2})
    before = seeded.version
    seeded.drop_partitions("part = 2")
    leaf_dir = root / dropped.directory
    # older __manifest versions still read it: the sweep keeps it
    report = seeded.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 0
    assert leaf_dir.exists()
    assert sorted(seeded.to_table(version=before).column("id").to_pylist()) == [0, 1, 2, 3]
    # once the versions that read it are cleaned up, it goes whole
    report = seeded.maintain(
        older_than=NOW, sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False
    )
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 1
    assert not [f for f in tree(root) if f.startswith(dropped.directory)]
    assert ids(seeded) == [0, 1]
    all_readable(seeded)
    seeded.write(tagged_rows("again", [2], 1, first_id=500))  # the partition can come back
    assert ids(seeded) == [0, 1, 500]


def test_a_recreated_partitions_young_files_keep_its_directory(seeded, root) -> None:
    seeded.drop_partitions("part = 2")
    seeded.write(tagged_rows("again", [2], 1, first_id=500))
    report = seeded.maintain(older_than=NOW, sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE)
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 0
    assert ids(seeded) == [0, 1, 500]
    all_readable(seeded)


def test_a_dropped_leaf_goes_whole_only_once_every_file_in_it_is_old(seeded, root) -> None:
    """Partition 2 is dropped and no retained ``__manifest`` version reads its leaf; every
    file in the directory is two days old but one data file, fresh (a writer creating the
    partition again right now). The sweep with the safe minimum age keeps the directory
    whole; once that file is old too, the directory goes."""
    dropped = seeded.partition({"part": 2})
    seeded.drop_partitions("part = 2")
    seeded.maintain(older_than=NOW)  # no retained version reads the dropped leaf any more
    leaf_dir = root / dropped.directory
    files = sorted(p for p in leaf_dir.rglob("*") if p.is_file())
    fresh = next(p for p in files if p.parent.name == "data")
    for path in files:
        if path != fresh:
            age(path, dt.timedelta(days=2))
    assert len(files) > 1
    before = tree(leaf_dir)

    report = seeded.maintain(sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE)
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 0
    assert tree(leaf_dir) == before
    assert lance.dataset(str(leaf_dir)).to_table().num_rows == 2  # still a whole table

    age(fresh, dt.timedelta(days=2))
    report = seeded.maintain(sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE)
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 1
    assert not [f for f in tree(root) if f.startswith(dropped.directory)]
    assert ids(seeded) == [0, 1]
    all_readable(seeded)


def test_the_sweep_rejects_a_negative_age(seeded) -> None:
    with pytest.raises(InvalidArgumentError):
        seeded.maintain(sweep_orphans=True, orphan_min_age=dt.timedelta(seconds=-1))


def test_a_crashed_writes_half_created_partition_is_removed_whole(
    seeded, root, monkeypatch
) -> None:
    """Killed after its leaf commits, before its swap: the new partition 4 has a leaf
    table no ``__manifest`` row points at (removed whole); partition 1's unpublished leaf
    version still references its file (kept: the next commit rolls it back)."""
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("crashed", [1, 4], 1, first_id=200))
    new_leaf = next(
        f.split("/")[0] for f in data_files(root) if "$" in f and f not in referenced(seeded)
    )
    report = seeded.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
    assert report.orphans is not None
    assert report.orphans["leaf_tables_removed"] == 1
    assert not [f for f in tree(root) if f.startswith(new_leaf)]
    seeded.write(tagged_rows("later", [1, 4], 1, first_id=300))
    assert ids(seeded) == [0, 1, 2, 3, 300, 301]
    all_readable(seeded)


# -- the safe minimum age ---------------------------------------------------------------------
@pytest.fixture
def orphaned(seeded, root, monkeypatch) -> PartitionedNamespace:
    """``ns`` with the files of a killed stager in partition 1: one orphan, seconds old."""
    with crashing(monkeypatch, "stage.written"), pytest.raises(FailpointError):
        seeded.begin("append", "K").stage(tagged_rows("killed", [1], 1, first_id=200))
    assert len(data_files(root) - referenced(seeded)) == 1
    return seeded


def age(path: Path, by: dt.timedelta) -> None:
    """Make ``path`` look ``by`` older than it is (as a killed writer's file gets with time)."""
    stat = path.stat()
    old = stat.st_mtime - by.total_seconds()
    os.utime(path, (old, old))


@pytest.mark.parametrize("short", [NOW, MIN_SAFE_ORPHAN_AGE - dt.timedelta(seconds=1)])
def test_an_age_below_the_safe_minimum_is_refused_changing_nothing(orphaned, root, short) -> None:
    before = tree(root)
    version = orphaned.version
    with pytest.raises(InvalidArgumentError) as refused:
        orphaned.maintain(older_than=NOW, sweep_orphans=True, orphan_min_age=short)
    message = str(refused.value)
    assert "below the safe minimum of 6:00:00" in message
    assert "files of writes still in flight" in message
    assert "would be deleted" in message
    assert "enforce_min_age=False" in message
    # refused before anything ran: no compaction, no version cleanup, no sweep
    assert tree(root) == before
    assert PartitionedNamespace.open(orphaned.uri).version == version
    # the sweep itself refuses too, whoever calls it
    with pytest.raises(InvalidArgumentError, match="enforce_min_age=False"):
        sweep_orphans(orphaned._txn, min_age=short)
    assert tree(root) == before


def test_enforce_min_age_false_allows_a_short_age(orphaned, root) -> None:
    [orphan] = data_files(root) - referenced(orphaned)
    report = orphaned.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 1
    assert orphan not in data_files(root)
    assert ids(orphaned) == [0, 1, 2, 3]
    all_readable(orphaned)


def test_the_safe_minimum_itself_needs_no_flag_and_removes_older_orphans(orphaned, root) -> None:
    [orphan] = data_files(root) - referenced(orphaned)
    report = orphaned.maintain(sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE)
    assert report.orphans is not None
    assert (report.orphans["files_removed"], report.orphans["kept_young"]) == (0, 1)
    age(root / orphan, MIN_SAFE_ORPHAN_AGE + dt.timedelta(minutes=1))
    report = orphaned.maintain(sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE)
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 1
    assert orphan not in data_files(root)
    all_readable(orphaned)


def test_the_default_age_is_at_least_the_safe_minimum() -> None:
    assert DEFAULT_MIN_AGE >= MIN_SAFE_ORPHAN_AGE


def test_a_dry_run_accepts_a_short_age_without_the_flag(orphaned, root) -> None:
    """A dry run deletes nothing, so it may look at what a short age would take."""
    [orphan] = data_files(root) - referenced(orphaned)
    before = tree(root)
    report = orphaned.maintain(sweep_orphans=True, orphan_min_age=NOW, dry_run=True)
    assert report.orphans is not None
    assert report.orphans["files_removed"] == 1
    assert report.orphans["sample"] == [orphan]
    assert tree(root) == before
    dry = sweep_orphans(orphaned._txn, min_age=NOW, dry_run=True)
    assert dry.files_removed == 1
    assert tree(root) == before


@pytest.mark.parametrize(
    "kwargs", [{}, {"enforce_min_age": False}, {"dry_run": True}], ids=["default", "off", "dry"]
)
def test_a_negative_age_is_always_refused(orphaned, root, kwargs) -> None:
    before = tree(root)
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        orphaned.maintain(sweep_orphans=True, orphan_min_age=dt.timedelta(seconds=-1), **kwargs)
    assert tree(root) == before


def test_the_cli_refuses_a_short_age_unless_told(orphaned, root, capsys) -> None:
    [orphan] = data_files(root) - referenced(orphaned)
    before = tree(root)
    argv = ["maintain", orphaned.uri, "--sweep-orphans", "--orphan-min-age-hours", "0"]
    assert cli.main(argv) == 2  # bad input: no retry can fix it
    err = capsys.readouterr().err
    assert "--orphan-min-age-hours of 0:00:00 is below the safe minimum" in err
    assert "--no-enforce-min-age" in err
    assert tree(root) == before

    assert cli.main([*argv, "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert dry["orphans"]["sample"] == [orphan]
    assert tree(root) == before

    assert cli.main([*argv, "--no-enforce-min-age"]) == 0
    swept = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert swept["orphans"]["files_removed"] == 1
    assert orphan not in data_files(root)
    assert ids(orphaned) == [0, 1, 2, 3]


# -- why: a write in flight --------------------------------------------------------------------
NEW_ROWS = tagged_rows("w", [1, 2, 4], 2, first_id=100)  # two existing partitions, a new one


def test_a_write_in_flight_survives_a_sweep_with_the_default_age(seeded, root) -> None:
    """A write parked after writing its data files, before its transaction records them
    (no version or record names them yet): the sweep with the default age keeps its
    files, and the write publishes every row."""
    with hold("stage.written") as parked:
        writer = Worker(other(seeded).write, NEW_ROWS, txn_id="T")
        writer.start()
        parked.wait_reached()
        in_flight = data_files(root) - referenced(seeded)
        assert len(in_flight) == 3  # one file in each partition the write touches
        report = seeded.maintain(older_than=NOW, sweep_orphans=True)
        assert report.orphans is not None
        assert (report.orphans["files_removed"], report.orphans["leaf_tables_removed"]) == (0, 0)
        assert in_flight <= data_files(root)
    writer.outcome()
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 102, 103, 104, 105]
    all_readable(seeded)


def test_without_the_guard_a_zero_age_sweep_fails_a_write_in_flight(seeded, root) -> None:
    """The same race with ``enforce_min_age=False`` and age 0: the sweep deletes the
    parked write's files. The write used to publish versions whose files were gone (the
    namespace could no longer be read: what the safe minimum refuses to risk); its commit
    now checks its staged files first and fails, typed and not retryable, publishing
    nothing (issue 24)."""
    before = ids(seeded)
    with hold("stage.written") as parked:
        writer = Worker(other(seeded).write, NEW_ROWS, txn_id="T")
        writer.start()
        parked.wait_reached()
        in_flight = data_files(root) - referenced(seeded)
        report = seeded.maintain(sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False)
        assert report.orphans is not None
        assert report.orphans["files_removed"] >= len(in_flight)
        assert not in_flight & data_files(root)
    with pytest.raises(StagedFilesMissing, match="3 data file") as failed:
        writer.outcome()
    assert not is_retryable(failed.value)
    assert sorted(len(files) for files in failed.value.missing.values()) == [1, 1, 1]
    assert ids(seeded) == before  # nothing of it was published, and everything reads
    all_readable(seeded)
