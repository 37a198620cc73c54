"""``LancePartitionedHook``: an Airflow ``lance`` connection -> ``PartitionedNamespace``.

The hook reads its connection lazily (on first use, never in ``__init__``), masks every
secret storage option, and offers the namespace operations DAG tasks need, each returning
small JSON-able values fit for XCom.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.connection import (
    get_async_connection,
    get_async_extra_dejson,
)
from airflow.providers.common.compat.sdk import AirflowNotFoundException, BaseHook, mask_secret

# The core's names load on first use (pylance, PyArrow, DataFusion), not when a DAG file
# that names this hook or an operator is parsed.
from airflow_provider_lance import namespace as core
from airflow_provider_lance import validation as v
from airflow_provider_lance.hooks.connection import LanceConnectionConfig

if TYPE_CHECKING:
    from airflow_provider_lance.hooks.specs import FieldsSpec, SchemaSpec
    from airflow_provider_lance.namespace import Partition, PartitionedNamespace

DEFAULT_CONN_ID = "lance_default"
#: A task logs the progress of a step once it ran this long (seconds; quicker ones are
#: silent) ...
PROGRESS_AFTER = 1.0
#: ... then each time it got this much further (a fraction of its partitions) ...
PROGRESS_FRACTION = 0.1
#: ... or this many seconds passed, and at its end.
PROGRESS_SECONDS = 10.0


class TaskProgress:
    """The ``progress=`` callback of long work in a task: for a step that runs longer than
    :data:`PROGRESS_AFTER`, a log line each time it got :data:`PROGRESS_FRACTION` further
    or :data:`PROGRESS_SECONDS` passed, and one at its end."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self._started = self._last_at = 0.0
        self._last_fraction = 0.0
        self._logged = False

    def __call__(self, progress: core.Progress) -> None:
        now = time.monotonic()
        if progress.done == 0:  # a step starts
            self._started, self._last_at, self._last_fraction = now, now, 0.0
            self._logged = False
            return
        if not self._logged and now - self._started < PROGRESS_AFTER:
            return
        finished = progress.done >= progress.total
        further = progress.fraction - self._last_fraction >= PROGRESS_FRACTION
        if not (further or finished or now - self._last_at >= PROGRESS_SECONDS):
            return
        self._last_at, self._last_fraction, self._logged = now, progress.fraction, True
        self.log.info(
            "%s: %d of %d partitions (%d%%, %.0f s)",
            progress.what,
            progress.done,
            progress.total,
            int(100 * progress.fraction),
            now - self._started,
        )


def default_local_root() -> str:
    """Where ``lance_default`` points when no such connection is defined: a local directory."""
    home = os.environ.get("AIRFLOW_HOME") or os.path.join("~", "airflow")
    return os.path.join(os.path.expanduser(home), "lance")


def partition_summary(partition: Partition) -> dict[str, Any]:
    """A partition as XCom carries it (values in their string form)."""
    return partition.to_dict()


@dataclass(frozen=True)
class PartitionCheck:
    """What a sensor poke found: done when every wanted partition is published."""

    done: bool
    partitions: list[dict[str, Any]] = field(default_factory=list)
    reason: str = ""


