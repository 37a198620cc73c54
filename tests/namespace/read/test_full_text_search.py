"""ns.to_table(full_text_query=...): matches ranked as ONE table holding the rows ranks them.

The corpus is skewed the way that breaks a plain merge of the leaves' own BM25 scores: each
partition has a word of its own, common there and rare elsewhere. Expectations come from
pylance's search of one Lance table holding the same rows.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.query import (
    BooleanQuery,
    BoostQuery,
    CombinedFieldsQuery,
    FullTextOperator,
    MatchQuery,
    MultiMatchQuery,
    Occur,
    PhraseQuery,
)

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    SchemaError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.read import fulltext
from airflow_provider_lance.namespace.read.fulltext import Boolean, Boosting, Match, Multi, Phrase

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("title", pa.utf8()),
        pa.field("text", pa.utf8()),
    ]
)
PARTS = [0, 1, 2, 3, None]
COMMON = [f"w{i}" for i in range(40)]
OWN = {0: "mango", 1: "kiwi", 2: "lemon", 3: "olive", None: "peach"}


def corpus(n: int, *, seed: int = 0, length: int | None = 8, first_id: int = 0) -> pa.Table:
    """``n`` documents over the parts; a part's own word is in 60% of its documents and in
    1% of the others'. ``length``: words per document (None: 3 to 14)."""
    rng = np.random.default_rng(seed)
    out: dict[str, list[Any]] = {"id": [], "part": [], "title": [], "text": []}
    for i in range(first_id, first_id + n):
        part = PARTS[i % len(PARTS)]
        size = length or int(rng.integers(3, 15))
        words = list(rng.choice(COMMON, size))
        for other, word in OWN.items():
            if rng.random() < (0.6 if other == part else 0.01):
                words[int(rng.integers(size))] = word
        out["id"].append(i)
        out["part"].append(part)
        out["title"].append(" ".join(rng.choice(COMMON[:10], 2)))
        out["text"].append(None if i % 37 == 5 else " ".join(words))
    return pa.table(out, schema=SCHEMA)


@pytest.fixture
def searched(tmp_path: Path) -> tuple[PartitionedNamespace, lance.LanceDataset]:
    data = corpus(1500)
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField("part", "part")])
    ns.write(data)
    return ns, lance.write_dataset(data, tmp_path / "one")


def scores(table: pa.Table) -> dict[int, float]:
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a row twice"
    return dict(zip(ids, table.column("_score").to_pylist(), strict=True))


def assert_ranked_alike(got: pa.Table, expected: pa.Table) -> None:
    """Same matches, same scores (to float32 rounding), ranked by score."""
    mine, theirs = scores(got), scores(expected)
    assert set(mine) == set(theirs)
    for i, score in theirs.items():
        assert math.isclose(mine[i], score, rel_tol=1e-5), (i, mine[i], score)
    ranked = got.column("_score").to_pylist()
    assert ranked == sorted(ranked, reverse=True)


def one_table(one: lance.LanceDataset, query: Any, **kw: Any) -> pa.Table:
    return one.to_table(columns=["id", "_score"], full_text_query=query, **kw)


def overlap(got: pa.Table, expected: pa.Table, k: int = 10) -> int:
    """How many of ``got``'s first ``k`` rows one table's top ``k`` holds, or could hold
    (tied with its k-th score: which of a tie Lance returns is arbitrary)."""
    theirs = scores(expected)
    kth = sorted(theirs.values(), reverse=True)[k - 1]
    return sum(theirs.get(i, -1.0) >= kth * (1 - 1e-6) for i in got.column("id").to_pylist()[:k])


