"""Retention against live transactions and live readers (issue 24).

* ``maintain(older_than=...)`` never deletes what a staged transaction's records name, and
  no commit publishes a leaf version whose staged files are gone (it fails, typed and not
  retryable, instead of publishing rows every read then fails on).
* A read whose ``__manifest`` version, or a leaf version it reads, was cleaned up under it
  gets :class:`VersionCleanedUp` (retryable only when it read the latest state), never
  pylance's "Not found".

Staged files are made older than Lance's 7-day threshold for unreferenced files by setting
their modification time: what a transaction left staged for a week looks like on disk.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField, SkipReason
from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    LatestVersionCleanedUp,
    StagedFilesMissing,
    VersionCleanedUp,
    is_retryable,
)
from airflow_provider_lance.namespace.read.coverage import pruned_rows
from airflow_provider_lance.namespace.read.pruning import is_parsed
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from airflow_provider_lance.namespace.write.staging import Stage
from tests.support import TAGGED, tagged_rows

WEEK_AND_A_DAY = 8 * 24 * 3600


@pytest.fixture
def with_history(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    for i in range(3):  # partition 1 exists, with history for retention to remove
        ns.write(tagged_rows(f"old{i}", [1, 2], 2, first_id=10 * i))
    return ns


def ids(ns: PartitionedNamespace, **kwargs: Any) -> Counter[int]:
    """The ids read, as a multiset (a duplicated row must not hide)."""
    return Counter(ns.to_table(**kwargs).column("id").to_pylist())


def staged_files(ns: PartitionedNamespace, stage: Stage) -> list[Path]:
    root = Path(ns.uri.removeprefix("file://"))
    return [
        root / part.directory / "data" / f["path"]
        for part in stage.partitions.values()
        for meta in part.fragment_metadata()
        for f in meta.to_json()["files"]
    ]


def age(files: list[Path], seconds: float = WEEK_AND_A_DAY) -> None:
    """Make ``files`` look ``seconds`` old (older than Lance's threshold for files no
    version references)."""
    then = time.time() - seconds
    for path in files:
        os.utime(path, (then, then))


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    return worker, out


def churn_and_clean(ns: PartitionedNamespace) -> None:
    """Publish over every partition and keep only the latest versions."""
    other = PartitionedNamespace.open(ns.uri)
    other.write(tagged_rows("new", [1, 2], 1, first_id=500))
    other.maintain(older_than=dt.timedelta(0))


# -- A. retention and live transactions -----------------------------------------------------
def test_retention_keeps_the_files_of_a_transaction_staged_for_a_week(
    with_history: PartitionedNamespace,
) -> None:
    before = ids(with_history)
    txn = with_history.begin("append", txn_id="weekly")
    stage = txn.stage(tagged_rows("staged", [1], 3, first_id=100), stage_id="s1")
    age(staged_files(with_history, stage))
    with_history.write(tagged_rows("later", [1], 1, first_id=200))

    report = with_history.maintain(older_than=dt.timedelta(0))

    staged_leaf = next(iter(stage.partitions))
    assert report.leaves_skipped_by_reason.get(SkipReason.STAGED) == [staged_leaf]
    assert report.leaf_versions_removed > 0  # partition 2 was cleaned as before
    assert all(path.exists() for path in staged_files(with_history, stage))
    with_history.commit("weekly")
    assert ids(with_history) == before + Counter([100, 101, 102, 200])


def test_a_stage_recorded_while_the_manifest_is_cleaned_is_honoured(
    with_history: PartitionedNamespace,
) -> None:
    """maintain reads the live stages after the __manifest cleanup: a stage recorded
    before that read (here: while maintain is parked just before it) is kept."""
    before = ids(with_history)
    txn = with_history.begin("append", txn_id="late")
    stage = txn.stage(tagged_rows("staged", [1], 2, first_id=100), record=False)
    age(staged_files(with_history, stage))
    with_history.write(tagged_rows("later", [1], 1, first_id=200))
    with hold("maintain.before_live_stages") as point:
        worker, out = in_thread(lambda: with_history.maintain(older_than=dt.timedelta(0)))
        point.wait_reached()
        txn.record(stage)
    worker.join()
    assert "error" not in out, out
    assert out["result"].leaves_skipped_by_reason.get(SkipReason.STAGED) == list(stage.partitions)
    with_history.commit("late")
    assert ids(with_history) == before + Counter([100, 101, 200])


def test_a_stage_recorded_after_maintain_read_the_live_stages_is_never_published_broken(
    with_history: PartitionedNamespace,
) -> None:
    """The interleaving maintain cannot see: a stage of week-old files recorded after it
    read the live stages loses its files; its commit then refuses, typed and for good,
    and publishes nothing (before the fix it published rows no read could return)."""
    before = ids(with_history)
    txn = with_history.begin("append", txn_id="unseen")
    stage = txn.stage(tagged_rows("staged", [1], 2, first_id=100), record=False)
    files = staged_files(with_history, stage)
    age(files)
    with_history.write(tagged_rows("later", [1], 1, first_id=200))
    with hold("maintain.live_stages_read") as point:
        worker, out = in_thread(lambda: with_history.maintain(older_than=dt.timedelta(0)))
        point.wait_reached()
        txn.record(stage)
    worker.join()
    assert "error" not in out, out
    assert not any(path.exists() for path in files)  # Lance's cleanup took them

    with pytest.raises(StagedFilesMissing) as raised:
        with_history.commit("unseen")
    assert not is_retryable(raised.value)
    assert "abort" in str(raised.value)
    assert "'unseen'" in str(raised.value)
    assert files[0].name in str(raised.value)
    assert list(raised.value.missing) == list(stage.partitions)
    with pytest.raises(StagedFilesMissing):  # a retry finds the same
        with_history.commit("unseen")
    assert ids(with_history) == before + Counter([200])  # nothing of it published; all readable

    with_history.abort("unseen")
    again = with_history.begin("append", txn_id="unseen")
    again.stage(tagged_rows("staged", [1], 2, first_id=100), stage_id="s2")
    with_history.commit("unseen")
    assert ids(with_history) == before + Counter([100, 101, 200])


def test_a_commit_refuses_staged_files_deleted_by_hand(with_history: PartitionedNamespace) -> None:
    before = ids(with_history)
    txn = with_history.begin("append", txn_id="gone")
    stage = txn.stage(tagged_rows("staged", [1, 2], 2, first_id=100), stage_id="s1")
    files = staged_files(with_history, stage)
    files[0].unlink()
    with pytest.raises(StagedFilesMissing, match=files[0].name) as raised:
        with_history.commit("gone")
    assert not raised.value.retryable
    assert sum(len(v) for v in raised.value.missing.values()) == 1
    assert ids(with_history) == before
    with_history.abort("gone")
    assert ids(with_history) == before


def test_a_direct_write_never_publishes_files_that_are_gone(
    with_history: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write without a txn id that finds a crashed writer's version above the published
    one stages files and commits its leaf at publish time: it checks the files first (it
    used to publish them gone, acknowledged). Its failure is retryable: writing again
    stages the rows anew."""
    before = ids(with_history)
    monkeypatch.setenv(ENV, "direct.staged=raise")  # a crash after the leaf commit
    with pytest.raises(FailpointError):
        with_history.write(tagged_rows("crashed", [1], 1, first_id=900))
    monkeypatch.delenv(ENV)
    leaf_dir = (
        Path(with_history.uri.removeprefix("file://"))
        / with_history.partition({"part": 1}).directory
    )
    known = set((leaf_dir / "data").iterdir())
    with hold("direct.staged") as point:
        worker, out = in_thread(lambda: with_history.write(tagged_rows("d", [1], 2, first_id=100)))
        point.wait_reached()
        written = set((leaf_dir / "data").iterdir()) - known
        assert written
        for path in written:
            path.unlink()
    worker.join()
    error = out.get("error")
    assert isinstance(error, CommitConflict), out
    assert is_retryable(error)
    assert any(p.name in str(error) for p in written), str(error)
    assert ids(with_history) == before  # nothing of it was published, and everything reads
    with_history.write(tagged_rows("d", [1], 2, first_id=100))
    assert ids(with_history) == before + Counter([100, 101])


