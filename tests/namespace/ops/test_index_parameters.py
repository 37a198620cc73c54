"""Index parameters are checked before anything is built (issue 41, "think like a new
user"): pylance ignores keyword arguments it does not know, so an unknown or misspelt one
is refused by name, with the closest valid ones, and nothing is built or published."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_lance.namespace import InvalidArgumentError, PartitionedNamespace
from airflow_provider_lance.namespace.ops.indexing import valid_parameters
from tests.namespace.ops.index_data import leaf_indices


def unchanged(ns: PartitionedNamespace, root: Path, before: int) -> None:
    assert ns.version == before
    assert ns.list_indices() == []
    assert leaf_indices(ns) == {p: [] for p in (1, 2, 3, 4)}
    assert not (root / "_index_models").exists()  # no model trained either


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda ns: ns.create_scalar_index("id", "BTREE", bogus=3),
            ["'bogus'", "BTREE takes no parameters"],
        ),
        (
            lambda ns: ns.create_index("vec", "IVF_PQ", num_partition=2, num_sub_vectors=2),
            ["'num_partition'", "IVF_PQ", "did you mean 'num_partitions'"],
        ),
        (
            lambda ns: ns.create_index("vec", "IVF_PQ", m=16, num_sub_vectors=2),
            ["'m'", "IVF_PQ", "IVF_HNSW"],
        ),
        (
            lambda ns: ns.create_scalar_index("txt", "INVERTED", with_positions=True),
            ["'with_positions'", "INVERTED", "did you mean 'with_position'"],
        ),
        (
            lambda ns: ns.create_index("vec", "ivf_hnsw_sq", ef_constructon=50),
            ["'ef_constructon'", "IVF_HNSW_SQ", "did you mean 'ef_construction'"],
        ),
    ],
)
def test_an_unknown_parameter_is_refused_by_name_before_anything_is_built(
    vectors: PartitionedNamespace, root: Path, call, words: list[str]
) -> None:
    before = vectors.version
    with pytest.raises(InvalidArgumentError) as raised:
        call(vectors)
    for word in words:
        assert word in str(raised.value)
    unchanged(vectors, root, before)


def test_the_parameters_pylance_documents_are_accepted(vectors: PartitionedNamespace) -> None:
    vectors.create_scalar_index("txt", "INVERTED", with_position=True, base_tokenizer="simple")
    vectors.create_index(
        "vec", "IVF_HNSW_SQ", num_partitions=2, m=8, ef_construction=40, sample_rate=8
    )
    declared = {i.name: i.params for i in vectors.list_indices()}
    assert declared["txt_idx"] == {"with_position": True, "base_tokenizer": "simple"}
    assert declared["vec_idx"] == {
        "num_partitions": 2,
        "m": 8,
        "ef_construction": 40,
        "sample_rate": 8,
    }


def test_valid_parameters_come_from_pylance_signature_and_the_prose_table() -> None:
    pq = valid_parameters("IVF_PQ")
    assert {"metric", "num_partitions", "num_sub_vectors", "target_partition_size"} <= pq
    assert {"num_bits", "index_file_version"} <= pq
    assert not pq & {"m", "with_position"}
    assert {"m", "ef_construction", "max_level"} <= valid_parameters("IVF_HNSW_PQ")
    assert valid_parameters("BTREE") == frozenset()
    assert {"with_position", "format_version"} <= valid_parameters("FTS")
    assert valid_parameters("FTS") == valid_parameters("INVERTED")
    for kind in ("IVF_PQ", "INVERTED", "BTREE"):
        assert not valid_parameters(kind) & {"fragment_ids", "index_uuid", "replace", "name"}


CENTROIDS = [[0.0] * 8, [1.0] * 8]


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda ns: ns.create_scalar_index("id", "BTREE", ivf_centroids=CENTROIDS),
            "unknown parameter 'ivf_centroids' for index type BTREE",
        ),
        (
            lambda ns: ns.create_index(
                "vec", "IVF_FLAT", shared_model=False, ivf_centroids=CENTROIDS
            ),
            "shared_model=False",
        ),
        (
            lambda ns: ns.create_index("vec", "IVF_RQ", ivf_centroids=CENTROIDS),
            "IVF_RQ",
        ),
        (
            lambda ns: ns.create_index(
                "vec", "IVF_FLAT", ivf_centroids=CENTROIDS, pq_codebook=CENTROIDS
            ),
            "pq_codebook",
        ),
    ],
)
def test_a_given_model_that_would_be_dropped_is_refused(
    vectors: PartitionedNamespace, root: Path, call, words: str
) -> None:
    """``ivf_centroids`` and ``pq_codebook`` become the shared model; where there is none
    to become (a scalar type, IVF_RQ, ``shared_model=False``, a codebook without PQ) they
    were dropped without a word."""
    before = vectors.version
    with pytest.raises(InvalidArgumentError) as raised:
        call(vectors)
    assert words in str(raised.value)
    unchanged(vectors, root, before)


def test_given_centroids_become_the_shared_model(vectors: PartitionedNamespace) -> None:
    result = vectors.create_index("vec", "IVF_FLAT", ivf_centroids=CENTROIDS)
    assert result.rows_indexed == 1200
    [info] = vectors.list_indices()
    assert info.shared_model
    assert info.params == {}
