"""Schema and partition spec evolution as tasks: add, drop, rename, promote, re-partition.

Each is one compare-and-swap of the namespace metadata in the core; data is never
rewritten (old partitions are read through their field ids). Each operator first looks
whether the namespace already is as asked, and then changes nothing: a retried task, or
a DAG run again, is a no-op instead of an error. The XCom says whether it changed
anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import BaseOperator

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook

if TYPE_CHECKING:
    import pyarrow as pa
    from airflow.providers.common.compat.sdk import Context

    from airflow_provider_lance.hooks.specs import FieldsSpec
    from airflow_provider_lance.namespace import PartitionedNamespace


_SCHEMA_CHANGE_ARGUMENTS: dict[str, v.Check] = {
    "column": v.column_name,
    "namespace": v.namespace,
    "lance_conn_id": v.conn_id,
}


class _SchemaChangeOperator(v.ArgumentChecks, BaseOperator):
    """Opens the namespace, asks :meth:`wanted` whether there is anything to do, and
    applies :meth:`apply` if there is; the XCom is ``{"uri", "column", "changed",
    "manifest_version"}``."""

    ui_color = "#d9ecd0"
    argument_checks = _SCHEMA_CHANGE_ARGUMENTS

    def __init__(
        self,
        *,
        column: Any,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.column = column
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def describe(self) -> str:
        raise NotImplementedError

    def done(self, ns: PartitionedNamespace) -> bool:
        """Whether the namespace already is as this change leaves it."""
        raise NotImplementedError

    def apply(self, ns: PartitionedNamespace) -> None:
        raise NotImplementedError

    def column_name(self) -> str:
        return str(self.column)

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"schema change of {uri}"):
            action = self.describe()  # a malformed column spec fails here, at once
            ns = hook.open(uri)
            changed = not self.done(ns)
            if changed:
                self.apply(ns)
            version = ns.version
        self.log.info("%s in %s: %s", action, uri, "done" if changed else "already so")
        return {
            "uri": uri,
            "column": self.column_name(),
            "changed": changed,
            "manifest_version": version,
        }


def _active(ns: PartitionedNamespace, name: str) -> pa.Field | None:
    schema = ns.schema
    return schema.field(name) if name in schema.names else None


class LanceAddColumnOperator(_SchemaChangeOperator):
    """Add a nullable column; partitions written before read it as NULL.

    :param column: ``{"name", "type", "nullable"}`` (types as in schema specs, e.g.
        ``"string"``, ``"decimal128(12, 2)"``) or a :class:`pyarrow.Field` (templated).
    :param namespace: relative name or full URI (templated).
    """

    template_fields: Sequence[str] = ("column", "namespace")
    template_fields_renderers = {"column": "json"}
    argument_checks = {**_SCHEMA_CHANGE_ARGUMENTS, "column": v.new_column}

    def _field(self) -> pa.Field:
        import pyarrow as pa

        from airflow_provider_lance.hooks.specs import parse_schema

        if isinstance(self.column, pa.Field):
            return self.column
        return parse_schema([self.column]).field(0)

    def column_name(self) -> str:
        return str(self._field().name)

    def describe(self) -> str:
        return f"adding column {self.column_name()!r}"

    def done(self, ns: PartitionedNamespace) -> bool:
        wanted = self._field()
        found = _active(ns, wanted.name)
        return found is not None and found.type == wanted.type  # another type: the core says

    def apply(self, ns: PartitionedNamespace) -> None:
        ns.add_column(self._field())


class LanceDropColumnOperator(_SchemaChangeOperator):
    """Drop a column: reads no longer return it, its data stays (field ids are never reused).

    :param column: the column's name (templated).
    :param namespace: relative name or full URI (templated).
    """

    template_fields: Sequence[str] = ("column", "namespace")

    def describe(self) -> str:
        return f"dropping column {self.column_name()!r}"

    def done(self, ns: PartitionedNamespace) -> bool:
        name = self.column_name()
        return _active(ns, name) is None and name in ns.stored_schema.names  # dropped before

    def apply(self, ns: PartitionedNamespace) -> None:
        ns.drop_column(self.column_name())


class LanceRenameColumnOperator(_SchemaChangeOperator):
    """Rename a column; partition fields using it follow (they name its field id).

    :param column: the current name (templated).
    :param new_name: the new name (templated).
    :param namespace: relative name or full URI (templated).
    """

    template_fields: Sequence[str] = ("column", "new_name", "namespace")
    argument_checks = {**_SCHEMA_CHANGE_ARGUMENTS, "new_name": v.column_name}

    def __init__(self, *, column: str, new_name: str, **kwargs: Any) -> None:
        super().__init__(column=column, **kwargs)
        self.new_name = new_name
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        if "column" in known and known.get("new_name") == known["column"]:
            raise v.Refused(f"new_name is the column's name {known['column']!r} already")

    def describe(self) -> str:
        return f"renaming column {self.column_name()!r} to {self.new_name!r}"

    def done(self, ns: PartitionedNamespace) -> bool:
        """Renamed already: the old name is gone and the new one is there."""
        return _active(ns, self.column_name()) is None and _active(ns, self.new_name) is not None

    def apply(self, ns: PartitionedNamespace) -> None:
        ns.rename_column(self.column_name(), self.new_name)


class LancePromoteColumnOperator(_SchemaChangeOperator):
    """Widen a column's type (``int32`` -> ``int64``, ``float32`` -> ``float64``...);
    narrowing is refused.

    :param column: the column's name (templated).
    :param type: the wider type, as in schema specs (templated).
    :param namespace: relative name or full URI (templated).
    """

    template_fields: Sequence[str] = ("column", "type", "namespace")
    argument_checks = {**_SCHEMA_CHANGE_ARGUMENTS, "type": v.arrow_type}

    def __init__(self, *, column: str, type: Any, **kwargs: Any) -> None:
        super().__init__(column=column, **kwargs)
        self.type = type
        self.check_arguments()

    def _type(self) -> pa.DataType:
        from airflow_provider_lance.hooks.specs import parse_type

        return parse_type(self.type)

    def describe(self) -> str:
        return f"promoting column {self.column_name()!r} to {self.type}"

    def done(self, ns: PartitionedNamespace) -> bool:
        found = _active(ns, self.column_name())
        return found is not None and found.type == self._type()

    def apply(self, ns: PartitionedNamespace) -> None:
        ns.promote_column(self.column_name(), self._type())


class LanceEvolvePartitionSpecOperator(v.ArgumentChecks, BaseOperator):
    """Make ``partition_fields`` the current partition spec (a new spec version); a no-op
    when it already is. Data written before stays under its spec and is pruned by it.

    :param partition_fields: list of ``{"name", "source", "expression", "result_type"}``
        (templated).
    :param namespace: relative name or full URI (templated).
    :return: (XCom) ``{"uri", "spec_version", "changed", "fields": [names]}``.
    """

    template_fields: Sequence[str] = ("partition_fields", "namespace")
    template_fields_renderers = {"partition_fields": "json"}
    ui_color = "#d9ecd0"
    argument_checks = {
        "partition_fields": v.partition_fields(),
        "namespace": v.namespace,
        "lance_conn_id": v.conn_id,
    }

    def __init__(
        self,
        *,
        partition_fields: FieldsSpec,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.partition_fields = partition_fields
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        self.check_arguments(rendered=True)
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"evolving the partition spec of {uri}"):
            before = hook.open(uri).spec_version
            version = hook.evolve_partition_spec(self.partition_fields, uri)
            fields = [f.name for f in hook.open(uri).partition_spec(version)]
        changed = version != before
        self.log.info(
            "partition spec of %s: v%d %s (%s)",
            uri,
            version,
            fields,
            "new" if changed else "already current",
        )
        return {"uri": uri, "spec_version": version, "changed": changed, "fields": fields}
