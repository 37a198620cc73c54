"""``format("lance_partitioned")``: the namespace as a Spark data source (PySpark 4.2's Python
Data Source API), for batch reads and writes and Structured Streaming appends.

    from airflow_provider_lance.spark import register

    register(spark)
    df = spark.read.format("lance_partitioned").option("as_of", "daily-2025-12-10").load(uri)
    df.where("event_date = DATE '2025-12-10'")  # pruned to that day's leaves
    df.write.format("lance_partitioned").mode("overwrite").option("txn_id", "load.1").save(uri)
    df.writeStream.format("lance_partitioned").option("checkpointLocation", cp).start(uri)

It is the same code as :func:`.read_partitioned` and :func:`.write_partitioned`: a read is a
:class:`.LeafScan`, a batch write a :class:`.WriteJob`; only who drives them differs. Where
each method runs (learned by probing PySpark 4.2's workers; ``tests/spark/test_datasource*.py``
hold what this module relies on):
``DataSource.schema``/``reader``/``writer`` and ``pushFilters`` run in Python workers the
driver's JVM starts (not in the caller's process), and the reader/writer they return is
pickled to the executors *before* ``partitions()`` is called; ``commit``/``abort`` run in
another such worker, with one message per task from its successful attempt only. A stream's
``streamWriter`` is called again for every micro-batch and for every commit (a new object
each time), and its tasks learn the query's id and the batch id from the task's local
properties ``sql.streaming.queryId`` (the id kept in the checkpoint, so a restarted query has
the same one) and ``streaming.sql.batchId``.

What the format costs beyond :func:`.read_partitioned`/:func:`.write_partitioned` is those
workers, not its planning (milliseconds; pruning is the same): a read starts two
(``create_data_source`` for ``schema``, ``data_source_pushdown_filters`` for ``reader``,
``pushFilters`` and ``partitions``), a write two (``write_into_data_source``,
``commit_data_source_write``). Each is forked from a daemon of its own kind, a new
interpreter that imports PySpark from the ``pyspark.zip`` Spark puts first on its path
(compiled from source every time: ~0.5 s), and each fork imports PyArrow and pylance (with
pandas) again (~0.5 s). Spark keeps a worker for a minute after its last use (hard-coded in
``PythonWorkerFactory``), so a query after a pause pays the imports again, where the two
functions plan in the caller's warm process. ``benchmarks/bench_spark.py`` measures this
beside a Python data source that does nothing (``benchmarks/_null_source.py``): the API
alone costs more, cold, than ``write_partitioned`` doing the whole write.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    WriterCommitMessage,
)

from airflow_provider_lance.namespace import (
    FLUSH_BYTES,
    CommitResult,
    InvalidArgumentError,
    NamespaceState,
    PartitionedNamespace,
    TxnState,
    options_from_json,
)

from .reader import LeafScan, read_task
from .writer import TaskStage, WriteJob

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from airflow_provider_lance.namespace import AsOf

log = logging.getLogger(__name__)

#: The format's name: ``spark.read.format(FORMAT)``.
FORMAT = "lance_partitioned"
#: Spark's switch for ``pushFilters`` (off by default; left as the session set it).
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: Task-local properties Spark's micro-batch execution sets.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
#: Tasks a read is split into at least (per fragment) when the option is not given.
DEFAULT_PARALLELISM = 8
#: The options each use takes, as Spark passes them (lowercased; ``path`` is the URI of
#: ``load``/``save``/``start``, ``checkpointlocation`` a stream's checkpoint). Any other is
#: refused: ignored, a misspelt ``as_of`` would read the latest rows, silently.
READ_OPTIONS = frozenset({"path", "storage_options", "as_of", "filter", "columns", "parallelism"})
WRITE_OPTIONS = frozenset({"path", "storage_options", "txn_id", "flush_bytes"})
STREAM_OPTIONS = frozenset(
    {"path", "storage_options", "query_id", "flush_bytes", "checkpointlocation"}
)
#: Options of other formats a user may reach for, and this format's own for the same.
_OPTION_HINTS = {
    "versionasof": "as_of",
    "timestampasof": "as_of",
    "snapshot-id": "as_of",
    "as-of-timestamp": "as_of",
    "version": "as_of",
    "txnappid": "query_id",
    "txnversion": "txn_id",
    "where": "filter",
}


def register(spark: SparkSession) -> None:
    """Register ``lance_partitioned`` in ``spark`` (a classic or Spark Connect session).

    Spark's own filters (``df.where``) prune partitions only with Spark's
    ``spark.sql.python.filterPushdown.enabled``, left as the session set it (off by
    default): Spark keeps the read a pushdown planned on the loaded DataFrame and reuses it
    for that DataFrame's later queries that push nothing, which then return the first
    query's rows (measured on 4.2.1 and 4.3.0: ``df.where("id > 5").count()``, then
    ``df.count()`` counts the filtered rows). Without it the ``filter`` option prunes and
    Spark filters the rows read. Turned on before registering, the format takes Spark's
    filters, and a warning says so; turned off after it, reads fail with
    ``DATA_SOURCE_PUSHDOWN_DISABLED`` (register again).
    """
    pushdown = (spark.conf.get(PUSHDOWN_CONF, None) or "false").strip().lower() == "true"
    if pushdown:
        log.warning(
            "%s is true: Spark (%s) reuses the read a pushed filter planned for later queries "
            "of the same loaded DataFrame that push no filter (they return the first query's "
            "rows); load the DataFrame again for each query, or prune with "
            '.option("filter", ...) and leave %s off',
            PUSHDOWN_CONF,
            spark.version,
            PUSHDOWN_CONF,
        )
    spark.dataSource.register(LancePartitioned if pushdown else LancePartitionedNoPushdown)


class LancePartitioned(DataSource):
    """The data source; options (all strings, as Spark passes them):

    * ``path`` (``load(uri)``/``save(uri)``): the namespace root;
    * ``storage_options``: a JSON object of Lance storage options;
    * reads: ``as_of`` (a ``__manifest`` version, an ISO 8601 moment, or a tag),
      ``filter`` (a SQL boolean expression, as the core takes), ``columns`` (comma
      separated), ``parallelism`` (split per fragment when fewer partitions than this);
    * writes: ``txn_id`` (a rerun with it publishes once), ``flush_bytes``;
    * streams: ``query_id`` (what keys the micro-batches; default: the query's id).
    """

    pushdown = True

    @classmethod
    def name(cls) -> str:
        return FORMAT

    @property
    def uri(self) -> str:
        uri = self.options.get("path")
        if not uri:
            raise InvalidArgumentError(f"{FORMAT} needs the namespace URI: load(uri) / save(uri)")
        return str(uri)

    @property
    def storage_options(self) -> dict[str, str] | None:
        raw = self.options.get("storage_options")
        if not raw:
            return None
        options = options_from_json(raw, "the storage_options option")
        return {str(k): str(v) for k, v in options.items()}

    def check_options(self, allowed: frozenset[str], use: str) -> None:
        """Refuse an option ``use`` (a read, a write, a stream) does not take."""
        unknown = sorted(str(k).lower() for k in self.options if str(k).lower() not in allowed)
        if not unknown:
            return
        hints = "".join(
            f" (for {k!r}, this format has {_OPTION_HINTS[k]!r})"
            for k in unknown
            if k in _OPTION_HINTS
        )
        takes = ", ".join(sorted(allowed - {"path", "checkpointlocation"}))
        raise InvalidArgumentError(
            f"a {FORMAT} {use} takes no option {', '.join(map(repr, unknown))}{hints}; "
            f"its options are {takes}"
        )

    def whole_number(self, name: str, default: int) -> int:
        """The option ``name`` as a whole number of at least 1 (``default`` if not given)."""
        raw = self.options.get(name)
        if raw is None or not str(raw).strip():
            return default
        try:
            value: int | None = int(str(raw).strip())
        except ValueError:
            value = None
        if value is None or value < 1:
            raise InvalidArgumentError(
                f"the {name} option must be a whole number of at least 1, not {raw!r}"
            )
        return value

    def scan(self) -> tuple[LeafScan, NamespaceState]:
        """The read the options describe and the state it pins (one namespace open: each
        planning step runs in a Python worker of its own, see the module docstring)."""
        self.check_options(READ_OPTIONS, "read")
        columns = self.options.get("columns")
        return LeafScan.resolve(
            self.uri,
            self.storage_options,
            as_of=as_of_option(self.options.get("as_of")),
            columns=[c.strip() for c in columns.split(",")] if columns else None,
            filter=self.options.get("filter") or None,
        )

    def schema(self) -> StructType:
        scan, state = self.scan()
        return scan.spark_schema(state)

    def reader(self, schema: StructType) -> DataSourceReader:
        scan, state = self.scan()
        if scan.columns is None and schema.fieldNames() != scan.spark_schema(state).fieldNames():
            scan = LeafScan(
                scan.uri,
                scan.storage_options,
                scan.manifest_version,
                schema.fieldNames(),
                scan.filter,
            )
        parallelism = self.whole_number("parallelism", DEFAULT_PARALLELISM)
        if self.pushdown:
            return PushdownReader(scan, parallelism)
        return Reader(scan, parallelism)

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        if not self.options.get("path"):
            # saveAsTable/insertInto: Spark constructs the source in a Python worker only
            # when it plans the write (no earlier hook), and its own log prints the JVM
            # stack of this refusal ("ERROR Utils: Aborting task"); the exception it raises
            # carries this message whole, after one frame of traceback.
            raise InvalidArgumentError(
                f"{FORMAT} writes to a namespace URI, not a catalog table: use "
                f'df.write.format("{FORMAT}").save(uri); saveAsTable and insertInto are '
                "not supported"
            )
        self.check_options(WRITE_OPTIONS, "write")
        job = WriteJob.begin(
            self.uri,
            self.storage_options,
            "overwrite" if overwrite else "append",
            self.options.get("txn_id") or None,
            self.whole_number("flush_bytes", FLUSH_BYTES),
            schema,
        )
        return BatchWriter(job)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        self.check_options(STREAM_OPTIONS, "stream")
        if overwrite:
            raise InvalidArgumentError(
                f"{FORMAT} streams support the append output mode only (complete mode would "
                "replace the whole namespace every micro-batch)"
            )
        ns = PartitionedNamespace.open(self.uri, self.storage_options)
        from .writer import check_spark_schema

        check_spark_schema(schema, ns.state())
        return StreamWriter(
            ns.uri,
            ns.storage_options,
            schema.json(),
            self.options.get("query_id") or None,
            self.whole_number("flush_bytes", FLUSH_BYTES),
        )


class LancePartitionedNoPushdown(LancePartitioned):
    """Registered when the session leaves ``spark.sql.python.filterPushdown.enabled`` off."""

    pushdown = False


def as_of_option(text: str | None) -> AsOf | None:
    """A version (digits), a moment (ISO 8601; naive = UTC) or a tag."""
    if not text:
        return None
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return text


# -- reads --------------------------------------------------------------------------------
class Reader(DataSourceReader):
    """Plans one task per pruned leaf, or per fragment when leaves are few (the
    :class:`.LeafScan` of ``read_partitioned``, planned by the core's ``plan_scan``)."""

    def __init__(self, scan: LeafScan, parallelism: int) -> None:
        self.scan = scan
        self.parallelism = parallelism

    def partitions(self) -> Sequence[InputPartition]:
        """One per task of the plan (a pickled ``ScanTask``: it carries what it reads)."""
        return [InputPartition(task) for task in self.scan.plan(self.parallelism).tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_task(partition.value)


class PushdownReader(Reader):
    """A :class:`Reader` that takes Spark's filters over namespace columns: they prune
    partitions and filter rows in the scan (so Spark does not evaluate them again)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        state_schema = self.scan.spark_schema()
        types = {f.name: f.dataType.typeName() for f in state_schema.fields}
        pushed = []
        for f in filters:
            sql = filter_sql(f, types)
            if sql is None:
                yield f  # Spark evaluates it
            else:
                pushed.append(sql)
        if pushed:
            self.scan = self.scan.with_filter(" AND ".join(f"({s})" for s in pushed))


#: Spark type names whose literals mean the same in Spark and DataFusion (no floats: NaN
#: orders differently; no timestamps: time zones).
_PUSHABLE = {"byte", "short", "integer", "long", "string", "date", "boolean"}


def filter_sql(f: Filter, types: dict[str, str]) -> str | None:
    """The SQL of a Spark filter, or None if it is not pushed (Spark evaluates it)."""
    if isinstance(f, Not):
        inner = filter_sql(f.child, types)
        return None if inner is None else f"NOT ({inner})"
    attribute: tuple[str, ...] = getattr(f, "attribute", ())
    if len(attribute) != 1 or types.get(attribute[0], "") not in _PUSHABLE:
        return None
    name = attribute[0]
    # backticks: a double-quoted name reads no rows in the core today (Lance's scan filter
    # takes it for a string), see test_a_double_quoted_column_in_a_filter
    column = "`" + name.replace("`", "``") + "`"
    if isinstance(f, IsNull):
        return f"{column} IS NULL"
    if isinstance(f, IsNotNull):
        return f"{column} IS NOT NULL"
    if isinstance(f, In):
        values = [filter_literal(v, types[name]) for v in f.value]
        if not values or any(v is None for v in values):
            return None
        return f"{column} IN ({', '.join(str(v) for v in values)})"
    if isinstance(f, EqualNullSafe):  # never NULL itself, also under a NOT
        literal = filter_literal(f.value, types[name]) if f.value is not None else None
        if f.value is None:
            return f"{column} IS NULL"
        return None if literal is None else f"({column} IS NOT NULL AND {column} = {literal})"
    operators = {
        EqualTo: "=",
        GreaterThan: ">",
        GreaterThanOrEqual: ">=",
        LessThan: "<",
        LessThanOrEqual: "<=",
    }
    op = operators.get(type(f))
    literal = filter_literal(getattr(f, "value", None), types[name])
    if op is None or literal is None:
        return None
    return f"{column} {op} {literal}"


def filter_literal(value: Any, type_name: str) -> str | None:
    """``value`` as a SQL literal of the column's type, or None if it is not one."""
    if type_name == "boolean":
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if type_name == "string":
        return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else None
    if type_name == "date":
        ok = isinstance(value, dt.date) and not isinstance(value, dt.datetime)
        return f"DATE '{value.isoformat()}'" if ok else None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


# -- batch writes -------------------------------------------------------------------------
@dataclass
class Staged(WriterCommitMessage):
    """A task's commit message: what its successful attempt staged (and, in a stream, for
    which query and micro-batch, into which transaction)."""

    task: TaskStage
    job: WriteJob | None = None
    query_id: str | None = None
    batch_id: int | None = None


class BatchWriter(DataSourceArrowWriter):
    """Tasks stage; ``commit`` records exactly the successful attempts' stages and publishes
    them in one ``__manifest`` commit; ``abort`` removes what the tasks staged."""

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        return Staged(self.job.stage_task(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.finish(_tasks(messages), commit=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self.job.fail(RuntimeError("the Spark write was aborted"), _tasks(messages))


def _tasks(messages: Sequence[WriterCommitMessage | None]) -> list[TaskStage]:
    return [m.task for m in messages if isinstance(m, Staged)]


# -- streaming ----------------------------------------------------------------------------
class StreamWriter(DataSourceStreamArrowWriter):
    """Appends every micro-batch exactly once, as transaction ``stream-<query>-<batch>``.

    Each task stages into a transaction of its own (it cannot know one begun for the batch:
    ``streamWriter`` runs before the batch id is known). ``commit`` publishes the tasks'
    transactions together under the batch's id; if an earlier run of the query already
    published (or began publishing) that batch, it finishes that one and discards what the
    replay staged, so a query restarted after a crash between its publish and Spark's commit
    log publishes nothing twice.
    """

    def __init__(
        self,
        uri: str,
        storage_options: dict[str, str] | None,
        schema_json: str,
        query_id: str | None,
        flush_bytes: int,
    ) -> None:
        self.uri = uri
        self.storage_options = storage_options
        self.schema_json = schema_json
        self.query_id = query_id
        self.flush_bytes = flush_bytes

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        from pyspark import TaskContext
        from pyspark.sql.types import StructType

        ctx = TaskContext.get()
        query_id = self.query_id or (ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx else None)
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx else None
        first = next(iterator, None)
        if first is None:  # nothing to stage: no transaction either
            return Staged(TaskStage("empty", None, 0, 0, 0), None, query_id, _int(batch))
        schema = StructType.fromJson(json.loads(self.schema_json))
        job = WriteJob.begin(
            self.uri, self.storage_options, "append", None, self.flush_bytes, schema
        )
        task = job.stage_task(itertools.chain([first], iterator))
        return Staged(task, job, query_id, _int(batch))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, Staged)]
        query_ids = {m.query_id for m in staged if m.job is not None}
        if not query_ids:
            return  # no task staged rows
        if len(query_ids) != 1 or None in query_ids:
            raise InvalidArgumentError(
                f"cannot tell the query of micro-batch {batchId} ({query_ids}); set the "
                "query_id option"
            )
        key = batch_txn_id(query_ids.pop() or "", batchId)
        publish_batch(self.uri, self.storage_options, key, staged)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        for m in messages:
            if isinstance(m, Staged) and m.job is not None:
                m.job.fail(RuntimeError(f"micro-batch {batchId} was aborted"), [m.task])


def batch_txn_id(query_id: str, batch_id: int) -> str:
    """The transaction id of a micro-batch: one per query and batch, stable across restarts."""
    return f"stream-{query_id}-{batch_id}"


def publish_batch(
    uri: str, storage_options: dict[str, str] | None, key: str, staged: Sequence[Staged]
) -> CommitResult | None:
    """Publish the tasks' transactions as ``key``, once (see :class:`StreamWriter`)."""
    ns = PartitionedNamespace.open(uri, storage_options)
    jobs = [(m.job, m.task) for m in staged if m.job is not None]
    if _begun(ns, key):  # a replay: finish what the earlier run began, drop the new stages
        log.info("micro-batch %s was published (or begun) before: publishing nothing new", key)
        for job, task in jobs:
            job.fail(RuntimeError(f"{key} replayed"), [task])
        return ns.commit(key)
    with_rows = []
    for job, task in jobs:
        stage = task.parsed()
        if stage is None:
            job.fail(RuntimeError("nothing staged"))
            continue
        ns.transaction(job.txn_id).record_all([stage])
        with_rows.append(job.txn_id)
    if not with_rows:
        return None
    result = ns.commit(with_rows, txn_id=key)
    log.info("published %s: %d rows (manifest v%d)", key, result.rows, result.manifest_version)
    return result


def _begun(ns: PartitionedNamespace, txn_id: str) -> bool:
    try:
        return ns.transaction(txn_id).state is not TxnState.ABORTED
    except InvalidArgumentError:  # no such transaction
        return False


def _int(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None
