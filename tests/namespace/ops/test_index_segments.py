"""Index segments are merged (issue 41, upkeep): each ``optimize_indices`` adds a delta
segment per leaf for the rows written since, and a leaf never keeps more than
``MAX_SEGMENTS`` of one index; merged segments also let ``optimize`` compact the daily
appends they cover (Lance's planner never bins fragments of different segments)."""

from __future__ import annotations

import lance

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.ops.indexing import MAX_SEGMENTS
from tests.namespace.ops.index_data import vector_rows
from tests.support import no_duplicates


def segments(ns: PartitionedNamespace, part: int) -> dict[str, int]:
    p = ns.partition({"part": part})
    leaf = lance.dataset(p.location, version=p.read_version)
    return {i.name: len(i.segments) for i in leaf.describe_indices()}


def test_daily_deltas_are_merged_and_the_merged_leaf_compacts(
    vectors: PartitionedNamespace,
) -> None:
    """Before: partition 2 had 1 + 8 segments of each index, and optimize compacted none
    of its nine fragments."""
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2)
    seen = []
    for day in range(8):
        vectors.write(vector_rows([2], 10, first_id=2000 + 100 * day))
        vectors.optimize_indices()
        seen.append(segments(vectors, 2))
    assert max(n for s in seen for n in s.values()) == MAX_SEGMENTS
    assert seen[2] == {"id_idx": 4, "vec_idx": 4}  # three deltas on the first build
    assert seen[3] == {"id_idx": 1, "vec_idx": 1}  # the fourth merged them
    assert {i.name: (i.rows_indexed, i.rows_unindexed) for i in vectors.list_indices()} == {
        "id_idx": (1280, 0),
        "vec_idx": (1280, 0),
    }
    assert vectors.to_table(filter="id = 2703").num_rows == 1
    rows = no_duplicates(vectors)
    p = vectors.partition({"part": 2})
    before = len(lance.dataset(p.location, version=p.read_version).get_fragments())
    vectors.optimize()
    p = vectors.partition({"part": 2})
    after = lance.dataset(p.location, version=p.read_version).get_fragments()
    assert len(after) < before
    assert no_duplicates(vectors) == rows
    assert {i.name: i.rows_unindexed for i in vectors.list_indices()} == {"id_idx": 0, "vec_idx": 0}
