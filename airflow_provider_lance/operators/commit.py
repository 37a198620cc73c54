"""``LanceCommitOperator``: publish staged transactions in one atomic commit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowFailException,
    AirflowSkipException,
    Asset,
    AssetAlias,
    BaseOperator,
)
from airflow.sdk.exceptions import AirflowRuntimeError

from airflow_provider_lance.assets import asset_uri, create_asset, is_lance_asset
from airflow_provider_lance.common import lance_errors, txn_id_from_context
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.operators.lineage import NamespaceWrite, operator_lineage

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context
    from airflow.providers.openlineage.extractors import OperatorLineage

#: Partitions named in XCom and asset event extras; the rest are counted only.
DEFAULT_SUMMARY_PARTITIONS = 20


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


class LanceCommitOperator(BaseOperator):
    """Publish one or many staged transactions in ONE atomic ``__manifest`` commit.

    Readers see all partitions of all the transactions, or none. The combined transaction's
    id derives from dag/run/task (or ``txn_id``), so a retried task returns the first
    commit's result instead of publishing twice. On success the namespace's asset outlets
    get an event whose extra names the published partitions and their ``read_version``s,
    and ``AssetAlias`` outlets get the namespace's ``lance://`` asset.

    :param transactions: transaction ids or write results (e.g. the XCom of a mapped
        :class:`LanceSparkWriteOperator`) (templated).
    :param namespace: relative name or full URI (templated; default: the ``uri`` the write
        results name, else the connection root).
    :param txn_id: id of the combined transaction (templated; default derived).
    :param summary_partitions: how many partitions XCom and asset extras list.
    :return: (XCom) ``{"txn_id", "uri", "manifest_version", "mode", "rows",
        "partition_count", "partitions": [...first N...], "sources": [...]}``. Writes their
        writer already published (``commit=True``) are reported with the rest (their
        partitions, the newest manifest version), so downstream tasks and asset events
        happen; the task skips only when it is given nothing at all.
    """

    template_fields: Sequence[str] = ("transactions", "namespace", "txn_id")
    ui_color = "#c6f0c2"

    def __init__(
        self,
        *,
        transactions: Any,
        namespace: str | None = None,
        txn_id: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        summary_partitions: int = DEFAULT_SUMMARY_PARTITIONS,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.transactions = transactions
        self.namespace = namespace
        self.txn_id = txn_id
        self.lance_conn_id = lance_conn_id
        self.summary_partitions = summary_partitions
        self._lineage: NamespaceWrite | None = None

    def _check_outlets(self, uri: str) -> None:
        """A ``lance://`` outlet for another namespace is a wiring mistake: fail before commit."""
        expected = asset_uri(uri)
        for outlet in self.outlets:
            if is_lance_asset(outlet) and outlet.uri != expected:
                raise AirflowFailException(
                    f"outlet {outlet.uri} does not name the namespace this task publishes "
                    f"({expected})"
                )

    def execute(self, context: Context) -> dict[str, Any]:
        ids, uris, published = parse_transactions(self.transactions)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = transactions_namespace(hook, self.namespace, uris)
        self._check_outlets(uri)
        if not ids and not published:
            raise AirflowSkipException(f"nothing staged to commit into {uri}")
        combined = self.txn_id or txn_id_from_context(context)
        results = []
        with lance_errors(f"commit of {ids or published} into {uri}"):
            if ids:
                self.log.info("publishing %d transaction(s) into %s as %s", len(ids), uri, combined)
                results.append(hook.commit(ids, txn_id=combined, namespace=uri))
            if published:  # their results, so downstream tasks and asset events still happen
                self.log.info("already published by their writers: %s", published)
                results += [hook.commit(t, namespace=uri) for t in published]
            schema = hook.open(uri).active_schema
        partitions = [p for result in results for p in result.get("partitions", [])]
        n = self.summary_partitions
        first = results[0]
        summary = {
            "txn_id": first.get("txn_id") or (ids[0] if len(ids) == 1 else combined),
            "uri": uri,
            "manifest_version": max(r["manifest_version"] for r in results),
            "mode": first.get("mode"),
            "rows": sum(int(p.get("rows", 0)) for p in partitions),
            "partition_count": len(partitions),
            "partitions": [
                {k: p[k] for k in ("values", "read_version", "rows", "created") if k in p}
                for p in partitions[:n]
            ],
            "sources": ids + published,
        }
        self.log.info(
            "published %d partition(s), %d rows -> manifest v%s",
            summary["partition_count"],
            summary["rows"],
            summary["manifest_version"],
        )
        self._emit_asset_events(context, uri, summary)
        self._lineage = NamespaceWrite(
            uri=uri,
            columns=[(f.name, str(f.type)) for f in schema],
            rows=summary["rows"],
            manifest_version=summary["manifest_version"],
            mode=summary["mode"],
        )
        return summary

    def _emit_asset_events(self, context: Context, uri: str, summary: dict[str, Any]) -> None:
        extra: dict[str, Any] = {
            "namespace": uri,
            "txn_id": summary["txn_id"],
            "manifest_version": summary["manifest_version"],
            "rows": summary["rows"],
            "partition_count": summary["partition_count"],
            "partitions": [
                {"values": p.get("values"), "read_version": p.get("read_version")}
                for p in summary["partitions"]
            ],
            "truncated": summary["partition_count"] > len(summary["partitions"]),
        }
        events = context["outlet_events"]
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                events[outlet].extra.update(extra)
            elif isinstance(outlet, AssetAlias):
                try:  # the asset a DAG declared for this URI, under whatever name it gave
                    # (the accessor takes an AssetRef; its protocol's type says Asset only)
                    ref = Asset.ref(uri=asset_uri(uri))
                    events[outlet].add(ref, extra=extra)  # type: ignore[arg-type]
                except AirflowRuntimeError:  # none yet: the namespace's own asset
                    events[outlet].add(create_asset(uri=uri), extra=extra)

    def get_openlineage_facets_on_complete(
        self, task_instance: Any
    ) -> OperatorLineage[Any, Any] | None:
        """The published namespace as an OpenLineage output: schema, row count, the manifest
        version published and, for an overwrite, an ``OVERWRITE`` lifecycle change."""
        if self._lineage is None:
            return None
        return operator_lineage(output=self._lineage)
