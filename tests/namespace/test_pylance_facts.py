"""Facts about pylance and DataFusion that the library relies on, each a test of the library
it states a fact about (not of this project), so that an upgrade that changes one fails here
under the fact's name instead of silently elsewhere.

Each docstring names the module that relies on the fact and what breaks if it changes; the
library's comments point back here. Concurrency facts are shown deterministically: a handle
opened at version V is the writer that read V, another handle commits meanwhile, then the
stale operation runs. Timings quoted in comments (costs, speed-ups) are not tested; only the
behaviour they come with is.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path

import lance
import lance.namespace as ln
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import SessionConfig, SessionContext, col, lit, udf
from lance import LanceOperation, Transaction
from lance.dataset import MergeInsertBuilder, Session  # type: ignore[attr-defined]
from lance.fragment import DataFile, FragmentMetadata, write_fragments
from lance.optimize import Compaction, CompactionOptions
from lance.schema import LanceSchema

from airflow_provider_lance.namespace.format.manifest import BASE_FIELDS, PRIMARY_KEY_METADATA
from airflow_provider_lance.namespace.io.storage import is_conflict, is_not_found
from airflow_provider_lance.namespace.write import leaf_commit as leaves

KEYED = pa.schema(
    [
        pa.field("object_id", pa.utf8(), nullable=False, metadata=PRIMARY_KEY_METADATA),
        pa.field("v", pa.int64()),
    ]
)
UNKEYED = pa.schema([pa.field("object_id", pa.utf8(), nullable=False), pa.field("v", pa.int64())])
#: What a lost commit race says (``storage.is_conflict`` looks for the same words).
CONFLICT = r"(?i)concurrent|conflict|incompatible"


def rows(*pairs: tuple[str, int], schema: pa.Schema = KEYED) -> pa.Table:
    return pa.Table.from_pylist([{"object_id": k, "v": v} for k, v in pairs], schema=schema)


def content(uri: str) -> list[tuple[str, int]]:
    """The (object_id, v) rows of the latest version, sorted: duplicates stay visible."""
    return sorted((r["object_id"], r["v"]) for r in lance.dataset(uri).to_table().to_pylist())


@pytest.fixture
def keyed(tmp_path: Path) -> Callable[..., str]:
    """A factory of small tables keyed like ``__manifest`` (rows a=1, b=2 at version 1)."""
    made = iter(range(1_000))

    def make(schema: pa.Schema = KEYED) -> str:
        uri = str(tmp_path / f"t{next(made)}.lance")
        lance.write_dataset(rows(("a", 1), ("b", 2), schema=schema), uri)
        return uri

    return make


def upsert(ds: lance.LanceDataset) -> MergeInsertBuilder:
    return ds.merge_insert("object_id").when_matched_update_all().when_not_matched_insert_all()


def ints(v: int, n: int = 1) -> pa.Table:
    return pa.table({"v": pa.array([v] * n, pa.int64())})


def values(ds: lance.LanceDataset) -> list[int]:
    return sorted(ds.to_table().column("v").to_pylist())


@pytest.fixture
def leaf(tmp_path: Path) -> Callable[[int], str]:
    """A factory of leaf-like tables of ``n`` versions (value i appended by version i+1)."""
    made = iter(range(1_000))

    def make(n: int = 3) -> str:
        uri = str(tmp_path / f"leaf{next(made)}.lance")
        for i in range(n):
            lance.write_dataset(ints(i), uri, mode="append" if i else "create")
        return uri

    return make


def version_numbers(uri: str) -> list[int]:
    return sorted(int(v["version"]) for v in lance.dataset(uri).versions())


# -- merge_insert: the __manifest compare-and-swap ------------------------------------------
def test_fact_merge_insert_conflict_retries_0_raises_on_concurrent_row_change(keyed):
    """``manifest.Manifest.compare_and_swap``: a ``merge_insert`` with ``conflict_retries(0)``
    from version V raises (an error ``storage.is_conflict`` recognises) when a commit after V
    changed one of its rows. If it were rebased instead, two read-modify-write commits of one
    row would both succeed: the claim protocol would lose updates."""
    uri = keyed()
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("a", 10)))
    with pytest.raises(OSError, match=CONFLICT) as raised:
        upsert(stale).conflict_retries(0).execute(rows(("a", 11)))
    assert is_conflict(raised.value)
    assert content(uri) == [("a", 10), ("b", 2)]


def test_fact_merge_insert_conflict_retries_0_rebases_over_changes_to_other_rows(keyed):
    """``manifest.Manifest.compare_and_swap``: a change after V to rows the ``merge_insert``
    does not touch is rebased (the commit lands one version higher, both changes kept). If
    it conflicted, every concurrent publish of unrelated partitions would retry."""
    uri = keyed()
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("b", 20)))
    upsert(stale).conflict_retries(0).execute(rows(("a", 11)))
    assert lance.dataset(uri).version == 3
    assert content(uri) == [("a", 11), ("b", 20)]


def test_fact_merge_insert_default_retries_loses_a_concurrent_update(keyed):
    """Why ``manifest`` passes ``conflict_retries(0)`` to every compare-and-swap: with the
    default retries a stale ``merge_insert`` re-applies its rows over a concurrent update of
    the same row, silently (the concurrent update is lost). Should this start to conflict,
    the explicit ``conflict_retries(0)`` is merely redundant."""
    uri = keyed()
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("a", 10)))
    upsert(stale).execute(rows(("a", 11)))
    assert content(uri) == [("a", 11), ("b", 2)]


def test_fact_merge_insert_conflict_retries_0_raises_on_concurrent_insert_of_same_key(keyed):
    """``manifest.Manifest.compare_and_swap`` (and the partition creation it carries): with
    the primary-key field metadata on ``object_id``, a stale ``merge_insert`` inserting a key
    that a commit after V inserted raises. If not, two writers creating one partition would
    both insert its row (a duplicate partition)."""
    uri = keyed()
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("c", 1)))
    with pytest.raises(OSError, match=CONFLICT) as raised:
        upsert(stale).conflict_retries(0).execute(rows(("c", 2)))
    assert is_conflict(raised.value)
    assert content(uri) == [("a", 1), ("b", 2), ("c", 1)]


def test_fact_insert_if_absent_with_primary_key_metadata_has_one_winner(keyed):
    """``manifest.Manifest.insert_absent``: a stale insert-if-absent of a key a concurrent
    commit inserted (default retries) inserts nothing and reports ``num_inserted_rows`` 0:
    exactly one writer wins each ``object_id``. If it inserted, namespaces and transaction
    rows would be duplicated."""
    uri = keyed()
    stale = lance.dataset(uri)
    lance.dataset(uri).merge_insert("object_id").when_not_matched_insert_all().execute(
        rows(("c", 1))
    )
    result = stale.merge_insert("object_id").when_not_matched_insert_all().execute(rows(("c", 2)))
    assert result["num_inserted_rows"] == 0
    assert content(uri) == [("a", 1), ("b", 2), ("c", 1)]


def test_fact_merge_insert_without_primary_key_metadata_duplicates_concurrent_inserts(keyed):
    """Why ``manifest.BASE_FIELDS`` puts ``PRIMARY_KEY_METADATA`` on ``object_id``: without it
    a stale ``merge_insert`` does not see a concurrent insert of the same key, even with
    ``conflict_retries(0)``, and both rows stay."""
    uri = keyed(UNKEYED)
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("c", 1), schema=UNKEYED))
    upsert(stale).conflict_retries(0).execute(rows(("c", 2), schema=UNKEYED))
    assert content(uri) == [("a", 1), ("b", 2), ("c", 1), ("c", 2)]


def test_fact_btree_on_merge_key_makes_merge_insert_miss_concurrent_inserts(keyed):
    """``manifest.Manifest.ensure_indices`` (no BTREE on ``object_id``, a bloom filter
    instead): with a BTREE on the merge key, a stale ``merge_insert`` with
    ``conflict_retries(0)`` inserts a key a concurrent commit inserted, primary-key metadata
    notwithstanding (a duplicate partition row). Should this start to conflict, the index
    could be created: lookups by id would get faster, and ``merge_insert``'s join would
    read the index instead of every row's ``object_id`` (the fix under review upstream:
    lance-format/lance#9238)."""
    uri = keyed()
    lance.dataset(uri).create_scalar_index("object_id", "BTREE")
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("c", 1)))
    upsert(stale).conflict_retries(0).execute(rows(("c", 2)))
    assert content(uri) == [("a", 1), ("b", 2), ("c", 1), ("c", 2)]


