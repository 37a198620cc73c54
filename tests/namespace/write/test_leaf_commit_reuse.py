"""A table operation opens each leaf once: its commit reuses the table its change was
computed on, and the checks of ``leaf_commit.commit_change`` read the same fields faster.

What the shortcuts must keep (module docstrings of ``ops/runner.py`` and
``write/leaf_commit.py``): a change is committed as exactly ``base + 1``; a version above
``base`` is rolled back first; a version of ours holding exactly what the change makes of
``base`` is reused; Lance rebases a commit on a stale table onto the versions above it,
whether given a URI or a table.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from lance import LanceOperation, Transaction
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.format.leaf_version import committed_by
from airflow_provider_lance.namespace.format.manifest import Manifest, ManifestView
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.ops.deletion import live_rows
from airflow_provider_lance.namespace.write import leaf_commit
from airflow_provider_lance.namespace.write.leaf_commit import (
    _commit_on,
    _signature,
    commit_change,
    content_after,
)
from tests.support import BY_PART, TAGGED, leaf_of, read_latest, tagged_rows

OWNER = "op-1#1"


class CountingStorage(Storage):
    """A storage that counts the tables it opens (by URI)."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.opened: Counter[str] = Counter()

    def table(self, uri: str, version: int | None = None, **kwargs: Any) -> lance.LanceDataset:
        self.opened[uri.rstrip("/")] += 1
        return super().table(uri, version, **kwargs)


def counted(root: Path) -> tuple[PartitionedNamespace, CountingStorage]:
    storage = CountingStorage(str(root))
    manifest = Manifest(storage)
    state = NamespaceState.load(str(root), manifest.latest())
    return PartitionedNamespace(str(root), manifest, state), storage


@pytest.fixture
def four_parts(root: Path) -> PartitionedNamespace:
    """Partitions 1-4 by ``part``, ids 0-39 (ten rows each)."""
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("seed", [1, 2, 3, 4], 10, first_id=0))
    return ns


def delete_change(uri: str, base: int, where: str) -> tuple[lance.LanceDataset, Any]:
    """The table at ``base`` and a Delete of ``where`` computed on it (uncommitted)."""
    leaf = lance.dataset(uri, version=base)
    updated = [f.delete(where) for f in leaf.get_fragments()]
    return leaf, LanceOperation.Delete([u for u in updated if u is not None], [], where)


def ids_at(uri: str, version: int) -> list[int]:
    return sorted(lance.dataset(uri, version=version).to_table(columns=["id"])["id"].to_pylist())


# -- the fields read directly -------------------------------------------------------------------
def old_signature(fragment: FragmentMetadata) -> str:
    """The signature as it was computed before (from ``to_json``)."""
    raw = fragment.to_json()
    files = sorted(f["path"] for f in raw.get("files", []))
    deletion = raw.get("deletion_file")
    return json.dumps([files, deletion and [deletion.get("id"), deletion.get("read_version")]])


def test_signatures_and_live_rows_equal_what_to_json_gives(four_parts) -> None:
    """Fragments without deletions, with a deletion file, and with two data files (a
    column added by ``add_columns``): the attribute reads give exactly the ``to_json``
    values, and the dictionary form gives the same signature."""
    uri, base = leaf_of(four_parts, 1)
    table = lance.dataset(uri, version=base)
    table.delete("id = 3")
    table = lance.dataset(uri)
    table.add_columns({"doubled": "id * 2"})
    fragments = [f.metadata for f in lance.dataset(uri).get_fragments()]
    fragments += [f.metadata for f in lance.dataset(uri, version=base).get_fragments()]
    assert any(f.deletion_file is not None for f in fragments)
    assert any(len(f.files) == 2 for f in fragments)
    for fragment in fragments:
        assert _signature(fragment) == old_signature(fragment)
        assert _signature(fragment.to_json()) == old_signature(fragment)
        raw = fragment.to_json()
        deleted = (raw.get("deletion_file") or {}).get("num_deleted_rows") or 0
        assert live_rows(fragment) == raw["physical_rows"] - deleted


# -- the commit on the table the change was computed on -----------------------------------------
def test_a_change_commits_on_its_table_without_opening_it_again(four_parts, root) -> None:
    uri, base = leaf_of(four_parts, 1)
    storage = CountingStorage(str(root))
    leaf, operation = delete_change(uri, base, "id < 3")
    version = commit_change(storage, uri, operation, base=base, owner=OWNER, opened=leaf)
    assert version == base + 1
    assert sum(storage.opened.values()) == 0
    latest = lance.dataset(uri)
    assert committed_by(latest, version) == OWNER
    assert ids_at(uri, version) == list(range(3, 10))
    assert sorted(_signature(f.metadata) for f in latest.get_fragments()) == content_after(
        leaf, base, operation
    )


