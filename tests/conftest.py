"""Shared fixtures: real namespaces on disk in a temporary directory."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

EVENTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("amount", pa.float64()),
    ]
)


def events(
    n: int, start: dt.date = dt.date(2025, 12, 10), days: int = 3, first_id: int = 0
) -> pa.Table:
    """``n`` deterministic event rows spread over ``days`` days and four countries."""
    countries = ["US", "DE", "FR", None]
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "event_date": pa.array([start + dt.timedelta(days=i % days) for i in range(n)]),
            "country": pa.array([countries[i % 4] for i in range(n)], pa.utf8()),
            "amount": pa.array([float(i) * 1.5 for i in range(n)]),
        },
        schema=EVENTS_SCHEMA,
    )


#: Storage options of an S3 store on a closed loopback port: every request is refused at once
#: and nothing leaves the machine (region and keys given: no lookups, no credential chain).
UNREACHABLE_OPTIONS = {
    "aws_endpoint": "http://127.0.0.1:9",
    "allow_http": "true",
    "aws_region": "us-east-1",
    "aws_access_key_id": "unreachable",
    "aws_secret_access_key": "unreachable",
    "client_max_retries": "0",
    "client_retry_timeout": "1",
    "connect_timeout": "2s",
    "timeout": "5s",
}


def sort_rows(table: pa.Table, key: str = "id") -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def tree(path: Path) -> list[str]:
    """Every file below ``path`` (relative), to prove an operation changed nothing on disk."""
    return sorted(
        os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files
    )


def leaf_files(path: Path) -> list[str]:
    """Files of the leaf tables only: not ``__manifest`` (whose history grows with every
    transaction step) and not the transaction records."""
    return [f for f in tree(path) if not f.startswith(("_transactions/", "__manifest/"))]


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
    "test_install.py",
    "test_readme.py",
    "test_chaos.py",
    "test_chaos_table_operations.py",
    "airflow/test_example_dags.py",
    "test_pruning.py",
    "airflow/test_spark_operator.py",
    "spark/test_standalone_cluster.py",
    "spark/test_spark_job.py",
    "test_concurrency.py",
    "airflow/test_live_airflow.py",
    "spark/test_spark_writes.py",
    "test_crashes.py",
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