@pytest.mark.parametrize(("column", "kind"), [("v", "BTREE"), ("object_id", "BLOOMFILTER")])
def test_fact_other_indices_keep_merge_insert_conflicts(keyed, column, kind):
    """``manifest.Manifest.ensure_indices`` (a BTREE on every partition column, a
    BLOOMFILTER on ``object_id``): with a BTREE on a column other than the merge key, or a
    bloom filter on the key, a stale ``merge_insert`` with ``conflict_retries(0)`` still
    raises on a concurrent change of its row and on a concurrent insert of its key, and
    insert-if-absent still has one winner. If not, these indices would let two publishes
    of one partition both win."""
    changed, inserted, absent = keyed(), keyed(), keyed()
    for uri in (changed, inserted, absent):
        lance.dataset(uri).create_scalar_index(column, kind)
    stale = lance.dataset(changed)
    upsert(lance.dataset(changed)).execute(rows(("a", 10)))
    with pytest.raises(OSError, match=CONFLICT):
        upsert(stale).conflict_retries(0).execute(rows(("a", 11)))
    stale = lance.dataset(inserted)
    upsert(lance.dataset(inserted)).execute(rows(("c", 1)))
    with pytest.raises(OSError, match=CONFLICT):
        upsert(stale).conflict_retries(0).execute(rows(("c", 2)))
    stale = lance.dataset(absent)
    lance.dataset(absent).merge_insert("object_id").when_not_matched_insert_all().execute(
        rows(("c", 1))
    )
    result = stale.merge_insert("object_id").when_not_matched_insert_all().execute(rows(("c", 2)))
    assert result["num_inserted_rows"] == 0
    assert (content(changed), content(inserted), content(absent)) == (
        [("a", 10), ("b", 2)],
        [("a", 1), ("b", 2), ("c", 1)],
        [("a", 1), ("b", 2), ("c", 1)],
    )


def test_fact_an_index_created_concurrently_with_a_compare_and_swap_lets_both_commit(keyed):
    """``manifest.Manifest.ensure_indices`` runs beside publishes (``maintain``, the
    compaction after a publish): an index created after a ``merge_insert`` read its version
    does not make it conflict, and one created from a version older than a ``merge_insert``
    lands too and still finds the row that commit rewrote (the new fragment is scanned)."""
    first, second = keyed(), keyed()
    stale = lance.dataset(first)
    lance.dataset(first).create_scalar_index("v", "BTREE")
    upsert(stale).conflict_retries(0).execute(rows(("a", 11)))
    stale = lance.dataset(second)
    upsert(lance.dataset(second)).conflict_retries(0).execute(rows(("a", 11)))
    stale.create_scalar_index("v", "BTREE")
    for uri in (first, second):
        assert content(uri) == [("a", 11), ("b", 2)]
        assert lance.dataset(uri).to_table(filter="v = 11").column("object_id").to_pylist() == ["a"]
        assert lance.dataset(uri).to_table(filter="v = 1").num_rows == 0
        assert [i.field_names for i in lance.dataset(uri).describe_indices()] == [["v"]]


