"""ns.to_table(nearest=...): the global top k across partitions, equal to one Lance table.

Every expectation is pylance's exact (flat) search of ONE Lance table holding the same rows:
the namespace must return the same rows at the same distances, whichever partitions the
best rows sit in and whatever the filter prunes.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    SchemaError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.read.search import Search
from tests.support import examples

DIM = 8
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("day", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("qty", pa.int32()),
        pa.field("vec", pa.list_(pa.float32(), DIM)),
    ]
)
DAYS = [dt.date(2025, 3, d) for d in range(1, 6)] + [None]
COUNTRIES = ["DE", "FR", "US", None]
BY_DAY_AND_COUNTRY = [PartitionField("day", "day"), PartitionField("country", "country")]


def rows(n: int, seed: int = 0, first_id: int = 0) -> pa.Table:
    """``n`` rows over 6 days (one NULL) x 4 countries (one NULL), random vectors."""
    rng = np.random.default_rng(seed)
    ids = np.arange(first_id, first_id + n)
    flat = rng.standard_normal(n * DIM).astype(np.float32)
    return pa.table(
        {
            "id": ids,
            "day": pa.array([DAYS[i % len(DAYS)] for i in ids], pa.date32()),
            "country": pa.array([COUNTRIES[(i // 6) % len(COUNTRIES)] for i in ids]),
            "qty": pa.array(ids % 7, pa.int32()),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(flat), DIM),
        },
        schema=SCHEMA,
    )


def query(seed: int) -> np.ndarray:
    return np.random.default_rng(1000 + seed).standard_normal(DIM).astype(np.float32)


@pytest.fixture
def searched(tmp_path: Path) -> tuple[PartitionedNamespace, lance.LanceDataset]:
    """A namespace by day and country (24 partitions, NULL ones included) and one Lance
    table holding the same 720 rows."""
    data = rows(720)
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    ns.write(data)
    return ns, lance.write_dataset(data, tmp_path / "one")


def exact(one: lance.LanceDataset, nearest: dict[str, Any], **kw: Any) -> pa.Table:
    """One table's flat search, in the namespace's columns."""
    out = one.to_table(nearest={**nearest, "use_index": False}, **kw)
    return out.select([*SCHEMA.names, "_distance"])


def assert_same(got: pa.Table, expected: pa.Table) -> None:
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    np.testing.assert_allclose(
        got.column("_distance").to_numpy(), expected.column("_distance").to_numpy(), rtol=1e-6
    )
    assert got.drop_columns(["_distance"]) == expected.drop_columns(["_distance"]).cast(
        got.schema.remove(got.schema.get_field_index("_distance"))
    )


PARTITION_FILTERS = [
    None,
    "day = DATE '2025-03-02'",
    "day BETWEEN DATE '2025-03-02' AND DATE '2025-03-04'",
    "country IN ('DE', 'US')",
    "day IS NULL",
    "country IS NULL AND day >= DATE '2025-03-04'",
    "day = DATE '2025-03-01' OR country = 'FR'",
]


@pytest.mark.parametrize("where", PARTITION_FILTERS)
@pytest.mark.parametrize("prefilter", [False, True])
def test_nearest_equals_one_table_under_partition_filters(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], where: str | None, prefilter: bool
) -> None:
    """A filter on partition columns only prunes: prefilter or not, the result is one
    table's prefiltered search."""
    ns, one = searched
    nearest = {"column": "vec", "q": query(1), "k": 12}
    got = ns.to_table(nearest=nearest, filter=where, prefilter=prefilter)
    assert_same(got, exact(one, nearest, filter=where, prefilter=True))
    assert got.schema.names == [*SCHEMA.names, "_distance"]


def test_the_global_top_k_comes_from_many_partitions(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, one = searched
    nearest = {"column": "vec", "q": query(2), "k": 20}
    got = ns.to_table(nearest=nearest)
    assert_same(got, exact(one, nearest))
    places = {(r["day"], r["country"]) for r in got.select(["day", "country"]).to_pylist()}
    assert len(places) >= 5


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_metrics_and_pylance_options_pass_through(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], metric: str
) -> None:
    ns, one = searched
    nearest = {"column": "vec", "q": query(3), "k": 9, "metric": metric, "nprobes": 4}
    assert_same(ns.to_table(nearest=nearest), exact(one, nearest))


