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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_lance.namespace import (
    CommitResult,
    DataValidationError,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    Stage,
    Transaction,
    TransactionAborted,
)
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.catalog import NamespaceState, value_text
from airflow_provider_lance.namespace.commit import merge_stages
from airflow_provider_lance.namespace.errors import StaleStage, aborted_meanwhile, stage_again
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.lifecycle import TxnState
from airflow_provider_lance.namespace.splitting import routing_keys
from airflow_provider_lance.namespace.staging import FLUSH_BYTES
from airflow_provider_lance.namespace.txnstore import TransactionStore
from airflow_provider_lance.namespace.types import WriteMode

from .executor import pinned_state
from .session import check_pyspark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

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
    if flush_bytes <= 0:
        raise InvalidArgumentError("flush_bytes must be positive")
    check_pyspark(df.sparkSession)
    ns = PartitionedNamespace.open(uri, storage_options)
    check_dataframe_schema(df, ns.state())
    txn = ns.begin(mode, txn_id, anonymous=txn_id is None)  # only this driver records
    if txn.state is not TxnState.STAGED:  # an earlier run got as far as committing
        log.info("transaction %s is %s already", txn.txn_id, txn.state.value)
        return ns.commit(txn) if commit else staged_write(ns, txn)
    if discarded := txn.discard():
        log.info("discarded %d stages an earlier run of %s left", len(discarded), txn.txn_id)
    state = ns.state()
    task = _StageTask(ns.uri, ns.storage_options, txn.txn_id, state.version, flush_bytes)
    source = df
    if distribution == "hash" and state.current_spec:
        from pyspark.sql.types import LongType, StructField, StructType

        keyed = StructType([*df.schema.fields, StructField(ROUTING_KEY, LongType(), False)])
        source = df.mapInArrow(task.route, keyed).repartition(ROUTING_KEY)
    from pyspark.sql.pandas.types import from_arrow_schema

    try:
        summaries = source.mapInArrow(task.stage, from_arrow_schema(_STAGE_SUMMARY)).collect()
        # collect() returns the output of the successful attempt of each task only
        stages = [Stage.from_json(json.loads(r["stage"])) for r in summaries if r["stage"]]
        txn.record_all(stages)
    except Exception as exc:
        _cleanup_failed(ns, txn, forget=txn_id is None)
        error = _project_error(exc)
        if isinstance(error, TransactionAborted):
            raise aborted_meanwhile(txn.txn_id, error) from exc
        raise error from exc
    peak = max((r["peak_rss_bytes"] for r in summaries), default=0)
    log.info(
        "staged %d rows into %d data files from %d tasks (peak worker RSS %.0f MiB)",
        sum(r["rows"] for r in summaries),
        sum(r["files"] for r in summaries),
        len(summaries),
        peak / 2**20,
    )
    if not commit:
        recorded = {s.stage_id: s for s in stages}
        return staged_write(ns, txn, stages=recorded, tasks=len(summaries), peak_rss=peak)
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
    parts = merge_stages(txn.stages() if stages is None else stages)
    return StagedWrite(
        txn_id=txn.txn_id,
        uri=ns.uri,
        mode=txn.mode,
        state=txn.state.value,
        record_uri=f"{ns.uri}/{TransactionStore.directory(txn.txn_id, txn.incarnation)}",
        rows=sum(p.rows for p in parts.values()),
        files=sum(len(p.fragments) for p in parts.values()),
        tasks=tasks,
        partitions=[
            {
                "object_id": p.object_id,
                "values": {k: value_text(v) for k, v in p.values.items()},
                "rows": p.rows,
            }
            for p in parts.values()
        ],
        peak_worker_rss_bytes=peak_rss,
    )


def check_dataframe_schema(df: DataFrame, state: NamespaceState) -> None:
    """Fail on the driver, before any task runs, if ``df`` cannot go into the namespace."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        timezone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
        arrow = to_arrow_schema(df.schema, timezone=timezone)
    except (TypeError, ValueError) as exc:
        raise DataValidationError(f"the DataFrame has a column Arrow cannot carry: {exc}") from exc
    state.schema.conform_input(arrow.empty_table(), spec=state.current_spec)


@dataclass(frozen=True)
class _StageTask:
    """What runs on the executors; small and picklable (no namespace objects inside)."""

    uri: str
    storage_options: dict[str, str] | None
    txn_id: str
    manifest_version: int
    flush_bytes: int

    def route(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Tag every row with its partition's routing key (computed by the core)."""
        state = pinned_state(self.uri, self.storage_options, self.manifest_version)
        for batch in batches:
            conformed = state.schema.conform_input(
                pa.Table.from_batches([batch]), spec=state.current_spec
            )
            keys = routing_keys(conformed, state.current_spec, state.schema)
            yield batch.append_column(ROUTING_KEY, keys)

    def stage(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Stage this task's rows; the stage (named after the attempt) goes to the driver.

        Nothing is recorded here: only the driver records, and only the stages of attempts
        Spark reports successful, so a speculative or failed attempt can never add rows.
        """
        from pyspark import TaskContext

        ctx = TaskContext.get()
        attempt = ctx.attemptNumber() if ctx else 0
        stage_id = f"spark-{ctx.stageId()}-{ctx.partitionId()}-{attempt}" if ctx else "spark"
        txn = PartitionedNamespace.open(self.uri, self.storage_options).transaction(self.txn_id)
        stage = txn.stage(
            (_without_key(b) for b in batches),
            stage_id,
            record=False,
            manifest_version=self.manifest_version,
            flush_bytes=self.flush_bytes,
        )
        try:
            failpoint(f"spark.task.staged.attempt{attempt}")
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "stage_id": stage_id,
                        "stage": json.dumps(stage.to_json()) if stage.partitions else None,
                        "rows": stage.rows,
                        "files": sum(len(p.fragments) for p in stage.partitions.values()),
                        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                    }
                ],
                schema=_STAGE_SUMMARY,
            )
        except BaseException:
            txn.drop(stage)  # this attempt failed: its files will never be committed
            raise


def _without_key(batch: pa.RecordBatch) -> pa.RecordBatch:
    if ROUTING_KEY in batch.schema.names:
        return batch.drop_columns([ROUTING_KEY])
    return batch


def _cleanup_failed(ns: PartitionedNamespace, txn: Transaction, *, forget: bool) -> None:
    """A failed job leaves nothing staged; an id nobody knows leaves no record at all."""
    try:
        if forget:
            ns.abort(txn.txn_id, reason="the Spark job failed", forget=True)
        else:
            txn.discard()
    except LanceNamespaceError as exc:
        log.warning("could not clean up after the failed write %s: %s", txn.txn_id, exc)


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
