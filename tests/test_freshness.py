"""When a handle asks the store for the latest ``__manifest`` version (issue 26, goal 2).

``PartitionedNamespace.open`` finds the latest version with one LIST of
``__manifest/_versions``; an operation right after it takes that state instead of listing
again (on an object store: one request and one round trip less per scheduled task). These
tests pin the request saved (by counting the freshness checks, ``ManifestView.is_latest``,
each one LIST on an object store) and what must not change with it: a handle sees every
commit this process made, a handle past the window asks again, and a write against the
state an open loaded loses nothing that was committed after that open.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pyarrow.compute as pc
import pytest

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace, facade
from airflow_provider_lance.namespace.format import manifest as manifest_module
from airflow_provider_lance.namespace.format.manifest import ManifestView

from .conftest import events

D = dt.date(2025, 12, 10)


@pytest.fixture
def freshness_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each call of ``ManifestView.is_latest`` (the version it was asked about)."""
    calls: list[int] = []
    original = ManifestView.is_latest

    def counted(view: ManifestView) -> bool:
        calls.append(view.version)
        return original(view)

    monkeypatch.setattr(ManifestView, "is_latest", counted)
    return calls


def _committed_elsewhere(ns: PartitionedNamespace, write: Callable[[], object]) -> None:
    """Run ``write`` as another process would: this process does not remember its version."""
    uri = ns._manifest.uri
    before = manifest_module._newest.get(uri)
    write()
    if before is None:
        manifest_module._newest.pop(uri, None)
    else:
        manifest_module._newest[uri] = before


def test_an_operation_right_after_open_does_not_list_versions_again(
    make_ns: Callable[..., PartitionedNamespace], root: Path, freshness_checks: list[int]
) -> None:
    make_ns().write(events(30))
    del freshness_checks[:]
    ns = PartitionedNamespace.open(root)
    ns.write(events(6, start=D + dt.timedelta(days=5), first_id=100))
    assert freshness_checks == []  # the write took the state open() loaded
    assert len(PartitionedNamespace.open(root).prune(f"event_date = DATE '{D}'")) == 1
    assert PartitionedNamespace.open(root).to_table().num_rows == 36
    assert freshness_checks == []


def test_a_handle_sees_what_this_process_committed_through_another_handle(
    make_ns: Callable[..., PartitionedNamespace], root: Path
) -> None:
    make_ns().write(events(30))
    first = PartitionedNamespace.open(root)
    second = PartitionedNamespace.open(root)
    second.write(events(6, start=D + dt.timedelta(days=5), first_id=100))
    assert first.to_table().num_rows == 36  # within the window, yet not stale
    assert first.version == second.version


def test_after_the_window_a_handle_asks_the_store_again(
    make_ns: Callable[..., PartitionedNamespace],
    root: Path,
    freshness_checks: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    make_ns().write(events(30))
    monkeypatch.setattr(facade, "FRESH_AFTER_OPEN", 0.0)
    late = PartitionedNamespace.open(root)
    _committed_elsewhere(
        late, lambda: PartitionedNamespace.open(root).write(events(3, start=D, first_id=600))
    )
    del freshness_checks[:]
    assert late.to_table().num_rows == 33  # the other "process"'s commit is seen
    assert freshness_checks  # because it asked


def test_a_write_against_the_state_open_loaded_loses_no_later_commit(
    make_ns: Callable[..., PartitionedNamespace], root: Path
) -> None:
    """Another process overwrites a partition after this handle's open: this handle's
    overwrite of the same partition, against the state open() loaded, must not replace a
    version it never saw (it fails, saying to write again, and the other's rows stand);
    an append against that state lands on top of the other process's rows."""
    make_ns().write(events(30))
    ns = PartitionedNamespace.open(root)
    stale = ns.version
    _committed_elsewhere(
        ns,
        lambda: PartitionedNamespace.open(root).write(
            events(4, start=D, days=1, first_id=1000), "overwrite"
        ),
    )
    with pytest.raises(CommitConflict, match="write again"):  # still in the window
        ns.write(events(2, start=D, days=1, first_id=2000), "overwrite")
    assert PartitionedNamespace.open(root).version == stale + 1  # nothing of it published
    day = PartitionedNamespace.open(root).to_table(filter=f"event_date = DATE '{D}'")
    assert sorted(day.column("id").to_pylist()) == [1000, 1001, 1002, 1003]
    appended = PartitionedNamespace.open(root)
    _committed_elsewhere(
        appended,
        lambda: PartitionedNamespace.open(root).write(events(3, start=D, days=1, first_id=3000)),
    )
    appended.write(events(1, start=D, days=1, first_id=4000))  # an append on a stale state
    day = PartitionedNamespace.open(root).to_table(filter=f"event_date = DATE '{D}'")
    assert sorted(pc.unique(day.column("id")).to_pylist()) == [
        1000,
        1001,
        1002,
        1003,
        3000,
        3001,
        3002,
        4000,
    ]
