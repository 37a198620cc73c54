"""``list_indices(coverage=False)`` reads the declarations alone (their ``__index$<name>``
rows in ``__manifest``): no leaf is opened, so it answers although every leaf is gone,
where the default (coverage counted on each leaf) needs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import LanceNamespaceError, PartitionedNamespace
from tests.namespace.ops.index_data import vector_rows


def test_declarations_alone_open_no_leaf(vectors: PartitionedNamespace) -> None:
    vectors.create_scalar_index("id", "BTREE", filter="part <= 2")
    vectors.create_index("vec", "IVF_FLAT", num_partitions=2, metric="cosine")
    vectors.write(vector_rows([5], 10, first_id=5000))
    full = {i.name: i for i in vectors.list_indices()}
    assert (full["id_idx"].partitions, full["id_idx"].rows_unindexed) == (2, 0)
    assert (full["vec_idx"].partitions, full["vec_idx"].rows_unindexed) == (5, 10)
    for p in vectors.state().partitions():
        shutil.rmtree(Path(p.location.removeprefix("file://")))
    with pytest.raises(LanceNamespaceError):
        vectors.list_indices()
    declared = {i.name: i for i in vectors.list_indices(coverage=False)}
    assert sorted(declared) == ["id_idx", "vec_idx"]
    for name, info in declared.items():
        assert (info.column, info.index_type, info.params, info.filter) == (
            full[name].column,
            full[name].index_type,
            full[name].params,
            full[name].filter,
        )
        assert (info.partitions, info.shared_model, info.declared) == (
            full[name].partitions,
            full[name].shared_model,
            True,
        )
        assert (info.partitions_indexed, info.rows_indexed, info.rows_unindexed) == (
            None,
            None,
            None,
        )
    assert info.to_dict()["rows_indexed"] is None


def test_declarations_alone_at_an_earlier_version(vectors: PartitionedNamespace) -> None:
    before = vectors.version
    vectors.create_scalar_index("id", "BTREE")
    assert vectors.list_indices(as_of=before, coverage=False) == []
    [info] = vectors.list_indices(coverage=False)
    assert (info.name, info.partitions) == ("id_idx", 4)
