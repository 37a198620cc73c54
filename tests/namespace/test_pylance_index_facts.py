"""Facts about pylance 14's indexes that ``ops/indexing.py``, ``ops/index_model.py`` and the
roll-back of ``write/leaf_commit.py`` rely on, each a test of pylance (not of this project)
named after the fact (see tests/namespace/test_pylance_facts.py)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance import LanceOperation, Transaction
from lance.dataset import Index
from lance.indices import IndicesBuilder

from airflow_provider_lance.namespace.ops.indexing import PROSE_PARAMETERS, VECTOR_TYPES

DIM = 8


def table(first: int, n: int) -> pa.Table:
    values = np.random.default_rng(first).standard_normal(n * DIM).astype("float32")
    return pa.table(
        {
            "id": pa.array(range(first, first + n), pa.int64()),
            "txt": [f"w{i % 5} x" for i in range(n)],
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(values), DIM),
        }
    )


@pytest.fixture
def leaf(tmp_path: Path) -> lance.LanceDataset:
    return lance.write_dataset(table(0, 600), tmp_path / "leaf", max_rows_per_file=300)


def fragments(ds: lance.LanceDataset) -> list[int]:
    return [f.fragment_id for f in ds.get_fragments()]


def commit(ds: lance.LanceDataset, operation: LanceOperation.BaseOperation, **props: str):
    txn = Transaction(int(ds.version), operation, transaction_properties=props)
    return lance.LanceDataset.commit(ds.uri, txn, max_retries=0)


def test_fact_an_uncommitted_segment_commits_as_a_create_index_transaction_with_properties(
    leaf: lance.LanceDataset,
) -> None:
    """indexing: a leaf's index is a computed change committed like a delete, tagged."""
    segment = leaf.create_index_uncommitted("id", "BTREE", "ids", fragment_ids=fragments(leaf))
    assert leaf.describe_indices() == []
    done = commit(leaf, LanceOperation.CreateIndex([segment], []), owner="me#1")
    assert [d.name for d in done.describe_indices()] == ["ids"]
    assert done.read_transaction(int(done.version)).transaction_properties == {"owner": "me#1"}
    assert "ScalarIndexQuery" in done.scanner(filter="id = 5").explain_plan()


def test_fact_an_inverted_segment_is_readable_only_once_merged(tmp_path: Path) -> None:
    """indexing.build_segment: INVERTED segments are written under ``staging/``; committed
    raw, a full-text query fails on a missing file."""
    raw = lance.write_dataset(table(0, 600), tmp_path / "raw", max_rows_per_file=300)
    segment = raw.create_index_uncommitted("txt", "INVERTED", "t", fragment_ids=fragments(raw))
    assert all(f.path.startswith("staging/") for f in segment.files)
    committed = commit(raw, LanceOperation.CreateIndex([segment], []))
    with pytest.raises(pa.ArrowInvalid, match="Not found"):
        committed.to_table(full_text_query="w1", columns=["id"])
    ds = lance.write_dataset(table(0, 600), tmp_path / "merged", max_rows_per_file=300)
    built = ds.create_index_uncommitted("txt", "INVERTED", "t", fragment_ids=fragments(ds))
    merged = ds.merge_existing_index_segments([built])
    done = commit(ds, LanceOperation.CreateIndex([merged], []))
    assert done.to_table(full_text_query="w1", columns=["id"]).num_rows == 120


