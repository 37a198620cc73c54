"""Shared fixtures: real namespaces on disk in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.support import EVENTS_SCHEMA


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ns"


@pytest.fixture
def make_ns(root: Path) -> Callable[..., PartitionedNamespace]:
    def make(
        fields: list[PartitionField] | None = None, schema: pa.Schema = EVENTS_SCHEMA
    ) -> PartitionedNamespace:
        return PartitionedNamespace.create(
            root,
            schema=schema,
            partition_fields=fields or [PartitionField("event_date", "event_date")],
        )

    return make


@pytest.fixture
def daily(make_ns: Callable[..., PartitionedNamespace]) -> PartitionedNamespace:
    """A namespace partitioned by day (identity on ``event_date``)."""
    return make_ns()


#: Test files that take minutes (venvs, spark-submit, multi-process chaos, live Airflow), in
#: roughly falling order: scripts/test.sh runs the suite on every core, a file whole on one
#: worker, and handing these out first keeps one of them from being the last work left.
SLOW_FILES = (
    "project/test_install.py",
    "project/test_readme.py",
    "namespace/txn/test_chaos.py",
    "namespace/ops/test_operations_chaos.py",
    "airflow/test_example_dags.py",
    "namespace/read/test_pruning.py",
    "airflow/test_spark_operator.py",
    "spark/test_standalone_cluster.py",
    "spark/test_spark_job.py",
    "namespace/txn/test_concurrent_partition_creation.py",
    "airflow/test_live_airflow.py",
    "spark/test_spark_writes.py",
    "namespace/txn/test_crashes.py",
    "airflow/test_manifest_watcher.py",
    "spark/test_datasource_streaming.py",
    "spark/test_spark_connect.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow files first (a stable sort: the order inside each file stays)."""
    here = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        name = Path(item.fspath).relative_to(here).as_posix()
        return SLOW_FILES.index(name) if name in SLOW_FILES else len(SLOW_FILES)

    items.sort(key=rank)
