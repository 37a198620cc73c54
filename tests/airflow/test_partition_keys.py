"""Partition keys: the documented spellings, the round trip (hypothesis), Airflow accepting
every key, and keys of a real namespace's partitions naming those partitions again."""

from __future__ import annotations

import datetime as dt
import math
import re
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    PartitionSpecError,
)
from airflow_provider_lance.partition_keys import (
    EMPTY,
    NULL,
    SEPARATOR,
    fields_of,
    key_value,
    partition_key,
    partition_values,
    summary_key,
    value_key,
)
from tests.support import examples

TIMESTAMPS = [
    pa.timestamp(unit, tz)
    for unit in ("s", "ms", "us", "ns")
    for tz in (None, "UTC", "Asia/Kolkata")
]
TYPES = [
    pa.date32(),
    pa.date64(),
    *TIMESTAMPS,
    pa.int8(),
    pa.int32(),
    pa.int64(),
    pa.uint16(),
    pa.uint64(),
    pa.bool_(),
    pa.utf8(),
    pa.large_utf8(),
    pa.float32(),
    pa.float64(),
    pa.decimal128(12, 3),
    pa.binary(),
]
_INT_RANGE = {
    pa.int8(): (-(2**7), 2**7 - 1),
    pa.int32(): (-(2**31), 2**31 - 1),
    pa.int64(): (-(2**63), 2**63 - 1),
    pa.uint16(): (0, 2**16 - 1),
    pa.uint64(): (0, 2**64 - 1),
}
#: Seconds from the epoch to 0001-01-02 and 9999-12-30 (Python's datetime range, a day
#: inside it: pyarrow's as_py overflows there for zones east or west of UTC).
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800 + 86_400, 253_402_300_799 - 86_400


def _field(name: str, dtype: pa.DataType, field_id: int = 1) -> PartitionField:
    return PartitionField(name, name, result_type=dtype, field_id=field_id, source_id=field_id)


def values_of(dtype: pa.DataType) -> st.SearchStrategy[Any]:
    """Python values of ``dtype`` as the namespace hands them out (``as_py``), NULL included."""
    if pa.types.is_timestamp(dtype):
        per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[dtype.unit]
        if dtype.unit == "ns":  # int64 nanoseconds (about 1677..2262), as pandas holds them
            margin = 2 * 86_400 * 10**9  # a zone's offset must not push pandas out of range
            ticks = st.integers(-(2**63) + margin, 2**63 - margin)
        else:
            ticks = st.integers(_MIN_SECONDS * per_second, _MAX_SECONDS * per_second)
        typed = ticks.map(lambda t: pa.scalar(t, pa.int64()).cast(dtype).as_py())
    elif pa.types.is_date(dtype):
        typed = st.dates()
    elif pa.types.is_integer(dtype):
        typed = st.integers(*_INT_RANGE[dtype])
    elif pa.types.is_boolean(dtype):
        typed = st.booleans()
    elif pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        typed = st.text()
    elif dtype == pa.float32():
        typed = st.floats(width=32)
    elif pa.types.is_floating(dtype):
        typed = st.floats()
    elif pa.types.is_decimal(dtype):
        typed = st.decimals(
            min_value=Decimal("-999999999.999"),
            max_value=Decimal("999999999.999"),
            places=3,
            allow_nan=False,
            allow_infinity=False,
        )
    else:
        typed = st.binary()
    return st.none() | typed


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and -0.0 distinct from 0.0 (the key keeps the sign)."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return type(a) is type(b) and a == b


@st.composite
def typed_values(draw: st.DrawFn) -> tuple[list[PartitionField], dict[str, Any]]:
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=4))
    fields = [_field(f"f{i}", t, i + 1) for i, t in enumerate(types)]
    return fields, {f.name: draw(values_of(t)) for f, t in zip(fields, types, strict=True)}


