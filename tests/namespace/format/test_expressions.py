"""Partition expressions: Appendix D and any deterministic DataFusion expression."""

from __future__ import annotations

import datetime as dt
import struct

import pyarrow as pa
import pytest
import xxhash

from airflow_provider_lance.namespace import ExpressionError, PartitionField, PartitionSpecError
from airflow_provider_lance.namespace.format.expressions import (
    _CONSTANTS,
    bind,
    evaluate_scalar,
    new_session,
    raw,
)
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.format.spec import evaluator, resolve_spec

SCHEMA = NamespaceSchema.from_user_schema(
    pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("small", pa.int32()),
            pa.field("ts", pa.timestamp("us")),
            pa.field("tstz", pa.timestamp("us", tz="America/New_York")),
            pa.field("d", pa.date32()),
            pa.field("s", pa.utf8()),
            pa.field("price", pa.float64()),
        ]
    )
)


def resolve(*fields: PartitionField) -> list[PartitionField]:
    return resolve_spec(fields, SCHEMA, {}, ())


def evaluate(field: PartitionField, values: list) -> list:
    [resolved] = resolve(field)
    source = SCHEMA.field(resolved.source or "")
    return evaluator(resolved, source.type).evaluate(pa.array(values, source.type)).to_pylist()


TS = dt.datetime(2025, 12, 10, 23, 45, 1)


@pytest.mark.parametrize(
    ("field", "values", "expected", "result_type"),
    [
        (
            PartitionField("d", "d"),
            [dt.date(2025, 1, 2), None],
            [dt.date(2025, 1, 2), None],
            pa.date32(),
        ),
        (
            PartitionField("y", "d", "date_part('year', col)"),
            [dt.date(2025, 1, 2)],
            [2025],
            pa.int32(),
        ),
        (PartitionField("m", "ts", "date_part('month', col)"), [TS], [12], pa.int32()),
        (PartitionField("dd", "ts", "date_part('day', col)"), [TS], [10], pa.int32()),
        (PartitionField("h", "ts", "date_part('hour', col)"), [TS, None], [23, None], pa.int32()),
        (
            PartitionField("s2", "s", "left(col, 2)"),
            ["héllo", "a", None],
            ["hé", "a", None],
            pa.utf8(),
        ),
        (
            PartitionField("t10", "id", "col - (col % 10)", pa.int64()),
            [17, -17, 0, None],
            [10, -10, 0, None],
            pa.int64(),
        ),
        (
            PartitionField("t10s", "small", "col - (col % 10)", pa.int32()),
            [25, 9],
            [20, 0],
            pa.int32(),
        ),
        (PartitionField("p", "price", "col - (col % 0.5)"), [1.7, None], [1.5, None], pa.float64()),
        (
            PartitionField("day", "ts", "date_trunc('day', col)"),
            [TS],
            [dt.datetime(2025, 12, 10)],
            pa.timestamp("us"),
        ),
    ],
    ids=lambda v: v.name if isinstance(v, PartitionField) else None,
)
def test_appendix_d_expressions(
    field: PartitionField, values: list, expected: list, result_type
) -> None:
    [resolved] = resolve(field)
    assert resolved.result_type == result_type
    assert evaluate(field, values) == expected


def test_bucket_is_abs_hash_mod_n_over_xxhash64() -> None:
    values = [0, 1, 5, 123456789, -42, None]
    got = evaluate(PartitionField("b", "id", "abs(hash(col)) % 16"), values)
    expected = []
    for v in values:
        if v is None:
            expected.append(None)
            continue
        h = struct.unpack("<q", struct.pack("<Q", xxhash.xxh64_intdigest(struct.pack("<q", v))))[0]
        expected.append(abs(h) % 16)
    assert got == expected


def test_bucket_of_int32_and_int64_columns_agree() -> None:
    values = list(range(-50, 50))
    small = evaluate(PartitionField("b", "small", "abs(hash(col)) % 7"), values)
    wide = evaluate(PartitionField("b", "id", "abs(hash(col)) % 7"), values)
    assert small == wide


def test_time_zones() -> None:
    """Zone-less timestamps are evaluated in UTC (the pinned session zone); a column that
    declares a zone is evaluated in that zone (DataFusion semantics: it is part of the type)."""
    naive = dt.datetime(2025, 12, 31, 23, 30)
    assert evaluate(PartitionField("h", "ts", "date_part('hour', col)"), [naive]) == [23]
    moment = dt.datetime(2026, 1, 1, 3, 30, tzinfo=dt.timezone.utc)  # 22:30 in New York
    assert evaluate(PartitionField("y", "tstz", "date_part('year', col)"), [moment]) == [2025]
    assert evaluate(PartitionField("h", "tstz", "date_part('hour', col)"), [moment]) == [22]


