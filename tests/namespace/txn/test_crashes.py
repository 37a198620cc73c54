"""Crash injection: kill -9 a writer at every step, then retry or recover.

Published data must equal the state before or after the transaction, never a mix; a retry
publishes it exactly once; recovery leaves no orphan visible.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import ENV
from tests.support import leaf_files, tagged_rows

FAILPOINTS = [
    "stage.written",
    "stage.recorded",
    "commit.before_seal",
    "commit.after_claim",
    "commit.leaf_committed",
    "commit.before_publish",
    "commit.after_publish",
]
REPO = Path(__file__).resolve().parents[3]
SEED = list(range(4))
NEW = tagged_rows("crash", [2, 3, 4], 2, first_id=100)  # an existing and two new partitions


def run(root: Path, mode: str, failpoint: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV, None)
    if failpoint:
        env[ENV] = f"{failpoint}=kill"
    return subprocess.run(
        [sys.executable, "-m", "tests.workers", str(root), "T", mode, json.dumps(NEW.to_pylist())],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(ns.to_table().column("id").to_pylist())


AFTER = sorted(SEED + NEW.column("id").to_pylist())


@pytest.mark.slow
@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_kill_then_retry_publishes_exactly_once(
    seeded: PartitionedNamespace, root: Path, failpoint: str
) -> None:
    killed = run(root, "append", failpoint)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ids(seeded) in (SEED, AFTER)
    retried = run(root, "append", None)
    assert retried.returncode == 0, retried.stderr
    assert ids(seeded) == AFTER
    again = run(root, "append", None)  # a third run is a no-op returning the same result
    assert json.loads(again.stdout) == json.loads(retried.stdout)
    assert ids(seeded) == AFTER


@pytest.mark.slow
@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_kill_then_recover_leaves_before_or_after(
    seeded: PartitionedNamespace, root: Path, failpoint: str
) -> None:
    killed = run(root, "append", failpoint)
    assert killed.returncode == -signal.SIGKILL
    published = failpoint == "commit.after_publish"
    seeded.recover(lease_seconds=0)
    assert ids(seeded) == (AFTER if published else SEED)
    # later writers never expose what the dead one left behind
    seeded.write(tagged_rows("later", [2, 3, 4], 1, first_id=500))
    expected = (AFTER if published else SEED) + [500, 501, 502]
    assert ids(seeded) == sorted(expected)
    assert all(t.state in ("aborted", "published") for t in seeded.transactions())


def run_combine(root: Path, failpoint: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV, None)
    if failpoint:
        env[ENV] = f"{failpoint}=kill"
    return subprocess.run(
        [sys.executable, "-m", "tests.workers", "combine", str(root), "P", "M0", "M1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "failpoint", ["combine.done", "commit.after_claim", "commit.after_publish"]
)
def test_kill_while_committing_several_then_retry_or_recover(
    seeded: PartitionedNamespace, root: Path, failpoint: str
) -> None:
    seeded.begin("append", "M0").stage(tagged_rows("m0", [2, 3], 1, first_id=100))
    seeded.begin("append", "M1").stage(tagged_rows("m1", [4], 1, first_id=200))
    after = sorted([*SEED, 100, 101, 200])
    assert run_combine(root, failpoint).returncode == -signal.SIGKILL
    assert ids(seeded) in (SEED, after)
    retried = run_combine(root, None)
    assert retried.returncode == 0, retried.stderr
    assert ids(seeded) == after
    assert run_combine(root, None).stdout == retried.stdout


@pytest.mark.slow
def test_recovery_of_a_dead_combined_commit_removes_every_source(
    seeded: PartitionedNamespace, root: Path
) -> None:
    data_before = leaf_files(root)
    seeded.begin("append", "M0").stage(tagged_rows("m0", [2, 3], 1, first_id=100))
    seeded.begin("append", "M1").stage(tagged_rows("m1", [4], 1, first_id=200))
    assert run_combine(root, "combine.done").returncode == -signal.SIGKILL
    # killed before the seal: all three are merely staged, and all three are idle
    assert seeded.recover(lease_seconds=0) == ["M0", "M1", "P"]
    assert ids(seeded) == SEED
    assert {t.txn_id: t.state for t in seeded.transactions()} == dict.fromkeys(
        ["M0", "M1", "P"], "aborted"
    )
    data_after = leaf_files(root)
    assert [f for f in data_after if "/data/" in f] == [f for f in data_before if "/data/" in f]
