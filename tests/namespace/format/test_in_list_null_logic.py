"""Filters are evaluated with SQL's NULL logic although DataFusion 55's simplifier merges IN
lists as sets (apache/datafusion#24246): ``c IN ('US') AND c IN ('DE')`` becomes FALSE, where
SQL says NULL for a NULL ``c``, so ``NOT (...)`` would be TRUE there.

The oracle is DataFusion with its logical optimizer off (``max_passes = 0``): SQL's answer, for
the filters it can evaluate that way (all of these: no ``coalesce``)."""

from __future__ import annotations

import datafusion
import lance
import pyarrow as pa
import pytest
from hypothesis import given, settings

from airflow_provider_lance.namespace import FilterError
from airflow_provider_lance.namespace.format.expressions import (
    bind,
    evaluate_scalar,
    merges_lists,
    raw,
)
from airflow_provider_lance.namespace.read.pruning import check_filter
from tests.support import sql_filters

TABLE = pa.table(
    {
        "c": pa.array(["US", "DE", None, "FR", None, "US"], pa.utf8()),
        "n": pa.array([1, None, 5, 7, 1, None], pa.int32()),
        "id": pa.array(range(6), pa.int64()),
    }
)


def sql_values(where: str, *, simplified: bool = False) -> list[bool | None]:
    """``where`` on every row of :data:`TABLE` by DataFusion; SQL's answer unless
    ``simplified`` (DataFusion 55's own)."""
    config = datafusion.SessionConfig()
    if not simplified:
        config = config.set("datafusion.optimizer.max_passes", "0")
    ctx = datafusion.SessionContext(config)
    ctx.register_record_batches("t", [TABLE.to_batches()])
    return ctx.sql(f"SELECT ({where}) AS v FROM t ORDER BY id").to_arrow_table()["v"].to_pylist()


def parsed(where: str) -> object:
    empty = datafusion.SessionContext().from_arrow(TABLE.schema.empty_table())
    return raw(empty.parse_sql_expr(where))


def merges(where: str) -> bool:
    return merges_lists(parsed(where))


# -- the simplifier's mistakes, and that they are caught ---------------------------------------
@pytest.mark.parametrize(
    "where",
    [
        "NOT (c IN ('US') AND c IN ('DE'))",  # an empty intersection: FALSE, not NULL
        "NOT ((c = 'US' OR c = 'FR') AND (c = 'DE' OR c = 'XX'))",  # = made IN lists first
        "NOT (c NOT IN ('US') OR c NOT IN ('DE'))",
        "NOT (c IN (NULL) AND c IN ('US'))",
        "c IN ('US') AND c NOT IN (NULL)",
        "NOT (n IN (5, 7) AND n IN (5, NULL))",
        "(c IN ('US') AND c IN ('DE')) IS NOT FALSE",
        "NOT (CAST(n AS BIGINT) IN (1) AND n IN (5))",  # one operand once coerced
        "NOT (c IN ('US') AND NOT (c NOT IN ('DE')))",
    ],
)
def test_a_merge_datafusion_gets_wrong_is_evaluated_in_parts(where: str) -> None:
    sql = sql_values(where)
    assert sql_values(where, simplified=True) != sql  # the upstream bug, still there
    assert merges(where)
    assert bind(where, TABLE.schema, "filter").evaluate(TABLE).to_pylist() == sql
    kept = bind(where, TABLE.schema, "filter").filter(TABLE)
    assert kept["id"].to_pylist() == [i for i, v in enumerate(sql) if v is True]