def test_any_deterministic_datafusion_expression() -> None:
    field = PartitionField(
        "k", "s", "lower(substr(col, 1, 3)) || '-' || CAST(length(col) AS VARCHAR)"
    )
    assert evaluate(field, ["HELLO", None]) == ["hel-5", None]


def test_result_type_is_cast_and_widening_allowed() -> None:
    [f] = resolve(PartitionField("y", "d", "date_part('year', col)", pa.int64()))
    assert f.result_type == pa.int64()
    assert evaluate(
        PartitionField("y", "d", "date_part('year', col)", pa.int64()), [dt.date(2030, 1, 1)]
    ) == [2030]
    # truncate of a timestamp stored as a date: same temporal family, exact
    field = PartitionField("m", "d", "date_trunc('month', col)", pa.date32())
    assert evaluate(field, [dt.date(2025, 12, 10)]) == [dt.date(2025, 12, 1)]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (PartitionField("x", "s", "col", pa.int32()), "cannot be stored as result_type int32"),
        (PartitionField("x", "d", "date_part('year', col)", pa.utf8()), "cannot be stored"),
        (PartitionField("x", "id", "col + random()"), "not deterministic"),
        (PartitionField("x", "d", "now()"), "not deterministic"),
        (PartitionField("x", "id", "coalesce(col, 0)"), "must return NULL for a NULL source"),
        (PartitionField("x", "id", "42"), "must return NULL"),
        (PartitionField("x", "id", "col + other"), "not a valid expression"),
        (PartitionField("x", "id", "sum(col)"), "scalar functions"),
        (PartitionField("x", "id", "col +"), "not a valid expression"),
        (PartitionField("x", "id", "no_such_function(col)"), "not a valid expression"),
        (PartitionField("x", "id", ""), "non-empty"),
        (PartitionField("x", "s", "hash(col) + hash(length(col))"), "different types"),
    ],
    ids=lambda v: v.expression if isinstance(v, PartitionField) else None,
)
def test_bad_expressions_are_rejected_at_definition(field: PartitionField, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        resolve(field)


def test_values_not_fitting_the_result_type_fail_loudly() -> None:
    with pytest.raises(ExpressionError, match="does not fit"):
        evaluate(PartitionField("t", "id", "col - (col % 10)", pa.int8()), [1000])


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (PartitionField("x", "nope"), "unknown column 'nope'"),
        (PartitionField("x"), "needs a source column"),
        (PartitionField("", "id"), "non-empty"),
        (PartitionField("object_id", "id"), "collides with a __manifest column"),
        (PartitionField("__mine", "id"), "collides"),
    ],
)
def test_bad_fields_are_rejected(field: PartitionField, message: str) -> None:
    with pytest.raises(PartitionSpecError, match=message):
        resolve_spec([field], SCHEMA, {}, ("object_id", "read_version"))


def test_duplicate_names_in_one_spec() -> None:
    with pytest.raises(PartitionSpecError, match="used twice"):
        resolve(PartitionField("a", "id"), PartitionField("a", "d"))


def test_evaluating_keeps_no_data_alive_in_the_session() -> None:
    """DataFusion's from_arrow registers its input; left registered, every batch leaked."""
    schema = pa.schema([pa.field("col", pa.int64())])
    value, predicate = bind("col + 1", schema, "test"), bind("col >= 0", schema, "test")

    def registered() -> list[set[str]]:
        return [b._session.catalog().schema().names() for b in (value, predicate)]

    before = registered()
    for i in range(3):
        assert value.evaluate(pa.table({"col": [i]})).to_pylist() == [i + 1]
        assert predicate.filter(pa.table({"col": [i]})).num_rows == 1
    assert registered() == before


def test_constant_folding_keeps_nothing_registered() -> None:
    """Pruning folds constants in one process-wide session: it must not grow per call."""
    constant = raw(bind("1 + 2", pa.schema([pa.field("col", pa.int64())]), "test").expr)
    assert evaluate_scalar(constant).as_py() == 3
    tables = _CONSTANTS[0].catalog().schema().names()
    for _ in range(3):
        assert evaluate_scalar(constant).as_py() == 3
    assert _CONSTANTS[0].catalog().schema().names() == tables


