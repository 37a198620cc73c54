"""The claim protocol's leaf guard (``txn/kernel.py: HeldClaim``): a committer rolls back
versions above the one it sealed on only while its transaction still holds the partition's
claim. A zombie committer (its transaction finished by another committer meanwhile) must
never roll back the version another writer committed and is about to publish.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.format.leaf_version import committed_by
from airflow_provider_lance.namespace.testing import hold
from tests.workers import TAGGED, tagged_rows


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))  # ids 0-3
    return ns


def other(ns: PartitionedNamespace) -> PartitionedNamespace:
    """A second handle, as another process would have."""
    return PartitionedNamespace.open(ns.uri)


def restores(location: str) -> list[tuple[int, str | None]]:
    """Each roll-back (a Restore commit) of the leaf at ``location``: its version, and the
    tag of the version it rolled back."""
    leaf = lance.dataset(location)
    out = []
    for v in (int(r["version"]) for r in leaf.versions()):
        txn = leaf.read_transaction(v)
        if txn is not None and type(txn.operation).__name__ == "Restore":
            out.append((v, committed_by(leaf, v - 1)))
    return out


#: The other writer of partition 1, which claims nothing: its failpoint prefix, its call,
#: and the tags it leaves.
WRITERS: dict[str, tuple[str, Callable[[PartitionedNamespace], Any], Counter[str]]] = {
    "direct": (
        "direct",
        lambda ns: ns.write(tagged_rows("w", [1], 2, first_id=200)),
        Counter({"w": 2}),
    ),
    "delete": ("delete", lambda ns: ns.delete("id = 0"), Counter({"seed": -1})),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_zombie_committer_never_rolls_back_an_unclaimed_writers_version(
    ns: PartitionedNamespace, writer: str
) -> None:
    """Committer A seals X (claiming partition 1) and parks before its leaf commits; B
    takes X over and publishes it. Then a writer that claims nothing (a direct write, a
    delete) commits partition 1's next leaf version and parks before its publish. A,
    resumed, finds that version above the one it sealed on, on a partition X no longer
    claims: it must leave it alone (no roll-back, no version of its own on top) and return
    X's result; the writer then publishes, and the leaf's latest version is the
    published one."""
    point, call, adds = WRITERS[writer]
    ns.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    location = ns.partition({"part": 1}).location
    with ThreadPoolExecutor(2) as pool, ExitStack() as stack:
        a_sealed = stack.enter_context(hold("commit.after_claim"))
        zombie = pool.submit(other(ns).commit, "X")
        a_sealed.wait_reached()
        taken_over = other(ns).commit("X")  # B
        w_parked = stack.enter_context(hold(f"{point}.before_publish"))
        written = pool.submit(call, other(ns))
        w_parked.wait_reached()  # its leaf version lies above X's published one
        unpublished = int(lance.dataset(location).version)
        a_sealed.release()
        assert zombie.result(timeout=120) == taken_over
        assert int(lance.dataset(location).version) == unpublished  # A committed nothing
        w_parked.release()
        written.result(timeout=120)
    assert restores(location) == []
    published = ns.partition({"part": 1})
    assert published.read_version == unpublished == int(lance.dataset(location).version)
    tags = Counter(ns.to_table(columns=["tag"]).column("tag").to_pylist())
    assert tags == Counter({"seed": 4, "x": 2}) + adds
    ids = ns.to_table(columns=["id"]).column("id").to_pylist()
    assert len(ids) == len(set(ids))
