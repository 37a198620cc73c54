"""Indexes as tasks: declare and build one, index what is new, drop one.

Each is ONE ``__manifest`` commit in the core (:meth:`PartitionedNamespace.create_index`,
``create_scalar_index``, ``optimize_indices``, ``drop_index``) under a transaction id
derived from dag/run/task/map index, so a retried task gets the first try's result back
(see :class:`~airflow_provider_lance.operators.table.TableOperationOperator`, whose XCom,
asset events and lineage these share). An index is declared on the namespace once:
partitions written later get it from :class:`LanceOptimizeIndicesOperator` (or from
:class:`~airflow_provider_lance.operators.upkeep.LanceMaintainOperator`, which runs it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_lance import validation as v
from airflow_provider_lance.hooks.lance import TaskProgress
from airflow_provider_lance.operators.commit import PUBLISH_ARGUMENTS
from airflow_provider_lance.operators.table import TableOperationOperator, claim_seconds

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_lance.namespace import (
        IndexInfo,
        OperationResult,
        PartitionedNamespace,
    )

#: pylance's vector index types (the core's ``VECTOR_TYPES``; that module loads pylance:
#: tests/airflow/test_index_operators.py holds the two equal).
VECTOR_INDEX_TYPES = (
    "IVF_FLAT IVF_PQ IVF_SQ IVF_RQ IVF_HNSW_FLAT IVF_HNSW_PQ IVF_HNSW_SQ".split()  # noqa: SIM905
)
#: pylance's scalar index types (the core's ``SCALAR_TYPES``).
SCALAR_INDEX_TYPES = (
    "BTREE BITMAP LABEL_LIST INVERTED FTS NGRAM ZONEMAP BLOOMFILTER RTREE".split()  # noqa: SIM905
)
#: What ``index_params`` cannot hold: the operator's own arguments, or what the namespace
#: sets for every leaf (None).
_NOT_PARAMS = {
    **{a: a for a in "column index_type name filter replace shared_model txn_id".split()},  # noqa: SIM905
    "claim_timeout": "claim_timeout",
    **dict.fromkeys("progress fragment_ids index_uuid storage_options train".split()),  # noqa: SIM905
}
#: Parameters given as a model rather than declared (not compared with a declaration).
_MODEL_PARAMS = frozenset({"ivf_centroids", "pq_codebook"})


def index_type(value: Any, deferred: v.Deferred) -> None:
    """One of pylance's index types, in any case."""
    expected = "an index type: " + ", ".join(VECTOR_INDEX_TYPES + SCALAR_INDEX_TYPES)
    if not isinstance(value, str):
        v.refuse(expected, value, wrong_type=True)
    if value.strip().upper() not in VECTOR_INDEX_TYPES + SCALAR_INDEX_TYPES:
        v.refuse(expected, value)


def index_name(*, optional: bool) -> v.Check:
    """The core's index name rule: non-empty, without ``$`` or ``/``."""
    expected = "an index name (non-empty, without '$' or '/')" + (
        ", or None for '<column>_idx'" if optional else ""
    )

    def check(value: Any, deferred: v.Deferred) -> None:
        if optional and v.absent(value):
            return
        if not isinstance(value, str):
            v.refuse(expected, value, wrong_type=True)
        if not value.strip() or "$" in value or "/" in value:
            v.refuse(expected, value)

    return check


def index_params(value: Any, deferred: v.Deferred) -> None:
    """pylance's ``create_index`` arguments: a mapping of names to JSON values, or None."""
    expected = (
        "a mapping of pylance create_index arguments to JSON values (e.g. {'metric': "
        "'cosine', 'num_partitions': 4}), or None"
    )
    if value is None:
        return
    if not isinstance(value, Mapping):
        v.refuse(expected, value, wrong_type=True)
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip():
            v.refuse(expected, value, wrong_type=True)
        if key in _NOT_PARAMS:
            own = _NOT_PARAMS[key]
            hint = f"give the operator's {own} instead" if own else "the namespace sets it"
            v.refuse(expected, value, hint=f" ({key!r} is not an index parameter: {hint})")
        if deferred(item):
            continue
        try:
            json.dumps(item)
        except (TypeError, ValueError):
            v.refuse(expected, value, wrong_type=True, hint=f" (argument {key!r})")


