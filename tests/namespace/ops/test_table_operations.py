"""Table operations on real Lance datasets: drop_partitions, delete, merge, optimize.

Each operation publishes in one ``__manifest`` commit; these tests check what it does to
the rows, to the leaf tables (read back with raw pylance at their published version), to
the files on disk, its idempotence under a ``txn_id``, a crash at each of its steps, and
the errors bad input gets (with nothing changed on disk)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    DataValidationError,
    FilterError,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.testing import FailpointError
from tests.support import (
    EVENTS_SCHEMA,
    TAGGED,
    all_readable,
    by_id,
    claims,
    crashing,
    events,
    ids,
    local,
    tagged_rows,
    tree,
)


def leaf_rows(ns: PartitionedNamespace, part: int) -> list[int]:
    """The ids raw pylance reads from one partition's leaf at its published version."""
    p = ns.partition({"part": part})
    table = lance.dataset(p.location, version=p.read_version).to_table(columns=["id"])
    return sorted(table.column("id").to_pylist())


def data_files(root: Path) -> set[str]:
    return {f for f in tree(root) if "/data/" in f and not f.startswith("__manifest/")}


def disk(root: Path) -> list[str]:
    """Everything on disk but ``__manifest``'s own history."""
    return [f for f in tree(root) if not f.startswith("__manifest/")]


def published_files_exist(ns: PartitionedNamespace) -> None:
    """Every data file a published leaf version references exists, and reads whole."""
    for p in ns.partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        for fragment in leaf.get_fragments():
            for f in fragment.data_files():
                assert (local(p.location) / "data" / f.path).exists()
    all_readable(ns)


# -- drop_partitions --------------------------------------------------------------------------
def test_drop_partitions_removes_whole_partitions_in_one_commit(three_parts, root) -> None:
    before, files = three_parts.version, data_files(root)
    result = three_parts.drop_partitions("part >= 2")
    assert result.manifest_version == three_parts.version == before + 1
    assert sorted(p.values["part"] for p in result.dropped) == [2, 3]
    assert result.rows_removed == 8
    assert result.rewritten == []
    assert ids(three_parts) == [0, 1, 2, 3]
    assert [p.values["part"] for p in three_parts.partitions()] == [1]
    assert data_files(root) == files  # metadata only: the leaf files stay
    # the version before still reads the dropped partitions (time travel)
    assert sorted(three_parts.to_table(version=before).column("id").to_pylist()) == list(range(12))
    assert three_parts.drop_partitions("part >= 2").manifest_version is None  # nothing left to drop


