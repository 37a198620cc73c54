"""Partitioned writes from Spark: route rows on the executors, stage per task, publish once.

1. The driver begins (or resumes) a transaction and pins the ``__manifest`` version every
   task stages against. A retried job (same ``txn_id``) first discards what an earlier run
   staged, so it never duplicates rows.
2. With ``distribution="hash"`` (the default, as Iceberg's Spark writer does) a first
   ``mapInArrow`` computes each row's partition with the core's DataFusion code and tags it
   with a routing key; ``repartition`` on that key sends every partition's rows to one
   task, so each partition gets few, large data files. ``"none"`` skips the shuffle (each
   task writes files for every partition it sees, like ``partitionBy`` on Parquet).
3. Each task stages its rows (``write_fragments`` into the partitions' directories,
   buffering at most ``flush_bytes``) and returns its stage (data-file descriptions, no
   rows) to the driver; a task attempt that fails after writing deletes its files.
4. ``collect()`` returns the output of exactly one successful attempt per task, so the
   driver records exactly those stages: failed and speculative attempts never add rows
   (files of attempts killed outright are never referenced; ``maintain`` reclaims them).
   Then it publishes everything in one atomic ``__manifest`` commit, or leaves it staged
   (:func:`stage_partitioned`) for a separate commit.
"""

from __future__ import annotations

import json
import logging
import re
import resource
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_lance.namespace import (
    FLUSH_BYTES,
    CommitResult,
    DataValidationError,
    InvalidArgumentError,
    LanceNamespaceError,
    NamespaceState,
    PartitionedNamespace,
    PartitionRouter,
    Stage,
    Transaction,
    TransactionAborted,
    TransactionSummary,
    TxnState,
    WriteMode,
)
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.errors import StaleStage, aborted_meanwhile, stage_again
from airflow_provider_lance.namespace.testing import failpoint

from .executor import pinned_state
from .session import check_pyspark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

#: The routing-key column added for the shuffle (dropped again before staging).
ROUTING_KEY = "__lance_pns_routing_key"
DISTRIBUTIONS = ("hash", "none")
_STAGE_SUMMARY = pa.schema(
    [
        pa.field("stage_id", pa.string()),
        pa.field("stage", pa.string()),
        pa.field("rows", pa.int64()),
        pa.field("files", pa.int64()),
        pa.field("peak_rss_bytes", pa.int64()),
    ]
)


@dataclass(frozen=True)
class StagedWrite:
    """A staged (not yet visible) Spark write: what a separate commit step needs."""

    txn_id: str
    uri: str
    mode: str
    state: str
    record_uri: str
    rows: int
    files: int
    tasks: int
    partitions: list[dict[str, Any]] = field(default_factory=list)
    #: Largest resident set of a Python worker that staged data (bytes; 0 if unknown).
    peak_worker_rss_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "txn_id": self.txn_id,
            "uri": self.uri,
            "mode": self.mode,
            "state": self.state,
            "record_uri": self.record_uri,
            "partition_count": len(self.partitions),
            "rows": self.rows,
            "files": self.files,
            "tasks": self.tasks,
            "peak_worker_rss_bytes": self.peak_worker_rss_bytes,
            "partitions": self.partitions,
        }


def write_partitioned(
    df: DataFrame,
    uri: str,
    mode: WriteMode = "append",
    storage_options: Mapping[str, str] | None = None,
    *,
    txn_id: str | None = None,
    distribution: str = "hash",
    flush_bytes: int = FLUSH_BYTES,
) -> CommitResult:
    """Write ``df`` into the partitioned namespace at ``uri`` and publish it atomically.

    ``mode="append"`` adds rows; ``mode="overwrite"`` is a *dynamic partition overwrite*
    (pyiceberg's name for it): exactly the partitions the data touches are replaced, the
    others stay. Running again with the same ``txn_id`` (a retried job) replaces the
    earlier attempt's staged data, or returns the published result if that attempt got
    as far as committing. See :func:`stage_partitioned` to publish later.
    """
    result = _write(df, uri, mode, storage_options, True, txn_id, distribution, flush_bytes)
    assert isinstance(result, CommitResult)
    return result