def _dropping(ds: lance.LanceDataset, drop: str) -> MergeInsertBuilder:
    return upsert(ds).when_not_matched_by_source_delete(f"object_id IN ('{drop}')")


@pytest.mark.parametrize(
    ("concurrent", "conflicts"),
    [
        ("update the dropped row", True),
        ("delete the dropped row", True),
        ("update the upserted row", True),
        ("delete the upserted row", True),
        ("update another row", False),
    ],
)
def test_fact_merge_insert_by_source_delete_conflicts_on_its_dropped_and_upserted_rows(
    tmp_path, concurrent, conflicts
):
    """``manifest.Manifest.compare_and_swap_dropping``: one ``merge_insert`` that upserts rows
    and deletes others (``when_not_matched_by_source_delete``), with ``conflict_retries(0)``,
    raises when a commit after V updated or deleted a row it deletes or upserts, and is
    rebased over a change to any other row. If a change to a dropped row were rebased, a
    drop would discard a concurrent publish of that partition."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(rows(("a", 1), ("b", 2), ("c", 3)), uri)
    stale = lance.dataset(uri)
    other = lance.dataset(uri)
    target = {"dropped": "b", "upserted": "a", "another": "c"}[concurrent.split()[-2]]
    if concurrent.startswith("update"):
        upsert(other).execute(rows((target, 99)))
    else:
        other.delete(f"object_id = '{target}'")
    if conflicts:
        with pytest.raises(OSError, match=CONFLICT) as raised:
            _dropping(stale, "b").conflict_retries(0).execute(rows(("a", 10)))
        assert is_conflict(raised.value)
    else:
        _dropping(stale, "b").conflict_retries(0).execute(rows(("a", 10)))
        assert content(uri) == [("a", 10), ("c", 99)]


def test_fact_merge_insert_by_source_delete_with_no_rows_deletes_only(keyed):
    """``manifest.Manifest.compare_and_swap_dropping``: an empty source deletes the rows
    the by-source filter selects and changes nothing else (a drop without upserts)."""
    uri = keyed()
    _dropping(lance.dataset(uri), "b").conflict_retries(0).execute(rows())
    assert content(uri) == [("a", 1)]


def test_fact_execute_uncommitted_then_commit_drops_the_primary_key_check(keyed):
    """``history`` (module docstring): a ``merge_insert`` takes transaction properties only
    through ``execute_uncommitted`` + ``LanceDataset.commit``, and that path loses the
    primary-key conflict check: a stale insert of a key a concurrent commit inserted commits
    a duplicate. So ``__manifest`` commits carry no properties and ``history`` reads what
    each version did from its Lance transaction. If ``MergeInsertBuilder`` gains properties,
    or the check survives, commits could describe themselves."""
    assert not hasattr(MergeInsertBuilder, "transaction_properties")
    uri = keyed()
    stale = lance.dataset(uri)
    upsert(lance.dataset(uri)).execute(rows(("c", 1)))
    transaction, _ = upsert(stale).conflict_retries(0).execute_uncommitted(rows(("c", 2)))
    lance.LanceDataset.commit(uri, transaction, max_retries=0)
    assert content(uri) == [("a", 1), ("b", 2), ("c", 1), ("c", 2)]


def test_fact_each_merge_insert_adds_a_fragment(keyed):
    """``manifest_compaction`` (``AUTO_COMPACT_FRAGMENTS``): every ``merge_insert`` commit adds a
    fragment to the table (an update also leaves a deletion file in the fragment that held
    the row; a fragment all of whose rows are deleted goes), so ``__manifest`` grows by
    one fragment a publish until compacted. (The slowdown this causes, ~100 ms -> ~700 ms a
    publish after 600 commits, is a timing and not tested.)"""
    uri = keyed()
    for change in (("c", 3), ("d", 4), ("a", 10)):
        upsert(lance.dataset(uri)).execute(rows(change))
    fragments = lance.dataset(uri).get_fragments()
    assert len(fragments) == 4
    assert fragments[0].metadata.deletion_file is not None  # "a" updated: deleted here


# -- UpdateConfig ---------------------------------------------------------------------------
CONFIG_CHANGES: dict[str, Callable[[lance.LanceDataset], object]] = {
    "table metadata": lambda ds: ds.update_metadata({"k": "v"}),
    "schema metadata": lambda ds: ds.update_schema_metadata({"k": "v"}),
    "field metadata": lambda ds: ds.update_field_metadata({"v": {"k": "v"}}),
    "config": lambda ds: ds.update_config({"k": "v"}),
}


@pytest.mark.parametrize("kind", list(CONFIG_CHANGES))
def test_fact_merge_insert_conflict_retries_0_is_rebased_over_any_update_config(keyed, kind):
    """``spec_fence`` (module docstring): a ``merge_insert`` with ``conflict_retries(0)``
    based before an ``UpdateConfig`` of any kind commits after it. That is why a merge
    cannot learn of a partition spec change from its swap and spec changes are ordered
    through fence and intent rows. If it started to conflict, the fences would be redundant
    (not wrong)."""
    uri = keyed()
    stale = lance.dataset(uri)
    CONFIG_CHANGES[kind](lance.dataset(uri))
    txn = lance.dataset(uri).read_transaction(2)
    assert type(txn.operation).__name__ == "UpdateConfig"
    upsert(stale).conflict_retries(0).execute(rows(("a", 11)))
    assert lance.dataset(uri).version == 3
    assert content(uri) == [("a", 11), ("b", 2)]


def test_fact_update_config_races_conflict_on_the_same_key_only(keyed):
    """``manifest.Manifest.commit_metadata`` (schema and partition-spec compare-and-swap): two
    ``UpdateConfig`` commits from one read version setting the same table-metadata key: the
    second raises a conflict; setting different keys, the second is rebased. If same-key
    races were rebased, two concurrent schema changes would both succeed, the last one
    silently overwriting the first."""
    uri = keyed()

    def set_key(key: str, value: str) -> None:
        operation = LanceOperation.UpdateConfig(
            table_metadata_updates=LanceOperation.UpdateMap({key: value})
        )
        lance.LanceDataset.commit(uri, Transaction(1, operation), max_retries=0)

    set_key("a", "1")
    set_key("b", "1")
    assert lance.dataset(uri).version == 3
    with pytest.raises(OSError, match=CONFLICT) as raised:
        set_key("a", "2")
    assert is_conflict(raised.value)
    assert lance.dataset(uri).metadata == {"a": "1", "b": "1"}


# -- creating, appending and committing to leaf tables ---------------------------------------
def test_fact_overwrite_at_read_version_0_without_retries_is_exclusive(tmp_path):
    """``storage.Storage.create_table`` and ``leaf_commit._commit_on`` (``base == 0``):
    ``LanceDataset.commit(uri, Transaction(0, Overwrite), max_retries=0)`` onto a table that
    exists raises and leaves the table alone, so of concurrent creators exactly one makes
    version 1. (pylance 14.0.2 raises an ``OSError`` saying ``_versions/0.manifest`` "was not
    found", which ``storage.is_conflict`` does not call a conflict: the callers check for an
    existing table after any storage error.)"""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(ints(1), uri)
    fragments = write_fragments(ints(2), uri, mode="overwrite")
    with pytest.raises((OSError, ValueError)):
        lance.LanceDataset.commit(
            uri, Transaction(0, LanceOperation.Overwrite(ints(2).schema, fragments)), max_retries=0
        )
    assert version_numbers(uri) == [1]
    assert values(lance.dataset(uri)) == [1]


def test_fact_create_is_not_exclusive_a_losing_creator_lands_as_a_later_version(tmp_path):
    """``storage.Storage.create_leaf`` and ``storage.Storage.create_table``:
    ``write_dataset(mode="create")`` commits a read-version-0 ``Overwrite`` with retries; a
    creator that finds the table made meanwhile is rebased into version 2 holding exactly its
    own data, with its own schema (shown here by that commit itself, since the race of two
    ``write_dataset`` calls is not deterministic). So ``create_leaf`` trusts only version 1,
    and ``create_table`` commits with ``max_retries=0``. A ``write_dataset(mode="create")``
    that finds the table already there raises "already exists" (``create_leaf`` then looks
    for the table)."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(ints(1), uri)
    other = pa.table({"w": ["x"]})
    fragments = write_fragments(other, uri, mode="overwrite")
    made = lance.LanceDataset.commit(
        uri, Transaction(0, LanceOperation.Overwrite(other.schema, fragments))
    )
    assert made.version == 2
    assert lance.dataset(uri).to_table().to_pylist() == [{"w": "x"}]
    assert values(lance.dataset(uri, version=1)) == [1]
    with pytest.raises((OSError, ValueError), match="already exists"):
        lance.write_dataset(ints(3), uri, mode="create")


