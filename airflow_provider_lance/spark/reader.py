"""Pruned reads into Spark: prune on the driver, read leaves at their versions on executors.

The driver plans the read with the core's ``plan_scan`` (every partition's
``read_version`` from ONE ``__manifest`` version, pruned): a task per data file
(fragment) when there are fewer partitions than task slots, else one per partition (so a
wide scan does not open every leaf on the driver). Each task is a ``ScanTask``, run on an
executor: its leaf at the pinned version, the projection pushed to Lance and the filter
pushed down where Lance can evaluate it (else applied by the core's DataFusion residual),
conformed to the namespace schema (renames, promotions, added columns).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa

from airflow_provider_lance.namespace import (
    AsOf,
    DataValidationError,
    NamespaceState,
    PartitionedNamespace,
    RowFilter,
    Scan,
    ScanPlan,
    ScanTask,
)

from .executor import pinned_state
from .session import check_pyspark, is_connect

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)


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
    plan = scan.plan(default_parallelism(spark))
    if not plan.tasks:
        return spark.createDataFrame([], spark_schema)
    rows = [(json.dumps(t.to_json(scan=False)),) for t in plan.tasks]
    if is_connect(spark):  # no sparkContext: a local relation split into one task per row
        descriptors = spark.createDataFrame(rows, "task string").repartition(len(rows))
    else:
        rdd = spark.sparkContext.parallelize(rows, len(rows))
        descriptors = spark.createDataFrame(rdd, "task string")
    return descriptors.mapInArrow(TaskReader(plan.scan), spark_schema)


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session runs at once (its cores), also on Spark Connect."""
    if not is_connect(spark):
        return max(spark.sparkContext.defaultParallelism, 1)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured is None:  # unset on most servers: their shuffle width is the next best
        configured = spark.conf.get("spark.sql.shuffle.partitions", "200")
    return max(int(configured or 1), 1)


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
    """One read, resolved on the driver to ONE ``__manifest`` version and not yet planned
    (Spark may still push filters into it): what its plan needs.

    Small and picklable. :meth:`plan` prunes with the core into a
    :class:`~airflow_provider_lance.namespace.ScanPlan`; :func:`read_task` reads one of its
    tasks on an executor, in Spark's types.
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
            RowFilter(filter, state)
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

    def plan(self, slots: int) -> ScanPlan:
        """The plan of what the filter does not prune away: a task per partition, or per
        data file when there are fewer partitions than ``slots``."""
        ns = PartitionedNamespace.open(self.uri, self.storage_options)
        plan = ns.plan_scan(self.filter, self.columns, self.manifest_version, target_tasks=slots)
        # (not "of N": counting every partition would read every __manifest row, where
        # the prune read only those its filter selects)
        log.info(
            "reading %d partitions in %d tasks (manifest v%d)",
            len({t.object_id for t in plan.tasks}),
            len(plan.tasks),
            self.manifest_version,
        )
        return plan


def read_task(task: ScanTask) -> Iterator[pa.RecordBatch]:
    """The rows of one task (on an executor), in the Arrow types Spark maps its own to."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(spark_schema_of(task.scan.schema), timezone="UTC")
    for out in task.to_batches():
        yield out.cast(target) if out.schema != target else out


@dataclass(frozen=True)
class TaskReader:
    """:func:`read_task` as a ``mapInArrow`` function over a column of task descriptors
    (``ScanTask.to_json(scan=False)``): the :class:`Scan` they share is shipped once."""

    scan: Scan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for text in batch.column("task").to_pylist():
                yield from read_task(ScanTask.from_json(json.loads(text), scan=self.scan))