def test_a_version_above_the_table_is_rolled_back_before_the_commit(four_parts) -> None:
    """A crashed writer's unpublished version lies above the base the change was computed
    on: the table held since then is not committed on; the version is rolled back and the
    change committed as the version after the restore, holding base minus the deleted
    rows (the crashed writer's rows gone)."""
    uri, base = leaf_of(four_parts, 2)
    leaf, operation = delete_change(uri, base, "id = 10")
    lance.write_dataset(tagged_rows("junk", [2], 2, first_id=900), uri, mode="append")
    version = commit_change(four_parts.storage, uri, operation, base=base, owner=OWNER, opened=leaf)
    assert version == base + 3  # base+1 the junk, base+2 the restore, base+3 the change
    assert ids_at(uri, version) == list(range(11, 20))
    assert committed_by(lance.dataset(uri), version) == OWNER


def test_a_change_rebased_above_a_version_is_rolled_back_not_published(four_parts) -> None:
    """A pinned leaf (no reader reads above its read_version): the first commit is made on
    the table the change was computed on without listing the versions first. A crashed
    writer's version above the base makes Lance rebase that commit above it: base+2, not
    base+1, so it is never returned; the next attempt rolls both back and commits the
    change on the restored base, holding base minus the deleted row."""
    uri, base = leaf_of(four_parts, 2)
    leaf, operation = delete_change(uri, base, "id = 10")
    lance.write_dataset(tagged_rows("junk", [2], 2, first_id=900), uri, mode="append")
    version = commit_change(
        four_parts.storage,
        uri,
        operation,
        base=base,
        owner=OWNER,
        opened=leaf,
        latest_is_read=False,
    )
    assert version == base + 4  # +1 the junk, +2 the rebased change, +3 the restore, +4
    assert ids_at(uri, version) == list(range(11, 20))
    latest = lance.dataset(uri)
    assert committed_by(latest, base + 2) == OWNER
    assert {900, 901} <= set(ids_at(uri, base + 2))  # the rebased commit, never taken


def test_a_change_on_a_pinned_leaf_commits_without_listing_its_versions(
    four_parts, monkeypatch
) -> None:
    """The listing of a leaf's versions before its commit (one request per leaf on an
    object store) is made only for a partition whose readers read its latest version."""
    listed: list[str] = []

    def still_latest(storage: Storage, ds: lance.LanceDataset, base: int) -> bool:
        listed.append(ds.uri)
        return real(storage, ds, base)

    real = leaf_commit._still_latest
    monkeypatch.setattr(leaf_commit, "_still_latest", still_latest)
    assert four_parts.delete("id % 10 = 1").rows_removed == 4
    assert listed == []
    location = read_latest(four_parts, 3)
    assert four_parts.delete("id % 10 = 2").rows_removed == 4
    assert [uri.rstrip("/") for uri in listed] == [location.rstrip("/")]
    assert sorted(four_parts.to_table()["id"].to_pylist()) == [
        i for i in range(40) if i % 10 not in (1, 2)
    ]


def test_a_version_of_ours_holding_the_change_is_reused(four_parts) -> None:
    """The commit went through but the caller did not learn it (a retry): called again
    with the same table, the version is found and reused, nothing committed twice."""
    uri, base = leaf_of(four_parts, 3)
    leaf, operation = delete_change(uri, base, "id = 20")
    first = commit_change(four_parts.storage, uri, operation, base=base, owner=OWNER, opened=leaf)
    again = commit_change(four_parts.storage, uri, operation, base=base, owner=OWNER, opened=leaf)
    assert again == first == base + 1
    assert int(lance.dataset(uri).version) == first


def test_a_table_at_another_version_than_the_base_is_not_committed_on(four_parts, root) -> None:
    uri, base = leaf_of(four_parts, 4)
    storage = CountingStorage(str(root))
    _, operation = delete_change(uri, base, "id = 30")
    lance.dataset(uri, version=base).delete("id = 31")  # base+1: not ours
    stale = lance.dataset(uri)  # at base+1, not at base
    version = commit_change(storage, uri, operation, base=base, owner=OWNER, opened=stale)
    assert version == base + 3  # rolled back to base, then committed
    assert ids_at(uri, version) == [i for i in range(30, 40) if i != 30]
    assert sum(storage.opened.values()) >= 1