def test_values_and_filtered_rows_keep_the_input_order() -> None:
    """Inputs of many DataFusion batches (8,192 rows each): an expression's values line up
    with their rows and a filter keeps the rows' order. With several target partitions the
    batches were dealt out round-robin and collected as they finished, so the values of a
    string, hash or date function belonged to other rows (and rows were written to
    partitions of other rows' values)."""
    n = 100_000
    words = ["apple", "banana", "cherry", None, ""]
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "s": pa.array([words[(i * 7919) % 5] for i in range(n)], pa.utf8()),
            "d": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i % 1500) for i in range(n)]),
        }
    )
    schema = table.schema
    letters = bind("left(s, 1)", schema, "test").evaluate(table).to_pylist()
    assert letters == [None if w is None else w[:1] for w in table.column("s").to_pylist()]
    years = bind("date_part('year', d)", schema, "test").evaluate(table).to_pylist()
    assert years == [d.year for d in table.column("d").to_pylist()]
    buckets = bind("abs(hash(s)) % 7", schema, "test").evaluate(table)
    one_batch_each = [
        bind("abs(hash(s)) % 7", schema, "test").evaluate(table.slice(i, 1000))
        for i in range(0, n, 1000)
    ]
    assert buckets.to_pylist() == [v for part in one_batch_each for v in part.to_pylist()]
    kept = bind("left(s, 1) = 'b' OR id % 3 = 0", schema, "test").filter(table)
    assert kept.column("id").to_pylist() == [
        i for i, w in enumerate(table.column("s").to_pylist()) if (w or "")[:1] == "b" or i % 3 == 0
    ]


IDENTITY_VALUES = {
    "id": [1, -(2**63), 2**63 - 1],
    "small": [0, None, -5],
    "ts": [TS, None],
    "tstz": [dt.datetime(2025, 3, 9, 7, 30, tzinfo=dt.timezone.utc), None],
    "d": [dt.date(2025, 1, 2), None, dt.date(1, 1, 1)],
    "s": ["", None, "é", "a\x00"],
    "price": [0.0, -0.0, float("nan"), float("inf"), None],
}


@pytest.mark.parametrize("column", sorted(IDENTITY_VALUES))
@pytest.mark.parametrize("expression", ["col", ' "col" ', "(col)"])
def test_identity_fields_take_the_column_as_datafusion_would(column: str, expression: str) -> None:
    """A field that is its source column skips DataFusion and yields exactly what
    DataFusion yields (types, NULLs, float bits), result-type cast included."""
    [f] = resolve(PartitionField("p", column, expression))
    source = SCHEMA.field(column)
    fast = evaluator(f, source.type)
    assert fast.identity
    values = pa.array(IDENTITY_VALUES[column], source.type)
    got = fast.evaluate(values)
    assert isinstance(got, pa.Array)
    through_datafusion = fast.bound.evaluate(pa.table({"col": values})).combine_chunks()
    expected = through_datafusion.cast(f.result_type)
    assert got.type == expected.type == f.result_type
    if pa.types.is_floating(got.type):  # bit for bit: NaN != NaN, and -0.0 == 0.0

        def bits(array: pa.Array) -> list[bytes | None]:
            return [None if v is None else struct.pack("<d", v) for v in array.to_pylist()]

        assert bits(got) == bits(expected)
    else:
        assert got.equals(expected)
    assert not evaluator(resolve(PartitionField("p", "id", "col + 0"))[0], pa.int64()).identity


def test_identity_fields_still_check_the_result_type() -> None:
    with pytest.raises(ExpressionError, match="does not fit"):
        evaluate(PartitionField("t", "id", "col", pa.int8()), [1000])
    assert evaluate(PartitionField("t", "id", "col", pa.int8()), [7, None]) == [7, None]


def test_constants_are_remembered_by_type_and_value() -> None:
    """A filter's constants are evaluated once per process and then remembered by
    DataFusion's canonical name: constants that differ in type or value never share one,
    and a constant that cannot be evaluated is not remembered as a value."""
    frame = new_session().from_arrow(pa.table({"x": pa.array([], pa.int64())}))
    texts = [
        "DATE '2025-01-01'",
        "TIMESTAMP '2025-01-01 00:00:00'",
        "CAST('2025-01-01' AS VARCHAR)",
        "CAST(5 AS INT)",
        "CAST(5 AS BIGINT)",
        "CAST(0.1 AS DOUBLE)",
        "CAST(0.1 AS REAL)",
        "1 + 1",
        "DATE '2025-01-02'",
    ]
    nodes = [raw(frame.parse_sql_expr(t)) for t in texts]
    fresh = [evaluate_scalar(n, new_session()) for n in nodes]  # (a session: not remembered)
    first = [evaluate_scalar(n) for n in nodes]
    again = [evaluate_scalar(raw(frame.parse_sql_expr(t))) for t in texts]
    assert first == fresh
    assert again == fresh
    assert [v.type for v in again] == [v.type for v in fresh]
    assert len({(str(v.type), v.as_py()) for v in again}) == len(texts)
    bad = "DATE '2025-13-45'"
    for _ in range(2):
        with pytest.raises(Exception, match="Cannot cast string '2025-13-45'"):
            evaluate_scalar(raw(frame.parse_sql_expr(bad)))
