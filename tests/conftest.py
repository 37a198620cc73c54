"""Fixtures shared by the test files: real namespaces on disk in a temporary directory, an
S3-compatible server on loopback; the helpers they use are in tests/support.py."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import settings

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.support import (
    BUCKET,
    BY_PART,
    EVENTS_SCHEMA,
    REGION,
    TAGGED,
    TrapServer,
    env_without_aws,
    moto_s3,
    seeded_namespace,
    tagged_rows,
)

#: Spark's JVMs here (each worker's session, spark-submit's drivers, a Spark Connect server, a
#: standalone cluster's daemons) live for seconds, most of it start-up: the C1 compiler alone
#: (no C2 tier) spends less CPU on compiling what runs only briefly. ``SPARK_SUBMIT_OPTS`` is
#: what spark-submit adds to the driver's java command, ``SPARK_DAEMON_JAVA_OPTS`` what
#: spark-class adds to a master's or a worker's; a value set outside the tests wins.
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_variable, "-XX:TieredStopAtLevel=1")


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


@pytest.fixture
def tagged(root: Path) -> PartitionedNamespace:
    """An empty namespace of :data:`~tests.support.TAGGED` rows partitioned by ``part``."""
    return PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)


@pytest.fixture
def seeded(root: Path) -> PartitionedNamespace:
    """Partitions 1 and 2 by ``part``, ids 0-3 (two rows each), tagged ``seed``."""
    return seeded_namespace(root)


@pytest.fixture
def three_parts(root: Path) -> PartitionedNamespace:
    """Partitions 1, 2, 3 by ``part``, ids 0-11 (four rows each), tagged ``seed``."""
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("seed", [1, 2, 3], 4, first_id=0))
    return ns


# -- S3: a moto server on loopback, and a trap for requests without storage options --------
@pytest.fixture(scope="module")
def default_endpoint_trap() -> Iterator[TrapServer]:
    """Clean AWS/proxy environment whose default S3 endpoint is the loopback trap."""
    trap = TrapServer()
    thread = threading.Thread(target=trap.serve_forever, daemon=True)
    thread.start()
    with pytest.MonkeyPatch.context() as mp:
        for key in env_without_aws():
            mp.delenv(key)
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("AWS_ENDPOINT", trap.endpoint)
        mp.setenv("AWS_ALLOW_HTTP", "true")
        mp.setenv("AWS_REGION", REGION)  # no bucket-region lookup against real AWS
        mp.setenv("AWS_ACCESS_KEY_ID", "trap")  # no credential chain / instance metadata
        mp.setenv("AWS_SECRET_ACCESS_KEY", "trap")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield trap
    trap.shutdown()
    trap.server_close()
    thread.join(timeout=5)


@pytest.fixture(scope="module")
def storage_options(default_endpoint_trap: TrapServer) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with one bucket; yields Lance's storage options for it."""
    with moto_s3(BUCKET) as options:
        yield options