def test_fact_a_segment_of_an_existing_name_needs_replace_and_commits_as_a_delta(
    leaf: lance.LanceDataset,
) -> None:
    """indexing.OptimizeIndices: new fragments get a segment of the same index."""
    first = leaf.create_index_uncommitted("id", "BTREE", "ids", fragment_ids=fragments(leaf))
    indexed = commit(leaf, LanceOperation.CreateIndex([first], []))
    grown = lance.write_dataset(table(600, 100), leaf.uri, mode="append")
    new = [f for f in fragments(grown) if f not in fragments(leaf)]
    with pytest.raises(RuntimeError, match="already exists"):
        grown.create_index_uncommitted("id", "BTREE", "ids", fragment_ids=new)
    delta = grown.create_index_uncommitted("id", "BTREE", "ids", replace=True, fragment_ids=new)
    done = commit(grown, LanceOperation.CreateIndex([delta], []))
    (found,) = done.describe_indices()
    assert [sorted(s.fragment_ids) for s in found.segments] == [fragments(indexed), new]
    assert done.to_table(filter="id = 650").num_rows == 1


def test_fact_a_segment_built_on_one_version_commits_on_a_later_append_and_delete(
    leaf: lance.LanceDataset,
) -> None:
    """indexing: a build is reused on a later published version whose fragments it covered
    hold the same data files; deleted rows are left out of index results."""
    segment = leaf.create_index_uncommitted("id", "BTREE", "ids", fragment_ids=fragments(leaf))
    lance.write_dataset(table(600, 100), leaf.uri, mode="append")
    later = lance.dataset(leaf.uri)
    later.delete("id = 5")
    later = lance.dataset(leaf.uri)
    done = commit(later, LanceOperation.CreateIndex([segment], []))
    assert done.to_table(filter="id = 5").num_rows == 0
    assert done.to_table(filter="id = 650").num_rows == 1
    stats = done.stats.index_stats("ids")
    assert (stats["num_indexed_rows"], stats["num_unindexed_rows"]) == (599, 100)


def test_fact_removed_indices_named_by_uuid_drop_an_index(leaf: lance.LanceDataset) -> None:
    """indexing.leaf_segments rebuilds ``Index`` records from ``describe_indices`` for a
    ``CreateIndex`` that removes them (drop_index, replace)."""
    leaf.create_scalar_index("id", "BTREE", name="ids")
    leaf = lance.dataset(leaf.uri)
    (found,) = leaf.describe_indices()
    removed = [
        Index(
            uuid=s.uuid,
            name=found.name,
            fields=list(found.fields),
            dataset_version=s.dataset_version_at_last_update,
            fragment_ids=s.fragment_ids,
            index_version=s.index_version,
        )
        for s in found.segments
    ]
    assert commit(leaf, LanceOperation.CreateIndex([], removed)).describe_indices() == []


def test_fact_an_index_built_with_pylance_is_a_create_index_without_properties(
    leaf: lance.LanceDataset,
) -> None:
    """leaf_commit.kept_above: such a version has the fragments and schema of the one
    before it and no transaction properties of ours."""
    before = lance.dataset(leaf.uri)
    leaf.create_scalar_index("id", "BTREE")
    after = lance.dataset(leaf.uri)
    txn = after.read_transaction(int(after.version))
    assert type(txn.operation).__name__ == "CreateIndex"
    assert not txn.transaction_properties
    assert fragments(after) == fragments(before)
    assert repr(after.lance_schema) == repr(before.lance_schema)


def test_fact_given_centroids_and_codebook_index_a_leaf_too_small_to_train_on(
    tmp_path: Path,
) -> None:
    """index_model: a model trained elsewhere serves a leaf of 20 rows; the leaf's index
    keeps exactly those centroids."""
    sample = lance.write_dataset(table(0, 2000).select(["vec"]), tmp_path / "sample")
    builder = IndicesBuilder(sample, "vec")
    ivf = builder.train_ivf(4, distance_type="l2", sample_rate=8)
    pq = builder.train_pq(ivf, 2, sample_rate=4)
    small = lance.write_dataset(table(5000, 20), tmp_path / "small")
    segment = small.create_index_uncommitted(
        "vec",
        "IVF_PQ",
        "v",
        num_sub_vectors=2,
        ivf_centroids=ivf.centroids,
        pq_codebook=pq.codebook,
        fragment_ids=fragments(small),
    )
    done = commit(small, LanceOperation.CreateIndex([segment], []))
    stats = done.stats.index_stats("v")["segments"][0]
    assert np.allclose(
        np.array(stats["centroids"]), ivf.centroids.flatten().to_numpy().reshape(4, DIM)
    )
    query = table(5000, 1).column("vec")[0].values.to_numpy()
    found = done.to_table(nearest={"column": "vec", "q": query, "k": 1}, columns=["id"])
    assert found.column("id").to_pylist() == [5000]


