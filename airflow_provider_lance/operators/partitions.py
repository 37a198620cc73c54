"""Operators that create and list partitions (no data is written by them)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import AirflowFailException, Asset, BaseOperator

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import describe_values, lance_errors, values_list
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.operators.commit import (
    add_partition_keys,
    partition_keys_of,
    wants_partition_keys,
)
from airflow_provider_lance.operators.timetravel import as_of_value

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_lance.hooks.specs import FieldsSpec, SchemaSpec
    from airflow_provider_lance.namespace import PartitionedNamespace


class LanceCreatePartitionOperator(v.ArgumentChecks, BaseOperator):
    """Create partitions (empty, published) so readers and sensors can rely on them.

    Creates the namespace first when ``schema`` and ``partition_fields`` are given and it does
    not exist yet. Idempotent: existing partitions are returned unchanged. The events of
    ``Asset`` outlets carry the partitions' keys as :class:`LanceCommitOperator`'s do
    (``emit_partition_keys``).

    :param values: partition field -> value, e.g. ``{"event_date": "{{ ds }}"}``, or a list
        of such mappings (templated).
    :param namespace: namespace name relative to the connection root, or a full URI
        (templated; default: the root itself).
    :param schema: list of ``{"name", "type", "nullable"}`` (templated, optional).
    :param partition_fields: list of ``{"name", "source", "expression", "result_type"}``
        (templated, optional).
    :param lance_conn_id: the ``lance`` connection.
    :param emit_partition_keys: key the ``Asset`` outlets' events by the partitions: ``None``
        (default) in partitioned runs only, ``True`` always, ``False`` never.
    :return: (XCom) the partitions: ``[{"object_id", "values", "read_version", "location",
        "spec_version"}, ...]``.
    """

    template_fields: Sequence[str] = ("values", "namespace", "schema", "partition_fields")
    template_fields_renderers = {"values": "json", "schema": "json", "partition_fields": "json"}
    ui_color = "#d5e8f7"
    argument_checks = {
        "values": v.partition_values(),
        "namespace": v.namespace,
        "schema": v.schema(optional=True),
        "partition_fields": v.partition_fields(optional=True),
        "lance_conn_id": v.conn_id,
        "emit_partition_keys": v.flag(optional=True, none_means="partitioned runs only"),
    }

    def __init__(
        self,
        *,
        values: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        schema: SchemaSpec | None = None,
        partition_fields: FieldsSpec | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        emit_partition_keys: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.values = values
        self.namespace = namespace
        self.schema = schema
        self.partition_fields = partition_fields
        self.lance_conn_id = lance_conn_id
        self.emit_partition_keys = emit_partition_keys
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if (self.schema is None) != (self.partition_fields is None):
            raise v.Refused(
                "creating the namespace needs both schema and partition_fields; give both, "
                "or neither to create partitions in an existing namespace"
            )

    def execute(self, context: Context) -> list[dict[str, Any]]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        wanted = values_list(self.values)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"creating partitions in {uri}"):
            ns, created = hook.create_or_open(
                uri, schema=self.schema, partition_fields=self.partition_fields
            )
            partitions = [p.to_dict() for p in ns.create_partitions(wanted)] if wanted else []
        if partitions and wants_partition_keys(self.emit_partition_keys, context):
            keys = [k for k in partition_keys_of(ns.state(), partitions, self.log) if k]
            for outlet in self.outlets:
                if isinstance(outlet, Asset):
                    add_partition_keys(context["outlet_events"][outlet], keys, self.log)
        self.log.info(
            "%s %s; %d partition(s) present: %s",
            "created namespace" if created else "namespace",
            uri,
            len(partitions),
            "; ".join(describe_values(p["values"]) for p in partitions[:10]) or "(none)",
        )
        return partitions


class LancePruneOperator(v.ArgumentChecks, BaseOperator):
    """List the partitions a filter needs (a SQL boolean expression), ready for ``.expand()``.

    Instead of a filter, ``partition_key`` names partitions by their Airflow partition keys
    (:mod:`airflow_provider_lance.partition_keys`), e.g. ``"{{ partition_key }}"`` in a run
    of a partitioned DAG: the partitions of the current spec those keys name, if they exist.

    With ``as_of`` it lists the partitions of a past state (time travel): a ``__manifest``
    version, an ISO timestamp or a tag, e.g. ``"eod-{{ ds }}"`` (see
    :func:`~airflow_provider_lance.operators.timetravel.as_of_value`); each partition's
    ``read_version`` is the one that state reads, so tasks reading them see that state.
    Keys then name partitions of the spec that state had.

    :param filter: e.g. ``"event_date >= DATE '{{ ds }}' AND country = 'DE'"`` (templated;
        none: every partition).
    :param partition_key: a partition key or a list of them, instead of ``filter``
        (templated).
    :param namespace: relative name or full URI (templated).
    :param as_of: the state to list (templated; default: the latest).
    :param published_only: leave out partitions without a published ``read_version``.
    :param max_partitions: fail instead of pushing more partitions than this to XCom.
    :return: (XCom) ``[{"object_id", "values", "read_version", "location",
        "spec_version"}, ...]``.
    """

    template_fields: Sequence[str] = ("filter", "partition_key", "namespace", "as_of")
    ui_color = "#d5e8f7"
    argument_checks = {
        "filter": v.sql_filter(required=False),
        "partition_key": v.partition_key,
        "namespace": v.namespace,
        "as_of": v.as_of,
        "published_only": v.flag(),
        "max_partitions": v.whole(minimum=1, optional=True, none_means="no limit"),
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        filter: str | None = None,
        partition_key: str | Sequence[str] | None = None,
        namespace: str | None = None,
        as_of: int | dt.datetime | str | None = None,
        published_only: bool = True,
        max_partitions: int | None = 1024,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.filter = filter
        self.partition_key = partition_key
        self.namespace = namespace
        self.as_of = as_of
        self.published_only = published_only
        self.max_partitions = max_partitions
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if self.filter is not None and self.partition_key is not None:
            raise v.Refused("give a filter or a partition_key, not both")

    def execute(self, context: Context) -> list[dict[str, Any]]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        where = v.filter_value(self.filter)
        as_of = as_of_value(self.as_of)
        with lance_errors(f"pruning {uri}" + ("" if as_of is None else f" as of {as_of!r}")):
            if self.partition_key is not None:
                where = f"partition_key {self.partition_key!r}"
                partitions = self._keyed(hook.open(uri), as_of)
            elif as_of is None:
                partitions = hook.prune(where or None, uri)
            else:
                ns = hook.open(uri)
                partitions = [p.to_dict() for p in ns.prune(where or None, as_of=as_of)]
        if self.published_only:
            partitions = [p for p in partitions if p["read_version"] is not None]
        if self.max_partitions is not None and len(partitions) > self.max_partitions:
            raise AirflowFailException(
                f"filter {where!r} matches {len(partitions)} partitions of {uri}, more than "
                f"max_partitions={self.max_partitions}; narrow the filter or raise the limit"
            )
        self.log.info(
            "filter %r keeps %d partition(s) of %s%s",
            where,
            len(partitions),
            uri,
            "" if as_of is None else f" as of {as_of!r}",
        )
        return partitions

    def _keyed(
        self, ns: PartitionedNamespace, as_of: int | dt.datetime | str | None
    ) -> list[dict[str, Any]]:
        """The existing partitions the keys name, one per key in their order, under the
        current spec of the state ``as_of`` names (the latest for None); a key of no
        partition names nothing. One lookup by leaf id for all of them, through the
        partition columns' index: never every partition of the state."""
        from airflow_provider_lance.partition_keys import fields_of, values_for_keys

        state = ns.state(as_of)
        fields = fields_of(state)
        named = values_for_keys(state, self.partition_key)
        ordered = [tuple(v[f.name] for f in fields) for v in named]
        ids = [state.leaf_id(row) for row in ordered]
        unique = dict(zip(ids, ordered, strict=True))  # a key given twice: looked up once
        found = state.find(list(unique), list(unique.values()))
        out = []
        for oid, values in zip(ids, named, strict=True):
            if oid in found:
                out.append(found[oid].to_dict())
            else:
                when = "" if as_of is None else f" as of {as_of!r}"
                self.log.info("no partition %s in %s%s", describe_values(values), ns.uri, when)
        return out
