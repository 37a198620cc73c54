"""ManifestView: the named questions asked of one ``__manifest`` version, on real tables.

The rows are written through :class:`Manifest` directly, so each row kind is exactly what
a question must tell apart: a published leaf, a leaf a transaction is still creating
(claimed, no ``read_version``), a published one under a claim, one that reads its latest,
and the bookkeeping rows of transactions, merges and fences.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import CommitConflict, ManifestError
from airflow_provider_lance.namespace.format import manifest as manifest_module
from airflow_provider_lance.namespace.format.manifest import (
    BASE_FIELDS,
    MANIFEST_NAME,
    NAMESPACE,
    OBJECT_ID,
    READ_VERSION,
    READ_VERSION_FIELD,
    TABLE,
    Manifest,
    ManifestView,
    manifest_schema,
    row,
)
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.io.storage import Storage
from tests.support import BY_PART, TAGGED, local, tagged_rows

PUBLISHED, CREATING, CLAIMED, LATEST = (f"v1$a={i}$dataset" for i in range(1, 5))
#: A transaction id with a quote: a claim value a filter must quote.
CLAIM_OF_T = "it's#1"


def rows() -> list[dict[str, object]]:
    return [
        row(PUBLISHED, TABLE, location="a1", read_version=3),
        row(CREATING, TABLE, location="a2", claim=CLAIM_OF_T),
        row(CLAIMED, TABLE, location="a3", read_version=5, claim=CLAIM_OF_T),
        row(LATEST, TABLE, location="a4"),
        row("__txn$it's", NAMESPACE, metadata="{}"),
        row("__merge$m1", NAMESPACE, metadata="{}"),
        row("__fence$v2", NAMESPACE, metadata="{}"),
    ]


def build(root: Path, schema: pa.Schema) -> Manifest:
    manifest = Manifest(Storage(str(root)))
    first = pa.Table.from_pylist([row("v1", NAMESPACE, metadata="{}")], schema=schema)
    manifest.create({"purpose": "test"}, first)
    manifest.insert_absent(pa.Table.from_pylist(rows(), schema=manifest_schema([])))
    return manifest


@pytest.fixture(params=["whole", "scanned"])
def reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways a view answers: a small version read whole at its first question, or
    (as a version too big to read whole) scanned per question."""
    if request.param == "scanned":
        monkeypatch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", 0)
    return str(request.param)


pytestmark = pytest.mark.usefixtures("reads")


@pytest.fixture
def manifest(tmp_path: Path) -> Manifest:
    return build(tmp_path, manifest_schema([]))


def answers(view: ManifestView) -> dict[str, object]:
    """What ``view`` answers to each question (rows by id and sorted)."""

    def ids(rows: list[dict[str, object]]) -> list[object]:
        return sorted(str(r[OBJECT_ID]) for r in rows)

    return {
        "claimed_by": ids(view.claimed_by(CLAIM_OF_T)),
        "claimed_ids": view.claimed_ids(),
        "published": view.published_leaves(),
        "locations": view.leaf_locations(),
        "txn": ids(view.txn_rows()),
        "intents": ids(view.intent_rows()),
        "indexes": ids(view.index_rows()),
        "read_versions": view.read_versions([PUBLISHED, LATEST, "absent"]),
        "by_id": view.rows_by_id([CLAIMED, "absent"]),
        "existing": view.existing([PUBLISHED, "absent"]),
        "all": ids(view.all_rows()),
    }


def test_a_small_version_is_read_once(manifest: Manifest, reads: str) -> None:
    """A version small enough to read whole is read at its first question, and every other
    question is answered from those rows: the answers stand with its data files gone. A
    version too big to read whole is scanned per question (then they fail)."""
    reference = answers(manifest.latest())
    view = manifest.latest()
    assert view.leaf_ids() == {PUBLISHED, CREATING, CLAIMED, LATEST}
    data = Path(manifest.uri) / "data"
    data.rename(data.with_name("data-gone"))
    if reads == "whole":
        assert answers(view) == reference
    else:
        with pytest.raises(pa.ArrowInvalid, match="Not found"):
            view.claimed_by(CLAIM_OF_T)


