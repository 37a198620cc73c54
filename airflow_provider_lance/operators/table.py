"""Table operations as tasks: delete rows, drop partitions, merge (upsert), optimize.

Each is ONE ``__manifest`` commit in the core (:meth:`PartitionedNamespace.delete`,
``drop_partitions``, ``merge``, ``optimize``), run under a transaction id derived from
dag/run/task/map index: the core records the operation's result with it, so a retried task
gets the first try's result back instead of applying the operation twice (a second delete
would find nothing, a second merge would update what the first inserted). A retry after a
crash *before* the commit runs the operation again from the state of then.

What they share, like :class:`LanceCommitOperator`: a small XCom summary (the first
partitions listed, the rest counted), one asset event per outlet whose extra names the
changed partitions (keyed by partition when ``emit_partition_keys`` asks for it), and
OpenLineage's output dataset with the ``__manifest`` version the operation produced.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseOperator,
    context_merge,
    determine_kwargs,
)

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors, txn_id_from_context
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook, TaskProgress
from airflow_provider_lance.operators.commit import (
    DEFAULT_MAX_PARTITION_KEYS,
    DEFAULT_SUMMARY_PARTITIONS,
    PUBLISH_ARGUMENTS,
    check_lance_outlets,
    emit_asset_events,
    partition_keys_of,
    truncated_keys_extra,
    wants_partition_keys,
)
from airflow_provider_lance.operators.lineage import (
    NamespaceWrite,
    file_dataset_name,
    operator_lineage,
)
from airflow_provider_lance.operators.write import arrow_data

if TYPE_CHECKING:
    import pyarrow as pa
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_lance.namespace import (
        NamespaceState,
        OperationResult,
        PartitionedNamespace,
    )


def claim_seconds(value: Any) -> float | None:
    """``claim_timeout`` as the core takes it (None: the core's default, 120 s)."""
    return v.duration_seconds(value, "claim_timeout", optional=True)


class TableOperationOperator(v.ArgumentChecks, BaseOperator):
    """Runs one table operation (:meth:`run`) and reports it; see the module docstring.

    :param namespace: relative name or full URI (templated; default: the connection root).
    :param txn_id: the operation's transaction id (templated; default derived from the
        task instance). An id is used by one operation only.
    :param summary_partitions: how many changed partitions XCom and asset extras list.
    :param emit_partition_keys: add the changed partitions' keys to the events of
        ``Asset`` outlets: ``None`` (default) in partitioned runs only, ``True`` always,
        ``False`` never (see :class:`LanceCommitOperator`).
    :param max_partition_keys: at most this many keys per outlet.
    :return: (XCom) ``{"operation", "txn_id", "uri", "manifest_version", "changed",
        "rows_removed", "rows_updated", "rows_inserted", "partitions_dropped",
        "partitions_rewritten", "fragments_before", "fragments_after", "partition_count",
        "partitions": [...first N, each with its "key"...], "skipped_count", "skipped":
        {...first N...}}``. ``changed`` is False when no partition changed (the core
        still records the transaction, so ``manifest_version`` names a version then).
    """

    #: The core's name of the operation (results, logs).
    operation: str = ""
    template_fields: Sequence[str] = ("namespace", "txn_id")
    ui_color = "#f4d9c6"
    argument_checks = PUBLISH_ARGUMENTS

    def __init__(
        self,
        *,
        namespace: str | None = None,
        txn_id: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        summary_partitions: int = DEFAULT_SUMMARY_PARTITIONS,
        emit_partition_keys: bool | None = None,
        max_partition_keys: int = DEFAULT_MAX_PARTITION_KEYS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.namespace = namespace
        self.txn_id = txn_id
        self.lance_conn_id = lance_conn_id
        self.summary_partitions = summary_partitions
        self.emit_partition_keys = emit_partition_keys
        self.max_partition_keys = max_partition_keys
        self._lineage: NamespaceWrite | None = None
        self.check_arguments()

    # -- what subclasses define ------------------------------------------------------------
    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        raise NotImplementedError

    def written_rows(self, result: OperationResult) -> int | None:
        """Rows the operation wrote, for lineage's output statistics (None: it writes none)."""
        return None

    def lineage_inputs(self) -> list[tuple[str, str]]:
        return []

    # -- the run ---------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        check_lance_outlets(self.outlets, uri)
        txn_id = v.txn_id_value(self.txn_id) or txn_id_from_context(context)
        with lance_errors(f"{self.operation} in {uri} as {txn_id}"):
            ns = hook.open(uri)
            result = self.run(ns, txn_id, context)
            state = ns.state()
            columns = [(f.name, str(f.type)) for f in ns.schema]
        keyed = wants_partition_keys(self.emit_partition_keys, context)
        summary, keys = self._summary(uri, result, state, keyed)
        self.log.info(
            "%s %s: %d partition(s) changed (%d dropped), %d rows removed, %d updated, "
            "%d inserted -> manifest v%s",
            self.operation,
            uri,
            summary["partition_count"],
            summary["partitions_dropped"],
            summary["rows_removed"],
            summary["rows_updated"],
            summary["rows_inserted"],
            summary["manifest_version"],
        )
        self._emit(context, uri, summary, keys[: self.max_partition_keys] if keyed else [])
        self._lineage = NamespaceWrite(
            uri=uri,
            columns=columns,
            rows=self.written_rows(result),
            manifest_version=result.manifest_version,
            mode=self.operation,
        )
        return summary

    def _summary(
        self, uri: str, result: OperationResult, state: NamespaceState, keyed: bool
    ) -> tuple[dict[str, Any], list[str | None]]:
        """The XCom summary and the keys of the first partitions (as many as the summary
        lists and the events carry, not one for every partition)."""
        full = result.to_dict()
        partitions = full.pop("partitions")
        skipped = full.pop("skipped")
        n = self.summary_partitions
        keys = partition_keys_of(
            state, partitions[: max(n, self.max_partition_keys if keyed else 0)], self.log
        )
        summary = {
            **full,
            "uri": uri,
            "changed": bool(partitions),
            "fragments_before": result.fragments_before,
            "fragments_after": result.fragments_after,
            "partition_count": len(partitions),
            "partitions": [{**p, "key": key} for p, key in zip(partitions[:n], keys, strict=False)],
            "skipped_count": len(skipped),
            "skipped": dict(list(skipped.items())[:n]),
        }
        return summary, keys

    def _emit(
        self, context: Context, uri: str, summary: dict[str, Any], keys: Sequence[str | None]
    ) -> None:
        extra: dict[str, Any] = {
            "namespace": uri,
            "operation": summary["operation"],
            "txn_id": summary["txn_id"],
            "manifest_version": summary["manifest_version"],
            "changed": summary["changed"],
            "rows_removed": summary["rows_removed"],
            "rows_updated": summary["rows_updated"],
            "rows_inserted": summary["rows_inserted"],
            "partition_count": summary["partition_count"],
            "partitions": [
                {"values": p["values"], "read_version": p["read_version"], "key": p["key"]}
                for p in summary["partitions"]
            ],
            "truncated": summary["partition_count"] > len(summary["partitions"]),
        }
        extra.update(truncated_keys_extra(summary["partition_count"], keys, self.log, "changed"))
        emit_asset_events(context, self.outlets, uri, extra, keys, self.log)

    def get_openlineage_facets_on_complete(
        self, task_instance: Any
    ) -> OperatorLineage[Any, Any] | None:
        """The namespace as the output, with the ``__manifest`` version the operation
        produced (and the source files of a merge as its input)."""
        if self._lineage is None:
            return None
        return operator_lineage(inputs=self.lineage_inputs(), output=self._lineage)


class _FilteredOperation(TableOperationOperator):
    """An operation on the rows or partitions a required filter names, waiting up to
    ``claim_timeout`` for partitions a transaction is committing."""

    template_fields: Sequence[str] = ("filter", "namespace", "txn_id", "claim_timeout")
    template_fields_renderers = {"filter": "sql"}
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "filter": v.sql_filter(required=True),
        "claim_timeout": v.duration(optional=True),
    }

    def __init__(
        self,
        *,
        filter: str,
        claim_timeout: dt.timedelta | float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filter = filter
        self.claim_timeout = claim_timeout
        self.check_arguments()


class LanceDeleteOperator(_FilteredOperation):
    """Delete the rows matching a filter, in one ``__manifest`` commit.

    Partitions the filter covers entirely are dropped as metadata; the others get Lance
    deletion files on their published version (nothing rewritten; run
    :class:`LanceOptimizeOperator` to drop deleted rows from the files).

    :param filter: SQL boolean expression on namespace columns, e.g. ``"country = 'DE' AND
        event_date = DATE '{{ ds }}'"`` (templated; required).
    :param claim_timeout: how long to wait for partitions a transaction is committing: a
        timedelta or seconds (templated; default the core's 120 s).

    See :class:`TableOperationOperator` for the other arguments and the XCom.
    """

    operation = "delete"

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        where = str(self.filter).strip()
        self.log.info("deleting the rows of %s where %s as %s", ns.uri, where, txn_id)
        return ns.delete(
            where,
            txn_id=txn_id,
            claim_timeout=claim_seconds(self.claim_timeout),
            progress=TaskProgress(self.log),
        )


class LanceDropPartitionsOperator(_FilteredOperation):
    """Drop whole partitions, as metadata: those whose partition values make a filter true.

    For retention: ``filter="event_date < DATE '{{ macros.ds_add(ds, -90) }}'"`` drops
    every day older than 90 days, in one ``__manifest`` commit. The filter names partition
    fields (a partition of a spec version without a field sees NULL for it). Their files
    stay for readers of older versions until :class:`LanceMaintainOperator` removes old
    versions and sweeps orphans.

    :param filter: SQL boolean expression on partition fields (templated; required).
    :param claim_timeout: see :class:`LanceDeleteOperator` (templated).

    See :class:`TableOperationOperator` for the other arguments and the XCom.
    """

    operation = "drop_partitions"

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        where = str(self.filter).strip()
        self.log.info("dropping the partitions of %s where %s as %s", ns.uri, where, txn_id)
        return ns.drop_partitions(
            where, txn_id=txn_id, claim_timeout=claim_seconds(self.claim_timeout)
        )


class LanceOptimizeOperator(TableOperationOperator):
    """Compact the leaves of the partitions a filter may touch (all without one).

    Small fragments are merged into fragments of ``target_rows_per_fragment`` rows and
    deleted rows dropped from the files; every compacted leaf's new version is published
    in one ``__manifest`` commit. Writers keep writing meanwhile: a partition a
    transaction is committing, or that keeps changing, is left alone (``skipped``). The
    rows never change, only their files.

    :param filter: SQL boolean expression; partitions it may touch are compacted
        (templated; none: every partition).
    :param target_rows_per_fragment: rows per compacted fragment (default the core's).
    :param materialize_deletions: rewrite the files of rows deleted by
        :class:`LanceDeleteOperator` without them.

    See :class:`TableOperationOperator` for the other arguments and the XCom.
    """

    operation = "optimize"
    template_fields: Sequence[str] = ("filter", "namespace", "txn_id")
    template_fields_renderers = {"filter": "sql"}
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "filter": v.sql_filter(required=False),
        "target_rows_per_fragment": v.whole(
            minimum=1, optional=True, none_means="the core's default"
        ),
        "materialize_deletions": v.flag(),
    }

    def __init__(
        self,
        *,
        filter: str | None = None,
        target_rows_per_fragment: int | None = None,
        materialize_deletions: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filter = filter
        self.target_rows_per_fragment = target_rows_per_fragment
        self.materialize_deletions = materialize_deletions
        self.check_arguments()

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        from airflow_provider_lance.namespace import DEFAULT_TARGET_ROWS

        where = v.filter_value(self.filter)
        target = self.target_rows_per_fragment
        target = DEFAULT_TARGET_ROWS if target is None else target
        self.log.info(
            "optimizing %s (%s) to %d rows per fragment as %s",
            ns.uri,
            where or "every partition",
            target,
            txn_id,
        )
        return ns.optimize(
            where,
            target_rows_per_fragment=target,
            materialize_deletions=self.materialize_deletions,
            txn_id=txn_id,
            progress=TaskProgress(self.log),
        )


class LanceMergeOperator(TableOperationOperator):
    """Upsert rows by key: stored rows whose key matches are updated, the others inserted.

    The rows come from ``source``, a Parquet file or directory (a path or URI, e.g. the
    XCom of the task that landed it), read with ``pyarrow.dataset`` through pyarrow's
    own filesystems (local disks, ``s3://`` and ``gs://`` with ambient credentials), or
    from ``python_callable``, which returns them as :class:`LanceWriteOperator`'s does
    (Arrow data, a pandas DataFrame, an iterator of tables or batches). The core's merge
    holds the whole source in memory (it checks that no key repeats before changing
    anything): merge corrections and late rows, not bulk loads.

    New partition values become new partitions; with ``when_not_matched_by_source_delete``
    the namespace is made to hold exactly the source's keys (stored rows whose key the
    source lacks are deleted, untouched partitions dropped). The key ``on`` must include
    every source column of the current partition spec.

    A retry of a merge that was published returns its first result without reading the
    source or calling the callable again.

    :param on: the key columns, e.g. ``["event_id", "event_date"]`` (templated).
    :param source: path or URI of Parquet data (templated); or give ``python_callable``.
    :param python_callable: returns the rows; its arguments are ``op_args``, ``op_kwargs``
        and any context variables it names.
    :param op_args: positional arguments of the callable (templated).
    :param op_kwargs: keyword arguments of the callable (templated).
    :param when_not_matched_by_source_delete: also delete every stored row whose key the
        source lacks.
    :param claim_timeout: see :class:`LanceDeleteOperator` (templated).

    See :class:`TableOperationOperator` for the other arguments and the XCom.
    """

    operation = "merge"
    template_fields: Sequence[str] = (
        "on",
        "source",
        "namespace",
        "txn_id",
        "op_args",
        "op_kwargs",
        "claim_timeout",
    )
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "on": v.names(single=True, what="key column"),
        "source": v.text(optional=True, what="a Parquet file or directory (a path or URI)"),
        "python_callable": v.optional_callable,
        "op_args": v.op_args,
        "op_kwargs": v.op_kwargs,
        "when_not_matched_by_source_delete": v.flag(),
        "claim_timeout": v.duration(optional=True),
    }

    def __init__(
        self,
        *,
        on: str | Sequence[str],
        source: str | None = None,
        python_callable: Callable[..., Any] | None = None,
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        when_not_matched_by_source_delete: bool = False,
        claim_timeout: dt.timedelta | float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.on = on
        self.source = source
        self.python_callable = python_callable
        self.op_args: Collection[Any] = op_args or ()
        self.op_kwargs: Mapping[str, Any] = op_kwargs or {}
        self.when_not_matched_by_source_delete = when_not_matched_by_source_delete
        self.claim_timeout = claim_timeout
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if v.absent(self.source) == (self.python_callable is None):
            raise v.Refused("give the merge a source (a Parquet path or URI) or a python_callable")
        if self.python_callable is None and (self.op_args or self.op_kwargs):
            raise v.Refused(
                "op_args and op_kwargs are the python_callable's; give one or drop them"
            )

    def key_columns(self) -> list[str]:
        return [self.on] if isinstance(self.on, str) else list(self.on)

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        on = self.key_columns()
        if self._published_earlier(ns, txn_id):
            self.log.info("merge %s was published already: its first result", txn_id)
            # the core returns the recorded result before it reads any row: no source needed
            return self._merge(ns, ns.schema.empty_table(), on, txn_id)
        data = self._read_source(context)
        self.log.info("merging into %s on %s as %s", ns.uri, on, txn_id)
        return self._merge(ns, data, on, txn_id)

    def _merge(
        self, ns: PartitionedNamespace, data: Any, on: list[str], txn_id: str
    ) -> OperationResult:
        return ns.merge(
            data,
            on,
            when_not_matched_by_source_delete=bool(self.when_not_matched_by_source_delete),
            txn_id=txn_id,
            claim_timeout=claim_seconds(self.claim_timeout),
            progress=TaskProgress(self.log),
        )

    @staticmethod
    def _published_earlier(ns: PartitionedNamespace, txn_id: str) -> bool:
        from airflow_provider_lance.namespace import InvalidArgumentError, TxnState

        try:
            txn = ns.transaction(txn_id)
        except InvalidArgumentError:  # no such transaction yet
            return False
        return txn.mode == "merge" and txn.state is TxnState.PUBLISHED

    def execute_callable(self, context: Context) -> Any:
        """Call the callable with its arguments and the context variables it names."""
        assert self.python_callable is not None
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        return self.python_callable(*self.op_args, **kwargs)

    def _read_source(self, context: Context) -> Any:
        if self.python_callable is not None:
            return arrow_data(self.execute_callable(context))
        return read_parquet(str(self.source).strip())

    def written_rows(self, result: OperationResult) -> int | None:
        return result.rows_updated + result.rows_inserted

    def lineage_inputs(self) -> list[tuple[str, str]]:
        if self.source is None or not isinstance(self.source, str):
            return []
        return [file_dataset_name(self.source.strip())]


def read_parquet(source: str) -> pa.Table:
    """The Parquet file or directory at ``source``, read whole (the core's merge holds
    its source whole anyway: read here, a bad file is reported as what it is).

    A source that is not there, or is not Parquet, is bad input no retry fixes; other
    storage errors (a store that did not answer) are retried.
    """
    import pyarrow as pa
    import pyarrow.dataset as pads

    try:
        return pads.dataset(source, format="parquet").to_table()
    except FileNotFoundError as exc:
        raise AirflowFailException(f"merge source {source} does not exist: {exc}") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise AirflowFailException(
            f"merge source {source} is not readable Parquet: {str(exc).splitlines()[0]}"
        ) from None
    except OSError as exc:
        raise AirflowException(f"cannot read merge source {source}: {exc}") from None