def test_fact_stale_append_is_rebased_over_an_append_and_fails_over_an_overwrite(leaf):
    """``storage.Storage.write_onto`` (``staging``, direct writes): ``write_dataset`` appending
    through a handle at version V, after another append made V+1, succeeds as V+2 holding
    both appends; after an overwrite made V+1, it raises a conflict. So only a version
    ``V + 1`` holds exactly V's rows plus the write's."""
    uri = leaf(1)
    stale = lance.dataset(uri)
    lance.write_dataset(ints(2), uri, mode="append")
    made = lance.write_dataset(ints(3), stale, mode="append")
    assert made.version == 3
    assert values(made) == [0, 2, 3]

    uri = leaf(1)
    stale = lance.dataset(uri)
    lance.write_dataset(ints(2), uri, mode="overwrite")
    with pytest.raises(OSError, match=CONFLICT) as raised:
        lance.write_dataset(ints(3), stale, mode="append")
    assert is_conflict(raised.value)
    assert values(lance.dataset(uri)) == [2]


def test_fact_stale_overwrite_silently_wins_over_a_concurrent_append(leaf):
    """``storage.Storage.write_onto`` with ``overwrite`` (and the rule that partition
    overwrites are serialised through the ``__manifest`` compare-and-swap): an overwrite
    through a handle at V after an append made V+1 succeeds as V+2, and the append's rows
    are gone. Nothing in Lance protects the append."""
    uri = leaf(1)
    stale = lance.dataset(uri)
    lance.write_dataset(ints(2), uri, mode="append")
    made = lance.write_dataset(ints(3), stale, mode="overwrite")
    assert made.version == 3
    assert values(made) == [3]


@pytest.mark.parametrize("by", ["handle", "uri"])
def test_fact_commit_through_a_stale_handle_is_rebased_like_a_commit_by_uri(leaf, by):
    """``storage.Storage.commit`` (its ``on`` argument): ``LanceDataset.commit`` of an
    ``Append`` at read version V, with ``max_retries=0``, after another commit made V+1,
    lands as V+2 whether given the URI or a handle opened at V; a handle is not a stale
    view the commit is checked against. So ``leaf_commit._commit_on`` accepts only ``base + 1``
    either way."""
    uri = leaf(1)
    stale = lance.dataset(uri)
    lance.write_dataset(ints(2), uri, mode="append")
    fragments = write_fragments(ints(3), uri, mode="append")
    made = lance.LanceDataset.commit(
        stale if by == "handle" else uri,
        Transaction(1, LanceOperation.Append(fragments)),
        max_retries=0,
    )
    assert made.version == 3
    assert values(made) == [0, 2, 3]


