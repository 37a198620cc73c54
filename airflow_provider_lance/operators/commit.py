"""``LanceCommitOperator``: publish staged transactions in one atomic commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    Asset,
    AssetAlias,
    BaseOperator,
)
from airflow.sdk.exceptions import AirflowRuntimeError

from airflow_provider_lance import validation as v
from airflow_provider_lance.assets import asset_uri, create_asset, is_lance_asset
from airflow_provider_lance.common import lance_errors, txn_id_from_context
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.operators.lineage import NamespaceWrite, operator_lineage

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_provider_lance.namespace import NamespaceState

#: Partitions named in XCom and asset event extras; the rest are counted only.
DEFAULT_SUMMARY_PARTITIONS = 20
#: Partition keys added to each asset outlet's event (Airflow records one event per key).
DEFAULT_MAX_PARTITION_KEYS = 1000


def _flatten(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, Mapping)):
        return [value]
    try:
        items = list(value)  # lists, tuples and lazy XCom sequences of mapped tasks
    except TypeError:
        raise AirflowFailException(
            f"transactions must be ids, write results or lists of them, got {value!r}"
        ) from None
    return [x for item in items for x in _flatten(item)]


def parse_transactions(value: Any) -> tuple[list[str], set[str], list[str]]:
    """``(ids to commit, namespace URIs named, ids already published by their writer)``.

    Accepts transaction ids and the result dicts of :class:`LanceSparkWriteOperator`
    (``{"txn_id", "uri", "state", ...}``), nested in lists (mapped tasks).
    """
    ids: list[str] = []
    uris: set[str] = set()
    published: list[str] = []
    for item in _flatten(value):
        if isinstance(item, Mapping):
            txn = item.get("txn_id")
            if not isinstance(txn, str):
                raise AirflowFailException(f"write result {dict(item)!r} has no txn_id")
            if isinstance(item.get("uri"), str):
                uris.add(item["uri"])
            if item.get("state") == "published":
                published.append(txn)
                continue
        elif isinstance(item, str):
            txn = item
        else:
            raise AirflowFailException(f"a transaction must be an id or a write result: {item!r}")
        if txn not in ids:
            ids.append(txn)
    return ids, uris, published


def transactions_namespace(
    hook: LancePartitionedHook, namespace: str | None, uris: set[str]
) -> str:
    """The namespace of transactions: ``namespace`` (which must be the one their write
    results name, if they name one), else the one they name, else the connection root."""
    if namespace:
        uri = hook.namespace_uri(namespace)
        named = {hook.namespace_uri(u) for u in uris}
        if named - {uri}:
            raise AirflowFailException(
                f"the transactions were staged into {sorted(named)}, not into {uri}"
            )
        return uri
    if len(uris) > 1:
        raise AirflowFailException(
            f"the transactions were staged into several namespaces {sorted(uris)}; one "
            "task works on one namespace"
        )
    return hook.namespace_uri(next(iter(uris)) if uris else None)


class _Log(Protocol):
    """An operator's ``self.log`` (stdlib or Airflow's structlog logger)."""

    def info(self, msg: str, /, *args: Any) -> Any: ...
    def warning(self, msg: str, /, *args: Any) -> Any: ...


def partition_keys_of(
    state: NamespaceState, partitions: Sequence[Mapping[str, Any]], log: _Log
) -> list[str | None]:
    """The partition key of each partition summary (None, with a warning, for a partition
    whose key Airflow could not hold, e.g. one longer than 250 characters)."""
    from airflow_provider_lance.namespace.errors import LanceNamespaceError
    from airflow_provider_lance.partition_keys import summary_key

    keys: list[str | None] = []
    for partition in partitions:
        try:
            keys.append(summary_key(state, partition))
        except LanceNamespaceError as exc:
            log.warning("partition %s gets no partition key: %s", partition.get("values"), exc)
            keys.append(None)
    return keys


def wants_partition_keys(setting: bool | None, context: Context) -> bool:
    """``emit_partition_keys`` of a publishing operator: None keys the events of partitioned
    runs only (a keyed event does not schedule DAGs that are not partition-aware)."""
    if setting is not None:
        return setting
    return context.get("partition_key") is not None


def add_partition_keys(accessor: Any, keys: Sequence[str], log: _Log) -> None:
    """Add partition keys to an outlet's asset event, where this Airflow can (3.3+)."""
    if not keys:
        return
    if not hasattr(accessor, "add_partitions"):
        log.info("this Airflow (before 3.3) cannot key asset events by partition; skipped")
        return
    accessor.add_partitions(list(keys))


def check_lance_outlets(outlets: Sequence[Any], uri: str) -> None:
    """A ``lance://`` outlet for another namespace is a wiring mistake: fail before any
    change."""
    expected = asset_uri(uri)
    for outlet in outlets:
        if is_lance_asset(outlet) and outlet.uri != expected:
            raise AirflowFailException(
                f"outlet {outlet.uri} does not name the namespace this task publishes ({expected})"
            )


