"""Indexes as table operations (issue 41, item 1): ``create_index``, ``create_scalar_index``,
``optimize_indices``, ``list_indices`` and ``drop_index`` on real namespaces, each published
in one ``__manifest`` commit; bad input is a project error that names what to do."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    SchemaError,
)
from airflow_provider_lance.namespace.errors import IndexExistsError, IndexNotFoundError
from airflow_provider_lance.namespace.testing import hold
from tests.support import Worker, other

DIM = 8
VECTORS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("txt", pa.utf8()),
        pa.field("vec", pa.list_(pa.float32(), DIM)),
    ]
)


def vector_rows(parts: list[int], per_part: int, first_id: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed + first_id)
    n = len(parts) * per_part
    values = rng.standard_normal(n * DIM).astype("float32")
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "part": pa.array([p for p in parts for _ in range(per_part)], pa.int32()),
            "txt": [f"word{i % 7} common" for i in range(n)],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(values), DIM),
        },
        schema=VECTORS,
    )


@pytest.fixture
def vectors(root: Path) -> PartitionedNamespace:
    """Partitions 1-4 by ``part``, 300 rows each (ids 0-1199)."""
    ns = PartitionedNamespace.create(root, VECTORS, [PartitionField("part", "part")])
    ns.write(vector_rows([1, 2, 3, 4], 300, first_id=0))
    return ns


def leaf_indices(ns: PartitionedNamespace, version: int | None = None) -> dict[int, list[str]]:
    """Partition ``part`` -> the index names its published leaf version has."""
    return {
        p.values["part"]: sorted(
            d.name for d in lance.dataset(p.location, version=p.read_version).describe_indices()
        )
        for p in ns.state(version).partitions()
    }


def test_a_scalar_index_is_built_on_every_partition_and_published_in_one_commit(
    vectors: PartitionedNamespace,
) -> None:
    before = vectors.version
    result = vectors.create_scalar_index("id", "BTREE")
    assert result.operation == "create_index"
    assert result.manifest_version == vectors.version == before + 1
    assert result.rows_indexed == 1200
    assert len(result.partitions) == 4
    assert leaf_indices(vectors) == {p: ["id_idx"] for p in (1, 2, 3, 4)}
    assert leaf_indices(vectors, before) == {p: [] for p in (1, 2, 3, 4)}
    (info,) = vectors.list_indices()
    assert (info.name, info.column, info.index_type) == ("id_idx", "id", "BTREE")
    assert (info.partitions, info.partitions_indexed) == (4, 4)
    assert (info.rows_indexed, info.rows_unindexed) == (1200, 0)
    assert vectors.list_indices(as_of=before) == []
    p = vectors.partition({"part": 2})
    plan = lance.dataset(p.location, version=p.read_version).scanner(filter="id = 305")
    assert "ScalarIndexQuery" in plan.explain_plan()
    assert vectors.to_table(filter="id = 305").column("id").to_pylist() == [305]


def test_a_reader_sees_the_index_of_every_partition_or_of_none(
    vectors: PartitionedNamespace,
) -> None:
    """The build parks after committing every leaf and before its swap: readers see no
    declaration and no published leaf with the index; after the swap, all of them."""
    before = vectors.version
    with hold("create_index.before_publish") as parked:
        build = Worker(other(vectors).create_scalar_index, "txt", "INVERTED")
        build.start()
        parked.wait_reached()
        reader = other(vectors)
        assert reader.version == before
        assert reader.list_indices() == []
        assert leaf_indices(reader) == {p: [] for p in (1, 2, 3, 4)}
    build.outcome()
    assert leaf_indices(other(vectors)) == {p: ["txt_idx"] for p in (1, 2, 3, 4)}
    hits = lance.dataset(vectors.partition({"part": 3}).location).to_table(
        full_text_query="word3", columns=["id"]
    )
    assert hits.num_rows > 0


def test_a_vector_index_shares_one_model_across_partitions(
    vectors: PartitionedNamespace,
) -> None:
    result = vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2)
    assert result.rows_indexed == 1200
    (info,) = vectors.list_indices()
    assert info.shared_model
    assert info.index_type == "IVF_PQ"
    assert info.params == {"num_sub_vectors": 2, "num_partitions": 2}
    centroids = set()
    for p in vectors.state().partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        stats = leaf.stats.index_stats("vec_idx")
        centroids.add(str(stats["segments"][0]["centroids"]))
        query = leaf.take([0], columns=["vec"]).column("vec")[0].values.to_numpy()
        found = leaf.to_table(nearest={"column": "vec", "q": query, "k": 1}, columns=["id"])
        assert found.num_rows == 1
    assert len(centroids) == 1  # one model: the same centroids in every leaf


def test_each_leaf_trains_its_own_model_without_a_shared_one(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_index("vec", "IVF_FLAT", "flat", shared_model=False, num_partitions=2)
    (info,) = vectors.list_indices()
    assert not info.shared_model
    assert info.partitions_indexed == 4


def test_a_retry_with_the_same_txn_id_returns_the_first_result(
    vectors: PartitionedNamespace,
) -> None:
    first = vectors.create_scalar_index("part", "BITMAP", txn_id="index-1")
    version = vectors.version
    again = other(vectors).create_scalar_index("part", "BITMAP", txn_id="index-1")
    assert again == first
    assert vectors.version == version


def test_the_filter_limits_the_index_to_some_partitions(vectors: PartitionedNamespace) -> None:
    result = vectors.create_scalar_index("id", "BTREE", filter="part >= 3")
    assert sorted(p.values["part"] for p in result.partitions) == [3, 4]
    assert leaf_indices(vectors) == {1: [], 2: [], 3: ["id_idx"], 4: ["id_idx"]}
    (info,) = vectors.list_indices()
    assert (info.filter, info.partitions, info.rows_indexed) == ("part >= 3", 2, 600)


def test_drop_index_removes_the_declaration_and_every_leaf_index(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_scalar_index("txt", "INVERTED")
    before = vectors.version
    result = vectors.drop_index("id_idx")
    assert result.manifest_version == before + 1
    assert [i.name for i in vectors.list_indices()] == ["txt_idx"]
    assert leaf_indices(vectors) == {p: ["txt_idx"] for p in (1, 2, 3, 4)}
    assert leaf_indices(vectors, before) == {p: ["id_idx", "txt_idx"] for p in (1, 2, 3, 4)}


# -- bad input: a project error naming what to do, nothing written --------------------------
@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda ns: ns.create_index("nope", "IVF_PQ"), SchemaError, "unknown column 'nope'"),
        (lambda ns: ns.create_index("id", "IVF_PQ"), InvalidArgumentError, "create_scalar_index"),
        (lambda ns: ns.create_index("vec", "IVF_XX"), InvalidArgumentError, "unknown index type"),
        (
            lambda ns: ns.create_scalar_index("vec", "IVF_PQ"),
            InvalidArgumentError,
            "unknown index type",
        ),
        (lambda ns: ns.create_scalar_index("id", "INVERTED"), InvalidArgumentError, "string"),
        (
            lambda ns: ns.create_scalar_index("id", "BTREE", filter="part = 99"),
            InvalidArgumentError,
            "matches no partition",
        ),
        (
            lambda ns: ns.create_scalar_index("id", "BTREE", "a$b"),
            InvalidArgumentError,
            "without '$'",
        ),
        (
            lambda ns: ns.create_scalar_index("id", "BTREE", fragment_ids=[0]),
            InvalidArgumentError,
            "set by the namespace",
        ),
        (
            lambda ns: ns.create_index("vec", "IVF_PQ", num_sub_vectors=3),
            InvalidArgumentError,
            "divisible by num_subvectors (3)",
        ),
        (
            lambda ns: ns.create_index("vec", "IVF_PQ", shared_model=False, num_sub_vectors=3),
            InvalidArgumentError,
            "pylance refused",
        ),
        (lambda ns: ns.drop_index("nope"), IndexNotFoundError, "list_indices()"),
        (lambda ns: ns.optimize_indices(names=["nope"]), IndexNotFoundError, "declared"),
    ],
)
def test_bad_input_is_a_project_error_and_changes_nothing(
    vectors: PartitionedNamespace, call, error, words: str
) -> None:
    before = vectors.version
    with pytest.raises(error, match=None) as raised:
        call(vectors)
    assert words in str(raised.value)
    assert vectors.version == before
    assert vectors.list_indices() == []
    assert leaf_indices(vectors) == {p: [] for p in (1, 2, 3, 4)}


def test_a_name_that_exists_is_refused_unless_replaced(vectors: PartitionedNamespace) -> None:
    vectors.create_scalar_index("id", "BTREE", "ids")
    before = vectors.version
    with pytest.raises(IndexExistsError, match="replace=True"):
        vectors.create_scalar_index("id", "BITMAP", "ids")
    assert vectors.version == before
    vectors.create_scalar_index("id", "BITMAP", "ids", replace=True)
    (info,) = vectors.list_indices()
    assert info.index_type == "BITMAP"
    assert info.partitions_indexed == 4
    p = vectors.partition({"part": 1})
    leaf = lance.dataset(p.location, version=p.read_version)
    assert [d.index_type for d in leaf.describe_indices()] == ["Bitmap"]