def test_fact_transaction_properties_are_read_back_per_version_and_restore_has_none(leaf):
    """``leaf_version.committed_by`` (which version a transaction made) and ``history``: the
    ``transaction_properties`` of ``write_dataset`` and of a ``Transaction`` are returned by
    ``read_transaction(version)``; a ``restore()`` records none (it is nobody's, so a roll
    back is never mistaken for a transaction's own commit)."""
    uri = leaf(1)
    lance.write_dataset(ints(1), uri, mode="append", transaction_properties={"txn": "w"})
    fragments = write_fragments(ints(2), uri, mode="append")
    lance.LanceDataset.commit(
        uri,
        Transaction(2, LanceOperation.Append(fragments), transaction_properties={"txn": "c"}),
        max_retries=0,
    )
    lance.dataset(uri, version=1).restore()
    ds = lance.dataset(uri)
    assert ds.read_transaction(2).transaction_properties == {"txn": "w"}
    assert ds.read_transaction(3).transaction_properties == {"txn": "c"}
    assert ds.version == 4
    assert not ds.read_transaction(4).transaction_properties


def test_fact_missing_table_error_is_recognised_as_not_found(tmp_path):
    """``storage.is_not_found`` (``Storage.table`` raising ``TableNotFoundError``): opening a
    table that does not exist raises an error saying the dataset "was not found". If the
    wording changes, a missing table is reported as unreadable storage."""
    with pytest.raises((OSError, ValueError)) as raised:
        lance.dataset(str(tmp_path / "missing.lance"))
    assert is_not_found(raised.value)


def test_fact_a_cacheless_session_opens_tables_to_write(leaf):
    """``storage.Storage.table_to_write``: a table opened through one process-wide ``Session``
    with no index or metadata cache can be written through. (That it halves the cost of an
    open with a session of its own is a timing and not tested.)"""
    session = Session(index_cache_size_bytes=0, metadata_cache_size_bytes=0)
    uri = leaf(1)
    for v in (1, 2):
        ds = lance.dataset(uri, session=session)
        made = lance.write_dataset(ints(v), ds, mode="append")
    assert made.version == 3
    assert values(lance.dataset(uri)) == [0, 1, 2]


# -- changes that rewrite what is there: Delete, Rewrite, restore ------------------------------
def test_fact_stale_delete_and_rewrite_are_rebased_over_an_append(leaf):
    """``leaf_commit.commit_change`` and ``compaction``: a ``Delete`` or a ``Rewrite`` computed on
    version V and committed (``max_retries=0``) after an ``Append`` made V+1 is silently
    rebased to V+2 (the append's rows kept). So a change is used only if it became
    ``base + 1``; otherwise it holds content it was not computed for."""
    uri = leaf(3)
    old = lance.dataset(uri)
    deleted = old.get_fragments()[0].delete("v = 0")
    assert deleted is None  # every row of the fragment matched: the fragment goes
    lance.write_dataset(ints(9), uri, mode="append")
    delete = LanceOperation.Delete([], [old.get_fragments()[0].fragment_id], "v = 0")
    made = lance.LanceDataset.commit(uri, Transaction(3, delete), max_retries=0)
    assert made.version == 5
    assert values(made) == [1, 2, 9]

    uri = leaf(3)
    old = lance.dataset(uri)
    results = [task.execute(old) for task in Compaction.plan(old, CompactionOptions()).tasks]
    lance.write_dataset(ints(9), uri, mode="append")
    groups = [
        LanceOperation.RewriteGroup(r.original_fragments, r.new_fragments)  # type: ignore[attr-defined]
        for r in results
    ]
    made = lance.LanceDataset.commit(
        uri, Transaction(3, LanceOperation.Rewrite(groups, [])), max_retries=0
    )
    assert made.version == 5
    assert values(made) == [0, 1, 2, 9]


def test_fact_compaction_planned_on_an_old_version_writes_files_without_committing(leaf):
    """``compaction`` (module docstring): ``Compaction.plan`` + ``CompactionTask.execute`` on
    a table opened at an older version write new files and commit nothing;
    ``Rewrite([RewriteGroup(original_fragments, new_fragments)], [])`` at that version
    commits them. ``optimize`` compacts each leaf's published version this way."""
    uri = leaf(3)
    old = lance.dataset(uri)
    lance.write_dataset(ints(9), uri, mode="append")
    plan = Compaction.plan(old, CompactionOptions())
    results = [task.execute(old) for task in plan.tasks]
    assert version_numbers(uri) == [1, 2, 3, 4]
    groups = [
        LanceOperation.RewriteGroup(r.original_fragments, r.new_fragments)  # type: ignore[attr-defined]
        for r in results
    ]
    lance.LanceDataset.commit(uri, Transaction(4, LanceOperation.Rewrite(groups, [])))
    compacted = lance.dataset(uri)
    assert values(compacted) == [0, 1, 2, 9]
    assert len(compacted.get_fragments()) == 2  # the three compacted, the later append


