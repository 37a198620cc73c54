"""``LanceWriteOperator``: write what a Python callable returns, in the task's own process.

For data a worker can produce itself (an API extract, a pandas or polars transform, a
DuckDB query): no Spark cluster, no spark-submit. The callable returns Arrow data or an
iterator of tables / record batches, and the core stages it as it is produced: at most
``flush_bytes`` of routed rows are held, however many batches the iterator yields.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    BaseOperator,
    context_merge,
    determine_kwargs,
)

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors, txn_id_from_context
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook, TaskProgress
from airflow_provider_lance.namespace import MODES
from airflow_provider_lance.operators.lineage import NamespaceWrite, operator_lineage

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_lance.namespace import PartitionedNamespace, Transaction

#: The stage id of the operator's write: a retried try stages under it again, which
#: replaces (and deletes) what the earlier try staged.
STAGE_ID = "write"


def arrow_data(value: Any) -> Any:
    """What the core's ``write`` / ``stage`` take, from what a callable returned.

    pandas DataFrames become Arrow tables without their index; an iterator stays an
    iterator (its items converted one at a time as the core asks for them, so it is never
    collected); anything else goes to the core, which names what it cannot take.
    """
    import pyarrow as pa

    if value is None:
        raise AirflowFailException(
            "the callable returned None; return Arrow data (a pyarrow Table, RecordBatch or "
            "RecordBatchReader, anything with __arrow_c_stream__, a pandas DataFrame) or an "
            "iterator of tables or record batches"
        )
    if _is_pandas(value):
        return _from_pandas(value)
    if isinstance(value, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return value
    if hasattr(value, "__arrow_c_stream__") or hasattr(value, "__arrow_c_array__"):
        return value
    if isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping)):
        return _converted(value)
    return value


def _converted(items: Iterable[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for item in items:
        if _is_pandas(item):
            yield _from_pandas(item)
        elif isinstance(item, (pa.Table, pa.RecordBatch)):
            yield item
        elif hasattr(item, "__arrow_c_stream__"):  # a reader, polars, DuckDB: batch by batch
            yield from pa.RecordBatchReader.from_stream(item)
        else:
            yield item  # the core says what it takes


def _from_pandas(frame: Any) -> Any:
    """An Arrow table of a pandas DataFrame (its index left out); a column Arrow cannot
    type is bad input, which no retry fixes."""
    import pyarrow as pa

    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise AirflowFailException(
            f"the callable's pandas DataFrame cannot become Arrow data: {exc}"
        ) from None


def _is_pandas(value: Any) -> bool:
    pandas = sys.modules.get("pandas")  # never imported here: only what the callable used
    return pandas is not None and isinstance(value, pandas.DataFrame)


class LanceWriteOperator(v.ArgumentChecks, BaseOperator):
    """Write the data a Python callable returns into a namespace, without Spark.

    The callable returns a pyarrow Table, RecordBatch or RecordBatchReader, anything with
    ``__arrow_c_stream__`` (polars, DuckDB), a pandas DataFrame, or an iterator (e.g. a
    generator) of tables, record batches or DataFrames, which is consumed as it is staged.

    The write is one namespace transaction whose id derives from dag/run/task/map index,
    so a retry never duplicates rows: a try after a publish returns the published result
    without calling the callable again, and a try of a staged write stages again under
    the same stage id, replacing what the earlier try staged. Mapped over ``op_kwargs``
    (``.expand()``), every map index writes its own transaction.

    :param python_callable: returns the data (see above); its arguments are ``op_args``,
        ``op_kwargs`` and any context variables it names.
    :param op_args: positional arguments of the callable (templated).
    :param op_kwargs: keyword arguments of the callable (templated).
    :param namespace: relative name or full URI (templated; default: the connection root).
    :param mode: ``append`` or ``overwrite`` (replaces exactly the partitions the data
        touches) (templated).
    :param stage_only: stage only (nothing visible) and leave the publish to
        :class:`LanceCommitOperator`, e.g. after checks of the staged data (write-audit-
        publish); otherwise the write is published at once.
    :param txn_id: transaction id (templated; default derived from the task instance).
    :param flush_bytes: routed rows buffered before data files are written (default the
        core's, 128 MiB): what bounds the task's memory, whatever the data's size.
    :param summary_partitions: how many partitions the XCom summary lists.
    :return: (XCom) the shape :class:`LanceSparkWriteOperator` returns, which
        :class:`LanceCommitOperator` takes: ``{"txn_id", "uri", "mode", "state",
        "partition_count", "rows", "files", "manifest_version", "partitions": [...first
        N...]}``.
    """

    template_fields: Sequence[str] = ("namespace", "mode", "txn_id", "op_args", "op_kwargs")
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)
    ui_color = "#f7e1a8"
    argument_checks = {
        "python_callable": v.a_callable,
        "op_args": v.op_args,
        "op_kwargs": v.op_kwargs,
        "namespace": v.namespace,
        "mode": v.choice(MODES),
        "stage_only": v.flag(),
        "txn_id": v.txn_id,
        "lance_conn_id": v.conn_id,
        "flush_bytes": v.whole(minimum=1, optional=True, none_means="the core's 128 MiB"),
        "summary_partitions": v.whole(minimum=0),
    }

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        namespace: str | None = None,
        mode: str = "append",
        stage_only: bool = False,
        txn_id: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        flush_bytes: int | None = None,
        summary_partitions: int = 10,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args: Collection[Any] = op_args or ()
        self.op_kwargs: Mapping[str, Any] = op_kwargs or {}
        self.namespace = namespace
        self.mode = mode
        self.stage_only = stage_only
        self.txn_id = txn_id
        self.lance_conn_id = lance_conn_id
        self.flush_bytes = flush_bytes
        self.summary_partitions = summary_partitions
        self._lineage: NamespaceWrite | None = None
        self.check_arguments()

    def execute_callable(self, context: Context) -> Any:
        """Call the callable with its arguments and the context variables it names."""
        context_merge(context, self.op_kwargs)
        kwargs = determine_kwargs(self.python_callable, self.op_args, context)
        return self.python_callable(*self.op_args, **kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        txn_id = v.txn_id_value(self.txn_id) or txn_id_from_context(context)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        what = "staging" if self.stage_only else "write"
        with lance_errors(f"{what} of {txn_id} into {uri}"):
            ns = hook.open(uri)  # a missing namespace fails before the callable runs
            done = self._finished_earlier(ns, txn_id)
            if done is not None:
                summary = done
            elif self.stage_only:
                summary = self._stage(ns, txn_id, context)
            else:
                summary = self._write(ns, txn_id, context)
            columns = [(f.name, str(f.type)) for f in ns.schema]
        self.log.info(
            "%s %d rows into %d partition(s) of %s as %s",
            summary["state"],
            summary["rows"],
            summary["partition_count"],
            uri,
            summary["txn_id"],
        )
        published = summary["state"] == "published"
        self._lineage = NamespaceWrite(
            uri=uri,
            columns=columns,
            rows=summary["rows"],
            manifest_version=summary["manifest_version"] if published else None,
            mode=summary["mode"],
        )
        return summary

    def _finished_earlier(self, ns: PartitionedNamespace, txn_id: str) -> dict[str, Any] | None:
        """The result of an earlier try that got past staging (None: write now).

        A publish (or a commit an earlier try started) is finished and reported; a staged
        write that a commit has sealed or merged meanwhile is reported as it is. Either
        way the callable is not called again.
        """
        from airflow_provider_lance.namespace import InvalidArgumentError, TxnState

        try:
            txn = ns.transaction(txn_id)
        except InvalidArgumentError:  # no such transaction yet
            return None
        state = txn.state
        if state in (TxnState.ABORTED, TxnState.STAGED):
            return None  # aborted: begin again; staged: stage again (replacing the try's)
        if txn.mode != self.mode:
            raise AirflowFailException(
                f"transaction {txn_id} exists with mode {txn.mode!r}, not {self.mode!r}"
            )
        if state is TxnState.COMMITTING and self.stage_only:
            return self._staged_summary(ns, txn)  # the commit task finishes it
        if state in (TxnState.PUBLISHED, TxnState.COMMITTING):
            self.log.info("transaction %s is %s already: not writing again", txn_id, state.value)
            return self._published_summary(ns, txn, ns.commit(txn_id).to_dict())
        return self._staged_summary(ns, txn)  # merged into a commit's combined transaction

    def _flush_bytes(self) -> int:
        from airflow_provider_lance.namespace import FLUSH_BYTES

        return FLUSH_BYTES if self.flush_bytes is None else self.flush_bytes

    def _stage(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> dict[str, Any]:
        data = arrow_data(self.execute_callable(context))  # a failing callable leaves nothing
        txn = ns.begin(self.mode, txn_id)  # type: ignore[arg-type]
        txn.stage(data, stage_id=STAGE_ID, flush_bytes=self._flush_bytes())
        return self._staged_summary(ns, txn)

    def _write(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> dict[str, Any]:
        data = arrow_data(self.execute_callable(context))
        result = ns.write(
            data,
            self.mode,  # type: ignore[arg-type]
            txn_id=txn_id,
            flush_bytes=self._flush_bytes(),
            progress=TaskProgress(self.log),
        )
        return self._published_summary(ns, ns.transaction(txn_id), result.to_dict())

    def _staged_summary(self, ns: PartitionedNamespace, txn: Transaction) -> dict[str, Any]:
        rows, files, partitions = _staged_partitions(txn)
        return self._summary(
            txn_id=txn.txn_id,
            uri=ns.uri,
            mode=txn.mode,
            state=txn.state.value,
            rows=rows,
            files=files,
            manifest_version=None,
            partitions=partitions,
        )

    def _published_summary(
        self, ns: PartitionedNamespace, txn: Transaction, result: Mapping[str, Any]
    ) -> dict[str, Any]:
        _, files, _ = _staged_partitions(txn)
        return self._summary(
            txn_id=result.get("txn_id") or txn.txn_id,
            uri=ns.uri,
            mode=result["mode"],
            state="published",
            rows=int(result["rows"]),
            files=files,
            manifest_version=result["manifest_version"],
            partitions=[{"values": p["values"], "rows": p["rows"]} for p in result["partitions"]],
        )

    def _summary(self, *, partitions: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """The Spark write operator's XCom shape (what :class:`LanceCommitOperator` reads)."""
        return {
            **fields,
            "partition_count": len(partitions),
            "partitions": partitions[: self.summary_partitions],
        }

    def get_openlineage_facets_on_complete(
        self, task_instance: Any
    ) -> OperatorLineage[Any, Any] | None:
        """The namespace as the output: schema, rows and, once published, its manifest
        version (and ``OVERWRITE`` for an overwrite)."""
        if self._lineage is None:
            return None
        return operator_lineage(output=self._lineage)


def _staged_partitions(txn: Transaction) -> tuple[int, int, list[dict[str, Any]]]:
    """``(rows, data files, partitions)`` a transaction's stages hold, partitions as
    ``{"values", "rows"}`` with values in their string form."""
    from airflow_provider_lance.namespace import value_text

    by_id: dict[str, dict[str, Any]] = {}
    files = 0
    for stage in txn.stages().values():
        for oid, part in stage.partitions.items():
            entry = by_id.setdefault(
                oid, {"values": {k: value_text(v) for k, v in part.values.items()}, "rows": 0}
            )
            entry["rows"] += part.rows
            files += len(part.fragments) - len(part.base_fragments)
    partitions = list(by_id.values())
    return sum(p["rows"] for p in partitions), files, partitions