def test_drop_partitions_filters_partition_fields_of_each_spec_version(root) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    ns.write(events(12))  # v1: 3 days
    ns.evolve_partition_spec(
        [
            PartitionField("event_year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    ns.write(events(8, start=dt.date(2026, 1, 5), first_id=100))  # v2: 2026 x 4 countries
    result = ns.drop_partitions("event_year = 2026 AND country = 'US'")
    assert [dict(p.values) for p in result.dropped] == [{"event_year": 2026, "country": "US"}]
    assert ns.count_rows() == 20 - 2
    # a v1 partition has no event_year: NULL, never dropped by a filter on it
    assert ns.drop_partitions("event_year IS NOT NULL AND country = 'DE'").rows_removed == 2
    result = ns.drop_partitions("event_date = '2025-12-11'")
    assert result.rows_removed == 4
    assert ns.count_rows() == 12


def test_a_dropped_partition_written_again_has_only_the_new_rows(three_parts, root) -> None:
    """The new leaf lands where the dropped one's files still are; none of its rows come
    back, even when the old leaf's latest version is one no writer of ours tagged (a
    roll-back's restore): see ``commit_leaf`` for partitions without a row."""
    p = three_parts.partition({"part": 1})
    lance.dataset(p.location).restore()  # an untagged latest version, as a roll-back makes
    three_parts.drop_partitions("part = 1")
    three_parts.write(tagged_rows("again", [1], 2, first_id=100))
    assert leaf_rows(three_parts, 1) == [100, 101]
    assert ids(three_parts) == [*range(4, 12), 100, 101]


@pytest.mark.parametrize(
    ("bad", "error", "says"),
    [
        (  # a column, not a partition field
            "tag = 'seed'",
            FilterError,
            r"^partition filter \"tag = 'seed'\" names no partition field 'tag'\. "
            r"drop_partitions filters on partition fields \(part\); to remove rows by other "
            r"columns use delete\(\)$",
        ),
        ("part >", FilterError, r"'part >' is not a valid expression: .*\. drop_partitions"),
        ("parts = 1", FilterError, r"names no partition field 'parts' \(did you mean 'part'\?\)"),
        ("", InvalidArgumentError, "a filter"),
    ],
)
def test_drop_partitions_rejects_filters_it_cannot_decide(
    three_parts, root, bad, error, says
) -> None:
    before = disk(root)
    with pytest.raises(error, match=says):
        three_parts.drop_partitions(bad, txn_id="drop-bad")
    assert disk(root) == before
    assert three_parts.transactions() == []


# -- delete -------------------------------------------------------------------------------------
def test_delete_drops_covered_partitions_and_writes_deletion_files_elsewhere(
    three_parts, root
) -> None:
    before, files = three_parts.version, data_files(root)
    result = three_parts.delete("part = 3 OR id IN (0, 5)")
    assert result.manifest_version == three_parts.version == before + 1
    assert [p.values["part"] for p in result.dropped] == [3]
    assert sorted(p.values["part"] for p in result.rewritten) == [1, 2]
    assert result.rows_removed == 6
    assert ids(three_parts) == [1, 2, 3, 4, 6, 7]
    assert leaf_rows(three_parts, 1) == [1, 2, 3]
    assert leaf_rows(three_parts, 2) == [4, 6, 7]
    assert data_files(root) == files  # deletion files only: no data rewritten
    assert any("/_deletions/" in f for f in tree(root))
    published_files_exist(three_parts)
    assert sorted(three_parts.to_table(version=before).column("id").to_pylist()) == list(range(12))


def test_delete_of_nothing_publishes_nothing(three_parts) -> None:
    before = three_parts.version
    result = three_parts.delete("id > 1000")
    assert result.manifest_version is None
    assert result.partitions == []
    assert three_parts.version == before


def test_delete_of_every_row_of_a_partition_by_rows_keeps_it_empty(three_parts) -> None:
    result = three_parts.delete("tag = 'seed' AND part = 2 AND id >= 0")
    # ``id >= 0`` is undecided per partition: a row-level delete empties the leaf
    assert result.dropped == []
    assert result.rows_removed == 4
    assert leaf_rows(three_parts, 2) == []
    three_parts.write(tagged_rows("later", [2], 1, first_id=50))
    assert leaf_rows(three_parts, 2) == [50]


def test_delete_evaluates_filters_lance_cannot_on_the_namespace_schema(three_parts) -> None:
    """A renamed column (the leaf keeps its old name) and ``hash()`` (which Lance lacks)
    are evaluated here, on rows conformed to the namespace schema; rows go by address."""
    three_parts.rename_column("tag", "label")
    result = three_parts.delete("label = 'seed' AND id % 4 = 1")
    assert result.rows_removed == 3
    assert ids(three_parts) == [0, 2, 3, 4, 6, 7, 8, 10, 11]
    result = three_parts.delete("hash(id) = hash(CAST(2 AS BIGINT))")
    assert result.rows_removed == 1
    assert 2 not in ids(three_parts)


def test_delete_across_spec_versions(root) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    ns.write(events(12))
    ns.evolve_partition_spec([PartitionField("country", "country")])
    ns.write(events(8, first_id=100))
    # v1 (by date) decides the date strictly; v2 (by country) must look at the rows
    result = ns.delete("event_date = '2025-12-10'")
    assert len(result.dropped) == 1
    assert result.dropped[0].values == {"event_date": dt.date(2025, 12, 10)}
    assert all(not p.dropped for p in result.partitions if "country" in p.values)
    assert ns.count_rows(filter="event_date = '2025-12-10'") == 0
    assert ns.count_rows() == 20 - 4 - 3
    # v2 by country decides ``country IS NULL`` strictly, v1 by date does not
    result = ns.delete("country IS NULL")
    assert [p.values for p in result.dropped] == [{"country": None}]
    assert ns.count_rows(filter="country IS NULL") == 0


@pytest.mark.parametrize(
    ("bad", "error"),
    [("nope = 1", FilterError), ("id >", FilterError), ("id + 1", FilterError)],
)
def test_delete_rejects_bad_filters_changing_nothing(three_parts, root, bad, error) -> None:
    before = disk(root)
    with pytest.raises(error):
        three_parts.delete(bad, txn_id="delete-bad")
    assert disk(root) == before


# -- idempotence under a txn_id ----------------------------------------------------------------
def test_a_retried_delete_returns_the_first_result_and_changes_nothing(three_parts) -> None:
    first = three_parts.delete("id % 2 = 0", txn_id="cleanup-1")
    version = three_parts.version
    three_parts.write(tagged_rows("later", [1], 2, first_id=100))  # even id 100 matches the filter
    again = three_parts.delete("id % 2 = 0", txn_id="cleanup-1")
    assert again == first
    assert three_parts.version == version + 1  # only the write's commit
    assert 100 in ids(three_parts)
    assert [(t.txn_id, t.mode, t.state) for t in three_parts.transactions()] == [
        ("cleanup-1", "delete", "published")
    ]


def test_a_table_operation_id_is_not_a_write_id(three_parts) -> None:
    three_parts.drop_partitions("part = 3", txn_id="op")
    with pytest.raises(InvalidArgumentError, match="exists with mode 'drop_partitions'"):
        three_parts.write(tagged_rows("w", [1], 1, first_id=100), txn_id="op")
    with pytest.raises(InvalidArgumentError, match="belongs to a drop_partitions"):
        three_parts.delete("id = 1", txn_id="op")
    three_parts.write(tagged_rows("w", [1], 1, first_id=100), txn_id="w")
    with pytest.raises(InvalidArgumentError, match="belongs to a append"):
        three_parts.delete("id = 1", txn_id="w")


DELETE_POINTS = [
    "delete.selected",
    "leaf.before_commit",
    "delete.leaf_committed",
    "delete.before_publish",
    "manifest.before_swap",
    "manifest.after_swap",
    "delete.after_publish",
]
AFTER_DELETE = [1, 2, 3, 4, 6, 7]


@pytest.mark.parametrize("point", DELETE_POINTS)
def test_a_crashed_delete_is_all_or_nothing_and_its_retry_completes_it(
    three_parts, monkeypatch, point
) -> None:
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        three_parts.delete("part = 3 OR id IN (0, 5)", txn_id="del")
    published = point in ("manifest.after_swap", "delete.after_publish")
    assert ids(three_parts) == (AFTER_DELETE if published else list(range(12)))
    all_readable(three_parts)
    result = three_parts.delete("part = 3 OR id IN (0, 5)", txn_id="del")
    assert ids(three_parts) == AFTER_DELETE
    assert result.rows_removed == 6
    assert len(result.partitions) == 3
    assert result.manifest_version is not None  # the version of the one swap, found again
    at = sorted(three_parts.to_table(version=result.manifest_version).column("id").to_pylist())
    before = sorted(
        three_parts.to_table(version=result.manifest_version - 1).column("id").to_pylist()
    )
    assert at == AFTER_DELETE
    assert before == list(range(12))
    assert three_parts.delete("part = 3 OR id IN (0, 5)", txn_id="del") == result
    published_files_exist(three_parts)
    three_parts.write(tagged_rows("later", [1, 2, 3], 1, first_id=100))  # every partition writable
    assert ids(three_parts) == sorted([*AFTER_DELETE, 100, 101, 102])


@pytest.mark.parametrize("point", ["delete.leaf_committed", "delete.before_publish"])
def test_a_crashed_anonymous_delete_leaves_no_record_and_nothing_visible(
    three_parts, root, monkeypatch, point
) -> None:
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        three_parts.delete("id IN (0, 5)")
    assert ids(three_parts) == list(range(12))
    assert not [f for f in tree(root) if f.startswith("_transactions/")]
    three_parts.delete("id IN (0, 5)")  # rolls the dead attempt's leaf versions back
    assert ids(three_parts) == [1, 2, 3, 4, *range(6, 12)]
    published_files_exist(three_parts)


def test_a_delete_whose_swap_reported_a_failure_but_committed_is_a_success(
    three_parts, monkeypatch
) -> None:
    with crashing(monkeypatch, "manifest.after_swap", "error"):
        result = three_parts.delete("id IN (0, 5)")
    assert result.manifest_version == three_parts.version
    assert result.rows_removed == 2
    assert ids(three_parts) == [1, 2, 3, 4, *range(6, 12)]


def test_a_delete_waits_for_a_claim_and_names_the_holder_after_the_timeout(
    three_parts, monkeypatch
) -> None:
    three_parts.begin("append", "X").stage(tagged_rows("x", [1], 1, first_id=100))
    with crashing(monkeypatch, "commit.after_claim"), pytest.raises(FailpointError):
        three_parts.commit("X")  # X holds partition 1's claim, its committer gone
    with pytest.raises(CommitConflict, match=r"X#1 \(committing for"):
        three_parts.delete("id = 0", claim_timeout=0.3)
    assert ids(three_parts) == list(range(12))
    three_parts.delete("part = 2 AND id = 4", claim_timeout=0.3)  # partition 2 is not held
    assert 4 not in ids(three_parts)
    three_parts.recover(lease_seconds=0)  # X aborted, its claim released
    three_parts.delete("id = 0")
    assert 0 not in ids(three_parts)
    assert claims(three_parts) == []


def test_a_dead_claim_is_cleared_by_the_delete(three_parts, monkeypatch) -> None:
    three_parts.begin("append", "X").stage(tagged_rows("x", [1], 1, first_id=100))
    with crashing(monkeypatch, "commit.after_claim"), pytest.raises(FailpointError):
        three_parts.commit("X")
    # X aborted by hand: its row is ABORTED, the claim on partition 1 dead but set
    from airflow_provider_lance.namespace.txn.lifecycle import aborted, load_records

    state = three_parts.state()
    record = load_records(state, ["X"])["X"]
    three_parts._manifest.commit(Swap(state.view, moves=aborted(record, "test")))
    assert claims(three_parts) == ["X#1"]
    three_parts.delete("id = 0", claim_timeout=0.3)
    assert claims(three_parts) == []
    assert ids(three_parts) == list(range(1, 12))


def test_errors_are_project_errors(three_parts) -> None:
    with pytest.raises(LanceNamespaceError):
        three_parts.delete("nope")


def _json_roundtrip(result) -> dict:
    return json.loads(json.dumps(result.to_dict()))


def test_results_are_small_and_json_friendly(three_parts) -> None:
    result = three_parts.delete("part = 3 OR id = 0", txn_id="d")
    raw = _json_roundtrip(result)
    assert raw["rows_removed"] == 5
    assert raw["partitions_dropped"] == 1
    assert raw["partitions"][0]["values"] == {"part": "3"}


# -- merge -------------------------------------------------------------------------------------
def rows_by_id(ns: PartitionedNamespace, version: int | None = None) -> dict[int, dict]:
    return by_id(ns.to_table(version=version))


def upserts(pairs: list[tuple[int, int]], tag: str) -> pa.Table:
    """Rows ``(id, part)`` tagged ``tag``."""
    return pa.table(
        {
            "id": pa.array([i for i, _ in pairs], pa.int64()),
            "part": pa.array([p for _, p in pairs], pa.int32()),
            "tag": [tag] * len(pairs),
        },
        schema=TAGGED,
    )


def test_merge_updates_matches_and_inserts_the_rest_in_one_commit(three_parts, root) -> None:
    before, rows_before = three_parts.version, rows_by_id(three_parts)
    result = three_parts.merge(
        upserts([(0, 1), (5, 2), (100, 2), (101, 7)], "m"), on=["id", "part"]
    )
    # Two commits: the merge's intent (bookkeeping, no row changes: see spec_fence), then
    # the one publish of all of it.
    assert result.manifest_version == three_parts.version == before + 2
    assert rows_by_id(three_parts, version=before + 1) == rows_before
    assert result.rows_updated == 2
    assert result.rows_inserted == 2
    assert [p.values["part"] for p in result.partitions if p.created] == [7]
    rows = rows_by_id(three_parts)
    assert sorted(rows) == [*range(12), 100, 101]
    assert {i for i, r in rows.items() if r["tag"] == "m"} == {0, 5, 100, 101}
    assert leaf_rows(three_parts, 2) == [4, 5, 6, 7, 100]
    assert leaf_rows(three_parts, 7) == [101]
    published_files_exist(three_parts)
    # a second merge of the same rows updates them again: nothing is duplicated
    again = three_parts.merge(
        upserts([(0, 1), (5, 2), (100, 2), (101, 7)], "m2"), on=["id", "part"]
    )
    assert again.rows_updated == 4
    assert again.rows_inserted == 0
    assert sorted(rows_by_id(three_parts)) == [*range(12), 100, 101]


def test_merge_with_delete_of_unmatched_rows_makes_the_namespace_the_source(three_parts) -> None:
    result = three_parts.merge(
        upserts([(0, 1), (1, 1), (50, 2)], "m"),
        on=["id", "part"],
        when_not_matched_by_source_delete=True,
    )
    assert sorted(rows_by_id(three_parts)) == [0, 1, 50]
    assert [p.values["part"] for p in result.dropped] == [3]
    assert result.rows_removed == 2 + 4 + 4  # 2 unmatched in 1, all of 2 but 50, all of 3


def test_merge_into_a_leaf_older_than_a_column_rewrites_it(three_parts) -> None:
    three_parts.add_column(pa.field("score", pa.float64()))
    data = pa.table(
        {
            "id": pa.array([1, 200], pa.int64()),
            "part": pa.array([1, 1], pa.int32()),
            "tag": ["m", "m"],
            "score": [1.5, 2.5],
        }
    )
    result = three_parts.merge(data, on=["id", "part"])
    assert result.rows_updated == 1
    assert result.rows_inserted == 1
    rows = rows_by_id(three_parts)
    assert rows[1]["score"] == 1.5
    assert rows[200]["score"] == 2.5
    assert rows[0]["score"] is None
    assert rows[0]["tag"] == "seed"
    assert sorted(rows) == [*range(12), 200]
    published_files_exist(three_parts)


def test_merge_on_a_renamed_key_column(three_parts) -> None:
    three_parts.rename_column("id", "key")
    data = pa.table(
        {
            "key": pa.array([2, 300], pa.int64()),
            "part": pa.array([1, 1], pa.int32()),
            "tag": ["r", "r"],
        }
    )
    result = three_parts.merge(data, on=["key", "part"])
    assert result.rows_updated == 1
    assert result.rows_inserted == 1
    tags = by_id(three_parts.to_table(), "tag", key="key")
    assert tags[2] == "r"
    assert tags[300] == "r"
    assert len(tags) == 13


def test_merge_updates_keys_where_an_older_spec_version_holds_them(root) -> None:
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    ns.write(events(6))  # v1, by day: ids 0-5
    ns.evolve_partition_spec([PartitionField("country", "country")])
    changed = events(6).set_column(3, "amount", pa.array([100.0 + i for i in range(6)]))
    fresh = events(2, first_id=50)
    result = ns.merge(
        pa.concat_tables([changed.slice(0, 2), fresh]), on=["id", "event_date", "country"]
    )
    # ids 0 and 1 live in v1 partitions: updated there, not inserted again under v2
    assert result.rows_updated == 2
    assert result.rows_inserted == 2
    amounts = by_id(ns.to_table(), "amount")
    assert sorted(amounts) == [0, 1, 2, 3, 4, 5, 50, 51]
    assert amounts[0] == 100.0
    assert amounts[1] == 101.0
    assert all(p.object_id.startswith("v2$") for p in result.partitions if p.created)


@pytest.mark.parametrize(
    ("data", "on", "error", "match"),
    [
        (upserts([(0, 1)], "m"), ["id"], InvalidArgumentError, r"missing: \['part'\]"),
        (upserts([(0, 1)], "m"), ["nope", "part"], LanceNamespaceError, "unknown column"),
        (upserts([(0, 1), (0, 1)], "m"), ["id", "part"], DataValidationError, "more than one"),
        (pa.table({"id": [1], "part": [1], "x": [1]}), ["id", "part"], DataValidationError, "'x'"),
        (upserts([(0, 1)], "m"), [], InvalidArgumentError, "key columns"),
    ],
)
def test_merge_rejects_bad_input_changing_nothing(
    three_parts, root, data, on, error, match
) -> None:
    before = disk(root)
    with pytest.raises(error, match=match):
        three_parts.merge(data, on=on, txn_id="merge-bad")
    assert disk(root) == before


MERGE_POINTS = [
    "merge.selected",
    "merge.leaf_committed",
    "merge.before_publish",
    "manifest.after_swap",
    "merge.after_publish",
]
MERGED = upserts([(0, 1), (100, 2), (101, 8)], "m")


@pytest.mark.parametrize("point", MERGE_POINTS)
def test_a_crashed_merge_is_all_or_nothing_and_its_retry_completes_it(
    three_parts, monkeypatch, point
) -> None:
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        three_parts.merge(MERGED, on=["id", "part"], txn_id="m")
    published = point in ("manifest.after_swap", "merge.after_publish")
    expected = [*range(12), 100, 101]
    assert ids(three_parts) == (expected if published else list(range(12)))
    result = three_parts.merge(MERGED, on=["id", "part"], txn_id="m")
    assert ids(three_parts) == expected
    assert rows_by_id(three_parts)[0]["tag"] == "m"
    assert result.rows_updated == 1
    assert result.rows_inserted == 2
    assert three_parts.merge(MERGED, on=["id", "part"], txn_id="m") == result
    published_files_exist(three_parts)
    three_parts.write(tagged_rows("later", [2, 8], 1, first_id=200))
    assert ids(three_parts) == [*expected, 200, 201]


# -- optimize ------------------------------------------------------------------------------------
def fragments(ns: PartitionedNamespace) -> dict[int, int]:
    """Fragments of each partition's leaf at its published version."""
    return {
        p.values["part"]: len(lance.dataset(p.location, version=p.read_version).get_fragments())
        for p in ns.partitions()
    }


def all_rows(ns: PartitionedNamespace) -> list[dict]:
    return sorted(ns.to_table().to_pylist(), key=lambda r: r["id"])


@pytest.fixture
def appended(three_parts) -> PartitionedNamespace:
    """Five more appends to every partition, then a delete: six fragments per leaf, some
    with deletion files."""
    for k in range(1, 6):
        three_parts.write(tagged_rows(f"day{k}", [1, 2, 3], 2, first_id=100 * k))
    three_parts.delete("id % 3 = 0")
    return three_parts


def test_optimize_compacts_every_leaf_in_one_commit_without_changing_a_row(appended) -> None:
    ns = appended
    rows, before = all_rows(ns), ns.version
    assert fragments(ns) == {1: 6, 2: 6, 3: 6}
    result = ns.optimize()
    assert result.manifest_version == ns.version == before + 1
    assert len(result.rewritten) == 3
    assert result.fragments_before == 18
    assert result.fragments_after == 3
    assert fragments(ns) == {1: 1, 2: 1, 3: 1}
    assert all_rows(ns) == rows
    assert ns.to_table(version=before).num_rows == len(rows)  # the old version reads too
    published_files_exist(ns)
    assert ns.optimize().manifest_version is None  # nothing left to compact


def test_optimize_only_the_partitions_a_filter_may_touch(appended) -> None:
    result = appended.optimize("part = 2")
    assert [p.values["part"] for p in result.rewritten] == [2]
    assert fragments(appended) == {1: 6, 2: 1, 3: 6}


def test_optimize_compacts_indexed_leaves_and_remaps_their_indexes(appended) -> None:
    """An index on a leaf, published (as a tool that indexes leaves would publish it):
    Lance's compaction commit remaps it onto the compacted fragments."""
    p = appended.partition({"part": 1})
    indexed = lance.dataset(p.location, version=p.read_version)
    indexed.create_scalar_index("id", "BTREE")
    state = appended.state()
    row = state.full_rows([p.object_id]).to_pylist()[0]
    row["read_version"] = lance.dataset(p.location).version
    appended._manifest.commit(Swap(state.view, [row]))
    rows = all_rows(appended)
    result = appended.optimize()
    assert result.skipped == {}
    assert sorted(c.values["part"] for c in result.rewritten) == [1, 2, 3]
    assert all_rows(appended) == rows
    leaf = lance.dataset(p.location, version=appended.partition({"part": 1}).read_version)
    (index,) = leaf.describe_indices()
    assert {int(f) for s in index.segments for f in s.fragment_ids} == {
        f.fragment_id for f in leaf.get_fragments()
    }
    assert "ScalarIndexQuery" in leaf.scanner(filter="id = 101").explain_plan()


OPTIMIZE_POINTS = [
    "optimize.selected",
    "optimize.leaf_committed",
    "optimize.before_publish",
    "manifest.after_swap",
]


@pytest.mark.parametrize("point", OPTIMIZE_POINTS)
def test_a_crashed_optimize_never_changes_a_row_and_its_retry_completes(
    appended, monkeypatch, point
) -> None:
    ns, rows = appended, all_rows(appended)
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        ns.optimize(txn_id="opt")
    assert all_rows(ns) == rows
    result = ns.optimize(txn_id="opt")
    assert fragments(ns) == {1: 1, 2: 1, 3: 1}
    assert all_rows(ns) == rows
    assert ns.optimize(txn_id="opt") == result
    published_files_exist(ns)


def test_optimize_rejects_bad_input(appended, root) -> None:
    before = disk(root)
    with pytest.raises(FilterError):
        appended.optimize("nope = 1")
    with pytest.raises(InvalidArgumentError):
        appended.optimize(target_rows_per_fragment=0)
    assert disk(root) == before


def test_operations_on_a_partition_published_as_read_the_latest(three_parts) -> None:
    """A foreign writer may publish a partition with a NULL read_version ("read the
    latest"): a delete builds on its latest version no writer of ours made, and
    publishes a read_version."""
    state = three_parts.state()
    p = three_parts.partition({"part": 2})
    row = state.full_rows([p.object_id]).to_pylist()[0]
    row["read_version"] = None
    three_parts._manifest.commit(Swap(state.view, [row]))
    assert three_parts.partition({"part": 2}).read_version is None
    result = three_parts.delete("id IN (4, 8)")
    assert result.rows_removed == 2
    assert three_parts.partition({"part": 2}).read_version is not None
    assert leaf_rows(three_parts, 2) == [5, 6, 7]
    merged = three_parts.merge(upserts([(5, 2)], "m"), on=["id", "part"])
    assert merged.rows_updated == 1
    assert ids(three_parts) == [0, 1, 2, 3, 5, 6, 7, 9, 10, 11]