def test_fact_restore_keeps_fragment_ids_so_a_change_computed_before_applies_after(leaf):
    """``leaf_commit.commit_change`` and ``leaf_commit._roll_back``: ``restore()`` of version V
    commits a new version with V's fragments under the same fragment ids, so a ``Rewrite`` computed
    on V commits onto the restored version unchanged. If ids were renumbered, a roll back
    would invalidate every change computed on the published version."""
    uri = leaf(3)
    old = lance.dataset(uri)
    results = [task.execute(old) for task in Compaction.plan(old, CompactionOptions()).tasks]
    lance.write_dataset(ints(9), uri, mode="append")
    lance.dataset(uri, version=3).restore()
    restored = lance.dataset(uri)
    assert restored.version == 5
    ids = [f.fragment_id for f in old.get_fragments()]
    assert [f.fragment_id for f in restored.get_fragments()] == ids
    groups = [
        LanceOperation.RewriteGroup(r.original_fragments, r.new_fragments)  # type: ignore[attr-defined]
        for r in results
    ]
    made = lance.LanceDataset.commit(
        uri, Transaction(5, LanceOperation.Rewrite(groups, [])), max_retries=0
    )
    assert made.version == 6
    assert values(made) == [0, 1, 2]
    assert len(made.get_fragments()) == 1


def test_fact_rewrite_result_names_the_old_fragments_original_fragments(leaf):
    """``compaction._group``: a ``RewriteResult`` has ``original_fragments`` (pylance 14.0.2's
    type stub says ``old_fragments``, which the object does not have)."""
    old = lance.dataset(leaf(3))
    (result,) = [task.execute(old) for task in Compaction.plan(old, CompactionOptions()).tasks]
    assert len(result.original_fragments) == 3  # type: ignore[attr-defined]
    assert not hasattr(result, "old_fragments")


def test_fact_compaction_reserves_fragment_ids_as_an_operation_without_a_class(leaf):
    """``history.History._describe`` (``"BaseOperation": "compact"``): ``compact_files``
    commits two versions, the first reserving fragment ids, which ``read_transaction`` gives
    as a bare ``BaseOperation``, the second a ``Rewrite``. If the reservation gets a class
    of its own, history lists it as "other"."""
    uri = leaf(3)
    lance.dataset(uri).optimize.compact_files()
    ds = lance.dataset(uri)
    kinds = [type(ds.read_transaction(v).operation).__name__ for v in (4, 5)]
    assert kinds == ["BaseOperation", "Rewrite"]


def test_fact_read_transaction_fails_on_a_compaction_that_rewrote_an_index(tmp_path):
    """``history.History._describe``: ``read_transaction`` of a compaction that rewrote a
    scalar index (as ``__manifest``'s BITMAP on ``object_type``) raises ``TypeError``
    naming ``RewrittenIndex``; history calls such a version a compaction. If this is fixed,
    the workaround is dead code (the ``Rewrite`` is classified normally)."""
    uri = str(tmp_path / "indexed.lance")
    for i in range(3):
        lance.write_dataset(pa.table({"k": ["x"], "v": [i]}), uri, mode="append" if i else "create")
    lance.dataset(uri).create_scalar_index("k", "BITMAP")
    lance.dataset(uri).optimize.compact_files()
    ds = lance.dataset(uri)
    assert type(ds.read_transaction(5).operation).__name__ == "BaseOperation"
    with pytest.raises(TypeError, match="RewrittenIndex"):
        ds.read_transaction(6)


# -- cleanup_old_versions ------------------------------------------------------------------
def _five_versions(leaf: Callable[[int], str]) -> str:
    """Versions 1-5: appends, except version 3 which overwrites."""
    uri = leaf(2)
    lance.write_dataset(ints(3), uri, mode="overwrite")
    lance.write_dataset(ints(4), uri, mode="append")
    lance.write_dataset(ints(5), uri, mode="append")
    return uri


def test_fact_cleanup_versions_removes_exactly_the_listed_old_versions(leaf):
    """``maintenance._remove_below``: ``cleanup_old_versions(older_than, versions=[...])``
    removes the listed versions older than ``older_than``, never the latest, and ignores
    listed versions that do not exist; younger ones stay. If it removed others, readers of
    a retained ``__manifest`` version would lose their leaf versions."""
    uri = _five_versions(leaf)
    ds = lance.dataset(uri)
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(hours=1), versions=[1, 2])
    assert stats.old_versions == 0
    assert version_numbers(uri) == [1, 2, 3, 4, 5]
    stats = ds.cleanup_old_versions(older_than=dt.timedelta(0), versions=[1, 3, 5, 42])
    assert stats.old_versions == 2
    assert version_numbers(uri) == [2, 4, 5]


def test_fact_cleanup_deletes_data_files_only_when_no_remaining_version_references_them(leaf):
    """``maintenance._remove_below``: removing versions deletes a data file only once no
    remaining version references it (an appended file lives on in later versions; the files
    of versions an overwrite replaced go)."""
    uri = _five_versions(leaf)
    data = Path(uri) / "data"
    before = set(os.listdir(data))
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0), versions=[1])
    assert set(os.listdir(data)) == before  # version 2 still reads version 1's file
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0), versions=[2])
    assert len(before - set(os.listdir(data))) == 2  # the two files the overwrite replaced
    assert values(lance.dataset(uri)) == [3, 4, 5]


def test_fact_cleanup_refuses_an_empty_versions_list(leaf):
    """``maintenance._remove_below`` returns early when nothing is doomed: pylance refuses
    ``versions=[]`` ("must not be empty") rather than removing nothing."""
    with pytest.raises((OSError, ValueError), match="must not be empty"):
        lance.dataset(leaf(2)).cleanup_old_versions(older_than=dt.timedelta(0), versions=[])


def test_fact_cleanup_retain_versions_counts_the_versions_that_exist_when_it_runs(leaf):
    """Why ``maintenance._remove_below`` lists versions instead of ``retain_versions``: it
    keeps the newest N versions existing when cleanup runs, so a commit that lands between
    choosing N and cleaning shifts the window off a version a reader needs."""
    uri = _five_versions(leaf)  # a reader needs versions 4 and 5: retain_versions=2
    lance.write_dataset(ints(6), uri, mode="append")  # a concurrent commit meanwhile
    lance.dataset(uri).cleanup_old_versions(older_than=dt.timedelta(0), retain_versions=2)
    assert version_numbers(uri) == [5, 6]


