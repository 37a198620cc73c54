"""Bad or unusual input to ``maintain`` and its orphan sweep: refused before anything runs,
or done as it says, never half done; and ``maintain`` while another process writes."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import (
    MIN_SAFE_ORPHAN_AGE,
    InvalidArgumentError,
    PartitionedNamespace,
    StorageError,
    is_retryable,
)
from airflow_provider_lance.namespace.testing import ENV
from tests.namespace.admin.test_unpublished_versions import (
    NOW,
    above_published,
    crash_a_write,
    published_files_exist,
    sweep,
)
from tests.namespace.txn.test_interleavings import BY_PART, crashing
from tests.support import no_duplicates
from tests.workers import TAGGED, tagged_rows

SEED = tagged_rows("seed", [1, 2], 2, first_id=0)


@pytest.fixture
def ns(root: Path, monkeypatch: pytest.MonkeyPatch) -> PartitionedNamespace:
    """Seeded, with a killed write's versions above the published ones of 1 and 2."""
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(SEED)
    crash_a_write(ns, monkeypatch, [1, 2], first_id=100)
    assert above_published(ns) == {1: 1, 2: 1}
    return ns


SWEEP = {"sweep_orphans": True, "orphan_min_age": NOW, "enforce_min_age": False}


@pytest.mark.parametrize(
    "bad",
    [
        {"older_than": 7},  # before: a raw TypeError, after the roll-back had run
        {"older_than": "7 days"},
        {"older_than": dt.timedelta(days=-1)},  # before: refused after the roll-back ran
        {"compact": "no"},  # before: truthy, so it compacted
        {"dry_run": "yes"},
        {"progress": "bar"},
    ],
)
def test_a_bad_argument_is_refused_before_anything_runs(ns, bad) -> None:
    with pytest.raises(InvalidArgumentError):
        ns.maintain(**{**SWEEP, **bad})
    assert above_published(ns) == {1: 1, 2: 1}


def test_sweep_orphans_must_be_a_bool(ns) -> None:
    """Before: ``sweep_orphans="no"`` was truthy and swept (with the default age here)."""
    with pytest.raises(InvalidArgumentError, match="sweep_orphans must be True or False"):
        ns.maintain(sweep_orphans="no")  # type: ignore[arg-type]


def test_an_age_beyond_any_date_removes_nothing(ns) -> None:
    """Before: ``older_than=timedelta.max`` ended in Lance's OverflowError. Now it removes
    no version, as it says; ``orphan_min_age=timedelta.max`` keeps every orphan."""
    report = ns.maintain(
        older_than=dt.timedelta.max, sweep_orphans=True, orphan_min_age=dt.timedelta.max
    )
    assert report.manifest_versions_removed == 0
    assert report.leaf_versions_removed == 0
    assert report.unpublished is not None
    assert report.unpublished["kept"] == {"young": 2}
    assert above_published(ns) == {1: 1, 2: 1}


def test_a_storage_failure_while_rolling_back_fails_maintain(ns, monkeypatch) -> None:
    """A leaf whose roll-back fails is not reported as "moved" (maintain said it
    succeeded, and freed nothing): the error is raised (retryable here), nothing was
    published, and a second run removes the versions."""
    with (
        crashing(monkeypatch, "maintain.before_restore", "error"),
        pytest.raises(StorageError) as failed,
    ):
        sweep(ns)
    assert is_retryable(failed.value)
    assert no_duplicates(ns) == [0, 1, 2, 3]
    report = sweep(ns)
    assert report.unpublished is not None
    assert report.unpublished["leaves_reclaimed"] == 2
    assert above_published(ns) == {1: 0, 2: 0}
    published_files_exist(ns)


APPENDER = """
import sys
sys.path.insert(0, {repo!r})
from tests.workers import tagged_rows
from airflow_provider_lance.namespace import PartitionedNamespace
ns = PartitionedNamespace.open(sys.argv[1])
for n in range(int(sys.argv[2])):
    ns.write(tagged_rows("w%d" % n, [1, 2, 3], 1, first_id=1000 + 10 * n))
    print("wrote", n + 1, flush=True)
"""


def backdate(ns: PartitionedNamespace, parts: list[int], age: dt.timedelta) -> None:
    """Make every file of these partitions' leaves ``age`` old (as a killed write's are,
    hours later)."""
    then = time.time() - age.total_seconds()
    for p in ns.partitions():
        if p.values["part"] in parts:
            for f in Path(p.location.removeprefix("file://")).rglob("*"):
                os.utime(f, (then, then))


def test_maintain_while_another_process_writes_the_same_partitions(ns) -> None:
    """The killed write's versions of 1 and 2 are 7 hours old; another process appends to
    1, 2 and 3 in a loop while ``maintain`` runs with the sweep at its safe age, again and
    again, from the first append to the last. The appends' own versions are young: every
    append publishes once, and nothing above a published version is left of 1 and 2.

    (At an age of 0, which ``enforce_min_age=False`` allows, an append in flight loses its
    files and fails retryably: the age is what protects writes in flight.)"""
    backdate(ns, [1, 2], dt.timedelta(hours=7))
    repo = str(Path(__file__).resolve().parents[3])
    writes = 30
    writer = subprocess.Popen(
        [sys.executable, "-c", APPENDER.format(repo=repo), ns.uri, str(writes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if k != ENV},
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().startswith("wrote 1"), writer.communicate()
    runs = 0
    while writer.poll() is None or runs < 2:
        PartitionedNamespace.open(ns.uri).maintain(
            older_than=dt.timedelta(0), sweep_orphans=True, orphan_min_age=MIN_SAFE_ORPHAN_AGE
        )
        runs += 1
    out, err = writer.communicate(timeout=300)
    assert writer.returncode == 0, err[-3000:]
    assert f"wrote {writes}" in out
    expected = [0, 1, 2, 3] + [1000 + 10 * n + k for n in range(writes) for k in range(3)]
    after = PartitionedNamespace.open(ns.uri)
    assert no_duplicates(after) == sorted(expected)
    published_files_exist(after)
    for p in after.partitions():
        assert lance.dataset(p.location).version == p.read_version, p.values
