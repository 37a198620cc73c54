"""``optimize`` on indexed leaves (issue 41, upkeep): Lance's compaction commit remaps every
index onto the new fragments, so a leaf that gets daily appends is compacted and its
searches return what they did, with the rows indexed before still indexed; one
``__manifest`` commit, and concurrent writes and crashes keep every row."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.testing import FailpointError, hold
from tests.namespace.ops.index_data import leaf_indices, vector_rows
from tests.support import Worker, crashing, logged, no_duplicates, other

LEAF_COMMIT = "airflow_provider_lance.namespace.write.leaf_commit"


def published(ns: PartitionedNamespace, part: int) -> lance.LanceDataset:
    p = ns.partition({"part": part})
    return lance.dataset(p.location, version=p.read_version)


def coverage(ns: PartitionedNamespace) -> dict[str, tuple[int, int, int]]:
    return {
        i.name: (i.partitions_indexed, i.rows_indexed, i.rows_unindexed) for i in ns.list_indices()
    }


def segments_point_at_fragments_that_exist(ns: PartitionedNamespace) -> None:
    for p in ns.state().partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        present = {f.fragment_id for f in leaf.get_fragments()}
        for index in leaf.describe_indices():
            for s in index.segments:
                assert {int(f) for f in s.fragment_ids} <= present, (p.values, index.name)


def searches(ns: PartitionedNamespace, part: int) -> dict[str, object]:
    """Vector, full-text and scalar searches of the published leaf, through its indexes."""
    leaf = published(ns, part)
    q = vector_rows([part], 1, first_id=77).column("vec")[0].values.to_numpy()
    nearest = {"column": "vec", "q": q, "k": 10, "nprobes": 2}
    plan = leaf.scanner(filter="id = 301", columns=["id"]).explain_plan()
    return {
        "nearest": leaf.to_table(nearest=nearest, columns=["id"]).column("id").to_pylist(),
        "fts": sorted(leaf.to_table(full_text_query="word3", columns=["id"])["id"].to_pylist()),
        "btree": leaf.to_table(filter="id = 301 OR id = 2010", columns=["id"]).num_rows,
        "uses_btree": "ScalarIndexQuery" in plan,
    }


@pytest.fixture
def daily(vectors: PartitionedNamespace) -> PartitionedNamespace:
    """Three indexes, a fifth of partition 2's indexed rows deleted (its indexed fragment
    is rewritten: its indexes must be remapped), then three daily appends not indexed yet
    (compacted into one): partition 2's leaf has four fragments to compact."""
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_scalar_index("txt", "INVERTED")
    vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2)
    vectors.delete("part = 2 AND id % 5 = 0")
    for day in range(3):
        vectors.write(vector_rows([2], 20, first_id=2000 + 100 * day))
    return vectors


def test_optimize_compacts_an_indexed_leaf_and_its_searches_return_what_they_did(
    daily: PartitionedNamespace,
) -> None:
    """Before: the leaf was skipped as ``indexed`` and kept its four fragments."""
    rows, before = no_duplicates(daily), daily.version
    found, covered = searches(daily, 2), coverage(daily)
    assert len(published(daily, 2).get_fragments()) == 4
    result = daily.optimize()
    assert result.manifest_version == daily.version == before + 1
    assert result.skipped == {}
    assert [p.values["part"] for p in result.rewritten] == [2]
    leaf = published(daily, 2)
    assert len(leaf.get_fragments()) == 2
    assert all(f.metadata.deletion_file is None for f in leaf.get_fragments())
    assert searches(daily, 2) == found
    assert (
        coverage(daily) == covered == dict.fromkeys(("id_idx", "txt_idx", "vec_idx"), (4, 1140, 60))
    )
    segments_point_at_fragments_that_exist(daily)
    assert no_duplicates(daily) == rows
    assert leaf_indices(daily)[2] == ["id_idx", "txt_idx", "vec_idx"]
    assert daily.optimize().manifest_version is None  # nothing left to compact


def test_a_write_while_an_indexed_leaf_is_compacted_keeps_its_rows(
    daily: PartitionedNamespace,
) -> None:
    """The compaction is computed and parks; a write publishes into partition 2. The
    optimize's swap loses, it computes again on the new version and publishes."""
    rows = no_duplicates(daily)
    with hold("optimize.computed") as parked:
        run = Worker(other(daily).optimize)
        run.start()
        parked.wait_reached()
        other(daily).write(vector_rows([2], 5, first_id=9000))
    run.outcome()
    assert no_duplicates(daily) == sorted(rows + list(range(9000, 9005)))
    assert coverage(daily)["id_idx"] == (4, 1140, 65)
    segments_point_at_fragments_that_exist(daily)
    daily.optimize_indices()
    assert daily.to_table(filter="id = 9003").num_rows == 1
    assert coverage(daily)["vec_idx"] == (4, 1205, 0)


def test_a_compaction_crashed_after_its_leaf_commit_is_rolled_back_as_ours(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lance's compaction commit made versions without our tag, then ours tagged them: the
    next commit of the partition rolls them back without naming them foreign."""
    rows, found = no_duplicates(daily), searches(daily, 2)
    with crashing(monkeypatch, "optimize.leaf_committed"), pytest.raises(FailpointError):
        other(daily).optimize()
    with logged(LEAF_COMMIT) as warnings:
        daily.write(vector_rows([2], 1, first_id=9500))
    assert [r.getMessage() for r in warnings if "outside the namespace" in r.getMessage()] == []
    assert no_duplicates(daily) == sorted([*rows, 9500])
    assert searches(daily, 2) == found
    segments_point_at_fragments_that_exist(daily)
    assert daily.optimize().rewritten  # and it compacts once asked again


def test_an_index_built_with_pylance_and_not_yet_published_is_remapped_too(
    vectors: PartitionedNamespace,
) -> None:
    """Partition 1 gets a second fragment, then a BTREE built on its leaf with pylance
    (kept, not published yet): optimize plans on that version, so its commit remaps the
    user's index with the leaf's."""
    vectors.write(vector_rows([1], 10, first_id=5000))
    lance.dataset(vectors.partition({"part": 1}).location).create_scalar_index("id", "BTREE")
    result = vectors.optimize()
    assert [p.values["part"] for p in result.rewritten] == [1]
    leaf = published(vectors, 1)
    assert len(leaf.get_fragments()) == 1
    assert [i.name for i in leaf.describe_indices()] == ["id_idx"]
    assert "ScalarIndexQuery" in leaf.scanner(filter="id = 5003").explain_plan()
    assert leaf.to_table(filter="id = 5003").num_rows == 1
    segments_point_at_fragments_that_exist(vectors)
    assert pa.compute.sum(leaf.to_table(columns=["id"])["id"]).as_py() == sum(
        [*range(300), *range(5000, 5010)]
    )