def test_fact_cleanup_raises_on_tagged_versions_unless_told_to_keep_them(leaf):
    """``maintenance._remove_below`` and ``maintain``'s manifest cleanup: a cleanup that would
    remove a tagged version raises by default; with ``error_if_tagged_old_versions=False``
    it keeps the tagged version and removes the others."""
    uri = _five_versions(leaf)
    ds = lance.dataset(uri)
    ds.tags.create("keep", 2)
    with pytest.raises((OSError, ValueError), match="tagged"):
        ds.cleanup_old_versions(older_than=dt.timedelta(0), versions=[1, 2, 3])
    assert version_numbers(uri) == [1, 2, 3, 4, 5]
    stats = ds.cleanup_old_versions(
        older_than=dt.timedelta(0), versions=[1, 2, 3], error_if_tagged_old_versions=False
    )
    assert stats.old_versions == 2
    assert version_numbers(uri) == [2, 4, 5]


# -- versions, schemas, files ----------------------------------------------------------------
def test_fact_version_timestamps_are_naive_local_times(leaf):
    """``timetravel._utc``: ``versions()`` gives each version's commit time as a naive
    ``datetime`` in the process's local zone (``fromtimestamp``), which ``astimezone``
    interprets correctly. If pylance gave naive UTC (or aware) times, ``as_of`` would be off
    by the zone's offset. Checked under a zone far from UTC."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "Pacific/Auckland"
    time.tzset()
    try:
        uri = leaf(1)
        before = time.time()
        stamp = lance.dataset(uri).versions()[0]["timestamp"]
        assert isinstance(stamp, dt.datetime)
        assert stamp.tzinfo is None
        assert abs(stamp.astimezone(dt.timezone.utc).timestamp() - before) < 60
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def test_fact_lance_strips_lance_prefixed_field_metadata(tmp_path):
    """``schema.LEAF_FIELD_ID_KEY``: Lance drops ``lance:``-prefixed field metadata from a
    written table's schema and keeps other keys, so leaf columns carry the namespace field
    id under ``partitioned-namespace:field_id``. If Lance kept (or also stripped) the key,
    leaf columns would map to namespace columns wrongly, or not at all."""
    field = pa.field(
        "a",
        pa.int64(),
        metadata={"lance:field_id": "7", "partitioned-namespace:field_id": "7", "other": "x"},
    )
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1]}, schema=pa.schema([field])), uri)
    assert lance.dataset(uri).schema.field("a").metadata == {
        b"partitioned-namespace:field_id": b"7",
        b"other": b"x",
    }


@pytest.mark.parametrize("predicate", ["a > 2.5", "d = '2025-01-01'"])
def test_fact_lance_filter_planner_rejects_what_datafusion_coerces(tmp_path, predicate):
    """``deletion._delete_rows``: ``LanceFragment.delete`` refuses a filter comparing an int
    column with a float or a date column with a string (DataFusion coerces both), raising
    ``OSError``/``ValueError``, which sends the delete to the project's own evaluation. If
    Lance silently evaluated such a filter differently, the fallback would never run."""
    uri = str(tmp_path / "t.lance")
    table = pa.table(
        {"a": pa.array([1, 2, 3], pa.int32()), "d": pa.array([dt.date(2025, 1, 1)] * 3)}
    )
    lance.write_dataset(table, uri)
    with pytest.raises((OSError, ValueError), match="literal"):
        lance.dataset(uri).get_fragments()[0].delete(predicate)


def test_fact_lance_filter_reads_a_double_quoted_name_as_a_string(tmp_path):
    """``scan._backtick_identifiers``: pylance's filter parser takes ``"country"`` for the
    string 'country' (SQL and DataFusion: the column), and backticks for the column. So every
    filter pushed to Lance names columns in backticks; a double-quoted one sent as it is
    would match nothing (or, under ``<>``, everything: a delete would remove every row)."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"country": ["DE", "FR"]}), uri)
    ds = lance.dataset(uri)
    assert ds.count_rows("\"country\" = 'DE'") == 0
    assert ds.count_rows("\"country\" <> 'DE'") == 2
    assert ds.count_rows("`country` = 'DE'") == 1


def test_fact_schema_from_pyarrow_equals_the_schema_of_a_table_created_from_it(tmp_path):
    """``leaf_commit.schema_digest`` (a ``pa.Schema`` stands for a table created from it):
    ``LanceSchema.from_pyarrow(s)`` renders exactly as the schema of a table written from
    ``s``, field ids included. If not, every replacement's staged files would be refused as
    written under another schema."""
    schema = pa.schema([pa.field("a", pa.int64()), pa.field("b", pa.utf8())])
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1], "b": ["x"]}, schema=schema), uri)
    assert repr(LanceSchema.from_pyarrow(schema)) == repr(lance.dataset(uri).lance_schema)


def test_fact_write_fragments_take_the_field_ids_of_the_version_they_target(tmp_path):
    """``leaf_commit.stage_fragments`` and ``leaf_commit.check_append_schema``: data files written
    for a table opened at version V name their columns by V's field ids (a column dropped and
    added again gets a new id), so files are only meaningful in a version of the schema
    they were written against."""
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(pa.table({"a": [1], "b": ["x"]}), uri)
    ds = lance.dataset(uri)
    ds.drop_columns(["a"])
    ds.add_columns(pa.schema([pa.field("a", pa.int64())]))
    at = lance.dataset(uri)
    (fragment,) = write_fragments(pa.table({"b": ["y"], "a": [2]}), at, mode="append")
    assert [f.fields for f in fragment.files] == [[1, 2]]  # b kept id 1, a is now 2