def emit_asset_events(
    context: Context,
    outlets: Sequence[Any],
    uri: str,
    extra: Mapping[str, Any],
    keys: Sequence[str | None],
    log: _Log,
) -> None:
    """One event per ``Asset`` outlet, with ``extra`` and the partition ``keys`` (None
    entries, partitions without a key, left out); ``AssetAlias`` outlets get the
    namespace's asset (the one a DAG declared for its URI, else a new one), unkeyed."""
    kept = [k for k in keys if k is not None]
    events = context["outlet_events"]
    for outlet in outlets:
        if isinstance(outlet, Asset):
            events[outlet].extra.update(extra)
            add_partition_keys(events[outlet], kept, log)
        elif isinstance(outlet, AssetAlias):
            try:  # the asset a DAG declared for this URI, under whatever name it gave
                # (the accessor takes an AssetRef; its protocol's type says Asset only)
                ref = Asset.ref(uri=asset_uri(uri))
                events[outlet].add(ref, extra=dict(extra))  # type: ignore[arg-type]
            except AirflowRuntimeError:  # none yet: the namespace's own asset
                events[outlet].add(create_asset(uri=uri), extra=dict(extra))


def truncated_keys_extra(
    total: int, keys: Sequence[str | None], log: _Log, what: str = "published"
) -> dict[str, Any]:
    """``{"keys_truncated"}`` for events keyed by the first ``len(keys)`` of ``total``
    partitions (nothing when unkeyed), with a warning when some were left out."""
    if not keys:
        return {}
    truncated = total > len(keys)
    if truncated:
        log.warning(
            "%d partitions %s: their asset events carry the first %d keys "
            "(max_partition_keys); partition-aware DAGs do not run for the rest",
            total,
            what,
            len(keys),
        )
    return {"keys_truncated": truncated}


#: The checks of the arguments every publishing operator shares.
PUBLISH_ARGUMENTS: dict[str, v.Check] = {
    "namespace": v.namespace,
    "txn_id": v.txn_id,
    "lance_conn_id": v.conn_id,
    "summary_partitions": v.whole(minimum=0),
    "emit_partition_keys": v.flag(optional=True, none_means="partitioned runs only"),
    "max_partition_keys": v.whole(minimum=0),
}


