"""``delete(f)`` removes exactly the rows where ``f`` is TRUE (the rows ``to_table(filter=f)``
reads), with SQL's three-valued logic:
a row where ``f`` is NULL stays (``NULL <> 'US'`` is NULL, not TRUE). A partition whose
partition value is NULL is neither covered by such a filter (dropped whole) nor excluded by
mistake: ``read/coverage.py`` must tell NULL from TRUE on partition values.

The oracle is DataFusion, evaluating ``(f) IS NOT TRUE`` on the very rows that were written;
the namespace has NULL partition values in an identity field (``country``) and in two
non-identity ones (the month of ``d``, then, after a spec evolution, a bucket of ``n``).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import datafusion
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.support import sql_filters

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.utf8()),
        pa.field("d", pa.date32()),
        pa.field("n", pa.int32()),
        pa.field("x", pa.int32()),  # never a partition source
    ]
)
COUNTRIES = ["US", "DE", None, "FR"]
DAYS = [dt.date(2025, 1, 5), dt.date(2025, 2, 7), None, dt.date(2025, 1, 20)]
NS = [1, None, 7, -3, 2]
XS = [None, 0, 5, 10]
#: Spec version 1: identity on country, month of d; version 2: identity, bucket of n.
BY_MONTH = [
    PartitionField("country", "country"),
    PartitionField("month", "d", "date_part('month', col)"),
]
BY_BUCKET = [
    PartitionField("country", "country"),
    PartitionField("bucket", "n", "abs(hash(col)) % 3"),
]


def rows(count: int, first_id: int) -> pa.Table:
    """``count`` rows cycling through the values above (NULLs included) at different
    periods, so that every combination of NULL and not NULL occurs."""
    ids = range(first_id, first_id + count)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "country": [COUNTRIES[i % 4] for i in ids],
            "d": pa.array([DAYS[(i // 3) % 4] for i in ids], pa.date32()),
            "n": pa.array([NS[i % 5] for i in ids], pa.int32()),
            "x": pa.array([XS[(i // 5) % 4] for i in ids], pa.int32()),
        },
        schema=SCHEMA,
    )


DATA = pa.concat_tables([rows(20, 0), rows(20, 100)])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A namespace holding :data:`DATA`, its first half written under spec version 1
    and its second under version 2; each test deletes from a copy of it."""
    root = tmp_path_factory.mktemp("null-partitions") / "ns"
    ns = PartitionedNamespace.create(root, schema=SCHEMA, partition_fields=BY_MONTH)
    ns.write(DATA.slice(0, 20))
    ns.evolve_partition_spec(BY_BUCKET)
    ns.write(DATA.slice(20))
    values = [p.values for p in ns.partitions()]
    assert {"country": None, "month": None} in values  # NULL in every field somewhere
    assert any(v.get("country") is None and v.get("bucket") is not None for v in values)
    assert any(v.get("bucket") is None for v in values)
    return root


def copy_of(template: Path, into: Path) -> PartitionedNamespace:
    shutil.copytree(template, into)
    return PartitionedNamespace.open(into)


def not_true(table: pa.Table, where: str) -> pa.Table:
    """The rows of ``table`` where ``where`` is not TRUE (FALSE or NULL), by DataFusion
    with its logical optimizer off: SQL's answer. DataFusion 55's simplifier merges ``c IN
    ('US') AND c NOT IN (NULL)`` into ``c IN ('US')`` (TRUE for 'US', where SQL says NULL:
    ``'US' NOT IN (NULL)`` is NULL), and so a plain Lance table deletes such rows; the
    namespace keeps them (hypothesis found it)."""
    if table.num_rows == 0:
        return table
    ctx = datafusion.SessionContext(
        datafusion.SessionConfig().set("datafusion.optimizer.max_passes", "0")
    )
    ctx.register_record_batches("t", [table.combine_chunks().to_batches()])
    kept = ctx.sql(f"SELECT * FROM t WHERE ({where}) IS NOT TRUE").to_arrow_table()
    return kept.cast(SCHEMA) if kept.num_rows else table.schema.empty_table()


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def check_delete(ns: PartitionedNamespace, stored: pa.Table, where: str) -> pa.Table:
    """Delete ``where`` from ``ns`` (holding ``stored``): it must remove exactly the rows
    where ``where`` is TRUE, the rows a read with that filter returns first. Returns what
    stays."""
    expected = not_true(stored, where)
    matching = {r["id"] for r in ns.to_table(filter=where).to_pylist()}
    assert matching == set(stored["id"].to_pylist()) - set(expected["id"].to_pylist()), where
    result = ns.delete(where)
    assert sorted_rows(ns.to_table()) == sorted_rows(expected), where
    assert result.rows_removed == stored.num_rows - expected.num_rows, where
    return expected


