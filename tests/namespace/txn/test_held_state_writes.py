"""Review of the held-state direct write (fcba170..b8c50e3): interleavings forced on real
Lance, each test named for what it attacks. See tests/namespace/txn/test_write_freshness.py for the
behaviour under review: a direct write stages on the state its handle holds while it asks
whether that is still the latest, and a handle then holds the state its own write made.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.format.manifest import Manifest, ManifestView
from airflow_provider_lance.namespace.format.state import NamespaceState
from tests.support import Worker, other, referenced_files, tagged_rows, tags_by_part


def test_two_writes_through_one_handle_leave_it_holding_the_newer_state(
    seeded, monkeypatch
) -> None:
    """Two threads write through one handle. The first to publish (A, version v+1) is
    parked in its ``_adopt`` after it found v+1 newer than the state held (v), while it
    builds the state of v+1; B then publishes v+2 and adopts it. A, released, must not
    replace the v+2 state B's write left with its own older v+1: the handle would hold a
    state older than one it already held (its next write, and every read, then reload:
    a listing and an open of ``__manifest`` the adoption exists to save)."""
    start = seeded.version
    real_load = NamespaceState.load.__func__  # type: ignore[attr-defined]
    parked, release = threading.Event(), threading.Event()
    a_thread: list[threading.Thread] = []

    def load(cls: type[NamespaceState], root: str, view: ManifestView, **kw: Any) -> Any:
        if a_thread and threading.current_thread() is a_thread[0] and view.version == start + 1:
            parked.set()
            assert release.wait(30)
        return real_load(cls, root, view, **kw)

    monkeypatch.setattr(NamespaceState, "load", classmethod(load))
    a = Worker(seeded.write, tagged_rows("a", [3], 1, first_id=100))
    a_thread.append(a)
    a.start()
    assert parked.wait(30), "A never adopted its version"
    b = seeded.write(tagged_rows("b", [4], 1, first_id=200))
    assert b.manifest_version == start + 2
    release.set()
    a.join(30)
    assert a.error is None
    assert a.result.manifest_version == start + 1
    monkeypatch.undo()

    opened: list[int | None] = []
    real_open = Manifest.open

    def open_(self: Manifest, version: int | None = None) -> object:
        opened.append(version)
        return real_open(self, version)

    monkeypatch.setattr(Manifest, "open", open_)
    assert seeded.state().version == start + 2  # (a reload if it went back to v+1)
    assert opened == [], "the handle went back to an older state than it held"
    monkeypatch.undo()
    assert tags_by_part(seeded) == {1: ["seed"] * 2, 2: ["seed"] * 2, 3: ["a"], 4: ["b"]}


# -- attacks that held (kept as regression guards) --------------------------------------------
def _leaf_data_files(ns: PartitionedNamespace) -> set[str]:
    root = Path(ns.uri.removeprefix("file://"))
    return {
        p.name
        for p in root.rglob("*.lance")
        if "/data/" in str(p) and not str(p.relative_to(root)).startswith("__manifest")
    }


@pytest.mark.parametrize("mode", ["append", "overwrite"])
@pytest.mark.parametrize("shape", ["stream", "tables", "empty_first"])
def test_a_restart_after_a_first_batch_above_flush_bytes_leaves_nothing_behind(
    seeded, mode, shape
) -> None:
    """Another handle overwrites partition 2 (its leaf moves to a new version) after this
    handle loaded its state; this handle then writes partitions 2 and 4 from several
    batches with ``flush_bytes=1`` (every batch flushed at once). The restart on the newer
    state happens before the first flush: exactly the rows written are published, every
    data file on disk is referenced by some leaf version, and no leaf has a version above
    its published one (nothing was committed on the held state's versions)."""
    other(seeded).write(tagged_rows("b", [2], 3, first_id=50), "overwrite")
    rows = tagged_rows("h", [2, 4], 2, first_id=1000)
    if shape == "stream":
        data: Any = pa.RecordBatchReader.from_batches(rows.schema, rows.to_batches(max_chunksize=1))
    elif shape == "tables":
        data = (rows.slice(i, 1) for i in range(rows.num_rows))
    else:
        data = iter([rows.slice(0, 0), rows])
    result = seeded.write(data, mode, flush_bytes=1)
    expected_2 = ["h", "h"] if mode == "overwrite" else ["b", "b", "b", "h", "h"]
    assert tags_by_part(seeded) == {1: ["seed"] * 2, 2: expected_2, 4: ["h", "h"]}
    assert result.manifest_version == other(seeded).version
    assert _leaf_data_files(seeded) <= referenced_files(seeded)
    for p in other(seeded).partitions():
        assert lance.dataset(p.location).version == p.read_version, p.values
