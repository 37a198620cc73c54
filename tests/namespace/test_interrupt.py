"""Ctrl-C stops a write at once, and ``maintain`` reclaims everything it left.

A real subprocess writes thousands of partitions; once its leaf fan-out is under way (leaf
directories appear on disk) it gets SIGINT. Before the fix it went on until the fan-out's
every task had run (the main thread, blocked on a lock, only ran Python's signal handler
when the fan-out ended; the worker threads then kept draining it at exit): 8 to 23 s at this
size on a loaded 2-core machine. Now no new leaf work starts and the running calls finish:
a fraction of a second. The bound asserted is a generous 5 s: a behaviour test, not a
benchmark.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import FailpointError

#: Partitions the interrupted write touches (the first SEEDED of them exist already).
PARTITIONS = 4000
SEEDED = 200
ROWS_PER_PARTITION = 5
#: Seconds the write may take to stop after SIGINT (see the module docstring).
STOP_BOUND = 5.0

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("v", pa.float64()),
    ]
)

#: Each script reinstates Python's SIGINT handler: a process started with SIGINT ignored
#: (as a test worker can be, by what ran in it before) passes that on, and Python then
#: installs none.
WRITER = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {repo!r})
from tests.namespace.test_interrupt import days
from airflow_provider_lance.namespace import PartitionedNamespace
PartitionedNamespace.open(sys.argv[1]).write(days(int(sys.argv[2]), first_id=1_000_000))
print("finished", flush=True)
"""


def days(partitions: int, first_id: int = 0) -> pa.Table:
    """``ROWS_PER_PARTITION`` rows in each of ``partitions`` days from 2000-01-01."""
    rows = partitions * ROWS_PER_PARTITION
    start = dt.date(2000, 1, 1)
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + rows), pa.int64()),
            "day": pa.array([start + dt.timedelta(days=i % partitions) for i in range(rows)]),
            "v": pa.array([float(i) for i in range(rows)]),
        },
        schema=SCHEMA,
    )


def seeded(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("day", "day")]
    )
    ns.write(days(SEEDED))
    return ns


def leaf_directories(root: Path) -> list[str]:
    return [d for d in os.listdir(root) if d.endswith("$dataset")]


def interrupted_write(root: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Run the write in a subprocess, SIGINT it once its fan-out has created 100 leaf
    tables; the seconds it took to exit after the signal, and how it ended."""
    repo = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(repo=repo), str(root), str(PARTITIONS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while len(leaf_directories(root)) < SEEDED + 100:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the write never got under way"
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    stopped = time.monotonic() - sent
    return stopped, subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def published_files(ns: PartitionedNamespace) -> dict[str, set[str]]:
    """Leaf directory -> the data files its published version references."""
    out = {}
    for p in ns.partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        out[p.directory] = {f.path for fr in leaf.get_fragments() for f in fr.data_files()}
    return out


def data_bytes(root: Path) -> int:
    return sum(
        f.stat().st_size for d in leaf_directories(root) for f in (root / d / "data").iterdir()
    )


def test_ctrl_c_stops_a_write_at_once_and_maintain_reclaims_what_it_left(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    seeded(root)
    stopped, ended = interrupted_write(root)
    assert "finished" not in ended.stdout, "the write ran to its end: no interrupt was seen"
    assert "KeyboardInterrupt" in ended.stderr, ended.stderr[-2000:]
    assert stopped < STOP_BOUND, f"the write stopped {stopped:.1f} s after SIGINT"

    ns = PartitionedNamespace.open(root)
    # The published data is the seed's, and nothing else is left on disk: no leaf version
    # above a published one, no data file a published version does not reference, no leaf
    # table of a partition the write was creating.
    clean_after_maintain(ns, root)
    assert sorted(ns.to_table(columns=["id"])["id"].to_pylist()) == list(
        range(SEEDED * ROWS_PER_PARTITION)
    )
    # ... so the data files take what a clean write of the same rows takes.
    clean = tmp_path / "clean"
    seeded(clean)
    assert data_bytes(root) == data_bytes(clean)


MAINTAINER = """
import datetime as dt, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from airflow_provider_lance.namespace import PartitionedNamespace

def rolling(progress):
    if progress.what == "maintain: roll back":
        print("rolling back", flush=True)

PartitionedNamespace.open(sys.argv[1]).maintain(
    sweep_orphans=True,
    orphan_min_age=dt.timedelta(0),
    enforce_min_age=False,
    progress=rolling,
)
print("finished", flush=True)
"""


def clean_after_maintain(ns: PartitionedNamespace, root: Path) -> None:
    """``maintain`` leaves only what the published versions reference."""
    ns.maintain(
        older_than=dt.timedelta(0),
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(0),
        enforce_min_age=False,
    )
    published = published_files(ns)
    assert sorted(leaf_directories(root)) == sorted(published)
    for p in ns.partitions():
        assert lance.dataset(p.location).version == p.read_version, p.values
        assert set(os.listdir(root / p.directory / "data")) == published[p.directory]


def test_ctrl_c_during_maintain_leaves_what_the_next_one_finishes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGINT while ``maintain`` rolls back a killed write's versions of 800 leaves: it
    stops (some leaves rolled back and not yet fenced, or fenced and not yet cleaned), the
    rows read are the seed's, and the next ``maintain`` leaves only the published data."""
    root = tmp_path / "ns"
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("day", "day")]
    )
    ns.write(days(800))
    monkeypatch.setenv("LANCE_PNS_FAILPOINTS", "direct.before_publish=raise")
    with pytest.raises(FailpointError):  # killed before its swap: its versions stay
        ns.write(days(800, first_id=1_000_000))
    monkeypatch.delenv("LANCE_PNS_FAILPOINTS")
    proc = subprocess.Popen(
        [sys.executable, "-c", MAINTAINER, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "rolling back\n", proc.communicate()
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    out, err = proc.communicate(timeout=120)
    stopped = time.monotonic() - sent
    assert "finished" not in out, "maintain ran to its end: no interrupt was seen"
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert stopped < STOP_BOUND, f"maintain stopped {stopped:.1f} s after SIGINT"
    ns = PartitionedNamespace.open(root)
    assert sorted(ns.to_table(columns=["id"])["id"].to_pylist()) == list(
        range(800 * ROWS_PER_PARTITION)
    )
    clean_after_maintain(ns, root)
    assert sorted(ns.to_table(columns=["id"])["id"].to_pylist()) == list(
        range(800 * ROWS_PER_PARTITION)
    )


@pytest.fixture(autouse=True)
def _no_failpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LANCE_PNS_FAILPOINTS", raising=False)