class LanceCreateIndexOperator(TableOperationOperator):
    """Declare an index on a namespace and build it on every partition in its scope.

    Vector types (IVF_PQ, IVF_HNSW_SQ, ...) and scalar ones (BTREE, BITMAP, INVERTED, ...)
    alike (:meth:`PartitionedNamespace.create_index`); every leaf's index is published in
    one ``__manifest`` commit. Idempotent, like
    :class:`~airflow_provider_lance.operators.timetravel.LanceTagOperator`: an index of that
    name declared already on the same column, type, filter and parameters changes nothing
    (the DAG run again, or every run of a daily DAG); declared otherwise, the task fails at
    once unless ``replace`` rebuilds it. Partitions written later are indexed by
    :class:`LanceOptimizeIndicesOperator`.

    :param column: the column to index (templated).
    :param index_type: pylance's index type, e.g. ``"IVF_PQ"`` or ``"BTREE"`` (templated).
    :param name: the index's name (templated; default ``<column>_idx``).
    :param filter: SQL boolean expression: only the partitions it may touch get the index,
        now and later (templated; none: every partition).
    :param index_params: pylance's ``create_index`` arguments, e.g. ``{"metric": "cosine",
        "num_partitions": 4, "num_sub_vectors": 16}`` (templated; JSON values). One the
        index type does not take fails the task before anything is built.
    :param replace: rebuild an index of that name declared otherwise.
    :param shared_model: IVF types train one model on a sample of every partition (False:
        each leaf trains its own, pylance's behaviour).
    :param claim_timeout: how long to wait for partitions a transaction is committing: a
        timedelta or seconds (templated; default the core's 120 s).
    :return: (XCom) :class:`TableOperationOperator`'s, with ``"index"`` (the name) and
        ``"existed"`` (True: declared alike already, nothing built).
    """

    operation = "create_index"
    template_fields: Sequence[str] = (
        "column",
        "index_type",
        "name",
        "filter",
        "index_params",
        "namespace",
        "txn_id",
        "claim_timeout",
    )
    template_fields_renderers = {"filter": "sql", "index_params": "json"}
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "column": v.column_name,
        "index_type": index_type,
        "name": index_name(optional=True),
        "filter": v.sql_filter(required=False),
        "index_params": index_params,
        "replace": v.flag(),
        "shared_model": v.flag(),
        "claim_timeout": v.duration(optional=True),
    }

    def __init__(
        self,
        *,
        column: str,
        index_type: str,
        name: str | None = None,
        filter: str | None = None,
        index_params: Mapping[str, Any] | None = None,
        replace: bool = False,
        shared_model: bool = True,
        claim_timeout: dt.timedelta | float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.column = column
        self.index_type = index_type
        self.name = name
        self.filter = filter
        self.index_params = index_params
        self.replace = replace
        self.shared_model = shared_model
        self.claim_timeout = claim_timeout
        self._existed = False
        self.check_arguments()

    def _wanted(self) -> tuple[str, str, str, str | None, dict[str, Any]]:
        column = str(self.column).strip()
        kind = str(self.index_type).strip().upper()
        name = v.given(self.name)
        name = column + "_idx" if name is None else name.strip()
        return column, kind, name, v.filter_value(self.filter), dict(self.index_params or {})

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        from airflow_provider_lance.namespace import IndexExistsError, OperationResult

        column, kind, name, where, params = self._wanted()
        scope = where or "every partition"
        self.log.info(
            "building index %r on %s (%s, %s) of %s as %s",
            name,
            column,
            kind,
            scope,
            ns.uri,
            txn_id,
        )
        try:
            return ns.create_index(
                column,
                kind,
                name,
                filter=where,
                replace=bool(self.replace),
                shared_model=bool(self.shared_model),
                txn_id=txn_id,
                claim_timeout=claim_seconds(self.claim_timeout),
                progress=TaskProgress(self.log),
                **params,
            )
        except IndexExistsError:
            declared = ns.list_indices(coverage=False)  # __manifest only: no leaf opened
            found = next((i for i in declared if i.name == name), None)
            if found is None or not self._alike(found, column, kind, where, params):
                raise
        self.log.info("index %r is declared alike already: nothing to build", name)
        self._existed = True
        return OperationResult(operation=self.operation, manifest_version=None)

    @staticmethod
    def _alike(
        found: IndexInfo, column: str, kind: str, where: str | None, params: Mapping[str, Any]
    ) -> bool:
        """Whether the declared index is the one asked for: same column, type and scope,
        and every parameter given has the declared value (the core adds defaults)."""
        given = {k: json.loads(json.dumps(p)) for k, p in params.items() if k not in _MODEL_PARAMS}
        declared = dict(found.params)
        same = (found.column, found.index_type, found.filter) == (column, kind, where)
        return same and all(k in declared and declared[k] == p for k, p in given.items())

    def execute(self, context: Context) -> dict[str, Any]:
        self._existed = False
        summary = super().execute(context)
        return {**summary, "index": self._wanted()[2], "existed": self._existed}


class LanceOptimizeIndicesOperator(TableOperationOperator):
    """Index what the declared indexes do not cover yet: partitions created since (whole)
    and fragments written since to indexed ones (a new segment each), in one
    ``__manifest`` commit. After a daily write: ``filter="event_date = DATE '{{ ds }}'"``.

    Writers keep writing meanwhile: a partition a transaction is committing, or that keeps
    changing, is left for the next run (``skipped``). Without declared indexes it changes
    nothing. :class:`~airflow_provider_lance.operators.upkeep.LanceMaintainOperator` runs
    it on every partition. Where a DAG also compacts, put it after
    :class:`~airflow_provider_lance.operators.table.LanceOptimizeOperator` (compact, then
    index: the compacted fragments get one segment, and no fresh segment is remapped).

    :param filter: SQL boolean expression; only partitions it may touch are indexed
        (templated; none: every partition).
    :param names: the indexes to bring up to date (templated; none: every declared one).
        An undeclared name fails the task at once.

    See :class:`TableOperationOperator` for the other arguments and the XCom
    (``rows_indexed``: rows this run newly indexed, a row counted once however many
    indexes it was added to).
    """

    operation = "optimize_indices"
    template_fields: Sequence[str] = ("filter", "names", "namespace", "txn_id")
    template_fields_renderers = {"filter": "sql"}
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "filter": v.sql_filter(required=False),
        "names": v.names(single=True, optional=True, what="index name"),
    }

    def __init__(
        self,
        *,
        filter: str | None = None,
        names: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filter = filter
        self.names = names
        self.check_arguments()

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        where = v.filter_value(self.filter)
        names = [self.names] if isinstance(self.names, str) else self.names
        listed = None if names is None else [str(n).strip() for n in names]
        self.log.info(
            "indexing what %s (%s) does not cover yet in %s as %s",
            ns.uri,
            where or "every partition",
            ", ".join(listed) if listed else "every index",
            txn_id,
        )
        return ns.optimize_indices(
            where, names=listed, txn_id=txn_id, progress=TaskProgress(self.log)
        )


class LanceDropIndexOperator(TableOperationOperator):
    """Remove an index from the namespace and from every leaf, in one ``__manifest``
    commit. An index that is not declared changes nothing (the DAG run again), as
    deleting a missing tag does.

    :param name: the index (templated).
    :param claim_timeout: see :class:`LanceCreateIndexOperator` (templated).

    See :class:`TableOperationOperator` for the other arguments and the XCom.
    """

    operation = "drop_index"
    template_fields: Sequence[str] = ("name", "namespace", "txn_id", "claim_timeout")
    argument_checks = {
        **PUBLISH_ARGUMENTS,
        "name": index_name(optional=False),
        "claim_timeout": v.duration(optional=True),
    }

    def __init__(
        self,
        *,
        name: str,
        claim_timeout: dt.timedelta | float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.name = name
        self.claim_timeout = claim_timeout
        self.check_arguments()

    def run(self, ns: PartitionedNamespace, txn_id: str, context: Context) -> OperationResult:
        from airflow_provider_lance.namespace import IndexNotFoundError, OperationResult

        name = str(self.name).strip()
        self.log.info("dropping index %r of %s as %s", name, ns.uri, txn_id)
        try:
            return ns.drop_index(
                name, txn_id=txn_id, claim_timeout=claim_seconds(self.claim_timeout)
            )
        except IndexNotFoundError as exc:
            self.log.warning("nothing to drop: %s", exc)
            return OperationResult(operation=self.operation, manifest_version=None)