def stage_partitioned(
    df: DataFrame,
    uri: str,
    mode: WriteMode = "append",
    storage_options: Mapping[str, str] | None = None,
    *,
    txn_id: str | None = None,
    distribution: str = "hash",
    flush_bytes: int = FLUSH_BYTES,
) -> StagedWrite:
    """Stage ``df`` as transaction ``txn_id`` without publishing anything; returns what
    was staged. ``PartitionedNamespace.commit`` (or ``LanceCommitOperator``) publishes it,
    alone or together with other staged transactions. Idempotent under ``txn_id`` like
    :func:`write_partitioned`."""
    staged = _write(df, uri, mode, storage_options, False, txn_id, distribution, flush_bytes)
    assert isinstance(staged, StagedWrite)
    return staged


def _write(
    df: DataFrame,
    uri: str,
    mode: WriteMode,
    storage_options: Mapping[str, str] | None,
    commit: bool,
    txn_id: str | None,
    distribution: str,
    flush_bytes: int,
) -> CommitResult | StagedWrite:
    if distribution not in DISTRIBUTIONS:
        raise InvalidArgumentError(f"distribution must be one of {DISTRIBUTIONS}")
    check_pyspark(df.sparkSession)
    timezone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    job = WriteJob.begin(uri, storage_options, mode, txn_id, flush_bytes, df.schema, timezone)
    if job.finished:  # an earlier run got as far as committing
        return job.finish([], commit=commit)
    source = df
    if distribution == "hash" and job.partitioned:
        from pyspark.sql.types import LongType, StructField, StructType

        keyed = StructType([*df.schema.fields, StructField(ROUTING_KEY, LongType(), False)])
        source = df.mapInArrow(job.route, keyed).repartition(ROUTING_KEY)
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        summaries = source.mapInArrow(job.stage, from_arrow_schema(_STAGE_SUMMARY)).collect()
    except Exception as exc:  # collect() returns the successful attempt of each task only
        raise job.fail(exc) from exc
    tasks = [TaskStage(**r.asDict()) for r in summaries]
    return job.finish(tasks, commit=commit)


@dataclass(frozen=True)
class TaskStage:
    """What one successful task attempt staged: a stage (as JSON, no rows) and figures.

    Spark hands the driver exactly one of these per task (``collect()``'s rows, a data
    source's commit messages), so failed and speculative attempts never count."""

    stage_id: str
    stage: str | None
    rows: int
    files: int
    peak_rss_bytes: int

    def parsed(self) -> Stage | None:
        return Stage.from_json(json.loads(self.stage)) if self.stage else None


def staged_write(
    ns: PartitionedNamespace,
    txn: Transaction,
    *,
    stages: Mapping[str, Stage] | None = None,
    tasks: int = 0,
    peak_rss: int = 0,
) -> StagedWrite:
    """The summary of a staged transaction, as the commit step and operators see it.

    ``stages`` are its stages when the caller has them (else they are read back).
    """
    summary = TransactionSummary.of(ns, txn, stages)
    return StagedWrite(
        txn_id=summary.txn_id,
        uri=summary.uri,
        mode=summary.mode,
        state=summary.state,
        record_uri=summary.record_uri,
        rows=summary.rows,
        files=summary.files,
        tasks=tasks,
        partitions=summary.partitions,
        peak_worker_rss_bytes=peak_rss,
    )


