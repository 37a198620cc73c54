"""Partition expressions are checked where they are defined, and a value an expression fails
for is named (issue 39).

Before, ``col % 0`` was accepted by ``create`` and ``evolve_partition_spec``, and then every
write failed ("Divide by zero error"); an expression that fails for some rows only (a cast of
text that is not a number) failed the write without saying for which value.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    ExpressionError,
    NamespaceNotFoundError,
    PartitionedNamespace,
    PartitionField,
)
from airflow_provider_lance.spark.writer import WriteJob
from tests.support import leaf_files

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("u", pa.uint8()),
        pa.field("s", pa.utf8()),
        pa.field("x", pa.float64()),
    ]
)
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 0, 5], pa.int64()),
        "u": pa.array([1, 2, 3, 4], pa.uint8()),
        "s": ["1", "2", "x", "3"],
        "x": [1.0, 4.0, -1.0, 2.0],
    }
)


def create(root: Path, field: PartitionField) -> PartitionedNamespace:
    return PartitionedNamespace.create(root, schema=SCHEMA, partition_fields=[field])


UNDEFINED = [
    pytest.param(PartitionField("m", "id", "col % 0"), "Divide by zero", id="int-modulo-zero"),
    pytest.param(PartitionField("m", "u", "col / 0"), "Divide by zero", id="unsigned-by-zero"),
    pytest.param(
        PartitionField("m", "s", "substr(col, 0, -1)"), "negative count", id="negative-substr"
    ),
]


@pytest.mark.parametrize(("field", "reason"), UNDEFINED)
def test_an_expression_defined_for_no_value_is_refused_at_create(
    root: Path, field: PartitionField, reason: str
) -> None:
    with pytest.raises(ExpressionError) as info:
        create(root, field)
    message = str(info.value)
    assert f"partition field 'm': {field.expression!r} fails for every" in message
    assert reason in message
    assert not root.exists() or leaf_files(root) == []
    with pytest.raises(NamespaceNotFoundError):
        PartitionedNamespace.open(root)


@pytest.mark.parametrize(("field", "reason"), UNDEFINED)
def test_an_expression_defined_for_no_value_is_refused_by_evolve_partition_spec(
    root: Path, field: PartitionField, reason: str
) -> None:
    ns = create(root, PartitionField("id_", "id"))
    ns.write(ROWS)
    with pytest.raises(ExpressionError, match=reason):
        ns.evolve_partition_spec([field])
    assert ns.spec_version == 1
    ns.write(ROWS)  # the namespace works as before
    assert ns.count_rows() == 8


@pytest.mark.parametrize(
    "field",
    [
        PartitionField("m", "id", "100 / col"),  # fails for 0 only
        PartitionField("m", "s", "CAST(col AS INT)"),  # fails for text that is no number
        PartitionField("m", "s", "to_date(col)"),
        PartitionField("m", "x", "sqrt(col)"),  # fails for negative numbers
        PartitionField("m", "id", "abs(hash(col)) % 16"),
        PartitionField("m", "s", "left(col, 1)"),
    ],
    ids=lambda f: f.expression,
)
def test_an_expression_defined_for_some_values_is_accepted(
    root: Path, field: PartitionField
) -> None:
    assert create(root, field).spec_version == 1


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (PartitionField("m", "s", "CAST(col AS INT)"), "'x'", "Cannot cast string 'x'"),
        (PartitionField("m", "id", "100 / col"), "0", "Divide by zero"),
        (PartitionField("m", "x", "sqrt(col)"), "-1.0", "square root of a negative"),
    ],
    ids=["cast", "division", "sqrt"],
)
def test_a_write_names_the_value_an_expression_fails_for(
    root: Path, field: PartitionField, value: str, reason: str
) -> None:
    ns = create(root, field)
    job = WriteJob(str(root), None, "spark-route", ns.version, 1 << 20)
    for take in (
        ns.write,
        lambda t: ns.begin("append", txn_id="load").stage(t, stage_id="task"),
        lambda t: list(job.route(iter(t.to_batches()))),  # the Spark writer's routing
    ):
        with pytest.raises(ExpressionError) as info:
            take(ROWS)
        message = str(info.value)
        assert f"partition field 'm': {field.expression!r} fails for the value {value}" in message
        assert f"of column '{field.source}'" in message
        assert reason in message
    assert leaf_files(root) == []


def test_a_result_that_overflows_its_declared_type_is_refused(root: Path) -> None:
    """A float64 beyond float32 became ``inf`` as a partition value."""
    ns = create(root, PartitionField("m", "x", "col", pa.float32()))
    with pytest.raises(ExpressionError, match=r"1e\+300 would be inf"):
        ns.write(ROWS.set_column(3, "x", pa.array([1.0, 2.0, 1e300, -1.0])))
    assert leaf_files(root) == []