def test_fact_data_file_and_fragment_metadata_fields(tmp_path):
    """``leaf_commit.fragment_text``: its fast path writes ``FragmentMetadata.to_json()`` by hand
    for these exact dataclass fields; with others it falls back to ``to_json`` (correct, but
    slower). This pins that the fast path is on with this pylance."""
    assert tuple(f.name for f in dataclasses.fields(DataFile)) == leaves._DATA_FILE_FIELDS
    fields = tuple(f.name for f in dataclasses.fields(FragmentMetadata))
    assert fields == leaves._FRAGMENT_FIELDS
    assert leaves._PLAIN_TEXT


def test_fact_directory_namespace_writes_rewrite_the_manifest_with_its_base_columns(tmp_path):
    """``manifest.BASE_FIELDS`` and ``repair``: pylance's ``DirectoryNamespace`` writes
    ``__manifest`` with exactly the base columns ``manifest`` defines (primary-key metadata
    included), reads a manifest with extra columns, and each write it makes is an
    ``Overwrite`` of the whole table with the base columns only: the extra columns (our
    ``read_version``, partition columns) are gone, rows and table metadata stay."""
    root = str(tmp_path)
    ln.DirectoryNamespace(root=root).create_namespace(ln.CreateNamespaceRequest(id=["a"]))
    manifest = lance.dataset(f"{root}/__manifest")
    assert list(manifest.schema) == list(BASE_FIELDS)
    manifest.add_columns(pa.schema([pa.field("read_version", pa.uint64())]))
    manifest.update_metadata({"kept": "1"})
    dirns = ln.DirectoryNamespace(root=root)
    assert dirns.list_namespaces(ln.ListNamespacesRequest(id=[])).namespaces == ["a"]
    dirns.create_namespace(ln.CreateNamespaceRequest(id=["b"]))
    clobbered = lance.dataset(f"{root}/__manifest")
    assert type(clobbered.read_transaction(clobbered.version).operation).__name__ == "Overwrite"
    assert clobbered.schema.names == [f.name for f in BASE_FIELDS]
    assert sorted(clobbered.to_table().column("object_id").to_pylist()) == ["a", "b"]
    assert clobbered.metadata == {"kept": "1"}


# -- DataFusion ------------------------------------------------------------------------------
def test_fact_datafusion_from_arrow_registers_its_input_until_deregistered():
    """``expressions.registered``: ``SessionContext.from_arrow(data, name)`` registers
    ``data`` in the session under ``name`` until ``deregister_table``; a long-lived session
    would otherwise keep every evaluated table alive."""
    ctx = SessionContext(SessionConfig().with_target_partitions(1))
    frame = ctx.from_arrow(pa.table({"a": [1]}), "__input_0")
    assert ctx.table_exist("__input_0")
    ctx.deregister_table("__input_0")
    assert not ctx.table_exist("__input_0")
    assert frame.to_arrow_table().num_rows == 1


def test_fact_datafusion_coerces_udf_arguments_to_its_one_signature():
    """``expressions.new_session`` (``hash`` bound to the input's type): a Python UDF declared
    for utf8 and called on an int32 column is not refused: DataFusion casts the ints to
    their decimal strings first. A ``hash`` bound to the wrong type would hash other bytes
    than the spec's and route rows to the wrong buckets, silently."""
    seen: list[pa.DataType] = []

    def length(values: pa.Array) -> pa.Array:
        seen.append(values.type)
        return pc.utf8_length(values).cast(pa.int64())

    ctx = SessionContext()
    ctx.register_udf(udf(length, [pa.utf8()], pa.int64(), "immutable", "length_of"))
    ctx.from_arrow(pa.table({"x": pa.array([12345, 7], pa.int32())}), "t")
    out = ctx.sql("SELECT length_of(x) AS n FROM t").to_arrow_table()
    assert seen == [pa.utf8()]
    assert out.column("n").to_pylist() == [5, 1]


def test_fact_datafusion_with_one_target_partition_keeps_the_input_order():
    """``expressions.new_session`` (``with_target_partitions(1)``): a projection over input of
    several 8,192-row batches returns its values in the input's row order with one target
    partition (with more, batches come back in the order they finish: not tested, as it is
    not deterministic). Partition values are matched to rows by position."""
    n = 8192 * 4 + 5
    table = pa.table({"a": pa.array(range(n), pa.int64())})
    ctx = SessionContext(SessionConfig().with_target_partitions(1))
    frame = ctx.from_arrow(pa.Table.from_batches(table.to_batches(max_chunksize=8192)), "t")
    out = frame.select((col("a") * lit(2)).alias("b")).to_arrow_table()
    assert out.column("b").to_pylist() == [2 * i for i in range(n)]


def test_fact_datafusion_evaluates_zoned_timestamps_in_their_zone_and_naive_ones_in_utc():
    """``expressions.new_session`` (session time zone pinned to UTC) and the temporal
    transforms of ``spec``: DataFusion takes the hour of a zoned timestamp in its zone and of
    a zone-less one as UTC. If this changed, ``hour``/``day`` partition values would follow."""
    moment = dt.datetime(2025, 1, 1, 23, 30, tzinfo=dt.timezone.utc)
    table = pa.table(
        {
            "zoned": pa.array([moment], pa.timestamp("us", tz="America/New_York")),
            "naive": pa.array([moment.replace(tzinfo=None)], pa.timestamp("us")),
        }
    )
    ctx = SessionContext(SessionConfig().set("datafusion.execution.time_zone", "+00:00"))
    ctx.from_arrow(table, "t")
    out = ctx.sql("SELECT date_part('hour', zoned) AS z, date_part('hour', naive) AS n FROM t")
    assert out.to_arrow_table().to_pylist() == [{"z": 18, "n": 23}]