def test_claims_are_found_by_holder_and_quoted(manifest: Manifest) -> None:
    view = manifest.latest()
    assert sorted(r[OBJECT_ID] for r in view.claimed_by(CLAIM_OF_T)) == [CREATING, CLAIMED]
    assert view.claimed_by("it#1") == []
    assert sorted(r[OBJECT_ID] for r in view.claimed_rows()) == [CREATING, CLAIMED]
    assert view.claimed_ids() == {CREATING, CLAIMED}


def test_published_leaves_leave_out_the_ones_being_created(manifest: Manifest) -> None:
    assert manifest.latest().published_leaves() == {
        PUBLISHED: ("a1", 3),
        CLAIMED: ("a3", 5),
        LATEST: ("a4", None),
    }


def test_rows_by_kind(manifest: Manifest) -> None:
    view = manifest.latest()
    assert view.leaf_ids() == {PUBLISHED, CREATING, CLAIMED, LATEST}
    assert view.leaf_locations() == {"a1", "a2", "a3", "a4"}
    assert [r[OBJECT_ID] for r in view.txn_rows()] == ["__txn$it's"]
    assert [r[OBJECT_ID] for r in view.intent_rows()] == ["__merge$m1"]
    assert len(view.all_rows()) == 1 + len(rows())
    assert view.read_versions([PUBLISHED, LATEST, "absent"]) == {PUBLISHED: 3, LATEST: None}
    assert view.read_versions([]) == {}


def test_a_view_is_one_version(manifest: Manifest) -> None:
    """A commit after a view was taken changes nothing it answers; the rows that commit
    wrote are those of the fragments it added."""
    old = manifest.latest()
    assert old.is_latest()
    moved = pa.Table.from_pylist(
        [row(PUBLISHED, TABLE, location="a1", read_version=4)], schema=manifest_schema([])
    )
    manifest.commit(Swap(old, moved.to_pylist()))
    new = manifest.latest()
    assert not old.is_latest()
    assert new.version == old.version + 1
    assert old.read_versions([PUBLISHED]) == {PUBLISHED: 3}
    assert manifest.at(old.version).read_versions([PUBLISHED]) == {PUBLISHED: 3}
    assert new.read_versions([PUBLISHED]) == {PUBLISHED: 4}
    assert new.version in new.retained_versions()
    assert old.version in new.retained_versions()
    added = {f.path for frag in new.transaction().operation.new_fragments for f in frag.files}
    written = [f for f in new.fragments() if any(d.path in added for d in f.metadata.files)]
    assert [r[OBJECT_ID] for r in new.rows_in_fragments(written)] == [PUBLISHED]


def test_a_manifest_from_before_transactions_has_no_claims(tmp_path: Path) -> None:
    """Without the claim column no row is claimed, and every leaf with or without a
    ``read_version`` is published."""
    manifest = build(tmp_path, pa.schema([*BASE_FIELDS, READ_VERSION_FIELD]))
    view = manifest.latest()
    assert not view.has_claim_column
    assert view.claimed_by(CLAIM_OF_T) == []
    assert view.claimed_rows() == []
    assert view.claimed_ids() == set()
    assert view.published_leaves()[CREATING] == ("a2", None)


