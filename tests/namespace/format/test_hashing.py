"""The hash() partition UDF: xxhash64 seed 0 over the canonical, promotion-stable encoding."""

from __future__ import annotations

import datetime as dt
import math
import struct

import pyarrow as pa
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_lance.namespace import ExpressionError
from airflow_provider_lance.namespace.format.expressions import bind
from airflow_provider_lance.namespace.format.hashing import hash_array


def signed(digest: int) -> int:
    return struct.unpack("<q", struct.pack("<Q", digest))[0]


def xx(data: bytes) -> int:
    return signed(xxhash.xxh64_intdigest(data, seed=0))


def test_design_example_hash_5_is_the_same_for_int32_and_int64() -> None:
    expected = xx(bytes.fromhex("0500000000000000"))
    for dtype in (pa.int8(), pa.int16(), pa.int32(), pa.int64()):
        assert hash_array(pa.array([5], dtype)).to_pylist() == [expected]


@given(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=50))
def test_signed_integers_hash_their_int64_bytes(values: list[int]) -> None:
    assert hash_array(pa.array(values, pa.int64())).to_pylist() == [
        xx(struct.pack("<q", v)) for v in values
    ]


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), max_size=50))
def test_unsigned_integers_hash_their_uint64_bytes(values: list[int]) -> None:
    assert hash_array(pa.array(values, pa.uint64())).to_pylist() == [
        xx(struct.pack("<Q", v)) for v in values
    ]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=30))
def test_float32_and_float64_hash_alike(values: list[float]) -> None:
    assert (
        hash_array(pa.array(values, pa.float32())).to_pylist()
        == hash_array(pa.array(values, pa.float64())).to_pylist()
    )


def test_float_canonical_forms() -> None:
    zero = xx(struct.pack("<d", 0.0))
    nan = xx(bytes.fromhex("000000000000f87f"))
    got = hash_array(pa.array([0.0, -0.0, math.nan, -math.nan, 1.5], pa.float64())).to_pylist()
    assert got == [zero, zero, nan, nan, xx(struct.pack("<d", 1.5))]


def test_dates_and_timestamps() -> None:
    day = dt.date(2025, 12, 10)
    days = (day - dt.date(1970, 1, 1)).days
    assert hash_array(pa.array([day], pa.date32())).to_pylist() == [xx(struct.pack("<q", days))]
    assert hash_array(pa.array([day], pa.date64())).to_pylist() == [xx(struct.pack("<q", days))]
    moment = dt.datetime(2025, 12, 10, 12, 30, 15, 123456)
    micros = int((moment - dt.datetime(1970, 1, 1)).total_seconds() * 1_000_000)
    expected = [xx(struct.pack("<q", micros))]
    assert hash_array(pa.array([moment], pa.timestamp("us"))).to_pylist() == expected
    assert hash_array(pa.array([moment], pa.timestamp("ns"))).to_pylist() == expected
    assert hash_array(pa.array([moment], pa.timestamp("us", tz="UTC"))).to_pylist() == expected
    whole = dt.datetime(2025, 12, 10, 12, 30, 15)
    whole_micros = int((whole - dt.datetime(1970, 1, 1)).total_seconds()) * 1_000_000
    for unit in ("s", "ms"):
        got = hash_array(pa.array([whole], pa.timestamp(unit))).to_pylist()
        assert got == [xx(struct.pack("<q", whole_micros))]


def test_negative_nanosecond_timestamps_floor_to_microseconds() -> None:
    got = hash_array(pa.array([-1], pa.timestamp("ns"))).to_pylist()
    assert got == [xx(struct.pack("<q", -1))]


@given(st.lists(st.one_of(st.none(), st.text()), max_size=30))
def test_strings_hash_their_utf8_bytes(values: list[str | None]) -> None:
    expected = [None if v is None else xx(v.encode()) for v in values]
    assert hash_array(pa.array(values, pa.utf8())).to_pylist() == expected
    assert hash_array(pa.array(values, pa.large_utf8())).to_pylist() == expected


def test_binary_and_bool() -> None:
    assert hash_array(pa.array([b"\x00\xff", b""], pa.binary())).to_pylist() == [
        xx(b"\x00\xff"),
        xx(b""),
    ]
    assert hash_array(pa.array([True, False, None])).to_pylist() == [xx(b"\x01"), xx(b"\x00"), None]


def test_null_in_null_out() -> None:
    assert hash_array(pa.array([None, 7, None], pa.int32())).to_pylist() == [
        None,
        xx(struct.pack("<q", 7)),
        None,
    ]
    assert hash_array(pa.nulls(2)).to_pylist() == [None, None]


def test_unhashable_type_is_rejected() -> None:
    with pytest.raises(ExpressionError, match="not defined"):
        hash_array(pa.array([[1]], pa.list_(pa.int64())))


@pytest.mark.parametrize(
    ("dtype", "value", "encoded"),
    [
        (pa.int32(), 5, struct.pack("<q", 5)),
        (pa.int64(), -3, struct.pack("<q", -3)),
        (pa.utf8(), "é$/=", "é$/=".encode()),
        (pa.date32(), dt.date(1970, 1, 2), struct.pack("<q", 1)),
    ],
)
def test_hash_inside_datafusion_expressions(
    dtype: pa.DataType, value: object, encoded: bytes
) -> None:
    """The UDF sees the real argument type (DataFusion would otherwise coerce it)."""
    bound = bind("hash(col)", pa.schema([pa.field("col", dtype)]), "test")
    got = bound.evaluate(pa.table({"col": pa.array([value, None], dtype)})).to_pylist()
    assert got == [xx(encoded), None]


def test_hash_of_a_derived_expression_uses_the_derived_type() -> None:
    bound = bind("hash(upper(col))", pa.schema([pa.field("col", pa.utf8())]), "test")
    assert bound.evaluate(pa.table({"col": ["ab"]})).to_pylist() == [xx(b"AB")]
    bound = bind("hash(date_part('year', col))", pa.schema([pa.field("col", pa.date32())]), "test")
    got = bound.evaluate(pa.table({"col": pa.array([dt.date(2025, 1, 1)])})).to_pylist()
    assert got == [xx(struct.pack("<q", 2025))]


def test_hash_of_two_different_types_in_one_expression_is_refused() -> None:
    schema = pa.schema([pa.field("col", pa.int64()), pa.field("s", pa.utf8())])
    with pytest.raises(ExpressionError, match="different types"):
        bind("hash(col) + hash(s)", schema, "test")