def test_a_commit_on_a_stale_table_is_rebased_as_one_by_uri_is(four_parts) -> None:
    """What ``Storage.commit(on=...)`` relies on (pylance 14.0.2): Lance looks up the
    latest version at the commit whether it is given a URI or a table, so a commit on a
    table older than the latest lands above it (rebased), and ``_commit_on`` refuses it
    (not ``base + 1``)."""
    uri, _ = leaf_of(four_parts, 1)
    for via_table in (True, False):
        for refused in (False, True):
            start = int(lance.dataset(uri).version)
            leaf, operation = delete_change(uri, start, f"id = {start}")
            lance.write_dataset(tagged_rows("x", [1], 1, first_id=800 + start), uri, mode="append")
            on = leaf if via_table else None
            if refused:
                assert _commit_on(four_parts.storage, uri, start, operation, {}, on=on) is None
            else:
                committed = four_parts.storage.commit(
                    uri, Transaction(start, operation), conflict="lost", on=on
                )
                assert int(committed.version) == start + 2  # above the append: rebased


# -- whole operations --------------------------------------------------------------------------
def test_a_delete_opens_each_leaf_once(four_parts, root) -> None:
    counting, storage = counted(root)
    result = counting.delete("id % 10 = 0")
    assert result.rows_removed == 4
    leaves = {p.location.rstrip("/") for p in counting.partitions()}
    assert {uri: storage.opened[uri] for uri in leaves} == dict.fromkeys(leaves, 1)
    assert sorted(four_parts.to_table()["id"].to_pylist()) == [i for i in range(40) if i % 10]


def test_a_merge_opens_each_leaf_it_changes_once(four_parts, root) -> None:
    counting, storage = counted(root)
    updates = pa.table(
        {"id": [1, 11, 21], "part": pa.array([1, 2, 3], pa.int32()), "tag": ["m"] * 3},
        schema=TAGGED,
    )
    result = counting.merge(updates, ["id", "part"])
    assert result.rows_updated == 3
    changed = {p.location.rstrip("/") for p in counting.partitions()}
    changed = {uri for uri in changed if storage.opened[uri]}
    assert len(changed) == 3
    assert all(storage.opened[uri] == 1 for uri in changed)
    tags = dict(zip(*four_parts.to_table().select(["id", "tag"]).to_pydict().values(), strict=True))
    assert [tags[i] for i in (1, 11, 21, 31)] == ["m", "m", "m", "seed"]


@pytest.mark.parametrize("kind", ["delete", "merge", "optimize", "drop_partitions"])
def test_a_table_operation_looks_up_the_latest_manifest_version_once(
    four_parts, monkeypatch, kind
) -> None:
    """On an object store each lookup of ``__manifest``'s latest version is a listing, one
    sequential round trip: an operation makes one (its input checked and its first attempt
    computed on the same state), and its swap finds out whether that is still the latest.
    It made three (the claim column check, the input check, the first attempt): a
    merge six."""
    lookups: list[str] = []

    def open_(self: Manifest, version: int | None = None) -> lance.LanceDataset:
        if version is None:
            lookups.append("open")
        return real_open(self, version)

    def is_latest(self: ManifestView) -> bool:
        lookups.append("is_latest")
        return real_is_latest(self)

    real_open, real_is_latest = Manifest.open, ManifestView.is_latest
    handle = PartitionedNamespace.open(four_parts.uri)
    monkeypatch.setattr(Manifest, "open", open_)
    monkeypatch.setattr(ManifestView, "is_latest", is_latest)
    calls = {
        "delete": lambda: handle.delete("id % 10 = 1"),
        "merge": lambda: handle.merge(
            pa.table({"id": [1], "part": pa.array([1], pa.int32()), "tag": ["m"]}, schema=TAGGED),
            ["id", "part"],
        ),
        "optimize": lambda: handle.optimize(),
        "drop_partitions": lambda: handle.drop_partitions("part = 4"),
    }
    calls[kind]()
    # A merge first registers its intent against spec changes (a commit of its own, which
    # opens the latest version), then computes on the state after it.
    expected = ["is_latest", "open"] * 2 if kind == "merge" else ["is_latest"]
    assert lookups == expected