def check_spark_schema(schema: StructType, state: NamespaceState, timezone: str = "UTC") -> None:
    """Fail on the driver, before any task runs, if rows of ``schema`` cannot go into the
    namespace."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        arrow = to_arrow_schema(schema, timezone=timezone)
    except (TypeError, ValueError) as exc:
        raise DataValidationError(f"the DataFrame has a column Arrow cannot carry: {exc}") from exc
    PartitionRouter(state).check(arrow)


@dataclass(frozen=True)
class WriteJob:
    """One Spark write, begun on the driver: what its tasks and its commit need.

    Small and picklable (no namespace objects inside): ``write_partitioned`` ships it to
    ``mapInArrow`` tasks and collects their :class:`TaskStage` rows; the
    ``lance_partitioned`` data source ships it to its writer tasks and gets the same
    :class:`TaskStage`\\ s back as commit messages. Either way :meth:`finish` records
    exactly those stages and publishes them in one ``__manifest`` commit.
    """

    uri: str
    storage_options: dict[str, str] | None
    txn_id: str
    manifest_version: int
    flush_bytes: int
    mode: str = "append"
    #: Begun without a ``txn_id``: nobody else knows it, so a failed job forgets it.
    anonymous: bool = False
    #: An earlier run with this ``txn_id`` got as far as committing: nothing to stage.
    finished: bool = False
    #: The namespace has a partition spec (rows can be routed by partition).
    partitioned: bool = True

    @classmethod
    def begin(
        cls,
        uri: str,
        storage_options: Mapping[str, str] | None,
        mode: WriteMode,
        txn_id: str | None,
        flush_bytes: int,
        schema: StructType,
        timezone: str = "UTC",
    ) -> WriteJob:
        """Check ``schema``, then begin (or resume) the transaction and pin the
        ``__manifest`` version every task stages against. A retried job (same ``txn_id``)
        first discards what an earlier run staged, so it never duplicates rows."""
        if flush_bytes <= 0:
            raise InvalidArgumentError("flush_bytes must be positive")
        ns = PartitionedNamespace.open(uri, storage_options)
        check_spark_schema(schema, ns.state(), timezone)
        txn = ns.begin(mode, txn_id, anonymous=txn_id is None)  # only the driver records
        finished = txn.state is not TxnState.STAGED
        if finished:
            log.info("transaction %s is %s already", txn.txn_id, txn.state.value)
        elif discarded := txn.discard():
            log.info("discarded %d stages an earlier run of %s left", len(discarded), txn.txn_id)
        state = ns.state()
        return cls(
            ns.uri,
            ns.storage_options,
            txn.txn_id,
            state.version,
            flush_bytes,
            mode=mode,
            anonymous=txn_id is None,
            finished=finished,
            partitioned=bool(state.current_spec),
        )

    def namespace(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.uri, self.storage_options)

    # -- on the executors -------------------------------------------------------------
    def route(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Tag every row with its partition's routing key (computed by the core)."""
        router = PartitionRouter(
            pinned_state(self.uri, self.storage_options, self.manifest_version)
        )
        for batch in batches:
            yield batch.append_column(ROUTING_KEY, router.keys(batch))

    def stage_task(self, batches: Iterator[pa.RecordBatch]) -> TaskStage:
        """Stage this task attempt's rows; the stage (named after the attempt) goes to the
        driver.

        Nothing is recorded here: only the driver records, and only the stages of attempts
        Spark reports successful, so a speculative or failed attempt can never add rows.
        """
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx else 0
        stage_id = f"spark-{ctx.stageId()}-{ctx.partitionId()}-{attempt}" if ctx else "spark"
        if self.finished:
            for _ in batches:  # an earlier run published these rows
                pass
            return TaskStage(stage_id, None, 0, 0, 0)
        txn = self.namespace().transaction(self.txn_id)
        stage = txn.stage(
            (_without_key(b) for b in batches),
            stage_id,
            record=False,
            manifest_version=self.manifest_version,
            flush_bytes=self.flush_bytes,
        )
        try:
            failpoint(f"spark.task.staged.attempt{attempt}")
        except BaseException:
            txn.drop(stage)  # this attempt failed: its files will never be committed
            raise
        return TaskStage(
            stage_id=stage_id,
            stage=json.dumps(stage.to_json()) if stage.partitions else None,
            rows=stage.rows,
            files=sum(len(p.fragments) for p in stage.partitions.values()),
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        )

    def stage(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """:meth:`stage_task` as a ``mapInArrow`` function: one summary row per task."""
        task = self.stage_task(batches)
        try:
            yield pa.RecordBatch.from_pylist([asdict(task)], schema=_STAGE_SUMMARY)
        except BaseException:
            self.drop([task])  # the attempt failed after staging: never committed
            raise

    def drop(self, tasks: Iterable[TaskStage], txn: Transaction | None = None) -> None:
        """Delete the data files of stages that were never recorded."""
        for task in tasks:
            stage = task.parsed()
            if stage is not None:
                txn = txn or self.namespace().transaction(self.txn_id)
                txn.drop(stage)

    # -- on the driver ----------------------------------------------------------------
    def finish(self, tasks: Sequence[TaskStage], *, commit: bool) -> CommitResult | StagedWrite:
        """Record the stages of ``tasks`` (one per task: the successful attempts') and
        publish them in one ``__manifest`` commit, or leave them staged."""
        ns = self.namespace()
        txn = ns.transaction(self.txn_id)
        if self.finished:
            return ns.commit(txn) if commit else staged_write(ns, txn)
        stages = [s for s in (t.parsed() for t in tasks) if s is not None]
        try:
            txn.record_all(stages)
        except Exception as exc:
            raise self.fail(exc) from exc
        peak = max((t.peak_rss_bytes for t in tasks), default=0)
        log.info(
            "staged %d rows into %d data files from %d tasks (peak worker RSS %.0f MiB)",
            sum(t.rows for t in tasks),
            sum(t.files for t in tasks),
            len(tasks),
            peak / 2**20,
        )
        if not commit:
            recorded = {s.stage_id: s for s in stages}
            return staged_write(ns, txn, stages=recorded, tasks=len(tasks), peak_rss=peak)
        try:
            result = ns.commit(txn)
        except TransactionAborted as exc:
            raise aborted_meanwhile(txn.txn_id, exc) from exc
        except StaleStage as exc:  # a retried job discards these stages and stages afresh
            raise stage_again(exc) from exc
        log.info(
            "published %d rows into %d partitions (manifest v%d)",
            result.rows,
            len(result.partitions),
            result.manifest_version,
        )
        return result

    def fail(self, exc: BaseException, tasks: Iterable[TaskStage] = ()) -> Exception:
        """Clean up after a failed job and return the error to raise (a project error
        raised on an executor comes back under its own class).

        A failed job leaves nothing staged (an id nobody knows leaves no record at all).
        The files of ``tasks`` are deleted only once the transaction can no longer publish
        them: if it was sealed or published meanwhile (e.g. Spark retries a commit whose
        first try published), the transaction refuses to be undone and they stay.
        """
        try:
            if not self.finished:
                ns = self.namespace()
                txn = ns.transaction(self.txn_id)
                if self.anonymous:
                    ns.abort(self.txn_id, reason="the Spark job failed", forget=True)
                else:
                    txn.discard()
                self.drop(tasks, txn)
        except LanceNamespaceError as cleanup:
            log.warning("could not clean up after the failed write %s: %s", self.txn_id, cleanup)
        error = _project_error(exc) if isinstance(exc, Exception) else exc
        if isinstance(error, TransactionAborted):
            return aborted_meanwhile(self.txn_id, error)
        return error if isinstance(error, Exception) else RuntimeError(str(error))


def _without_key(batch: pa.RecordBatch) -> pa.RecordBatch:
    if ROUTING_KEY in batch.schema.names:
        return batch.drop_columns([ROUTING_KEY])
    return batch


#: Project errors raised on executors, re-raised on the driver under their own class (so
#: their ``retryable`` decides what the job's exit code and the Airflow task do).
_REMOTE_ERRORS: dict[str, type[LanceNamespaceError]] = project_errors.error_classes()
_REMOTE = re.compile(r"(?:airflow_provider_lance\.namespace\.errors\.)?(\w+): (.+)")


def _project_error(exc: Exception) -> Exception:
    """Turn a Spark task failure caused by a project error back into that error."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        match = _REMOTE.search(line.strip())
        if match and match.group(1) in _REMOTE_ERRORS:
            try:
                return _REMOTE_ERRORS[match.group(1)](f"a Spark task failed: {match.group(2)}")
            except TypeError:  # a class that needs more than a message to be built
                return exc
    return exc