def test_a_clobbered_manifest(tmp_path: Path) -> None:
    """A version a foreign writer rewrote without our columns: every leaf reads its latest,
    and the sweep cannot tell what a version without locations reads."""
    leaves = pa.table({OBJECT_ID: [PUBLISHED], "object_type": [TABLE], "location": ["a1"]})
    uri = str(tmp_path / MANIFEST_NAME)
    view = ManifestView(lance.write_dataset(leaves, uri))
    assert READ_VERSION not in view.column_types
    assert view.published_leaves() == {PUBLISHED: ("a1", None)}
    assert view.read_versions([PUBLISHED]) == {PUBLISHED: None}
    bare = ManifestView(
        lance.write_dataset(leaves.drop_columns(["location"]), uri, mode="overwrite")
    )
    with pytest.raises(ManifestError, match="no location column"):
        bare.leaf_locations()


def _cleanup_all_but_latest(manifest: Manifest) -> None:
    lance.dataset(manifest.uri).cleanup_old_versions(
        older_than=dt.timedelta(0), delete_unverified=True
    )


@pytest.mark.parametrize("compacted", [False, True], ids=["versions", "versions-and-files"])
def test_a_swap_on_a_version_cleaned_up_since_it_was_read_is_a_conflict(
    manifest: Manifest, compacted: bool
) -> None:
    """A swap commits on a copy of the version it read, kept open (no request to open it
    again), so nothing checks first that the version still exists. Another handle
    changes the row, commits again, and cleans up every version but its latest (with a
    compaction first: the read version's data files go too). The swap must fail with
    :class:`CommitConflict`, never publish over the change it could not see (Lance
    fails to read the versions in between; measured with pylance 14.0.2: "Not found:
    .../_versions/<n>.manifest", a storage error that would not say to read again)."""
    old = manifest.latest()
    other = Manifest(Storage(manifest.root))
    moved = pa.Table.from_pylist(
        [row(PUBLISHED, TABLE, location="a1", read_version=4)], schema=manifest_schema([])
    )
    other.commit(Swap(old, moved.to_pylist()))
    later = pa.Table.from_pylist(
        [row(CLAIMED, TABLE, location="a3", read_version=6)], schema=manifest_schema([])
    )
    other.commit(Swap(other.at(old.version + 1), later.to_pylist()))
    if compacted:
        other.open().optimize.compact_files()
    _cleanup_all_but_latest(other)
    stale = pa.Table.from_pylist(
        [row(PUBLISHED, TABLE, location="a1", read_version=9)], schema=manifest_schema([])
    )
    with pytest.raises(CommitConflict):
        manifest.commit(Swap(old, stale.to_pylist()))
    assert manifest.latest().read_versions([PUBLISHED]) == {PUBLISHED: 4}


def test_the_latest_check_sees_a_later_version_when_cleanup_removed_the_next(
    tmp_path: Path,
) -> None:
    """On a local disk the check reads the next version's manifest and Lance's hint, not
    every version's name. A handle holding a tagged version whose next version cleanup
    removed (a later one stands) must still see the later one; so must a handle when the
    hint is gone (then Lance lists the versions)."""
    ns = PartitionedNamespace.create(tmp_path / "ns", TAGGED, BY_PART)
    ns.write(tagged_rows("a", [1], 1, first_id=0))
    held = PartitionedNamespace.open(ns.uri)
    ns.tag("kept")
    kept = held.version
    ns.write(tagged_rows("b", [2], 1, first_id=10))
    ns.write(tagged_rows("c", [3], 1, first_id=20))
    ns.maintain(older_than=dt.timedelta(0), enforce_min_age=False)
    versions = {v["version"] for v in lance.dataset(f"{ns.uri}/__manifest").versions()}
    assert kept in versions
    assert kept + 1 not in versions  # the next one is gone, a later one stands
    assert sorted(held.to_table().column("id").to_pylist()) == [0, 10, 20]
    assert held.version > kept + 1

    hint = local(ns.uri) / "__manifest" / "_versions" / "latest_version_hint.json"
    hint.unlink()  # without it, Lance lists the versions
    assert held.state().view.is_latest()
    ns.write(tagged_rows("d", [4], 1, first_id=30))
    hint.unlink()
    assert sorted(held.to_table().column("id").to_pylist()) == [0, 10, 20, 30]
