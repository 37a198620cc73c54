"""``rows_indexed`` counts rows, not (row, index) pairs: a row two indexes newly cover is
one row indexed, in every partition's outcome, the total and the JSON round trip."""

from __future__ import annotations

from airflow_provider_lance.namespace import OperationResult, PartitionedNamespace
from tests.namespace.ops.index_data import VECTORS, vector_rows


def test_two_indexes_over_50_new_rows_report_50_rows_indexed(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_scalar_index("txt", "INVERTED")
    vectors.write(vector_rows([2], 50, first_id=5000))
    result = vectors.optimize_indices()
    assert result.rows_indexed == 50
    [outcome] = result.partitions
    assert (outcome.values["part"], outcome.rows_indexed) == (2, 50)
    assert {i.name: i.rows_unindexed for i in vectors.list_indices()} == {
        "id_idx": 0,
        "txt_idx": 0,
    }
    types = {"part": VECTORS.field("part").type}
    again = OperationResult.from_dict(result.to_dict(), types)
    assert again == result
    assert again.to_dict()["rows_indexed"] == 50


def test_a_new_partition_and_new_rows_of_an_old_one_count_once_each(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_scalar_index("id", "BITMAP", "id_bitmap")
    vectors.write(vector_rows([5], 30, first_id=5000))  # a new partition
    vectors.write(vector_rows([1], 20, first_id=6000))  # new rows of an indexed one
    result = vectors.optimize_indices()
    assert {p.values["part"]: p.rows_indexed for p in result.partitions} == {1: 20, 5: 30}
    assert result.rows_indexed == 50