def test_fact_create_index_uncommitted_requires_num_sub_vectors_for_pq(
    leaf: lance.LanceDataset,
) -> None:
    """indexing.declaration_for supplies IndicesBuilder's default."""
    with pytest.raises(ValueError, match="num_sub_vectors are required"):
        leaf.create_index_uncommitted("vec", "IVF_PQ", "v", fragment_ids=fragments(leaf))


class Unconvertible:
    """A value no pylance argument converts: passing it shows whether pylance reads a key."""


def test_fact_pylance_ignores_keywords_it_does_not_know_for_scalar_and_vector_indexes(
    leaf: lance.LanceDataset,
) -> None:
    """Why indexing.check_parameters refuses unknown parameters: pylance builds without a
    word (a typo such as ``num_partition`` is dropped), and even commits a BTREE."""
    ids = fragments(leaf)
    leaf.create_index_uncommitted("id", "BTREE", "b", fragment_ids=ids, bogus=Unconvertible())
    leaf.create_index_uncommitted(
        "vec", "IVF_PQ", "v", fragment_ids=ids, num_sub_vectors=2, num_partition=Unconvertible()
    )
    leaf.create_scalar_index("id", "BTREE", bogus=3)
    assert [i.name for i in leaf.describe_indices()] == ["id_idx"]


@pytest.mark.parametrize("kind", sorted(VECTOR_TYPES))
def test_fact_pylance_reads_every_parameter_the_table_gives_a_vector_type(
    leaf: lance.LanceDataset, kind: str
) -> None:
    """Each keyword of PROSE_PARAMETERS is one pylance reads (an unconvertible value is
    refused where the same call without it builds), for the type it is listed under."""
    base = {"fragment_ids": fragments(leaf), "num_partitions": 2, "num_sub_vectors": 2}
    leaf.create_index_uncommitted("vec", kind, "v", **base)
    for key in sorted(PROSE_PARAMETERS[kind]):
        with pytest.raises((TypeError, ValueError)):
            leaf.create_index_uncommitted("vec", kind, "v", **base, **{key: Unconvertible()})


FTS_VALUES = {
    "with_position": True,
    "block_size": 128,
    "memory_limit": 64,
    "num_workers": 1,
    "base_tokenizer": "simple",
    "language": "English",
    "max_token_length": 40,
    "lower_case": True,
    "stem": False,
    "remove_stop_words": False,
    "custom_stop_words": ["x"],
    "ascii_folding": True,
    "format_version": 2,
    "document_granularity": "row",
    "min_ngram_length": 2,
    "max_ngram_length": 3,
    "prefix_only": False,
    "split_identifiers": False,
    "split_on_numerics": False,
    "preserve_original": False,
}


def test_fact_pylance_knows_every_full_text_parameter_of_the_table(
    leaf: lance.LanceDataset,
) -> None:
    """INVERTED (FTS) is the one type whose unknown keywords pylance refuses itself, after
    the namespace trained and scheduled nothing: the table holds what it accepts."""
    assert set(FTS_VALUES) == PROSE_PARAMETERS["INVERTED"] == PROSE_PARAMETERS["FTS"]
    for key, value in FTS_VALUES.items():
        leaf.create_index_uncommitted("txt", "INVERTED", "t", fragment_ids=[0], **{key: value})
    with pytest.raises(ValueError, match="unknown FTS index parameter 'with_positions'"):
        leaf.create_index_uncommitted("txt", "INVERTED", "t", fragment_ids=[0], with_positions=1)