@pytest.mark.parametrize(
    "where",
    [
        "c = 'US'",
        "c IN ('US', 'DE')",
        "c = 'US' OR c = 'DE'",  # a union: SQL's logic allows it
        "c IN ('US') OR c IN (NULL, 'DE')",
        "c NOT IN ('US') AND c <> 'DE'",
        "NOT (c = 'US' OR c = 'DE')",
        "c = 'US' AND n = 1",  # different operands
        "n >= 1 AND n < 7",
        "c IN ('US') AND n IN (1, 5)",
        "NOT (c IN ('US')) AND NOT (c IN ('DE'))",  # c NOT IN ('US') AND c NOT IN ('DE')
        "(CASE WHEN c = 'US' OR c = 'DE' THEN 1 ELSE 0 END) = 1",
    ],
)
def test_filters_datafusion_gets_right_are_left_whole(where: str) -> None:
    """These stay one DataFusion expression, and Lance may evaluate them (so scalar
    indexes serve them)."""
    assert not merges(where)
    assert sql_values(where, simplified=True) == sql_values(where)


def test_a_merge_inside_a_case_is_refused_with_the_way_around_it() -> None:
    """Inside a CASE (or a function's argument) the merge cannot be taken apart: DataFusion
    says TRUE for the NULL row, SQL says FALSE. The filter is refused, not answered wrong."""
    where = "(CASE WHEN NOT (c IN ('US') AND c IN ('DE')) THEN 1 ELSE 0 END) = 1"
    assert sql_values(where) == [True, True, False, True, False, True]
    assert sql_values(where, simplified=True) == [True] * 6
    assert bind(where, TABLE.schema, "filter").hidden_merges
    with pytest.raises(FilterError, match=r"inside a CASE or a function call.*#24246"):
        check_filter(where, bind(where, TABLE.schema, "filter"))


# -- the property: where merges_lists says no, DataFusion and Lance give SQL's answer ----------
LITERALS = {"c": ["'US'", "'DE'", "'XX'", "NULL"], "n": ["1", "5", "9", "NULL"]}
FILTERS = sql_filters(
    {**LITERALS, "CAST(n AS BIGINT)": LITERALS["n"]},
    comparisons=["=", "<>", "<", "IN", "NOT IN", "IS NULL", "BETWEEN"],
    wrappers=[
        "({}) IS TRUE",
        "({}) IS NOT TRUE",
        "({}) IS FALSE",
        "(CASE WHEN {} THEN 1 ELSE 0 END) = 1",
    ],
    max_leaves=6,
)


@pytest.fixture(scope="module")
def leaf(tmp_path_factory: pytest.TempPathFactory) -> lance.LanceDataset:
    return lance.write_dataset(TABLE, tmp_path_factory.mktemp("leaf") / "t.lance")


@settings(max_examples=150, deadline=None)
@given(where=FILTERS)
def test_every_filter_is_evaluated_as_sql_says(leaf: lance.LanceDataset, where: str) -> None:
    """Ours is SQL's answer, or the filter is refused (a merge inside a CASE); where
    :func:`merges_lists` says the simplifier merges nothing wrongly, DataFusion's own answer
    and Lance's rows are SQL's too (so handing it to them whole is safe)."""
    sql = sql_values(where)
    bound = bind(where, TABLE.schema, "filter")
    if bound.hidden_merges:
        with pytest.raises(FilterError):
            check_filter(where, bound)
        return
    assert bound.evaluate(TABLE).to_pylist() == sql, where
    if merges(where):
        return
    assert sql_values(where, simplified=True) == sql, where
    try:
        matching = sorted(leaf.to_table(filter=where)["id"].to_pylist())
    except ValueError as exc:  # Lance's planner takes no CASE and no IS UNKNOWN
        refused = str(exc)
    else:
        assert matching == [i for i, v in enumerate(sql) if v is True], where
        return
    assert "is not supported SQL in lance" in refused, where


def test_a_constant_is_folded_with_sqls_logic() -> None:
    """Constants are folded apart (pruning folds them): the same logic holds there."""
    ctx = datafusion.SessionContext()
    frame = ctx.from_arrow(pa.table({"x": [1]}))
    expr = raw(frame.parse_sql_expr("NOT (NULL IN ('US') AND NULL IN ('DE'))"))
    assert evaluate_scalar(expr).as_py() is None