# -- the documented spellings ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "dtype", "key"),
    [
        (dt.date(2025, 12, 10), pa.date32(), "2025-12-10"),
        ("2025-12-10", pa.date32(), "2025-12-10"),  # the text a partition summary carries
        (dt.datetime(2025, 12, 10, 13), pa.timestamp("us"), "2025-12-10T13:00:00"),
        (
            dt.datetime(2025, 12, 10, 13, 0, 0, 250_000),
            pa.timestamp("ms"),
            "2025-12-10T13:00:00.25",
        ),
        (  # an instant: written in UTC, whatever the column's zone
            dt.datetime(2025, 12, 10, 14, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            pa.timestamp("us", "Europe/Berlin"),
            "2025-12-10T13:00:00",
        ),
        ("2025-12-10T14:00:00+01:00", pa.timestamp("us", "UTC"), "2025-12-10T13:00:00"),
        (  # local mean time: Python writes offsets with seconds for old dates
            "1905-12-31T23:59:59+05:21:10",
            pa.timestamp("s", "Asia/Kolkata"),
            "1905-12-31T18:38:49",
        ),
        ("1905-12-31T18:38:49.5-00:00:00.25", pa.timestamp("ms"), "1905-12-31T18:38:49.75"),
        (-42, pa.int32(), "-42"),
        (7, pa.int64(), "7"),
        (True, pa.bool_(), "true"),
        ("false", pa.bool_(), "false"),
        ("DE", pa.utf8(), "DE"),
        ("New York|NY 100%", pa.utf8(), "New%20York%7CNY%20100%25"),
        (" ", pa.utf8(), "%20"),
        ("tab\there\n", pa.utf8(), "tab%09here%0A"),
        ("Zürich", pa.utf8(), "Zürich"),
        ("", pa.utf8(), EMPTY),
        ("%null", pa.utf8(), "%25null"),  # the NULL spelling as a string value
        (None, pa.utf8(), NULL),
        (None, pa.date32(), NULL),
        (1.5, pa.float64(), "1.5"),
        (-0.0, pa.float64(), "-0.0"),
        (Decimal("1.500"), pa.decimal128(6, 3), "1.500"),
        (b"\x00\xff", pa.binary(), "00ff"),
        (b"", pa.binary(), EMPTY),
    ],
)
def test_value_spellings(value: Any, dtype: pa.DataType, key: str) -> None:
    assert value_key(value, dtype) == key


def test_fields_join_in_spec_order_with_the_separator() -> None:
    fields = [_field("event_date", pa.date32(), 1), _field("country", pa.utf8(), 2)]
    values = {"country": "DE", "event_date": dt.date(2025, 12, 10)}
    assert partition_key(values, fields) == "2025-12-10|DE"
    assert partition_key({**values, "country": None}, fields) == f"2025-12-10{SEPARATOR}{NULL}"
    assert partition_values("2025-12-10|a%7Cb", fields) == {
        "event_date": dt.date(2025, 12, 10),
        "country": "a|b",
    }


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("2025-12-10", "has 1 value(s); the partition spec has 2"),
        ("2025-12-10|DE|x", "has 3 value(s)"),
        ("2025-13-10|DE", "'event_date'"),
        ("2025-12-10|D%4", "malformed % escape"),
        ("2025-12-10|%FF", "not UTF-8"),
        ("%empty|DE", "'event_date'"),
        ("", "non-empty"),
    ],
)
def test_bad_keys_raise_project_errors(key: str, message: str) -> None:
    fields = [_field("event_date", pa.date32(), 1), _field("country", pa.utf8(), 2)]
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        partition_values(key, fields)


def test_bad_values_raise_project_errors() -> None:
    fields = [_field("bucket", pa.int8())]
    with pytest.raises(InvalidArgumentError, match="not a int8"):
        partition_key({"bucket": 300}, fields)
    with pytest.raises(InvalidArgumentError, match="not a int8"):
        partition_key({"bucket": "1.5"}, fields)
    with pytest.raises(PartitionSpecError, match="do not name exactly"):
        partition_key({"other": 1}, fields)
    with pytest.raises(InvalidArgumentError, match="Airflow keeps at most 250"):
        partition_key({"s": "x" * 251}, [_field("s", pa.utf8())])
    with pytest.raises(InvalidArgumentError, match="finer than the column's unit"):
        value_key("2025-12-10T13:00:00.5", pa.timestamp("s"))
    with pytest.raises(InvalidArgumentError, match="no partition key spelling"):
        value_key(1, pa.time64("us"))


# -- the round trip ---------------------------------------------------------------------------
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(typed_values())
def test_values_round_trip_through_keys(case: tuple[list[PartitionField], dict[str, Any]]) -> None:
    fields, values = case
    key = partition_key(values, fields, max_length=None)
    assert len(key.split(SEPARATOR)) == len(fields)  # Airflow's ProductMapper splits it right
    assert key.strip() == key
    assert key
    back = partition_values(key, fields)
    for f in fields:
        assert same(back[f.name], values[f.name]), (f.result_type, values[f.name], key)
    assert partition_key(back, fields, max_length=None) == key  # one spelling per value