# -- explicit cases ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "where",
    [
        "country <> 'US'",
        "country NOT IN ('US', 'DE')",
        "NOT (country = 'US')",
        "NOT (country IN ('US', 'FR'))",
        "country <> 'US' AND x IS NOT NULL",
        "NOT (country = 'US' OR x = 5)",
    ],
)
def test_a_negated_filter_keeps_the_null_partitions_rows(
    template: Path, tmp_path: Path, where: str
) -> None:
    """On a NULL ``country`` the filter is NULL (or, for the last two, NULL or FALSE):
    every row of the NULL-country partitions stays, and so do those partitions."""
    ns = copy_of(template, tmp_path / "ns")
    null_partitions = {p.object_id for p in ns.partitions() if p.values["country"] is None}
    kept = check_delete(ns, DATA, where)
    assert kept.filter(pc.is_null(kept["country"])).num_rows == 10
    left = {p.object_id for p in ns.partitions() if p.values["country"] is None}
    assert left == null_partitions


@pytest.mark.parametrize(
    "where",
    [
        "NOT (NOT ((country IN ('US')) AND (country NOT IN (NULL))))",
        "(x IN (5)) AND (x NOT IN (NULL))",
        "NOT ((country IN (NULL)) AND (country IN ('US')))",
        "NOT ((x IN (NULL)) AND (x IN (5)))",
        "NOT ((country IN ('US')) AND (country IN ('DE')))",
        "NOT ((x = 5 OR x = 10) AND (x = 0))",
        "NOT ((n IN (1, 7)) AND (n IN (1, NULL)))",
    ],
)
def test_in_lists_datafusion_would_merge_are_decided_as_sql_says(
    template: Path, tmp_path: Path, where: str
) -> None:
    """DataFusion 55's simplifier (and so a plain Lance table) merges these IN lists as sets
    and gets NULL wrong: ``NOT (c IN (NULL) AND c IN ('US'))`` is TRUE for every row there,
    where SQL says NULL for 'US' and for NULL (apache/datafusion#24246). The namespace
    deletes what SQL says, on partition values (whole partitions) and on rows alike."""
    ns = copy_of(template, tmp_path / "ns")
    check_delete(ns, DATA, where)


def test_drop_partitions_decides_merged_in_lists_as_sql_says(
    template: Path, tmp_path: Path
) -> None:
    """On partition values: 'US' AND NULL is NULL, so only the 'DE' and 'FR' partitions go."""
    ns = copy_of(template, tmp_path / "ns")
    kept = {p.object_id for p in ns.partitions() if p.values["country"] in ("US", None)}
    ns.drop_partitions("NOT ((country IN (NULL)) AND (country IN ('US')))")
    assert {p.object_id for p in ns.partitions()} == kept


def test_is_null_deletes_the_null_partitions_whole(template: Path, tmp_path: Path) -> None:
    ns = copy_of(template, tmp_path / "ns")
    result = ns.delete("country IS NULL")
    assert result.rows_removed == 10
    assert [p for p in ns.partitions() if p.values["country"] is None] == []
    assert sorted_rows(ns.to_table()) == sorted_rows(not_true(DATA, "country IS NULL"))


# -- the property -----------------------------------------------------------------------------
LITERALS = {
    "country": ["'US'", "'DE'", "'FR'", "'XX'", "NULL"],
    "d": ["DATE '2025-01-05'", "DATE '2025-01-31'", "DATE '2025-02-07'", "NULL"],
    "n": ["-3", "1", "2", "7", "NULL"],
    "x": ["0", "5", "10", "NULL"],
}
#: The identity partition column half the time: the filters whose truth on partition
#: values decides a partition whole.
FILTERS = sql_filters(LITERALS, columns=["country", "country", "country", "d", "n", "x"])


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(filters=st.lists(FILTERS, min_size=1, max_size=3))
def test_delete_removes_exactly_the_rows_where_the_filter_is_true(
    template: Path, tmp_path_factory: pytest.TempPathFactory, filters: list[str]
) -> None:
    """Deletes one after another (deletion files on deletion files, partitions dropped
    along the way): after each, the namespace reads exactly the rows where the filter
    was not TRUE."""
    ns = copy_of(template, tmp_path_factory.mktemp("delete") / "ns")
    stored = DATA
    for where in filters:
        stored = check_delete(ns, stored, where)