def documented(doc: str, marker: str) -> set[str]:
    """The ``name: type`` entries of a numpydoc section whose text contains ``marker``."""
    found = set()
    for entry in re.split(r"\n        (?=\w+ ?:)", doc):
        name = entry.split(":", 1)[0].strip()
        if marker in entry and name.isidentifier():
            found.add(name)
    return found


def test_fact_the_parameters_pylance_documents_in_prose_are_in_the_table() -> None:
    inverted = documented(lance.LanceDataset.create_scalar_index.__doc__ or "", "INVERTED")
    assert {"with_position", "base_tokenizer", "ascii_folding"} <= inverted
    assert inverted - {"index_type", "column"} <= PROSE_PARAMETERS["INVERTED"]
    prose = lance.LanceDataset.create_index.__doc__ or ""
    hnsw = prose.split("Optional parameters for `IVF_HNSW_*`:")[1].split("Examples")[0]
    assert {"max_level", "m", "ef_construction"} == set(re.findall(r"^\s+(\w+)\n", hnsw, re.M))
    for kind in ("IVF_HNSW_FLAT", "IVF_HNSW_SQ", "IVF_HNSW_PQ"):
        assert {"max_level", "m", "ef_construction"} <= PROSE_PARAMETERS[kind]
    assert {"num_bits", "index_file_version"} <= PROSE_PARAMETERS["IVF_PQ"]
    assert "- num_bits" in prose.split("Optional parameters for `IVF_RQ`:")[1][:80]


#: The index types ``indexing.OptimizeIndices`` could merge, and the column each indexes.
MERGED = {"BTREE": "id", "BITMAP": "txt", "INVERTED": "txt", "IVF_FLAT": "vec", "IVF_PQ": "vec"}


def shared_model(tmp_path: Path, kind: str) -> dict[str, object]:
    """The arguments of a model trained once (index_model's shared model); none for scalars."""
    if not kind.startswith("IVF"):
        return {}
    builder = IndicesBuilder(lance.write_dataset(table(10**6, 2000), tmp_path / "s"), "vec")
    ivf = builder.train_ivf(4, distance_type="l2", sample_rate=8)
    if "PQ" not in kind:
        return {"ivf_centroids": ivf.centroids}
    pq = builder.train_pq(ivf, 2, sample_rate=4)
    return {"ivf_centroids": ivf.centroids, "pq_codebook": pq.codebook, "num_sub_vectors": 2}


def build(ds: lance.LanceDataset, kind: str, ids: list[int], params: dict[str, object]) -> Index:
    segment = ds.create_index_uncommitted(
        MERGED.get(kind, "vec"), kind, "i", replace=True, fragment_ids=ids, **params
    )
    if any(f.path.startswith("staging/") for f in segment.files or ()):
        segment = ds.merge_existing_index_segments([segment])
    return segment


def daily(uri: Path, kind: str, params: dict[str, object]) -> lance.LanceDataset:
    """A leaf of three fragments, the first two indexed by a committed segment each."""
    ds = lance.write_dataset(table(0, 900), uri, max_rows_per_file=300)
    for f in fragments(ds)[:2]:
        ds = commit(ds, LanceOperation.CreateIndex([build(ds, kind, [f], params)], []))
    return ds


def described(ds: lance.LanceDataset) -> list[Index]:
    """The leaf's segments as ``describe_indices`` gives them (ops/indexing.leaf_segments)."""
    return [
        Index(
            uuid=s.uuid,
            name=d.name,
            fields=list(d.fields),
            dataset_version=s.dataset_version_at_last_update,
            fragment_ids=s.fragment_ids,
            index_version=s.index_version,
        )
        for d in ds.describe_indices()
        for s in d.segments
    ]