@settings(max_examples=examples(200), deadline=None)
@given(st.sampled_from(TYPES).flatmap(lambda t: st.tuples(st.just(t), values_of(t))))
def test_the_text_of_a_partition_summary_gives_the_same_key(case: tuple[pa.DataType, Any]) -> None:
    """XCom and commit results carry values as ``Partition.to_dict`` spells them."""
    from airflow_provider_lance.namespace.results import value_text

    dtype, value = case
    key = value_key(value, dtype)
    assert value_key(value_text(value), dtype) == key
    assert same(key_value(key, dtype), value)


# -- Airflow takes every key -------------------------------------------------------------------
@pytest.mark.skipif(
    not AIRFLOW_V_3_3_PLUS, reason="outlet_events[...].add_partitions is Airflow 3.3+"
)
@settings(max_examples=examples(200), deadline=None)
@given(typed_values())
def test_airflow_accepts_every_key(case: tuple[list[PartitionField], dict[str, Any]]) -> None:
    from airflow.partition_mappers.identity import IdentityMapper
    from airflow.partition_mappers.product import ProductMapper
    from airflow.sdk.definitions.asset import AssetUniqueKey
    from airflow.sdk.execution_time.context import OutletEventAccessor

    fields, values = case
    try:
        key = partition_key(values, fields)
    except InvalidArgumentError:  # longer than Airflow keeps: refused here, by name
        assert len(partition_key(values, fields, max_length=None)) > 250
        return
    accessor = OutletEventAccessor(key=AssetUniqueKey(name="a", uri="lance://file/a"))
    accessor.add_partitions(key)  # Airflow's own validation of partition keys
    assert accessor.partition_keys == {key}
    if len(fields) >= 2:
        mapper = ProductMapper(*[IdentityMapper() for _ in fields])  # type: ignore[arg-type]
        assert mapper.to_downstream(key) == key


def test_a_date_key_is_what_airflow_temporal_mappers_read() -> None:
    from airflow.partition_mappers.temporal import StartOfDayMapper

    day = value_key(dt.date(2025, 12, 10), pa.date32())
    assert StartOfDayMapper(input_format="%Y-%m-%d").to_downstream(day) == "2025-12-10"
    hour = value_key(dt.datetime(2025, 12, 10, 13), pa.timestamp("us", "UTC"))
    assert StartOfDayMapper().to_downstream(hour) == "2025-12-10"  # the default input_format


# -- a real namespace ----------------------------------------------------------------------------
def test_keys_of_a_namespaces_partitions_name_them_again(tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("ts", pa.timestamp("us", "UTC")),
            pa.field("city", pa.utf8()),
            pa.field("user", pa.int64()),
            pa.field("vip", pa.bool_()),
        ]
    )
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        schema,
        [
            PartitionField("day", "ts", "date_trunc('day', col)", pa.timestamp("us", "UTC")),
            PartitionField("city", "city"),
            PartitionField("bucket", "user", "abs(hash(col)) % 8"),
            PartitionField("vip", "vip"),
        ],
    )
    ts = dt.datetime(2025, 12, 10, 13, 30, tzinfo=dt.UTC)
    ns.write(
        pa.table(
            {
                "id": [1, 2, 3, 4],
                "ts": [ts, ts, ts + dt.timedelta(days=1), None],
                "city": ["New York|NY", "", "Zürich", None],
                "user": [1, 2, 3, None],
                "vip": [True, False, None, True],
            },
            schema=schema,
        )
    )
    state = ns.state()
    partitions = ns.partitions()
    assert len(partitions) == 4
    keys = {summary_key(state, p.to_dict()) for p in partitions}
    assert len(keys) == 4
    assert "%null|%null|%null|true" in keys
    assert any(k.startswith("2025-12-10T00:00:00|New%20York%7CNY|") for k in keys)
    assert any(k.startswith("2025-12-10T00:00:00|%empty|") for k in keys)
    for p in partitions:
        key = summary_key(state, p.to_dict())
        assert ns.partition(partition_values(key, fields_of(state))).object_id == p.object_id


def test_the_keys_module_imports_no_airflow() -> None:
    code = (
        "import sys, airflow_provider_lance.partition_keys\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] == 'airflow')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