class LancePartitionedHook(BaseHook):
    """Resolve a ``lance`` connection into partitioned namespaces and operate on them.

    :param lance_conn_id: the ``lance`` connection (its ``root`` is the base of relative
        namespace names). ``lance_default`` that is not defined falls back to the local
        directory ``$AIRFLOW_HOME/lance`` so examples run as they are.
    """

    conn_name_attr = "lance_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "lance"
    hook_name = "Lance Partitioned Namespace"

    def __init__(self, lance_conn_id: str = DEFAULT_CONN_ID, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        v.check_values(
            type(self).__name__, {"lance_conn_id": v.conn_id}, {"lance_conn_id": lance_conn_id}
        )
        self.lance_conn_id = lance_conn_id
        self._config: LanceConnectionConfig | None = None
        #: True when ``lance_default`` is undefined and the local directory stands in for it
        self.local_fallback = False

    # -- connection --------------------------------------------------------------------
    @property
    def config(self) -> LanceConnectionConfig:
        """The parsed connection (read on first use; its secrets registered for masking)."""
        if self._config is None:
            try:
                conn = self.get_connection(self.lance_conn_id)
            except AirflowNotFoundException:
                if self.lance_conn_id != DEFAULT_CONN_ID:
                    raise
                config = LanceConnectionConfig.from_fields(default_root=default_local_root())
                self.local_fallback = True
                self.log.warning(
                    "connection %r is not defined; using the local directory %s",
                    self.lance_conn_id,
                    config.root,
                )
            else:
                config = LanceConnectionConfig.from_fields(
                    host=conn.host,
                    login=conn.login,
                    password=conn.password,
                    extras=conn.extra_dejson,
                )
            for key, secret in config.secrets():
                mask_secret(secret, key)
            self._config = config
        return self._config

    async def aget_config(self) -> LanceConnectionConfig:
        """:attr:`config` for async code (the triggerer): no blocking connection calls."""
        if self._config is None:
            try:
                conn = await get_async_connection(self.lance_conn_id, self)
            except AirflowNotFoundException:
                if self.lance_conn_id != DEFAULT_CONN_ID:
                    raise
                config = LanceConnectionConfig.from_fields(default_root=default_local_root())
                self.local_fallback = True
            else:
                config = LanceConnectionConfig.from_fields(
                    host=conn.host,
                    login=conn.login,
                    password=conn.password,
                    extras=await get_async_extra_dejson(conn),
                )
            await _amask_secrets(config)
            self._config = config
        return self._config

    @property
    def storage_options(self) -> dict[str, str]:
        """The Lance storage options (for Spark jobs); never log them."""
        return dict(self.config.storage_options)

    def namespace_uri(self, namespace: str | None = None) -> str:
        """The URI of ``namespace`` (relative to the connection root, or a full URI)."""
        return self.config.namespace_uri(namespace)

    def get_conn(self) -> PartitionedNamespace:
        """The namespace at the connection root (BaseHook convention)."""
        return self.open()

    # -- namespaces ----------------------------------------------------------------------
    def open(self, namespace: str | None = None) -> PartitionedNamespace:
        return core.PartitionedNamespace.open(
            self.namespace_uri(namespace),
            storage_options=self.config.storage_options or None,
            concurrency=self.config.concurrency,
        )

    def exists(self, namespace: str | None = None) -> bool:
        return core.PartitionedNamespace.exists(
            self.namespace_uri(namespace), storage_options=self.config.storage_options or None
        )

    def create_or_open(
        self,
        namespace: str | None = None,
        *,
        schema: SchemaSpec | None = None,
        partition_fields: FieldsSpec | None = None,
    ) -> tuple[PartitionedNamespace, bool]:
        """Open the namespace, creating it first when a schema and partition fields are given.

        Returns ``(namespace, created)``. An existing namespace must know every given column
        and be partitioned by the given field names (under its current spec), so a DAG whose
        spec drifted from the data fails loudly instead of writing somewhere unexpected.
        """
        from airflow_provider_lance.hooks.specs import parse_partition_fields, parse_schema

        uri = self.namespace_uri(namespace)
        options = self.config.storage_options or None
        concurrency = self.config.concurrency
        if schema is None and partition_fields is None:
            return self.open(uri), False
        if schema is None or partition_fields is None:
            raise core.InvalidArgumentError(
                "creating a namespace needs both a schema and partition fields"
            )
        arrow_schema = parse_schema(schema)
        fields = parse_partition_fields(partition_fields)
        try:
            ns = self.open(uri)
        except core.NamespaceNotFoundError:
            try:
                ns = core.PartitionedNamespace.create(
                    uri,
                    schema=arrow_schema,
                    partition_fields=fields,
                    storage_options=options,
                    concurrency=concurrency,
                )
            except core.NamespaceExistsError:  # a concurrent task created it first
                ns = self.open(uri)
            else:
                self.log.info(
                    "created namespace %s partitioned by %s", uri, [f.name for f in fields]
                )
                return ns, True
        self._check_compatible(ns, arrow_schema.names, [f.name for f in fields])
        return ns, False

    @staticmethod
    def _check_compatible(
        ns: PartitionedNamespace, columns: Sequence[str], field_names: Sequence[str]
    ) -> None:
        missing = [c for c in columns if c not in ns.schema.names]
        if missing:
            raise core.SchemaError(
                f"namespace {ns.uri} exists but has no column(s) {missing}; its columns: "
                f"{ns.schema.names}"
            )
        current = [f.name for f in ns.partition_spec()]
        if list(field_names) != current:
            raise core.PartitionSpecError(
                f"namespace {ns.uri} exists partitioned by {current} (spec "
                f"v{ns.spec_version}), not by {list(field_names)}"
            )

    def evolve_partition_spec(
        self, partition_fields: FieldsSpec, namespace: str | None = None
    ) -> int:
        """Make ``partition_fields`` the current spec; a no-op if it already is.

        Returns the current spec version, so a retried task does not add a version twice.
        """
        from airflow_provider_lance.hooks.specs import parse_partition_fields

        ns = self.open(namespace)
        wanted = parse_partition_fields(partition_fields)
        current = ns.partition_spec()
        if [(f.name, f.source, f.expression) for f in wanted] == [
            (f.name, f.source, f.expression) for f in current
        ]:
            return ns.spec_version
        return ns.evolve_partition_spec(wanted)

    def describe(self, namespace: str | None = None) -> dict[str, Any]:
        """Schema, partition specs and partition counts of a namespace (small, JSON-able)."""
        from airflow_provider_lance.hooks.specs import field_to_spec, schema_to_spec

        ns = self.open(namespace)
        state = ns.state()
        partitions = state.partitions()
        return {
            "uri": ns.uri,
            "manifest_version": state.version,
            "schema": schema_to_spec(ns.schema),
            "spec_version": state.spec_version,
            "partition_specs": {
                str(v): [field_to_spec(f) for f in fields] for v, fields in state.specs.items()
            },
            "partition_count": len(partitions),
            "published_count": sum(p.read_version is not None for p in partitions),
        }

    # -- partitions --------------------------------------------------------------------
    def create_partitions(
        self, values: Iterable[Mapping[str, Any]], namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Create (empty) partitions in one transaction; existing ones are returned as is."""
        ns = self.open(namespace)
        return [partition_summary(p) for p in ns.create_partitions(list(values))]

    def prune(
        self, filter: str | None = None, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """The partitions that can hold rows matching ``filter`` (all without a filter)."""
        ns = self.open(namespace)
        return [partition_summary(p) for p in ns.prune(filter)]

    def check_partitions(
        self,
        namespace: str | None = None,
        *,
        values: Sequence[Mapping[str, Any]] | None = None,
        filter: str | None = None,
        min_partitions: int = 1,
        require_rows: bool = False,
    ) -> PartitionCheck:
        """Whether the wanted partitions are published (the sensor's and trigger's poke).

        With ``values``: each of them must exist under the current spec with a published
        ``read_version``; with ``filter``: at least ``min_partitions`` published partitions
        must match it. ``require_rows`` also asks for at least one row in each. A missing
        namespace is "not yet"; bad filters or values raise.
        """
        try:
            ns = self.open(namespace)
        except core.NamespaceNotFoundError as exc:
            return PartitionCheck(False, reason=str(exc))
        if values:
            found = []
            for v in values:
                try:
                    found.append(ns.partition(v))
                except core.PartitionNotFoundError:
                    return PartitionCheck(False, reason=f"no partition {dict(v)} yet")
        else:
            found = ns.prune(filter)
        published = [p for p in found if p.read_version is not None]
        if require_rows:
            published = [p for p in published if ns.count_rows_of(p) > 0]
        summaries = [partition_summary(p) for p in published]
        if values:
            if len(published) < len(found):
                from airflow_provider_lance.namespace import value_text

                waiting = [
                    {k: value_text(x) for k, x in p.values.items()}
                    for p in found
                    if p not in published
                ]
                return PartitionCheck(False, summaries, f"not published yet: {waiting}")
            return PartitionCheck(True, summaries)
        if len(published) < min_partitions:
            return PartitionCheck(
                False,
                summaries,
                f"{len(published)} of at least {min_partitions} partition(s) published "
                f"for filter {filter!r}",
            )
        return PartitionCheck(True, summaries)

    # -- transactions --------------------------------------------------------------------
    def commit(
        self,
        txn_ids: str | Sequence[str],
        *,
        txn_id: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]:
        """Publish staged transactions in ONE atomic ``__manifest`` commit; idempotent.

        Several ids are combined into one transaction named ``txn_id`` (deterministic, so a
        retry returns the first commit's result); a single id is committed as itself.
        """
        ids = [txn_ids] if isinstance(txn_ids, str) else list(dict.fromkeys(txn_ids))
        if not ids:
            raise core.InvalidArgumentError("no transactions to commit")
        ns = self.open(namespace)
        result = ns.commit(ids[0]) if len(ids) == 1 else ns.commit(ids, txn_id=txn_id)
        return result.to_dict()

    def recover(self, lease_seconds: float = 6 * 3600.0, namespace: str | None = None) -> list[str]:
        """Abort transactions idle for longer than ``lease_seconds``; returns their ids."""
        return self.open(namespace).recover(lease_seconds)

    def transactions(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [t.to_dict() for t in self.open(namespace).transactions()]

    # -- UI -----------------------------------------------------------------------------
    def test_connection(self) -> tuple[bool, str]:
        """Reach the root: report a namespace there, or that the root is reachable."""
        try:
            config = self.config
            if core.PartitionedNamespace.exists(config.root, config.storage_options or None):
                info = self.describe()
                return True, (
                    f"{config.root} is a partitioned namespace with "
                    f"{info['partition_count']} partition(s) (manifest v"
                    f"{info['manifest_version']})"
                )
            return True, f"{config.root} is reachable (no namespace at the root itself)"
        except Exception as exc:  # the UI shows any failure as a failed test, never a 500
            return False, f"{type(exc).__name__}: {exc}"


async def _amask_secrets(config: LanceConnectionConfig) -> None:
    """Register the connection's secrets for masking without blocking the event loop.

    ``amask_secret`` came with Airflow 3.3.2; before it, the synchronous call runs in a
    worker thread, as common-compat does for ``extra_dejson``.
    """
    try:
        from airflow.sdk.log import amask_secret
    except ImportError:  # Airflow < 3.3.2
        from asgiref.sync import sync_to_async

        for key, secret in config.secrets():
            await sync_to_async(mask_secret)(secret, key)
        return
    for key, secret in config.secrets():
        await amask_secret(secret, key)