def answers(ds: lance.LanceDataset, kind: str) -> list[list[tuple[object, ...]]]:
    """What the leaf's index answers: rows of filters, (id, _score) or (id, _distance)."""
    if kind in ("BTREE", "BITMAP"):
        filters = ["id = 5", "id BETWEEN 250 AND 640"] if kind == "BTREE" else ["txt = 'w3 x'"]
        assert "ScalarIndexQuery" in ds.scanner(filter=filters[0]).explain_plan()
        return [sorted((i,) for i in ds.to_table(filter=f)["id"].to_pylist()) for f in filters]
    if kind == "INVERTED":
        found = [ds.to_table(full_text_query=w, columns=["id"]) for w in ("w1", "x")]
        return [
            sorted(zip(t["id"].to_pylist(), t["_score"].to_pylist(), strict=True)) for t in found
        ]
    out = []
    for q in table(77, 5).column("vec"):
        near = {"column": "vec", "q": q.values.to_numpy(), "k": 10, "nprobes": 4}
        t = ds.to_table(nearest=near, columns=["id"])
        out.append(list(zip(t["id"].to_pylist(), t["_distance"].to_pylist(), strict=True)))
    return out


@pytest.mark.parametrize("kind", sorted(MERGED))
def test_fact_committed_segments_merge_with_a_delta_into_one_uncommitted_segment(
    tmp_path: Path, kind: str
) -> None:
    """indexing.OptimizeIndices merges a leaf's segments: ``merge_existing_index_segments``
    takes committed segments given the ``index_details`` of a delta built with the same
    arguments (those of ``describe_indices`` have none and are refused), writes one segment
    under a uuid of its own beside its inputs, over the union of their fragments, and
    commits nothing: committed like a built segment, it answers as one fresh build does."""
    params = shared_model(tmp_path, kind)
    ds = daily(tmp_path / "leaf", kind, params)
    existing = described(ds)
    delta = build(ds, kind, fragments(ds)[2:], params)
    with pytest.raises(ValueError, match="same supported index type"):
        ds.merge_existing_index_segments([*existing, delta])
    committed = [ds.read_transaction(s.dataset_version + 1).operation for s in existing]
    # the same message: a vector index's parameters are a map, serialized in any order
    same = [(url, sorted(value)) for url, value in [delta.index_details]]
    assert [
        (url, sorted(value)) for op in committed for url, value in [op.new_indices[0].index_details]
    ] == same * 2
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in existing]
    merged = ds.merge_existing_index_segments([*given, delta])
    now = lance.dataset(ds.uri)
    assert (now.version, [len(d.segments) for d in now.describe_indices()]) == (ds.version, [2])
    assert merged.uuid not in {delta.uuid, *(s.uuid for s in existing)}
    assert sorted(merged.fragment_ids) == fragments(ds)
    on_disk = {p.name for p in (Path(ds.uri) / "_indices").iterdir()}
    assert {merged.uuid, delta.uuid, *(s.uuid for s in existing)} <= on_disk
    done = commit(ds, LanceOperation.CreateIndex([merged], existing))
    assert [len(d.segments) for d in done.describe_indices()] == [1]
    fresh = lance.write_dataset(table(0, 900), tmp_path / "fresh", max_rows_per_file=300)
    fresh = commit(fresh, LanceOperation.CreateIndex([build(fresh, kind, [0, 1, 2], params)], []))
    assert answers(done, kind) == answers(fresh, kind)


def test_fact_vector_segments_of_their_own_models_do_not_merge(leaf: lance.LanceDataset) -> None:
    """indexing: a declaration without a shared model rebuilds its leaf's segments."""
    ids = fragments(leaf)
    first = build(leaf, "IVF_FLAT", ids[:1], {"num_partitions": 2})
    second = build(leaf, "IVF_FLAT", ids[1:], {"num_partitions": 2})
    with pytest.raises(RuntimeError, match="IVF centroids mismatch"):
        leaf.merge_existing_index_segments([first, second])


