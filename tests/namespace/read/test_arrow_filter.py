"""An engine's pyarrow filter translated into the namespace's SQL (read/arrow_filter.py): the
SQL selects exactly the rows pyarrow does where it is complete, at least those where not."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField, RowFilter
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.read.arrow_filter import (
    ArrowFilter,
    Call,
    Field,
    Literal,
    decode,
)

UTC = dt.timezone.utc
SCHEMA = pa.schema(
    [
        pa.field("n", pa.int32()),
        pa.field("s", pa.large_string()),
        pa.field("d", pa.date32()),
        pa.field("t", pa.timestamp("us", "UTC")),
        pa.field("naive", pa.timestamp("ns")),
        pa.field("b", pa.bool_()),
        pa.field("m", pa.decimal128(10, 2)),
        pa.field("f", pa.float64()),
    ]
)
TABLE = pa.table(
    {
        "n": pa.array([1, 2, 3, None, 5, -7], pa.int32()),
        "s": pa.array(["a", "b", None, "it's", "a", ""], pa.large_string()),
        "d": pa.array([dt.date(2025, 1, d) if d else None for d in (1, 2, 3, None, 5, 31)]),
        "t": pa.array(
            [
                dt.datetime(2025, 1, 1, h, tzinfo=UTC) if h is not None else None
                for h in (0, 5, 5, None, 23, 1)
            ],
            pa.timestamp("us", "UTC"),
        ),
        "naive": pa.array(
            [None if i is None else 10**18 + i for i in (0, 1, 2, 3, None, 5)], pa.timestamp("ns")
        ),
        "b": pa.array([True, False, None, True, False, None]),
        "m": pa.array(
            [
                decimal.Decimal(x) if x else None
                for x in ("1.25", "2.50", None, "3.00", "1.25", "-1")
            ],
            pa.decimal128(10, 2),
        ),
        "f": pa.array([0.5, float("nan"), None, 2.0, -1.0, 3.5]),
    },
    schema=SCHEMA,
)


@pytest.fixture(scope="module")
def schema(tmp_path_factory: pytest.TempPathFactory) -> NamespaceSchema:
    root: Path = tmp_path_factory.mktemp("arrow_filter") / "ns"
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("d", "d")]
    )
    return ns.state().schema


F = pc.field
#: Expressions the translation knows: its SQL selects exactly their rows.
COMPLETE: dict[str, pc.Expression] = {
    "eq": F("n") == 2,
    "flipped": pc.scalar(2) < F("n"),
    "ne": F("s") != "a",
    "quote": F("s") == "it's",
    "date range": (F("d") >= dt.date(2025, 1, 2)) & (F("d") < dt.date(2025, 1, 5)),
    "zoned": F("t") > pa.scalar(dt.datetime(2025, 1, 1, 4, tzinfo=UTC), pa.timestamp("us", "UTC")),
    "zoned ms literal": F("t")
    == pa.scalar(dt.datetime(2025, 1, 1, 5, tzinfo=UTC), pa.timestamp("ms", "UTC")),
    "nanoseconds": F("naive") >= pa.scalar(10**18 + 2, pa.timestamp("ns")),
    "bool": F("b") == True,  # noqa: E712 (an expression, not a test)
    "decimal": F("m") == pa.scalar(decimal.Decimal("1.25"), pa.decimal128(10, 2)),
    "int vs float": F("n") > 2.5,
    "is null": F("d").is_null(),
    "is valid": F("s").is_valid(),
    "isin": F("s").isin(["a", "b"]),
    "isin with null": F("s").isin(["a", None]),
    "isin skip nulls": pc.is_in(F("s"), value_set=pa.array(["a", None]), skip_nulls=True),
    "isin empty": F("n").isin(pa.array([], pa.int32())),
    "or": (F("n") == 1) | F("s").is_null(),
    "not": ~(F("n") <= 2),
    "not isin": ~F("s").isin(["a"]),
    "not isin with null": ~F("s").isin(["a", None]),
    "duckdb in": pc.if_else(
        F("s").is_valid(), F("s").isin(["a", "b"]), pa.scalar(None, pa.bool_())
    ),
    "not duckdb in": ~pc.if_else(
        F("s").is_valid(), F("s").isin(["a"]), pa.scalar(None, pa.bool_())
    ),
    "null literal": F("n") == pa.scalar(None, pa.int32()),
    "true": pc.scalar(True),
}
#: Expressions with a part it does not know: its SQL selects at least their rows.
PARTIAL: dict[str, tuple[pc.Expression, bool]] = {  # expression, whether some SQL is left
    "float": (F("f") > 1.0, False),
    "float and date": ((F("f") > 1.0) & (F("d") <= dt.date(2025, 1, 3)), True),
    "float or date": ((F("f") > 1.0) | (F("d") <= dt.date(2025, 1, 3)), False),
    "function": (pc.starts_with(F("s"), "a") & (F("n") > 1), True),
    "not function": (~(pc.starts_with(F("s"), "a") | (F("n") > 1)), True),
    "column vs column": ((F("n") > F("n")) & F("b"), False),
}


def plain(table: pa.Table) -> list[dict]:
    """The rows, without the floating column (NaN is not equal to itself)."""
    return table.drop_columns(["f"]).to_pylist()


def sql_rows(sql: str, schema: NamespaceSchema) -> list[dict]:
    return plain(RowFilter(sql, schema).filter(TABLE))


@pytest.mark.parametrize("name", sorted(COMPLETE))
def test_the_sql_selects_exactly_the_expressions_rows(name: str, schema: NamespaceSchema) -> None:
    expression = COMPLETE[name]
    translated = ArrowFilter(expression, schema)
    assert translated.complete, translated
    assert translated.sql is not None
    want = plain(TABLE.filter(expression))
    assert sql_rows(translated.sql, schema) == want, translated.sql


@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_a_part_it_does_not_know_only_widens_the_sql(name: str, schema: NamespaceSchema) -> None:
    expression, some_sql = PARTIAL[name]
    translated = ArrowFilter(expression, schema)
    assert not translated.complete
    assert (translated.sql is not None) == some_sql, translated.sql
    kept = TABLE if translated.sql is None else RowFilter(translated.sql, schema).filter(TABLE)
    want = TABLE.filter(expression)
    assert all(row in plain(kept) for row in plain(want))
    assert plain(kept.filter(expression)) == plain(want)  # what a scan then applies


def test_pyarrow_pickles_an_expression_as_its_tree() -> None:
    """The fact the translation reads expressions by: a typed literal per column, the tree
    in the schema metadata in order."""
    tree = decode((F("d") == dt.date(2025, 1, 2)) & F("s").isin(["a"]))
    assert isinstance(tree, Call)
    assert tree.name == "and_kleene"
    equal, isin = tree.args
    assert equal == Call("equal", (Field("d"), Literal(pa.scalar(dt.date(2025, 1, 2)))), None)
    assert isinstance(isin, Call)
    assert isin.name == "is_in"
    assert isin.args == (Field("s"),)
    assert isin.options is not None
    assert isin.options["value_set"].values.to_pylist() == ["a"]


def test_an_expression_pyarrow_cannot_pickle_is_applied_as_it_is(schema: NamespaceSchema) -> None:
    by_position = pc.field(0) == 1
    assert decode(by_position) is None
    translated = ArrowFilter(by_position, schema)
    assert translated.sql is None
    assert not translated.complete
    assert translated.columns == SCHEMA.names


LITERAL_CASES: dict[str, Callable[[], pc.Expression]] = {
    "string vs number": lambda: F("n") == "2",
    "date vs timestamp": lambda: F("d") == pa.scalar(dt.datetime(2025, 1, 2), pa.timestamp("s")),
}


@pytest.mark.parametrize("name", sorted(LITERAL_CASES))
def test_a_constant_of_another_kind_is_left_to_pyarrow(name: str, schema: NamespaceSchema) -> None:
    translated = ArrowFilter(LITERAL_CASES[name](), schema)
    assert translated.sql is None
    assert not translated.complete
