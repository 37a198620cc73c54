"""``list_indices`` shows indexes a user built on leaves with pylance (issue 41, item 2):
kept and published by the namespace's next commit, named by no declaration, listed with
``declared=False`` and their coverage over the partitions that have them."""

from __future__ import annotations

import lance

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.namespace.ops.index_data import vector_rows


def test_an_index_built_with_pylance_is_listed_as_undeclared_once_published(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    for part in (1, 2):
        leaf = lance.dataset(vectors.partition({"part": part}).location)
        leaf.create_scalar_index("txt", "BITMAP", name="by_txt")
    assert [i.name for i in vectors.list_indices()] == ["id_idx"]  # not published yet
    vectors.write(vector_rows([1, 2], 10, first_id=5000))  # publishes the kept versions
    vectors.rename_column("txt", "text")
    declared, user = vectors.list_indices()
    assert (declared.name, declared.declared, declared.partitions) == ("id_idx", True, 4)
    assert user.name == "by_txt"
    assert not user.declared
    assert (user.column, user.index_type, user.params, user.filter) == ("text", "BITMAP", {}, None)
    assert (user.partitions, user.partitions_indexed) == (2, 2)
    assert (user.rows_indexed, user.rows_unindexed) == (600, 20)
    assert user.to_dict()["declared"] is False
    # declaring it under its name takes it over: one declared index, no undeclared one
    vectors.create_scalar_index("text", "BITMAP", "by_txt", replace=True)
    assert [(i.name, i.declared, i.partitions_indexed) for i in vectors.list_indices()] == [
        ("by_txt", True, 4),
        ("id_idx", True, 4),
    ]


def test_a_namespace_without_indexes_lists_none(vectors: PartitionedNamespace) -> None:
    assert vectors.list_indices() == []