def test_fact_merged_ivf_sq_segments_answer_unlike_a_fresh_build(tmp_path: Path) -> None:
    """indexing.MERGED_TYPES leaves IVF_SQ out: each segment keeps its own quantization
    bounds, so a merge measures other distances than one build over every fragment."""
    params = shared_model(tmp_path, "IVF_SQ")
    ds = daily(tmp_path / "leaf", "IVF_SQ", params)
    delta = build(ds, "IVF_SQ", fragments(ds)[2:], params)
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in described(ds)]
    merged = ds.merge_existing_index_segments([*given, delta])
    done = commit(ds, LanceOperation.CreateIndex([merged], described(ds)))
    fresh = lance.write_dataset(table(0, 900), tmp_path / "fresh", max_rows_per_file=300)
    every = build(fresh, "IVF_SQ", [0, 1, 2], params)
    fresh = commit(fresh, LanceOperation.CreateIndex([every], []))
    assert answers(done, "IVF_SQ") != answers(fresh, "IVF_SQ")


def test_fact_a_merged_inverted_segment_keeps_the_rows_deleted_before_it(tmp_path: Path) -> None:
    """indexing.MERGED_TYPES leaves INVERTED out: a merge keeps the deleted rows its inputs
    counted in its BM25 statistics, so scores differ from a fresh build's."""
    ds = daily(tmp_path / "leaf", "INVERTED", {})
    ds.delete("id < 100")
    ds = lance.dataset(ds.uri)
    delta = build(ds, "INVERTED", fragments(ds)[2:], {})
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in described(ds)]
    merged = ds.merge_existing_index_segments([*given, delta])
    done = commit(ds, LanceOperation.CreateIndex([merged], described(ds)))
    rebuilt = build(done, "INVERTED", fragments(done), {})
    again = commit(done, LanceOperation.CreateIndex([rebuilt], described(done)))
    assert done.stats.index_stats("i")["indices"][0]["num_docs"] == 900
    assert again.stats.index_stats("i")["indices"][0]["num_docs"] == 800
    assert answers(done, "INVERTED") != answers(again, "INVERTED")


def test_fact_pq_segments_built_over_a_whole_leaf_or_merged_do_not_merge(tmp_path: Path) -> None:
    """indexing.MERGED_TYPES leaves IVF_PQ out: pylance merges only PQ segments that store
    their codes row-major (``skip_transpose=True``); a build over every fragment of a leaf
    (the namespace's first one) and every merge store them transposed."""
    params = shared_model(tmp_path, "IVF_PQ")
    ds = lance.write_dataset(table(0, 600), tmp_path / "leaf", max_rows_per_file=300)
    whole = build(ds, "IVF_PQ", fragments(ds), params)
    ds = commit(ds, LanceOperation.CreateIndex([whole], []))
    ds = lance.write_dataset(table(600, 300), ds.uri, mode="append")
    delta = build(ds, "IVF_PQ", fragments(ds)[2:], params)
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in described(ds)]
    with pytest.raises(RuntimeError, match="stores transposed PQ codes"):
        ds.merge_existing_index_segments([*given, delta])
    rows = {**params, "skip_transpose": True}
    ds = daily(tmp_path / "row-major", "IVF_PQ", rows)
    delta = build(ds, "IVF_PQ", fragments(ds)[2:], rows)
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in described(ds)]
    merged = ds.merge_existing_index_segments([*given, delta])
    ds = commit(ds, LanceOperation.CreateIndex([merged], described(ds)))
    grown = lance.write_dataset(table(900, 300), ds.uri, mode="append")
    delta = build(grown, "IVF_PQ", fragments(grown)[3:], rows)
    given = [dataclasses.replace(s, index_details=delta.index_details) for s in described(grown)]
    with pytest.raises(RuntimeError, match="stores transposed PQ codes"):
        grown.merge_existing_index_segments([*given, delta])
