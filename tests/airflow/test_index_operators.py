"""Index operators (create, optimize, drop) and the upkeep operator's index upkeep, in real
``dag.test()`` runs on real namespaces.

A retried task whose first try published gets that result back; creating an index declared
alike already changes nothing (every run of a daily DAG declares it), one declared otherwise
fails at once; dropping an index that is not there changes nothing.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.namespace import IndexInfo, PartitionedNamespace, PartitionField
from airflow_provider_lance.operators.indexes import (
    SCALAR_INDEX_TYPES,
    VECTOR_INDEX_TYPES,
    index_name,
)
from airflow_provider_lance.validation import Refused, never
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
SUCCESS, FAILED = "success", "failed"
DAY = dt.date(2025, 12, 10)
NEW_DAY = dt.date(2025, 12, 20)


def make_namespace(root: Path) -> PartitionedNamespace:
    """30 events over three days from :data:`DAY`."""
    ns = PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    ns.write(events(30, start=DAY, days=3))
    return ns


def only_index(ns: PartitionedNamespace) -> IndexInfo:
    [info] = ns.list_indices()
    return info


def test_create_index_retried_returns_the_first_result_and_runs_again_as_a_no_op(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    run = run_dag("lance_test_create_index", conf={"crash_after": True})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["create_index"] == 2  # the first try died after the index was published
    summary = run.xcom("create_index")
    assert summary["txn_id"] == derive_txn_id("lance_test_create_index", run.run_id, "create_index")
    assert (summary["operation"], summary["index"], summary["existed"]) == (
        "create_index",
        "by_id",
        False,
    )
    assert summary["rows_indexed"] == 30  # the first try's result, not a second build's
    assert summary["partition_count"] == 3
    assert summary["manifest_version"] == ns.version  # the retry published nothing more
    info = only_index(ns)
    assert (info.name, info.column, info.index_type) == ("by_id", "id", "BTREE")
    assert (info.partitions, info.partitions_indexed, info.rows_unindexed) == (3, 3, 0)

    version = ns.version
    again = run_dag("lance_test_create_index")  # the next run of the DAG: declared alike
    assert again.state == SUCCESS, again.output[-3000:]
    summary = again.xcom("create_index")
    assert (summary["existed"], summary["changed"], summary["manifest_version"]) == (
        True,
        False,
        None,
    )
    assert ns.version == version
    assert "index 'by_id' is declared alike already" in again.output

    other = run_dag("lance_test_create_index", conf={"index_type": "BITMAP"})
    assert other.state == FAILED
    assert other.tries["create_index"] == 1  # bad input: no retry
    assert "an index named 'by_id' is declared already (BTREE)" in other.output
    assert only_index(ns).index_type == "BTREE"
    assert ns.version == version


def test_the_declared_alike_check_reads_the_declaration_and_opens_no_leaf(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """A leaf made unreadable (its directory gone) does not fail the no-op run: only the
    ``__index$by_id`` row is read to see that the index is declared alike."""
    ns = make_namespace(lance_test_root)
    ns.create_scalar_index("id", "BTREE", "by_id")
    version = ns.version
    gone = ns.state().partitions()[0]
    shutil.rmtree(Path(gone.location.removeprefix("file://")))
    run = run_dag("lance_test_create_index")
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.xcom("create_index")["existed"] is True
    assert ns.version == version


def make_docs(root: Path, rows: int = 300, dim: int = 8) -> PartitionedNamespace:
    """Two days of ``rows`` rows each with an ``embedding`` of ``dim`` floats."""
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("day", pa.date32()),
            pa.field("embedding", pa.list_(pa.float32(), dim)),
        ]
    )
    ns = PartitionedNamespace.create(
        root / "docs", schema=schema, partition_fields=[PartitionField("day", "day")]
    )
    vectors = np.random.default_rng(7).random((2 * rows, dim), dtype=np.float32)
    ns.write(
        pa.table(
            {
                "id": pa.array(range(2 * rows), pa.int64()),
                "day": pa.array([DAY + dt.timedelta(days=i % 2) for i in range(2 * rows)]),
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim),
            },
            schema=schema,
        )
    )
    return ns


def test_a_vector_index_is_built_with_its_rendered_parameters(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    rows = 300
    ns = make_docs(lance_test_root, rows)
    run = run_dag("lance_test_vector_index", conf={"num_partitions": 2})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.xcom("create_index")["rows_indexed"] == 2 * rows
    info = only_index(ns)
    assert (info.name, info.index_type, info.shared_model) == ("embedding_idx", "IVF_FLAT", True)
    assert (info.params["num_partitions"], info.params["metric"]) == (2, "l2")
    assert (info.partitions_indexed, info.rows_indexed, info.rows_unindexed) == (2, 2 * rows, 0)


def test_a_misspelt_index_parameter_fails_the_task_once_with_the_cores_error(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """pylance would ignore ``num_partition``: the core refuses it before building, and the
    task fails without a retry (bad input) and without publishing."""
    ns = make_docs(lance_test_root)
    version = ns.version
    run = run_dag("lance_test_index_param_typo")
    assert run.state == FAILED
    assert run.tries["create_index"] == 1
    assert "unknown parameter 'num_partition' for index type IVF_FLAT" in run.output
    assert "did you mean 'num_partitions'?" in run.output
    assert ns.version == version
    assert ns.list_indices() == []


def test_optimize_indices_indexes_the_new_day_once_however_often_retried(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.create_scalar_index("id", "BTREE", "by_id")
    ns.write(events(7, start=NEW_DAY, days=1, first_id=100))  # a new partition
    ns.write(events(2, start=DAY, days=1, first_id=200))  # new rows in an indexed one
    assert only_index(ns).rows_unindexed == 9
    run = run_dag(
        "lance_test_optimize_indices", conf={"day": NEW_DAY.isoformat(), "crash_after": True}
    )
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["optimize_indices"] == 2
    summary = run.xcom("optimize_indices")
    assert (summary["operation"], summary["rows_indexed"], summary["partition_count"]) == (
        "optimize_indices",
        7,
        1,
    )
    assert summary["partitions"][0]["key"] == NEW_DAY.isoformat()
    assert summary["manifest_version"] == ns.version
    info = only_index(ns)
    assert (info.partitions, info.partitions_indexed) == (4, 4)
    assert info.rows_unindexed == 2  # the day outside the filter waits for the next upkeep

    version = ns.version
    unknown = run_dag("lance_test_optimize_indices", conf={"names": ["by_id", "nope"]})
    assert unknown.state == FAILED
    assert unknown.tries["optimize_indices"] == 1
    assert "no index named 'nope' is declared on this namespace" in unknown.output
    assert ns.version == version


def test_maintain_runs_the_index_upkeep_and_reports_it(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.create_scalar_index("country", "BITMAP")
    ns.write(events(5, start=NEW_DAY, days=1, first_id=100))
    run = run_dag("lance_test_maintain_indices")
    assert run.state == SUCCESS, run.output[-3000:]
    indices = run.xcom("maintain")["indices"]
    assert (indices["rows_indexed"], indices["partition_count"], indices["skipped_count"]) == (
        5,
        1,
        0,
    )
    assert indices["manifest_version"] is not None
    info = only_index(ns)
    assert (info.partitions_indexed, info.rows_unindexed) == (4, 0)


def test_drop_index_removes_it_and_a_second_drop_changes_nothing(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.create_scalar_index("id", "BTREE", "by_id")
    run = run_dag("lance_test_drop_index")
    assert run.state == SUCCESS, run.output[-3000:]
    summary = run.xcom("drop_index")
    assert (summary["operation"], summary["changed"], summary["partition_count"]) == (
        "drop_index",
        True,
        3,
    )
    assert ns.list_indices() == []
    version = ns.version
    again = run_dag("lance_test_drop_index")
    assert again.state == SUCCESS, again.output[-3000:]
    assert again.xcom("drop_index")["changed"] is False
    assert "nothing to drop: no index named 'by_id'" in again.output
    assert ns.version == version


# -- the parse-time rules are the core's ------------------------------------------------------
@pytest.mark.parametrize(
    ("params", "says"),
    [
        ({"name": "x"}, "'name' is not an index parameter: give the operator's name instead"),
        ({"filter": "a = 1"}, "give the operator's filter instead"),
        ({"index_uuid": "u"}, "'index_uuid' is not an index parameter: the namespace sets it"),
    ],
)
def test_index_params_that_are_arguments_are_refused_at_parse_time(
    params: dict[str, str], says: str
) -> None:
    """They were a TypeError at run time (``create_index`` got ``name`` twice)."""
    from airflow.sdk import DAG

    from airflow_provider_lance.operators import LanceCreateIndexOperator
    from airflow_provider_lance.validation import OperatorArgumentError

    start = dt.datetime(2025, 12, 1, tzinfo=dt.timezone.utc)
    with (
        DAG("d", schedule=None, start_date=start),
        pytest.raises(OperatorArgumentError, match="index_params must be") as refused,
    ):
        LanceCreateIndexOperator(task_id="t", column="id", index_type="BTREE", index_params=params)
    assert says in str(refused.value)


def test_the_index_types_checked_at_parse_time_are_the_cores() -> None:
    from airflow_provider_lance.namespace.ops.indexing import SCALAR_TYPES, VECTOR_TYPES

    assert set(VECTOR_INDEX_TYPES) == VECTOR_TYPES
    assert set(SCALAR_INDEX_TYPES) == SCALAR_TYPES


@pytest.mark.parametrize("name", ["by_id", "x", "a$b", "a/b", "", "été"])
def test_the_index_name_rule_checked_at_parse_time_is_the_cores(name: str) -> None:
    from airflow_provider_lance.namespace import InvalidArgumentError
    from airflow_provider_lance.namespace.ops.indexing import check_name

    try:
        check_name(name)
        core_ok = True
    except InvalidArgumentError:
        core_ok = False
    try:
        index_name(optional=False)(name, never)
        ours_ok = True
    except Refused:
        ours_ok = False
    assert ours_ok == core_ok
