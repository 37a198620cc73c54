"""Every conversion of a written value keeps it exactly or is refused naming the column and a
value (issue 39), by one rule on every path that takes data: ``write`` (with and without a
``txn_id``), ``Transaction.stage``, ``merge``, the Spark writer's routing on an executor and
``create_partition``'s values (README, "Writes: what the data must hold").

Before, ``1e300`` was stored as ``inf`` in a float32 column, ``2`` and ``-5`` as ``True`` in a
bool column, ``"1.5"``, ``"007"``, ``5`` (into a string) and ``"01"`` (into an int partition)
were converted without a word, a zone-less timestamp was relabelled UTC (and the reverse),
``1.005`` was stored as ``1.00`` in a ``decimal(5, 2)`` and a struct's extra field was dropped.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    DataValidationError,
    PartitionedNamespace,
    PartitionField,
    PartitionSpecError,
    is_retryable,
)
from airflow_provider_lance.spark.writer import WriteJob
from tests.support import leaf_files

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("f32", pa.float32()),
        pa.field("flag", pa.bool_()),
        pa.field("d", pa.float64()),
        pa.field("i32", pa.int32()),
        pa.field("s", pa.utf8()),
        pa.field("ts", pa.timestamp("us")),
        pa.field("tsz", pa.timestamp("us", "UTC")),
        pa.field("dec", pa.decimal128(5, 2)),
        pa.field("st", pa.struct([("a", pa.int64())])),
    ]
)
NOON = dt.datetime(2025, 12, 10, 12, 0)
BERLIN = pa.timestamp("us", "Europe/Berlin")


@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("part", "part")]
    )
    ns.write(pa.table({"id": pa.array([100], pa.int64()), "part": pa.array([1], pa.int32())}))
    return ns


def rows(column: str, values: pa.Array) -> pa.Table:
    """``values`` in ``column``, with ids and partition 1 (other columns left out: NULL)."""
    n = len(values)
    data = {"id": pa.array(range(n), pa.int64()), "part": pa.array([1] * n, pa.int32())}
    data[column] = values
    return pa.table(data)


def entry_points(ns: PartitionedNamespace, root: Path) -> dict[str, Callable[[pa.Table], object]]:
    """Every path that takes data, each as a function of the data."""
    job = WriteJob(str(root), None, "spark-route", ns.version, 1 << 20)
    return {
        "write": ns.write,
        "write with a txn_id": lambda t: ns.write(t, txn_id="load-1"),
        "txn.stage": lambda t: ns.begin("append", txn_id="load-2").stage(t, stage_id="task"),
        "merge": lambda t: ns.merge(t, on=["id", "part"]),
        "the Spark writer's routing": lambda t: list(job.route(iter(t.to_batches()))),
    }


REFUSED = [
    pytest.param("f32", pa.array([0.5, 1e300]), "1e+300 would be stored as inf", id="1e300-f32"),
    pytest.param("f32", pa.array([-1e300]), "-1e+300 would be stored as -inf", id="-1e300-f32"),
    pytest.param(
        "f32", pa.array([0.1]), "0.1 would be stored as 0.10000000149", id="0.1-rounded-f32"
    ),
    pytest.param("flag", pa.array([2, -5]), "(e.g. 2).*a number is not a truth value", id="2-bool"),
    pytest.param("flag", pa.array([-5]), "(e.g. -5).*a number is not a truth value", id="-5-bool"),
    pytest.param("i32", pa.array([True]), "a truth value is not a number", id="True-int"),
    pytest.param("d", pa.array(["1.5"]), "'1.5'.*text is not read as a number", id="text-double"),
    pytest.param("i32", pa.array(["007"]), "'007'.*text is not read as a number", id="007-int"),
    pytest.param("part", pa.array(["01"]), "'01'.*text is not read as a number", id="01-part"),
    pytest.param("s", pa.array([5]), "(e.g. 5).*a number is not text", id="int-string"),
    pytest.param(
        "dec", pa.array([1.005]), "1.005 would be stored as Decimal('1.00')", id="float-dec"
    ),
    pytest.param(
        "tsz",
        pa.array([NOON], pa.timestamp("us")),
        "timestamp without a time zone.*assume_timezone",
        id="naive-into-zoned",
    ),
    pytest.param(
        "ts",
        pa.array([NOON], BERLIN),
        "zoned timestamp is not written as one without a zone.*local_timestamp",
        id="zoned-into-naive",
    ),
    pytest.param(
        "ts", pa.array(["2025-12-10 12:00:00"]), "text is read as a date", id="text-timestamp"
    ),
    pytest.param(
        "st",
        pa.array([{"a": 1, "b": 2}]),
        "nested values are converted only",
        id="struct-with-an-extra-field",
    ),
    pytest.param(
        "ts", pa.array([1_700_000_000], pa.int64()), "numbers as points in time", id="int-ts"
    ),
]


@pytest.mark.parametrize(("column", "values", "match"), REFUSED)
def test_a_conversion_that_changes_a_value_is_refused_on_every_path(
    ns: PartitionedNamespace, root: Path, column: str, values: pa.Array, match: str
) -> None:
    before = leaf_files(root), ns.to_table().to_pylist()
    for path, take in entry_points(ns, root).items():
        with pytest.raises(DataValidationError) as info:
            take(rows(column, values))
        message = str(info.value)
        assert all(part in message for part in (f"column '{column}'", *match.split(".*"))), (
            path,
            message,
        )
        assert not is_retryable(info.value), path
        assert (leaf_files(root), ns.to_table().to_pylist()) == before, path


KEPT = [
    pytest.param("f32", pa.array([0.5, -2.25, math.inf, None]), None, id="exact-floats-into-f32"),
    pytest.param("i32", pa.array([1, -7, None], pa.int64()), None, id="int64-that-fit-into-int32"),
    pytest.param("i32", pa.array([3.0, -4.0]), [3, -4], id="whole-floats-into-int32"),
    pytest.param("d", pa.array([2**53, -3], pa.int64()), [2.0**53, -3.0], id="ints-into-double"),
    pytest.param(
        "dec", pa.array([Decimal("123.4")], pa.decimal128(4, 1)), None, id="decimal-rescaled"
    ),
    pytest.param("dec", pa.array([1.25]), [Decimal("1.25")], id="exact-float-into-decimal"),
    pytest.param(
        "ts", pa.array([1_000], pa.timestamp("ns")), [dt.datetime(1970, 1, 1, 0, 0, 0, 1)], id="ns"
    ),
    pytest.param(
        "ts", pa.array([dt.date(2025, 12, 10)]), [dt.datetime(2025, 12, 10)], id="date-midnight"
    ),
    pytest.param("tsz", pa.array([NOON], BERLIN), None, id="another-zone-same-instant"),
    pytest.param("s", pa.array(["a", None], pa.large_string()), None, id="large-string"),
    pytest.param("s", pa.array(["a", "b", "a"]).dictionary_encode(), ["a", "b", "a"], id="dict"),
    pytest.param("st", pa.array([{"a": 1}], pa.struct([("a", pa.int32())])), None, id="struct"),
]


@pytest.mark.parametrize(("column", "values", "expected"), KEPT)
def test_a_conversion_that_keeps_every_value_is_made(
    ns: PartitionedNamespace, column: str, values: pa.Array, expected: list | None
) -> None:
    ns.write(rows(column, values))
    stored = ns.to_table(columns=["id", column], filter="id < 100").sort_by("id").column(column)
    assert stored.type == SCHEMA.field(column).type
    assert stored.to_pylist() == (values.to_pylist() if expected is None else expected)


def test_the_same_rule_takes_a_value_on_every_path(ns: PartitionedNamespace, root: Path) -> None:
    """A conversion that keeps every value is made on every path alike: float64 values a
    float32 holds exactly are published by the writes and the merge, staged by the stage and
    routed by the Spark writer."""
    data = rows("f32", pa.array([0.5, -2.25]))
    done = {path: take(data) for path, take in entry_points(ns, root).items()}
    assert done["txn.stage"].rows == 2  # type: ignore[attr-defined]
    assert sum(b.num_rows for b in done["the Spark writer's routing"]) == 2  # type: ignore[attr-defined]
    stored = ns.to_table(filter="id < 100").sort_by("f32").column("f32").to_pylist()
    assert stored == [-2.25, -2.25, 0.5, 0.5]  # two writes; the merge updated those rows


def test_create_partition_converts_its_values_by_the_same_rule(ns: PartitionedNamespace) -> None:
    with pytest.raises(PartitionSpecError, match=r"'01'.*text is not read as a number"):
        ns.create_partition({"part": "01"})
    with pytest.raises(PartitionSpecError, match="a truth value is not a number"):
        ns.create_partition({"part": True})
    with pytest.raises(PartitionSpecError, match=r"1\.5 .*truncated"):
        ns.create_partition({"part": 1.5})
    assert ns.create_partition({"part": 2.0}).values == {"part": 2}
    assert len(ns.partitions()) == 2