class LanceCommitOperator(v.ArgumentChecks, BaseOperator):
    """Publish one or many staged transactions in ONE atomic ``__manifest`` commit.

    Readers see all partitions of all the transactions, or none. The combined transaction's
    id derives from dag/run/task (or ``txn_id``), so a retried task returns the first
    commit's result instead of publishing twice. On success the namespace's asset outlets
    get an event whose extra names the published partitions and their ``read_version``s,
    and ``AssetAlias`` outlets get the namespace's ``lance://`` asset.

    **Partition keys** (Airflow 3.3+): the events of ``Asset`` outlets can carry the
    published partitions as partition keys (:mod:`airflow_provider_lance.partition_keys`:
    ``2025-12-10``, ``2025-12-10|DE``), one asset event per key, so a DAG scheduled by
    ``PartitionedAssetTimetable`` runs once per published partition and reads exactly it.
    By default they are added when the run itself is partitioned (a
    ``CronPartitionTimetable`` run or a partitioned backfill): its events are keyed by
    Airflow anyway, and the published partitions name them more exactly than the run key.
    Outside partitioned runs they are added only with ``emit_partition_keys=True``, because
    Airflow does not schedule DAGs that are not partition-aware on a keyed event.
    ``AssetAlias`` outlets cannot carry keys (their events take the run's key).

    :param transactions: transaction ids or write results (e.g. the XCom of a mapped
        :class:`LanceSparkWriteOperator`) (templated).
    :param namespace: relative name or full URI (templated; default: the ``uri`` the write
        results name, else the connection root).
    :param txn_id: id of the combined transaction (templated; default derived).
    :param summary_partitions: how many partitions XCom and asset extras list.
    :param emit_partition_keys: add the published partitions' keys to the events of
        ``Asset`` outlets: ``None`` (default) in partitioned runs only, ``True`` always,
        ``False`` never.
    :param max_partition_keys: at most this many keys per outlet (the first ones; a
        warning names how many were left out, and the extra says ``"keys_truncated"``).
    :return: (XCom) ``{"txn_id", "uri", "manifest_version", "mode", "rows",
        "partition_count", "partitions": [...first N, each with its "key"...], "sources":
        [...]}``. Writes their writer already published (``commit=True``) are reported
        with the rest (their partitions, the newest manifest version), so downstream tasks
        and asset events happen; the task skips only when it is given nothing at all.
    """

    template_fields: Sequence[str] = ("transactions", "namespace", "txn_id")
    ui_color = "#c6f0c2"
    argument_checks = {"transactions": v.transactions, **PUBLISH_ARGUMENTS}

    def __init__(
        self,
        *,
        transactions: Any,
        namespace: str | None = None,
        txn_id: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        summary_partitions: int = DEFAULT_SUMMARY_PARTITIONS,
        emit_partition_keys: bool | None = None,
        max_partition_keys: int = DEFAULT_MAX_PARTITION_KEYS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.transactions = transactions
        self.namespace = namespace
        self.txn_id = txn_id
        self.lance_conn_id = lance_conn_id
        self.summary_partitions = summary_partitions
        self.emit_partition_keys = emit_partition_keys
        self.max_partition_keys = max_partition_keys
        self._lineage: NamespaceWrite | None = None
        self.check_arguments()

    def _check_outlets(self, uri: str) -> None:
        """A ``lance://`` outlet for another namespace is a wiring mistake: fail before commit."""
        check_lance_outlets(self.outlets, uri)

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        ids, uris, published = parse_transactions(self.transactions)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = transactions_namespace(hook, self.namespace, uris)
        self._check_outlets(uri)
        if not ids and not published:
            raise AirflowSkipException(f"nothing staged to commit into {uri}")
        combined = v.txn_id_value(self.txn_id) or txn_id_from_context(context)
        results = []
        with lance_errors(f"commit of {ids or published} into {uri}"):
            if ids:
                self.log.info("publishing %d transaction(s) into %s as %s", len(ids), uri, combined)
                results.append(hook.commit(ids, txn_id=combined, namespace=uri))
            if published:  # their results, so downstream tasks and asset events still happen
                self.log.info("already published by their writers: %s", published)
                results += [hook.commit(t, namespace=uri) for t in published]
            ns = hook.open(uri)
            schema = ns.schema
        partitions = [p for result in results for p in result.get("partitions", [])]
        n = self.summary_partitions
        keyed = self._wants_partition_keys(context)
        # keys for what the summary lists and the events carry, not for every partition
        keys = partition_keys_of(
            ns.state(), partitions[: max(n, self.max_partition_keys if keyed else 0)], self.log
        )
        first = results[0]
        summary = {
            "txn_id": first.get("txn_id") or (ids[0] if len(ids) == 1 else combined),
            "uri": uri,
            "manifest_version": max(r["manifest_version"] for r in results),
            "mode": first.get("mode"),
            "rows": sum(int(p.get("rows", 0)) for p in partitions),
            "partition_count": len(partitions),
            "partitions": [
                {
                    **{k: p[k] for k in ("values", "read_version", "rows", "created") if k in p},
                    "key": key,
                }
                for p, key in zip(partitions[:n], keys, strict=False)
            ],
            "sources": ids + published,
        }
        self.log.info(
            "published %d partition(s), %d rows -> manifest v%s",
            summary["partition_count"],
            summary["rows"],
            summary["manifest_version"],
        )
        event_keys = keys[: self.max_partition_keys] if keyed else []
        self._emit_asset_events(context, uri, summary, event_keys)
        self._lineage = NamespaceWrite(
            uri=uri,
            columns=[(f.name, str(f.type)) for f in schema],
            rows=summary["rows"],
            manifest_version=summary["manifest_version"],
            mode=summary["mode"],
        )
        return summary

    def _wants_partition_keys(self, context: Context) -> bool:
        return wants_partition_keys(self.emit_partition_keys, context)

    def _emit_asset_events(
        self, context: Context, uri: str, summary: dict[str, Any], keys: Sequence[str | None]
    ) -> None:
        """One event per ``Asset`` outlet (per partition key, when ``keys`` are given)."""
        extra: dict[str, Any] = {
            "namespace": uri,
            "txn_id": summary["txn_id"],
            "manifest_version": summary["manifest_version"],
            "rows": summary["rows"],
            "partition_count": summary["partition_count"],
            "partitions": [
                {"values": p.get("values"), "read_version": p.get("read_version"), "key": p["key"]}
                for p in summary["partitions"]
            ],
            "truncated": summary["partition_count"] > len(summary["partitions"]),
        }
        extra.update(truncated_keys_extra(summary["partition_count"], keys, self.log))
        emit_asset_events(context, self.outlets, uri, extra, keys, self.log)

    def get_openlineage_facets_on_complete(
        self, task_instance: Any
    ) -> OperatorLineage[Any, Any] | None:
        """The published namespace as an OpenLineage output: schema, row count, the manifest
        version published and, for an overwrite, an ``OVERWRITE`` lifecycle change."""
        if self._lineage is None:
            return None
        return operator_lineage(output=self._lineage)
