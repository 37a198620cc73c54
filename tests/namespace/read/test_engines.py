"""DuckDB, Polars, DataFusion and pyarrow query a namespace through its dataset
(ns.to_pyarrow_dataset, ns.to_polars, ns.to_duckdb): the rows equal to_table's with the same
filter, partitions are pruned (a leaf the query must not touch is unreadable), and a dataset
reads the one __manifest version it was made at."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import SessionContext

from airflow_provider_lance.namespace import (
    InstallationError,
    NamespaceDataset,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.namespace.errors import FilterError
from tests.support import EVENTS_SCHEMA, events, sort_rows

D = dt.date
SPACES = {
    "daily": [PartitionField("event_date", "event_date")],
    "month": [PartitionField("p_month", "event_date", "date_part('month', col)")],
    "bucket": [PartitionField("p_bucket", "id", "abs(hash(col)) % 4")],
}


def rows() -> pa.Table:
    """300 events over 15 days (Nov 28 - Dec 12) and 20 without a date."""
    dated = events(300, start=D(2025, 11, 28), days=15)
    undated = events(20, first_id=300).set_column(1, "event_date", pa.nulls(20, pa.date32()))
    return pa.concat_tables([dated, undated.cast(EVENTS_SCHEMA)])


@pytest.fixture(params=sorted(SPACES))
def space(request: pytest.FixtureRequest, tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        tmp_path / request.param, schema=EVENTS_SCHEMA, partition_fields=SPACES[request.param]
    )
    ns.write(rows())
    return ns


#: (SQL filter, the same as a pyarrow expression, as a Polars expression)
CASES: dict[str, tuple[str, pc.Expression, pl.Expr]] = {
    "point": (
        "event_date = DATE '2025-12-03'",
        pc.field("event_date") == D(2025, 12, 3),
        pl.col("event_date") == D(2025, 12, 3),
    ),
    "range": (
        "event_date >= DATE '2025-12-01' AND event_date < DATE '2025-12-05'",
        (pc.field("event_date") >= D(2025, 12, 1)) & (pc.field("event_date") < D(2025, 12, 5)),
        pl.col("event_date").is_between(D(2025, 12, 1), D(2025, 12, 5), closed="left"),
    ),
    "in": (
        "event_date IN (DATE '2025-11-29', DATE '2025-12-10') AND country IN ('DE', 'FR')",
        pc.field("event_date").isin([D(2025, 11, 29), D(2025, 12, 10)])
        & pc.field("country").isin(["DE", "FR"]),
        pl.col("event_date").is_in([D(2025, 11, 29), D(2025, 12, 10)])
        & pl.col("country").is_in(["DE", "FR"]),
    ),
    "null": (
        "event_date IS NULL",
        pc.field("event_date").is_null(),
        pl.col("event_date").is_null(),
    ),
    "not-or": (
        "NOT (event_date <= DATE '2025-12-08') OR country IS NULL",
        ~(pc.field("event_date") <= D(2025, 12, 8)) | pc.field("country").is_null(),
        ~(pl.col("event_date") <= D(2025, 12, 8)) | pl.col("country").is_null(),
    ),
    "ids": (
        "id IN (3, 17, 250)",
        pc.field("id").isin([3, 17, 250]),
        pl.col("id").is_in([3, 17, 250]),
    ),
    "residual": (  # amount is floating: applied by pyarrow, after the date prunes
        "event_date = DATE '2025-12-03' AND amount > 100",
        (pc.field("event_date") == D(2025, 12, 3)) & (pc.field("amount") > 100.0),
        (pl.col("event_date") == D(2025, 12, 3)) & (pl.col("amount") > 100.0),
    ),
}


def expected(ns: PartitionedNamespace, sql: str, columns: list[str] | None = None) -> list[dict]:
    table = ns.to_table(filter=sql, columns=columns)
    assert table.num_rows > 0  # every case selects some rows
    return sort_rows(table)


def as_rows(table: Any) -> list[dict]:
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    return sort_rows(pa.table(table))


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_engine_reads_what_to_table_reads(space: PartitionedNamespace, case: str) -> None:
    sql, arrow, polars = CASES[case]
    want = expected(space, sql)
    ds = space.to_pyarrow_dataset()
    assert as_rows(duckdb.sql(f"SELECT * FROM ds WHERE {sql}").to_arrow_table()) == want
    assert as_rows(duckdb.from_arrow(ds).filter(sql).to_arrow_table()) == want
    assert as_rows(pl.scan_pyarrow_dataset(ds).filter(polars).collect()) == want
    assert as_rows(space.to_polars().filter(polars).collect()) == want
    assert as_rows(ds.to_table(filter=arrow)) == want
    assert as_rows(ds.scanner(filter=arrow).to_table()) == want
    assert ds.count_rows(arrow) == len(want)
    ctx = SessionContext()
    ctx.register_dataset("events", ds)
    assert as_rows(ctx.sql(f"SELECT * FROM events WHERE {sql}").to_arrow_table()) == want


def test_projections_and_aggregates(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    ds = daily.to_pyarrow_dataset()
    sql = "event_date BETWEEN DATE '2025-12-01' AND DATE '2025-12-04'"
    ids = pa.table({"id": [r["id"] for r in expected(daily, sql, ["id"])]})
    count, total = duckdb.sql(f"SELECT count(*), sum(id) FROM ds WHERE {sql}").fetchall()[0]
    assert (count, total) == (ids.num_rows, pc.sum(ids["id"]).as_py())
    projected = ds.to_table(columns=["id"], filter=pc.field("event_date") >= D(2025, 12, 1))
    assert projected.schema.names == ["id"]
    lazy = daily.to_polars().filter(pl.col("country") == "DE").select("id", "country")
    assert lazy.collect().columns == ["id", "country"]
    assert lazy.head(3).collect().height == 3
    assert daily.to_polars().select(pl.len()).collect().item() == 320


def test_counts_read_no_column(daily: PartitionedNamespace) -> None:
    """DataFusion counts through a scan of no column; a read of no column keeps its rows."""
    daily.write(rows())
    sql = "event_date >= DATE '2025-12-01' AND amount > 100"
    want = len(expected(daily, sql))
    ctx = SessionContext()
    ctx.register_dataset("events", daily.to_pyarrow_dataset())
    counted = ctx.sql(f"SELECT count(*) AS n FROM events WHERE {sql}").to_arrow_table()
    assert counted.column("n").to_pylist() == [want]
    everything = ctx.sql("SELECT count(*) AS n FROM events").to_arrow_table()
    assert everything.column("n").to_pylist() == [320]
    assert daily.to_table(columns=[], filter=sql).num_rows == want
    assert daily.to_table(columns=[]).num_rows == 320


# -- pruning: the query succeeds although a leaf it must not touch is unreadable ----------
def break_leaf(ns: PartitionedNamespace, sql: str) -> None:
    """Delete the data files of the one partition ``sql`` selects (its reads fail now)."""
    (partition,) = ns.prune(sql)
    shutil.rmtree(Path(unquote(urlparse(partition.location).path)) / "data")
    with pytest.raises(Exception, match=r"(?i)not found|no such file"):
        ns.to_table(filter=sql)


PRUNED = {  # namespace: (the query, a partition it must not read)
    "daily": ("event_date = DATE '2025-12-03'", "event_date = DATE '2025-12-04'"),
    "month": ("event_date = DATE '2025-12-03'", "event_date = DATE '2025-11-30'"),
    "bucket": ("id = 17", "id = 18"),
}


def engine_queries(ns: PartitionedNamespace, sql: str) -> dict[str, Callable[[], list[dict]]]:
    """``sql`` run by every engine, as plain rows (a pyarrow expression for pyarrow's own)."""
    arrow = {
        "event_date = DATE '2025-12-03'": pc.field("event_date") == D(2025, 12, 3),
        "id = 17": pc.field("id") == 17,
        "event_date IS NULL": pc.field("event_date").is_null(),
    }[sql]
    polars = {
        "event_date = DATE '2025-12-03'": pl.col("event_date") == D(2025, 12, 3),
        "id = 17": pl.col("id") == 17,
        "event_date IS NULL": pl.col("event_date").is_null(),
    }[sql]

    def datafusion() -> list[dict]:
        ctx = SessionContext()
        ctx.register_dataset("events", ns.to_pyarrow_dataset())
        return as_rows(ctx.sql(f"SELECT * FROM events WHERE {sql}").to_arrow_table())

    def duck() -> list[dict]:
        ds = ns.to_pyarrow_dataset()  # noqa: F841 (DuckDB reads it by name)
        return as_rows(duckdb.sql(f"SELECT * FROM ds WHERE {sql}").to_arrow_table())

    return {
        "duckdb": duck,
        "duckdb view": lambda: as_rows(
            ns.to_duckdb("events").sql(f"SELECT * FROM events WHERE {sql}").to_arrow_table()
        ),
        "polars": lambda: as_rows(ns.to_polars().filter(polars).collect()),
        "polars dataset": lambda: as_rows(
            pl.scan_pyarrow_dataset(ns.to_pyarrow_dataset()).filter(polars).collect()
        ),
        "pyarrow": lambda: as_rows(ns.to_pyarrow_dataset().to_table(filter=arrow)),
        "datafusion": datafusion,
    }


@pytest.mark.parametrize("name", sorted(PRUNED))
def test_a_query_never_reads_a_partition_its_filter_excludes(tmp_path: Path, name: str) -> None:
    ns = PartitionedNamespace.create(
        tmp_path / name, schema=EVENTS_SCHEMA, partition_fields=SPACES[name]
    )
    ns.write(rows())
    query, other = PRUNED[name]
    want = expected(ns, query)
    break_leaf(ns, other)
    for engine, run in engine_queries(ns, query).items():
        assert run() == want, engine


def test_a_null_partition_is_read_alone(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    want = expected(daily, "event_date IS NULL")
    break_leaf(daily, "event_date = DATE '2025-12-03'")
    for engine, run in engine_queries(daily, "event_date IS NULL").items():
        assert run() == want, engine


def test_count_rows_of_whole_partitions_comes_from_metadata(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    want = len(expected(daily, "event_date = DATE '2025-12-03'"))
    break_leaf(daily, "event_date = DATE '2025-12-03'")  # no data file left to count
    ds = daily.to_pyarrow_dataset()
    assert ds.count_rows(pc.field("event_date") == D(2025, 12, 3)) == want
    assert ds.count_rows("event_date = DATE '2025-12-03'") == want


def test_head_stops_once_it_has_its_rows(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    ds = daily.to_pyarrow_dataset()
    first, *rest = ds.get_fragments()
    for fragment in rest:  # only the first partition in the plan's order can be read
        values = fragment.values["event_date"]
        where = "event_date IS NULL" if values is None else f"event_date = DATE '{values}'"
        break_leaf(daily, where)
    assert ds.head(5).num_rows == 5
    assert daily.to_polars().head(5).collect().height == 5  # Polars' limit reaches the scan
    assert ds.scanner(columns=["id"]).head(5).to_pylist() == first.head(5, ["id"]).to_pylist()


# -- versions --------------------------------------------------------------------------------
def test_as_of_reads_that_version(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    before = daily.version
    daily.write(events(30, start=D(2026, 1, 1), first_id=1000))
    old = daily.to_pyarrow_dataset(as_of=before)
    assert old.version == before
    assert duckdb.sql("SELECT count(*) FROM old").fetchall()[0] == (320,)
    assert daily.to_polars(as_of=before).select(pl.len()).collect().item() == 320
    assert daily.to_duckdb("e", as_of=before).sql("SELECT max(id) FROM e").fetchall()[0] == (319,)
    new = daily.to_pyarrow_dataset()  # noqa: F841 (DuckDB reads it by name)
    assert duckdb.sql("SELECT count(*) FROM new").fetchall()[0] == (350,)


def test_a_dataset_sees_a_write_made_after_it_whole_or_not_at_all(
    daily: PartitionedNamespace,
) -> None:
    daily.write(rows())
    ds = daily.to_pyarrow_dataset()
    lazy = daily.to_polars()
    # one write into existing partitions and three new ones
    daily.write(events(40, start=D(2025, 12, 11), days=4, first_id=2000))
    assert ds.count_rows() == 320
    assert duckdb.sql("SELECT count(*), max(id) FROM ds").fetchall()[0] == (320, 319)
    assert lazy.select(pl.len()).collect().item() == 320
    assert (
        ds.to_table(filter=pc.field("event_date") >= D(2025, 12, 11)).num_rows
        == len(expected(daily, "event_date >= DATE '2025-12-11'", ["id"])) - 40
    )
    fresh = daily.to_pyarrow_dataset()  # noqa: F841 (DuckDB reads it by name)
    assert duckdb.sql("SELECT count(*), max(id) FROM fresh").fetchall()[0] == (360, 2039)


# -- the dataset's own contract --------------------------------------------------------------
def test_a_filter_on_an_unknown_column_names_it(daily: PartitionedNamespace) -> None:
    ds = daily.to_pyarrow_dataset()
    with pytest.raises(FilterError, match=r"no column 'colour'.*id, event_date, country"):
        ds.to_table(filter=pc.field("colour") == "red")


def test_filtered_dataset_and_fragments(daily: PartitionedNamespace) -> None:
    daily.write(rows())
    ds = daily.to_pyarrow_dataset().filter(pc.field("country") == "DE")
    assert isinstance(ds, NamespaceDataset)
    assert ds.count_rows(pc.field("event_date") == D(2025, 12, 3)) == len(
        expected(daily, "country = 'DE' AND event_date = DATE '2025-12-03'")
    )
    fragments = daily.to_pyarrow_dataset().get_fragments(pc.field("event_date") < D(2025, 12, 1))
    assert sorted(f.values["event_date"] for f in fragments) == [
        D(2025, 11, 28),
        D(2025, 11, 29),
        D(2025, 11, 30),
    ]


def test_a_missing_engine_names_its_extra(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars raises ImportError
    with pytest.raises(InstallationError, match=r"pip install 'airflow-provider-lance\[polars\]'"):
        daily.to_polars()
    monkeypatch.setitem(sys.modules, "duckdb", None)
    with pytest.raises(InstallationError, match=r"pip install 'airflow-provider-lance\[duckdb\]'"):
        daily.to_duckdb("events")


def test_the_core_imports_no_engine() -> None:
    code = (
        "import sys\n"
        "import airflow_provider_lance.namespace.facade\n"
        "import airflow_provider_lance.namespace.read.dataset\n"
        "import airflow_provider_lance.namespace.read.engines\n"
        "print(sorted(m for m in ('duckdb', 'polars') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_pylances_datafusion_provider_does_not_serve_this_datafusion(
    daily: PartitionedNamespace,
) -> None:
    """Why DataFusion reads through register_dataset: pylance 14's FFILanceTableProvider is
    built against DataFusion 54's FFI, the installed datafusion is 55. When this fails, the
    provider may serve it: measure whether it prunes better than the dataset."""
    import lance

    (partition,) = daily.partitions() or [daily.create_partition({"event_date": D(2025, 1, 1)})]
    provider = lance.FFILanceTableProvider(lance.dataset(partition.location))
    with pytest.raises(ImportError, match="major version 54; expected 55"):
        SessionContext().register_table("leaf", provider)