def leaf_merge(ns: PartitionedNamespace, query: Any, k: int) -> pa.Table:
    """The plain merge of every leaf's own top ``k`` by its own BM25 (what not to do)."""
    tables = []
    for task in ns.plan_scan().tasks:
        leaf = lance.dataset(task.location, version=task.read_version)
        tables.append(leaf.to_table(columns=["id", "_score"], full_text_query=query, limit=k))
    merged = pa.concat_tables(tables)
    return merged.take(pa.compute.sort_indices(merged, [("_score", "descending")])).slice(0, k)


def test_scores_equal_one_tables_where_a_plain_merge_fails(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """Every document has 8 words (one average length everywhere): the scores are one
    table's exactly, while the leaves' own scores would put the rare-word parts first."""
    ns, one = searched
    query = MatchQuery("mango kiwi w3", "text")
    got = ns.to_table(columns=["id"], full_text_query=query)
    assert got.schema.names == ["id", "_score"]
    assert_ranked_alike(got, one_table(one, query))
    top = ns.to_table(columns=["id"], full_text_query=query, limit=10)
    assert top == got.slice(0, 10)
    assert overlap(leaf_merge(ns, query, 10), one_table(one, query)) < 9


def test_documents_of_different_lengths_share_nine_of_ten(tmp_path: Path) -> None:
    """With lengths from 3 to 14 words each leaf keeps its own average length (a boost
    cannot carry it): the top 10 still shares at least 9 with one table's."""
    data = corpus(3000, seed=4, length=None)
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField("part", "part")])
    ns.write(data)
    one = lance.write_dataset(data, tmp_path / "one")
    for words in ["mango w1", "kiwi lemon", "peach w7 w8", "olive"]:
        query = MatchQuery(words, "text")
        assert overlap(ns.to_table(full_text_query=query, limit=10), one_table(one, query)) >= 9


QUERIES = [
    pytest.param(MatchQuery("mango w3 w3", "text"), id="repeated word"),
    pytest.param(MatchQuery("kiwi w5", "text", operator=FullTextOperator.AND), id="and"),
    pytest.param(MatchQuery("lemon w2", "text", boost=2.5), id="boost"),
    pytest.param(PhraseQuery("olive w1", "text"), id="phrase"),
    pytest.param(MultiMatchQuery("kiwi w4", ["text", "title"]), id="multi match"),
    pytest.param(
        BooleanQuery(
            [
                (Occur.MUST, MatchQuery("kiwi", "text")),
                (Occur.SHOULD, MatchQuery("w1 peach", "text")),
                (Occur.MUST_NOT, MatchQuery("w2", "title")),
            ]
        ),
        id="boolean",
    ),
    pytest.param(
        BoostQuery(MatchQuery("mango lemon", "text"), MatchQuery("w9", "text")), id="boosting"
    ),
    pytest.param({"query": "peach w6", "columns": ["text"]}, id="dict"),
]


@pytest.mark.parametrize("query", QUERIES)
def test_pylance_queries_rank_as_one_table(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], query: Any
) -> None:
    ns, one = searched
    got = ns.to_table(columns=["id"], full_text_query=query)
    assert got.num_rows > 0
    assert_ranked_alike(got, one_table(one, query))


def test_a_partition_filter_ranks_as_a_table_of_the_kept_partitions(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], tmp_path: Path
) -> None:
    ns, one = searched
    where = "part IN (1, 2) OR part IS NULL"
    kept = lance.write_dataset(one.to_table(filter=where), tmp_path / "kept")
    query = MatchQuery("kiwi lemon peach w0", "text")
    got = ns.to_table(columns=["id", "part"], full_text_query=query, filter=where)
    assert set(got.column("part").to_pylist()) == {1, 2, None}
    assert_ranked_alike(got, one_table(kept, query))