def _attempt(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return exc


# -- B. readers outrun by retention ---------------------------------------------------------
def test_a_reader_of_the_latest_state_whose_manifest_version_went_may_retry(
    with_history: PartitionedNamespace,
) -> None:
    version, before = with_history.version, ids(with_history)
    reader = PartitionedNamespace.open(with_history.uri)  # its state's rows are not read yet
    with hold("read.resolved") as point:
        worker, out = in_thread(lambda: reader.to_table())
        point.wait_reached()
        churn_and_clean(with_history)
    worker.join()
    error = out.get("error")
    assert isinstance(error, LatestVersionCleanedUp), error
    assert is_retryable(error)
    assert f"__manifest version {version} " in str(error)
    assert "retention" in str(error)
    assert "kept:" in str(error)
    assert ids(with_history) == before + Counter([500, 501])  # a retry reads the new latest


def test_a_prune_whose_rows_load_beside_its_parse_reports_the_version_that_went(
    with_history: PartitionedNamespace,
) -> None:
    """A filter not parsed yet is parsed while the (small) ``__manifest`` rows load on a
    storage thread: the load's failure is the prune's, typed as ever (not pylance's "Not
    found" from another thread, and not lost behind the parse)."""
    reader = PartitionedNamespace.open(with_history.uri)
    state = reader.state()  # resolved, its rows not read yet
    version = state.version
    churn_and_clean(with_history)
    filter = "part = 1 OR part = 31337"  # parsed by no other test
    assert not is_parsed(filter, state.schema)
    with pytest.raises(LatestVersionCleanedUp, match=f"__manifest version {version} "):
        pruned_rows(state, filter)
    assert is_parsed(filter, state.schema)  # the parse finished; the load's error won
    assert ids(reader, filter=filter) == Counter([10, 11, 20, 21, 0, 1, 500])  # read again


@pytest.mark.parametrize("which", ["latest", "older"])
def test_an_as_of_reader_whose_version_went_gets_a_permanent_error(
    with_history: PartitionedNamespace, which: str
) -> None:
    """``as_of`` the handle's own (latest) version, or an older one it opens."""
    version = with_history.version if which == "latest" else with_history.version - 1
    with hold("read.resolved") as point:
        worker, out = in_thread(lambda: with_history.to_table(as_of=version))
        point.wait_reached()
        churn_and_clean(with_history)
    worker.join()
    error = out.get("error")
    assert isinstance(error, VersionCleanedUp), error
    assert not is_retryable(error)
    assert f"__manifest version {version} " in str(error)
    # the same handle asked again (its cached state is that version) and a fresh one
    for reader in (with_history, PartitionedNamespace.open(with_history.uri)):
        with pytest.raises(VersionCleanedUp) as again:
            reader.to_table(as_of=version)
        assert not is_retryable(again.value)
        assert not isinstance(again.value, LatestVersionCleanedUp)


def test_as_of_the_cached_version_after_cleanup_is_a_typed_error(
    with_history: PartitionedNamespace,
) -> None:
    """The handle's cached state is the version asked for; pylance raised ``ValueError:
    Not found: .../__manifest/_versions/...manifest`` from it."""
    version = with_history.version
    churn_and_clean(with_history)
    with pytest.raises(VersionCleanedUp, match=f"__manifest version {version} ") as raised:
        with_history.to_table(as_of=version)
    assert not is_retryable(raised.value)


@pytest.mark.parametrize("how", ["to_reader", "to_batches", "count_rows"])
def test_a_read_whose_leaf_version_went_gets_a_typed_error(
    with_history: PartitionedNamespace, how: str
) -> None:
    """Partitions were resolved (the reader is open) and are read lazily: retention
    removed the leaf versions they name before they were opened."""
    before = ids(with_history)
    if how == "count_rows":
        partitions = with_history.partitions()
        churn_and_clean(with_history)

        def read() -> object:
            return sum(with_history.count_rows_of(p) for p in partitions)
    else:
        opened = getattr(with_history, how)()
        churn_and_clean(with_history)

        def read() -> object:
            return opened.read_all() if how == "to_reader" else list(opened)

    with pytest.raises(LatestVersionCleanedUp) as raised:
        read()
    assert is_retryable(raised.value)
    text = str(raised.value)
    assert "version 3 of the table of partition" in text
    assert "kept: " in text
    assert ids(with_history) == before + Counter([500, 501])


def test_a_read_error_that_is_not_retention_is_left_alone(
    with_history: PartitionedNamespace,
) -> None:
    """A leaf version that still exists but whose data file is missing (deleted by hand)
    is not called a retention error."""
    partition = with_history.partition({"part": 1})
    data = Path(partition.location.removeprefix("file://")) / "data"
    for path in data.iterdir():
        path.unlink()
    with pytest.raises(ValueError, match="Not found") as raised:  # pylance's own, as before
        with_history.to_table()
    assert not isinstance(raised.value, VersionCleanedUp)


def test_retention_errors_keep_their_class_across_processes() -> None:
    """Rebuilt from a message alone (a Spark task's failure), each keeps its flag."""
    assert LatestVersionCleanedUp("x").retryable
    assert not VersionCleanedUp("x").retryable
    assert not StagedFilesMissing("x").retryable
