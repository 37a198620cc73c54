"""Pruned reads into Spark: prune on the driver, read leaves at their versions on executors.

The driver resolves every partition's ``read_version`` from ONE ``__manifest`` version and
prunes with the core, then plans tasks: one per data file (fragment) when there are fewer
partitions than task slots, else one per partition (so a wide scan does not open every leaf
on the driver). Each task reads its leaf at the pinned version with the projection pushed
to Lance and the filter pushed down where Lance can evaluate it (else applied by the core's
DataFusion residual), conformed to the namespace schema (renames, promotions, added columns).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_lance.namespace import (
    AsOf,
    DataValidationError,
    NamespaceState,
    Partition,
    PartitionedNamespace,
)
from airflow_provider_lance.namespace.worker import Storage, open_leaf, parse_filter, read_partition

from .executor import pinned_state
from .session import check_pyspark, is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

#: Leaves opened at once on the driver to list their fragments (latency bound on stores).
PLANNING_THREADS = 16


def read_partitioned(
    spark: SparkSession,
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    storage_options: Mapping[str, str] | None = None,
    version: int | None = None,
    as_of: AsOf | None = None,
) -> DataFrame:
    """The rows of the namespace at ``uri`` matching ``filter`` as a Spark DataFrame.

    ``filter`` is a SQL boolean expression over namespace columns; ``columns`` projects;
    ``as_of`` reads a past state: a ``__manifest`` version, a moment (naive = UTC) or a
    tag (``version`` is the older name of an int ``as_of``). The driver resolves it to one
    manifest version, which every task reads. Bad filters, unknown columns and states that
    do not exist raise here, before any task runs. ``spark.read.format("lance_partitioned")``
    plans and reads with the same :class:`LeafScan`.
    """
    check_pyspark(spark)
    scan, state = LeafScan.resolve(
        uri, storage_options, as_of=as_of, version=version, columns=columns, filter=filter
    )
    spark_schema = scan.spark_schema(state)
    tasks = scan.plan(default_parallelism(spark))
    if not tasks:
        return spark.createDataFrame([], spark_schema)
    rows = [(t,) for t in tasks]
    if is_connect(spark):  # no sparkContext: a local relation split into one task per row
        descriptors = spark.createDataFrame(rows, "task string").repartition(len(tasks))
    else:
        rdd = spark.sparkContext.parallelize(rows, len(tasks))
        descriptors = spark.createDataFrame(rdd, "task string")
    return descriptors.mapInArrow(scan.read_descriptors, spark_schema)


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once (its cores), also on Spark Connect."""
    if not is_connect(spark):
        return max(spark.sparkContext.defaultParallelism, 1)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured is None:  # unset on most servers: their shuffle width is the next best
        configured = spark.conf.get("spark.sql.shuffle.partitions", "200")
    return max(int(configured or 1), 1)


def plan_tasks(partitions: Sequence[Partition], storage: Storage, slots: int) -> list[str]:
    """JSON task descriptors: per fragment when partitions are fewer than ``slots``."""

    def describe(p: Partition, fragments: list[int] | None) -> str:
        return json.dumps(
            {
                "object_id": p.object_id,
                "location": p.location,
                "spec_version": p.spec_version,
                "read_version": p.read_version,
                "fragments": fragments,
            }
        )

    if len(partitions) >= slots:
        return [describe(p, None) for p in partitions]

    def fragment_ids(p: Partition) -> list[int]:
        return [f.fragment_id for f in open_leaf(storage, p).get_fragments()]

    with ThreadPoolExecutor(max_workers=min(PLANNING_THREADS, len(partitions) or 1)) as pool:
        listed = list(pool.map(fragment_ids, partitions))
    return [describe(p, [f]) for p, ids in zip(partitions, listed, strict=True) for f in ids]


def spark_schema_of(schema: pa.Schema) -> StructType:
    """The Spark schema of namespace columns; a clear error for types Spark lacks."""
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    fields = []
    for f in schema:
        try:
            fields.append(StructField(f.name, from_arrow_type(f.type), f.nullable))
        except (TypeError, ValueError) as exc:
            raise DataValidationError(
                f"column {f.name!r} has type {f.type}, which Spark cannot represent; "
                "leave it out with columns=[...]"
            ) from exc
    return StructType(fields)


@dataclass(frozen=True)
class LeafScan:
    """One read, resolved on the driver to ONE ``__manifest`` version: what its tasks need.

    Small and picklable. :meth:`plan` prunes with the core and describes the tasks;
    :meth:`read` reads one task's leaf (or fragment) at its pinned version with the
    projection and the filter pushed to Lance where Lance can evaluate it (else applied by
    the core's DataFusion residual), conformed to the namespace schema.
    """

    uri: str
    storage_options: dict[str, str] | None
    manifest_version: int
    columns: list[str] | None
    filter: str | None

    @classmethod
    def resolve(
        cls,
        uri: str,
        storage_options: Mapping[str, str] | None,
        *,
        as_of: AsOf | None = None,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
    ) -> tuple[LeafScan, NamespaceState]:
        """Pin the state ``as_of`` (now by default); check the columns and the filter."""
        ns = PartitionedNamespace.open(uri, storage_options)
        state = ns.state(as_of, version=version)
        state.schema.project(columns)
        if filter is not None:
            parse_filter(filter, state.schema)
        scan = cls(
            ns.uri, ns.storage_options, state.version, list(columns) if columns else None, filter
        )
        return scan, state

    def with_filter(self, extra: str | None) -> LeafScan:
        """This scan with ``extra`` ANDed to its filter (e.g. filters Spark pushed down)."""
        if not extra:
            return self
        combined = f"({self.filter}) AND ({extra})" if self.filter else extra
        return replace(self, filter=combined)

    def spark_schema(self, state: NamespaceState | None = None) -> StructType:
        state = state or pinned_state(self.uri, self.storage_options, self.manifest_version)
        return spark_schema_of(state.schema.project(self.columns))

    def plan(self, slots: int) -> list[str]:
        """JSON descriptors of the tasks reading what the filter does not prune away."""
        ns = PartitionedNamespace.open(self.uri, self.storage_options)
        partitions = ns.prune(self.filter, version=self.manifest_version)
        tasks = plan_tasks(partitions, ns.storage, slots)
        # (not "of N": counting every partition would read every __manifest row, where
        # the prune read only those its filter selects)
        log.info(
            "reading %d partitions in %d tasks (manifest v%d)",
            len(partitions),
            len(tasks),
            self.manifest_version,
        )
        return tasks

    def read(self, descriptor: str) -> Iterator[pa.RecordBatch]:
        """The rows of one task (on an executor)."""
        from pyspark.sql.pandas.types import to_arrow_schema

        state = pinned_state(self.uri, self.storage_options, self.manifest_version)
        residual = parse_filter(self.filter, state.schema)[0] if self.filter else None
        storage = Storage(self.uri, self.storage_options)
        target = to_arrow_schema(self.spark_schema(state), timezone="UTC")
        task: dict[str, Any] = json.loads(descriptor)
        partition = Partition(
            object_id=task["object_id"],
            location=task["location"],
            spec_version=task["spec_version"],
            values={},
            read_version=task["read_version"],
        )
        for out in read_partition(
            storage,
            partition,
            state.schema,
            columns=self.columns,
            residual=residual,
            fragment_ids=task["fragments"],
        ):
            yield out.cast(target) if out.schema != target else out

    def read_descriptors(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """:meth:`read` as a ``mapInArrow`` function over a column of descriptors."""
        for batch in batches:
            for text in batch.column("task").to_pylist():
                yield from self.read(text)