@pytest.fixture(scope="module")
def s3(storage_options: dict[str, str]) -> Any:
    """A boto3 client for the moto server (to look at the objects Lance wrote)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=storage_options["aws_endpoint"],
        aws_access_key_id=storage_options["aws_access_key_id"],
        aws_secret_access_key=storage_options["aws_secret_access_key"],
        region_name=storage_options["aws_region"],
    )


#: Hypothesis profiles: the everyday tier (bare ``pytest``) runs a quarter of each property
#: test's examples, scripts/test.sh the full number (``--hypothesis-profile=full``). Tests that
#: set their own count scale it with :func:`tests.support.examples`.
settings.register_profile("everyday", max_examples=25)
settings.register_profile("full", max_examples=100)
settings.load_profile("everyday")

#: The test files that take longest, in falling order of their seconds in a whole run. pytest-xdist
#: (``--dist loadfile``) runs a file whole on one worker and hands files out in collection
#: order: the longest go first so that none is the last work left. Only the order; which tier
#: a test is in is said by its markers (``slow``, ``integration``) alone.
LONGEST_FILES = (
    "project/test_install.py",
    "namespace/ops/test_operation_interleavings.py",
    "airflow/test_example_dags.py",
    "spark/test_datasource.py",
    "spark/test_value_conversions.py",
    "spark/test_standalone_cluster.py",
    "airflow/test_spark_operator.py",
    "spark/test_spark_writes.py",
    "spark/test_spark_reads.py",
    "airflow/test_table_operation_operators.py",
    "spark/test_spark_connect.py",
    "airflow/test_manifest_watcher.py",
    "namespace/ops/test_operations_chaos.py",
    "project/test_readme.py",
    "spark/test_session.py",
    "namespace/txn/test_chaos.py",
    "spark/test_spark_job.py",
    "namespace/txn/test_crashes.py",
    "airflow/test_operators.py",
    "namespace/format/test_manifest_fold.py",
    "namespace/txn/test_interleavings.py",
    "namespace/io/test_storage_inputs.py",
    "airflow/test_live_airflow.py",
    "spark/test_spark_s3.py",
    "namespace/read/test_pruning.py",
    "cli/test_cli_errors.py",
    "spark/test_datasource_streaming.py",
    "namespace/io/test_storage_failures.py",
    "namespace/txn/test_concurrent_partition_creation.py",
    "namespace/write/test_splitting.py",
    "airflow/test_connection_form.py",
    "namespace/txn/test_transactions.py",
    "namespace/read/test_time_travel.py",
    "namespace/txn/test_direct_write_attacks.py",
    "airflow/test_upkeep_operators.py",
    "airflow/test_manifest_trigger.py",
    "airflow/test_write_operator.py",
    "airflow/test_partition_key_operators.py",
    "cli/test_commands.py",
    "airflow/test_operator_arguments.py",
    "project/test_quiet_logs.py",
)


#: The test files that use the worker's SparkSession (``tests/spark/conftest.py``'s ``spark``
#: fixture). xdist hands them to one worker as one unit, so a run starts one session and
#: warms one JVM, not one per worker (checked when collecting: a file missing here fails).
SPARK_SESSION_FILES = frozenset(
    f"spark/{name}.py"
    for name in (
        "test_datasource",
        "test_datasource_streaming",
        "test_indexed_reads",
        "test_save_as_table",
        "test_session",
        "test_spark_job",
        "test_spark_reads",
        "test_spark_s3",
        "test_spark_writes",
        "test_value_conversions",
    )
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (addopts), with :data:`SPARK_SESSION_FILES` as one unit."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneSparkSession(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "spark session" if scope.removeprefix("tests/") in SPARK_SESSION_FILES else scope

    return OneSparkSession(config, log)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (addopts): a worker per core and one more, since a worker often waits (on
    its subprocesses, JVMs and polls) and one per core leaves cores idle; the
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` environment variable still decides when set."""
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS")
    return int(chosen) if chosen else (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (a stable sort: the order inside each file stays)."""
    here = Path(__file__).parent
    missing = [f for f in LONGEST_FILES if not (here / f).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES names no such file: {missing}")

    def name(item: pytest.Item) -> str | None:
        """The item's file under tests/ (None: elsewhere)."""
        return item.path.relative_to(here).as_posix() if item.path.is_relative_to(here) else None

    def rank(item: pytest.Item) -> int:
        file = name(item)
        return LONGEST_FILES.index(file) if file in LONGEST_FILES else len(LONGEST_FILES)

    items.sort(key=rank)
    unlisted = sorted(
        file
        for file in {name(i) for i in items if "spark" in getattr(i, "fixturenames", ())}
        if file is not None and file not in SPARK_SESSION_FILES
    )
    if unlisted:
        raise pytest.UsageError(f"tests/conftest.py SPARK_SESSION_FILES misses {unlisted}")