def test_a_residual_filter_uses_the_statistics_of_every_row(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """``id % 3 = 0`` prunes nothing: prefiltered, each leaf ranks (without an index) over
    its rows that pass, and the scores are still those of one indexed table of all rows."""
    ns, one = searched
    one.create_scalar_index("text", "INVERTED")
    one = lance.dataset(one.uri)
    query = MatchQuery("olive w2", "text")
    where = "id % 3 = 0"
    got = ns.to_table(columns=["id"], full_text_query=query, filter=where, prefilter=True)
    assert_ranked_alike(got, one_table(one, query, filter=where, prefilter=True))
    post = ns.to_table(columns=["id"], full_text_query=query, filter=where, limit=30)
    expected = one_table(one, query, filter=where, prefilter=False, limit=30)
    assert_ranked_alike(post, expected)


def test_as_of_ranks_the_rows_of_then(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField("part", "part")])
    first = corpus(600)
    version = ns.write(first).manifest_version
    ns.write(corpus(600, seed=9, first_id=600))
    one = lance.write_dataset(first, tmp_path / "one")
    query = MatchQuery("mango w1", "text")
    assert_ranked_alike(
        ns.to_table(columns=["id"], full_text_query=query, as_of=version), one_table(one, query)
    )


def test_a_pruned_partition_is_never_opened(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], tmp_path: Path
) -> None:
    ns, one = searched
    (gone,) = ns.prune("part = 3")
    shutil.rmtree(Path(gone.location.removeprefix("file://")))
    where = "part <> 3 OR part IS NULL"
    kept = lance.write_dataset(one.to_table(filter=where), tmp_path / "kept")
    query = MatchQuery("olive kiwi", "text")
    got = ns.to_table(columns=["id"], full_text_query=query, filter=where)
    assert_ranked_alike(got, one_table(kept, query))
    with pytest.raises((TableNotFoundError, StorageError)):
        ns.to_table(full_text_query=query)


