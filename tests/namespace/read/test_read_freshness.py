"""A read of the latest state checks that its loaded state is still the latest while it
prunes, not before: on an object store that check is a listing of ``__manifest``'s
versions, one round trip, which now overlaps the read's own first requests.

What must hold: a read returns what was the latest during the call (a commit by another
handle before the call is seen), and a read that failed on a state that is no longer
the latest (``maintain`` removed what it read) is done again on the latest instead of
failing.
"""

from __future__ import annotations

import datetime as dt
import threading

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.format.manifest import ManifestView
from airflow_provider_lance.namespace.format.state import NamespaceState
from tests.support import tagged_rows

NOW = dt.timedelta(0)


def parts(partitions: list) -> list[int]:
    return sorted(p.values["part"] for p in partitions)


def test_the_latest_check_runs_while_the_read_prunes(seeded, monkeypatch) -> None:
    """The check is held until the read has started pruning the loaded state: done one
    after the other (check first), the hold would never be released. (A filter pruned
    before on that state is not pruned again: its read checks first; the two reads here
    use two filters.)"""
    pruning = threading.Event()
    released_in_time: list[bool] = []
    real_candidates, real_is_latest = NamespaceState.candidates, ManifestView.is_latest

    def candidates(self: NamespaceState, where: object) -> object:
        pruning.set()
        return real_candidates(self, where)

    def is_latest(self: ManifestView) -> bool:
        released_in_time.append(pruning.wait(timeout=10))
        return real_is_latest(self)

    monkeypatch.setattr(NamespaceState, "candidates", candidates)
    monkeypatch.setattr(ManifestView, "is_latest", is_latest)
    for read in (
        lambda: parts(seeded.prune("part = 2")),
        lambda: sorted(seeded.to_table(filter="part >= 2").column("id").to_pylist()),
    ):
        pruning.clear()
        assert read() in ([2], [2, 3])
    assert released_in_time == [True, True]


def test_a_read_sees_a_commit_made_before_it_by_another_handle(seeded) -> None:
    handle = PartitionedNamespace.open(seeded.uri)
    assert parts(handle.prune("part >= 2")) == [2]
    seeded.write(tagged_rows("new", [3], 1, first_id=100))
    assert parts(handle.prune("part >= 2")) == [2, 3]
    assert parts(handle.partitions()) == [1, 2, 3]
    assert sorted(handle.to_table(filter="part = 3").column("id").to_pylist()) == [100]
    seeded.drop_partitions("part = 3")
    assert handle.to_table(filter="part = 3").num_rows == 0
    assert parts(handle.partitions()) == [1, 2]


def test_a_read_that_failed_on_a_state_no_longer_the_latest_is_done_on_the_latest(
    seeded,
) -> None:
    """Another handle writes, compacts ``__manifest`` and removes every older version and
    file (``maintain``): the handle's loaded state can no longer be read. Its read runs
    on that state first (the check runs beside it), fails, and is done again on the
    latest state, as a read that checked first would have been."""
    handle = PartitionedNamespace.open(seeded.uri)
    for i in range(3):
        seeded.write(tagged_rows(f"w{i}", [2, 3], 1, first_id=200 + 10 * i))
    seeded.maintain(older_than=NOW)
    assert parts(handle.prune("part >= 2")) == [2, 3]
    assert sorted(handle.to_table(filter="part = 3").column("id").to_pylist()) == [
        201,
        211,
        221,
    ]
    assert parts(handle.partitions()) == [1, 2, 3]