def test_a_residual_filter_prefilters_or_postfilters_as_pylance(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """``qty`` is no partition column: with ``prefilter=True`` it is applied in each leaf
    before ranking; without, to the global top k (fewer rows, as one table gives)."""
    ns, one = searched
    nearest = {"column": "vec", "q": query(4), "k": 15}
    where = "qty IN (1, 2) AND country <> 'FR'"
    pre = ns.to_table(nearest=nearest, filter=where, prefilter=True)
    assert pre.num_rows == 15
    assert_same(pre, exact(one, nearest, filter=where, prefilter=True))
    post = ns.to_table(nearest=nearest, filter="qty IN (1, 2)")
    assert 0 < post.num_rows < 15
    assert_same(post, exact(one, nearest, filter="qty IN (1, 2)", prefilter=False))


def test_a_postfilter_applies_to_the_top_k_of_the_kept_partitions(
    searched: tuple[PartitionedNamespace, lance.LanceDataset], tmp_path: Path
) -> None:
    """The filter prunes first, then the rest is applied to the top k of what is left: as
    one table holding the rows of the kept partitions would give."""
    ns, one = searched
    day = dt.date(2025, 3, 2)
    kept = lance.write_dataset(one.to_table(filter="day = DATE '2025-03-02'"), tmp_path / "k")
    nearest = {"column": "vec", "q": query(12), "k": 10}
    got = ns.to_table(nearest=nearest, filter="day = DATE '2025-03-02' AND qty IN (1, 2)")
    assert 0 < got.num_rows < 10
    assert set(got.column("day").to_pylist()) == {day}
    assert_same(got, exact(kept, nearest, filter="qty IN (1, 2)", prefilter=False))


def test_a_filter_lance_cannot_plan_is_applied_by_row_ids(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """Lance's planner refuses ``qty > 2.5`` on an int32 column (DataFusion takes it): the
    rows it holds for are found here and handed to Lance as row ids."""
    ns, one = searched
    nearest = {"column": "vec", "q": query(5), "k": 10}
    got = ns.to_table(nearest=nearest, filter="qty > 2.5", prefilter=True)
    assert_same(got, exact(one, nearest, filter="qty > 2", prefilter=True))


def test_as_of_searches_the_rows_of_then(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    first = rows(300)
    version = ns.write(first).manifest_version
    ns.write(rows(300, seed=1, first_id=300))
    one = lance.write_dataset(first, tmp_path / "one")
    nearest = {"column": "vec", "q": query(6), "k": 10}
    then = ns.to_table(nearest=nearest, as_of=version)
    assert_same(then, exact(one, nearest))
    assert ns.to_table(nearest=nearest).column("id").to_pylist() != then["id"].to_pylist()


def test_a_pruned_partition_is_never_opened(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """The leaf of 2025-03-01 / DE is gone: a search that prunes it succeeds, one that
    must read it fails with a project error."""
    ns, one = searched
    (gone,) = ns.prune("day = DATE '2025-03-01' AND country = 'DE'")
    shutil.rmtree(Path(gone.location.removeprefix("file://")))
    nearest = {"column": "vec", "q": query(7), "k": 10}
    where = "day >= DATE '2025-03-02'"
    assert_same(
        ns.to_table(nearest=nearest, filter=where),
        exact(one, nearest, filter=where, prefilter=True),
    )
    with pytest.raises((TableNotFoundError, StorageError)):
        ns.to_table(nearest=nearest)


def test_each_leaf_returns_at_most_k_rows(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, _ = searched
    plan = ns.plan_scan()
    found = Search({"column": "vec", "q": query(8), "k": 3}, None, False, None).found(plan)
    assert len(found.tops) == len(plan.tasks) == 24
    assert all(t.rows.num_rows == 3 for t in found.tops)
    assert found.merge(plan.schema) == ns.to_table(nearest={"column": "vec", "q": query(8), "k": 3})


def test_readers_batches_projection_and_limit(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, one = searched
    nearest = {"column": "vec", "q": query(9), "k": 11}
    expected = exact(one, nearest)
    reader = ns.to_reader(nearest=nearest, columns=["id", "day"], batch_size=4)
    assert reader.schema.names == ["id", "day", "_distance"]
    got = reader.read_all()
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    batches = list(ns.to_batches(nearest=nearest, columns=["id"], batch_size=4))
    assert [b.num_rows for b in batches] == [4, 4, 3]
    limited = ns.to_table(nearest=nearest, columns=["id"], limit=5)
    assert limited.column("id").to_pylist() == expected.column("id").to_pylist()[:5]
    assert ns.to_table(nearest=nearest, columns=[]).schema.names == ["_distance"]


def test_one_leaf_at_a_time_gives_the_same_rows(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, one = searched
    serial = PartitionedNamespace.open(ns.uri, concurrency=1)
    nearest = {"column": "vec", "q": query(10), "k": 10}
    assert_same(serial.to_table(nearest=nearest), exact(one, nearest))


def test_leaves_older_than_the_vector_column_and_a_renamed_one(tmp_path: Path) -> None:
    """Partitions written before ``vec`` was added hold no vector (skipped); after a rename
    the leaves still store the old name, and the search finds it by field id."""
    plain = SCHEMA.remove(SCHEMA.get_field_index("vec"))
    ns = PartitionedNamespace.create(tmp_path / "ns", plain, [PartitionField("day", "day")])
    ns.write(rows(60).drop_columns(["vec"]).filter(pa.compute.field("id") < 30))
    ns.add_column(pa.field("vec", pa.list_(pa.float32(), DIM)))
    later = rows(200, seed=3, first_id=100)
    ns.write(later)
    ns.rename_column("vec", "embedding")
    one = lance.write_dataset(later, tmp_path / "one")
    nearest = {"column": "embedding", "q": query(11), "k": 8}
    got = ns.to_table(nearest=nearest, columns=["id"])
    expected = exact(one, {**nearest, "column": "vec"})
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()


def test_ties_are_broken_by_partition_then_row(tmp_path: Path) -> None:
    """Every vector is the same: the order is partition id, then row id, run after run."""
    data = rows(40)
    same = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(40 * DIM, np.float32)), DIM)
    data = data.set_column(data.schema.get_field_index("vec"), "vec", same)
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    ns.write(data)
    nearest = {"column": "vec", "q": np.zeros(DIM, np.float32), "k": 12}
    first = ns.to_table(nearest=nearest)
    assert all(ns.to_table(nearest=nearest) == first for _ in range(3))
    order = {p.object_id: p.values for p in ns.partitions()}
    ranked = sorted(order, key=str)
    first_partition = order[ranked[0]]
    top = first.slice(0, 1).to_pylist()[0]
    assert (top["day"], top["country"]) == (first_partition["day"], first_partition["country"])


BAD = [
    ({"column": "nope", "q": np.zeros(DIM), "k": 3}, SchemaError, "nope"),
    ({"column": "qty", "q": np.zeros(DIM), "k": 3}, SchemaError, "not a vector column"),
    ({"column": "vec", "q": np.zeros(DIM - 1), "k": 3}, InvalidArgumentError, "holds vectors of 8"),
    ({"column": "vec", "q": np.zeros((2, DIM)), "k": 3}, InvalidArgumentError, "one vector"),
    ({"column": "vec", "q": "abc", "k": 3}, InvalidArgumentError, "one vector"),
    ({"column": "vec", "q": np.zeros(DIM), "k": 0}, InvalidArgumentError, r"nearest\['k'\]"),
    ({"column": "vec", "q": np.zeros(DIM), "k": 2.5}, InvalidArgumentError, r"nearest\['k'\]"),
    ({"column": "vec", "q": np.zeros(DIM), "metric": "manhattan"}, InvalidArgumentError, "metric"),
    ({"column": "vec", "q": np.zeros(DIM), "kk": 3}, InvalidArgumentError, "unknown keys"),
    ({"q": np.zeros(DIM)}, InvalidArgumentError, "needs 'column'"),
    ([1, 2], InvalidArgumentError, "must be a dict"),
]


@pytest.mark.parametrize(("nearest", "error", "match"), BAD)
def test_bad_nearest_arguments_are_project_errors(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
    nearest: Any,
    error: type[Exception],
    match: str,
) -> None:
    ns, _ = searched
    with pytest.raises(error, match=match):
        ns.to_table(nearest=nearest)


def test_bad_combinations_are_project_errors(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, _ = searched
    nearest = {"column": "vec", "q": np.zeros(DIM), "k": 3}
    with pytest.raises(InvalidArgumentError, match="not both"):
        ns.to_table(nearest=nearest, full_text_query="x")
    with pytest.raises(InvalidArgumentError, match="prefilter must be"):
        ns.to_table(nearest=nearest, prefilter="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="prefilter applies to a search"):
        ns.to_table(prefilter=True)
    with pytest.raises(InvalidArgumentError, match="limit"):
        ns.to_table(nearest=nearest, limit=-1)
    with pytest.raises(SchemaError, match="'nope'"):  # checked with limit=0 too
        ns.to_table(nearest={**nearest, "column": "nope"}, limit=0)


def test_a_search_for_no_rows_is_empty_as_pylance_answers_it(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, table = searched
    nearest = {"column": "vec", "q": np.zeros(DIM), "k": 3}
    ours = ns.to_table(nearest=nearest, limit=0)
    theirs = table.to_table(nearest=nearest, limit=0)
    assert ours.num_rows == theirs.num_rows == 0
    assert ours.schema.names == [*ns.schema.names, "_distance"]
    assert ours.schema.field("_distance").type == theirs.schema.field("_distance").type
    assert list(ns.to_batches(nearest=nearest, limit=0)) == []


def test_limit_stops_a_plain_read(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    ns, _ = searched
    assert ns.to_table(limit=7).num_rows == 7
    assert sum(b.num_rows for b in ns.to_batches(limit=100, batch_size=30)) == 100


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 120),
    seed=st.integers(0, 10_000),
    k=st.integers(1, 40),
    where=st.sampled_from([*PARTITION_FILTERS, "qty < 3", "qty % 2 = 0"]),
    prefilter=st.booleans(),
)
def test_property_namespace_search_equals_one_table(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    seed: int,
    k: int,
    where: str | None,
    prefilter: bool,
) -> None:
    base = tmp_path_factory.mktemp("prop")
    data = rows(n, seed=seed)
    ns = PartitionedNamespace.create(base / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    ns.write(data)
    one = lance.write_dataset(data, base / "one")
    nearest = {"column": "vec", "q": query(seed), "k": k}
    partition_only = where is None or "qty" not in where
    expected = exact(one, nearest, filter=where, prefilter=prefilter or partition_only)
    assert_same(ns.to_table(nearest=nearest, filter=where, prefilter=prefilter), expected)


def test_indexed_leaves_are_searched_through_their_published_index(
    searched: tuple[PartitionedNamespace, lance.LanceDataset],
) -> None:
    """``ns.create_index`` publishes an IVF_FLAT of 4 lists on every leaf: probing all of
    them finds exactly what flat search finds, probing one misses some (the index is used:
    for one query of ten at least, as the lists are trained at random), and
    ``use_index=False`` or a version before the index is flat search again."""
    ns, one = searched
    before = ns.version
    ns.create_index("vec", "IVF_FLAT", num_partitions=4)
    nearest = {"column": "vec", "q": query(13), "k": 10}
    flat = exact(one, nearest)
    assert_same(ns.to_table(nearest={**nearest, "nprobes": 4}), flat)
    missed = [
        ns.to_table(nearest={**nearest, "q": query(q), "nprobes": 1}).column("id").to_pylist()
        != exact(one, {**nearest, "q": query(q)}).column("id").to_pylist()
        for q in range(13, 23)
    ]
    assert any(missed)
    assert_same(ns.to_table(nearest={**nearest, "nprobes": 1, "use_index": False}), flat)
    assert_same(ns.to_table(nearest={**nearest, "nprobes": 1}, as_of=before), flat)


def test_leaves_kept_open_between_searches_never_hide_a_write_or_a_loss(tmp_path: Path) -> None:
    """Searched leaf versions stay open for the next search: a write publishes new versions
    (searched afresh), and a leaf whose files vanished is a project error, not a stale hit."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, BY_DAY_AND_COUNTRY)
    ns.write(rows(200))
    nearest = {"column": "vec", "q": query(14), "k": 5}
    ns.to_table(nearest=nearest)
    exact_hits = rows(5, seed=5, first_id=1000)
    same = pa.FixedSizeListArray.from_arrays(pa.array(np.tile(query(14), 5)), DIM)
    exact_hits = exact_hits.set_column(exact_hits.schema.get_field_index("vec"), "vec", same)
    ns.write(exact_hits)
    after = ns.to_table(nearest=nearest)
    assert sorted(after.column("id").to_pylist()) == list(range(1000, 1005))
    for partition in ns.partitions():
        shutil.rmtree(Path(partition.location.removeprefix("file://")))
    with pytest.raises((TableNotFoundError, StorageError)):
        ns.to_table(nearest=nearest)