def test_one_leaf_at_a_time_gives_the_same_rows(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, one = searched
    query = MatchQuery("lemon w8", "text")
    serial = PartitionedNamespace.open(ns.uri, concurrency=1)
    assert_ranked_alike(
        serial.to_table(columns=["id"], full_text_query=query), one_table(one, query)
    )


def test_a_string_needs_an_indexed_column(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """As in pylance, a plain string searches the indexed columns; with none, the error
    says how to name the column."""
    ns, _ = searched
    with pytest.raises(InvalidArgumentError, match="'columns': \\['text'\\]"):
        ns.to_table(full_text_query="mango")


BAD = [
    (MatchQuery("x", "nope"), SchemaError, "nope"),
    (MatchQuery("x", "id"), SchemaError, "needs a text column"),
    ({"query": "x", "columns": ["nope"]}, SchemaError, "nope"),
    ({"query": "x", "column": ["text"]}, InvalidArgumentError, "'query'"),
    ({"query": "x", "columns": "text"}, InvalidArgumentError, "list of column names"),
    (CombinedFieldsQuery("x", ["text", "title"]), InvalidArgumentError, "CombinedFieldsQuery"),
    (42, InvalidArgumentError, "must be a string"),
]


@pytest.mark.parametrize(("query", "error", "match"), BAD)
def test_bad_queries_are_project_errors(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
    query: Any,
    error: type[Exception],
    match: str,
) -> None:
    ns, _ = searched
    with pytest.raises(error, match=match):
        ns.to_table(full_text_query=query)
    with pytest.raises(error, match=match):  # checked for no rows too
        ns.to_table(full_text_query=query, limit=0)


def test_a_search_for_no_rows_is_empty(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, _ = searched
    ours = ns.to_table(full_text_query=MatchQuery("mango", "text"), limit=0)
    assert ours.num_rows == 0
    assert ours.schema.names == [*ns.schema.names, "_score"]


def test_fact_a_query_plan_shows_the_arguments_of_a_full_text_query() -> None:
    """pylance's query objects hide their arguments; the Debug text of a query plan shows
    them all, and is read back here into the same query."""
    schema = pa.schema([pa.field("text", pa.utf8()), pa.field("title", pa.utf8())])
    ns_schema = NamespaceSchema.from_user_schema(schema)
    query = BooleanQuery(
        [
            (
                Occur.MUST,
                MatchQuery(
                    'say "hi" \\ {x}',
                    "text",
                    boost=2.5,
                    fuzziness=2,
                    prefix_length=1,
                    max_expansions=7,
                    operator=FullTextOperator.AND,
                ),
            ),
            (Occur.SHOULD, PhraseQuery("a b", "title", slop=3)),
            (Occur.SHOULD, MultiMatchQuery("c", ["text", "title"], boosts=[1.0, 3.0])),
            (
                Occur.MUST_NOT,
                BoostQuery(MatchQuery("d", "text"), MatchQuery("e", "text"), negative_boost=0.25),
            ),
        ]
    )
    parsed = fulltext.parse(query, ns_schema)
    assert parsed == Boolean(
        must=(Match("text", 'say "hi" \\ {x}', 2.5, 2, 7, "AND", 1, "row"),),
        should=(
            Phrase("title", "a b", 3, "row"),
            Multi(
                (
                    Match("text", "c", 1.0, 0, 50, "OR", 0, "row"),
                    Match("title", "c", 3.0, 0, 50, "OR", 0, "row"),
                )
            ),
        ),
        must_not=(
            Boosting(
                Match("text", "d", 1.0, 0, 50, "OR", 0, "row"),
                Match("text", "e", 1.0, 0, 50, "OR", 0, "row"),
                0.25,
            ),
        ),
    )


@pytest.fixture
def indexed(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> tuple[PartitionedNamespace, lance.LanceDataset]:
    """Both with an INVERTED index (positions kept) on ``text`` and ``title``."""
    ns, one = searched
    for column in ("text", "title"):
        ns.create_scalar_index(column, "INVERTED", with_position=True)
        one.create_scalar_index(column, "INVERTED", with_position=True)
    return ns, lance.dataset(one.uri)


@pytest.mark.parametrize(
    "query",
    [
        pytest.param("mango kiwi w3", id="string"),
        pytest.param(MatchQuery("kiwi lemon w0", "text"), id="match"),
        pytest.param(PhraseQuery("olive w1", "text"), id="phrase"),
        pytest.param(MultiMatchQuery("kiwi w4", ["text", "title"]), id="multi match"),
    ],
)
def test_indexed_leaves_rank_as_one_indexed_table(
    indexed: tuple[PartitionedNamespace, lance.LanceDataset], query: Any
) -> None:
    """A string searches the indexed columns (both, the best one counting) as in pylance."""
    ns, one = indexed
    got = ns.to_table(columns=["id"], full_text_query=query)
    assert got.num_rows > 0
    assert_ranked_alike(got, one_table(one, query))


def test_a_fuzzy_match_shares_nine_of_ten(
    indexed: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """A fuzzy word expands to several words, each with its own IDF in Lance; the
    statistics here are those of the expanded word as a whole: close, not exact."""
    ns, one = indexed
    query = MatchQuery("mangoo kiwii", "text", fuzziness=1)
    got = ns.to_table(columns=["id"], full_text_query=query, limit=10)
    assert got.num_rows == 10
    assert overlap(got, one_table(one, query)) >= 9


def test_the_statistics_of_a_search_follow_a_later_write(tmp_path: Path) -> None:
    """Counts of a leaf version are kept for the next search; a write publishes a new
    version, whose counts are taken afresh."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField("part", "part")])
    first = corpus(600)
    ns.write(first)
    query = MatchQuery("mango kiwi w3", "text")
    ns.to_table(columns=["id"], full_text_query=query)
    more = corpus(600, seed=5, first_id=600).filter(pa.compute.field("part") == 1)
    ns.write(more)
    one = lance.write_dataset(pa.concat_tables([first, more]), tmp_path / "one")
    assert_ranked_alike(ns.to_table(columns=["id"], full_text_query=query), one_table(one, query))
