"""``LancePartitionTrigger``: wait in the triggerer until partitions are published."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import describe_error
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook, PartitionCheck
from airflow_provider_lance.namespace.errors import (
    LanceNamespaceError,
    NamespaceNotFoundError,
    is_retryable,
)

#: The checks of what the sensor and the trigger wait for.
PARTITION_WAIT_ARGUMENTS: dict[str, v.Check] = {
    "values": v.partition_values(optional=True),
    "filter": v.sql_filter(required=False),
    "partition_key": v.partition_key,
    "namespace": v.namespace,
    "min_partitions": v.whole(minimum=1),
    "require_rows": v.flag(),
    "lance_conn_id": v.conn_id,
}


def check_partition_wait(values: Any, filter: Any, partition_key: Any, min_partitions: Any) -> None:
    """Raise :class:`~airflow_provider_lance.validation.Refused` unless exactly one way to
    name the partitions is given (``min_partitions`` counts the matches of a filter)."""
    named = [
        n
        for n, x in (("values", values), ("filter", filter), ("partition_key", partition_key))
        if not v.absent(x)
    ]
    if len(named) != 1:
        raise v.Refused(
            "give exactly one of values, filter or partition_key"
            + (f" (got {', '.join(named)})" if named else "")
        )
    if min_partitions != 1 and named != ["filter"]:
        raise v.Refused(
            f"min_partitions counts the partitions a filter matches; with {named[0]} every "
            "partition named must be published (leave min_partitions at 1)"
        )


def check_partitions(
    hook: LancePartitionedHook,
    uri: str,
    *,
    values: Sequence[Mapping[str, Any]] | None = None,
    filter: str | None = None,
    partition_key: str | Sequence[str] | None = None,
    min_partitions: int = 1,
    require_rows: bool = False,
) -> PartitionCheck:
    """The sensor's and the trigger's poke: :meth:`LancePartitionedHook.check_partitions`,
    with partitions named by ``partition_key`` (decoded under the current spec) as well."""
    if partition_key is not None:
        from airflow_provider_lance.partition_keys import values_for_keys

        try:
            ns = hook.open(uri)
        except NamespaceNotFoundError as exc:  # not yet: keys are typed by its spec
            return PartitionCheck(False, reason=str(exc))
        values = values_for_keys(ns.state(), partition_key)
    return hook.check_partitions(
        uri,
        values=values,
        filter=filter,
        min_partitions=min_partitions,
        require_rows=require_rows,
    )


class LancePartitionTrigger(BaseTrigger):
    """Poll a namespace until the wanted partitions have a published ``read_version``.

    The partitions are named by ``values``, a ``filter`` or ``partition_key`` (Airflow
    partition keys, :mod:`airflow_provider_lance.partition_keys`).

    The connection is read with the async API; each check (blocking Lance I/O) runs in a
    worker thread so the triggerer's event loop never stalls. Yields one event:
    ``{"status": "success", "partitions": [...]}`` or ``{"status": "error", "message": ...}``
    (an error no retry can fix, such as a bad filter or values; retryable ones such as
    storage errors are retried until the task's timeout).
    """

    #: Checked in ``__init__``: kwargs come rendered from the sensor, or from serialisation.
    argument_checks: ClassVar[Mapping[str, v.Check]] = {
        **PARTITION_WAIT_ARGUMENTS,
        "poll_interval": v.interval(positive=False),
    }

    def __init__(
        self,
        *,
        namespace: str | None = None,
        values: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        filter: str | None = None,
        partition_key: str | Sequence[str] | None = None,
        min_partitions: int = 1,
        require_rows: bool = False,
        poll_interval: float = 30.0,
        lance_conn_id: str = DEFAULT_CONN_ID,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        owner = type(self).__name__
        given = {
            "values": values,
            "filter": filter,
            "partition_key": partition_key,
            "namespace": namespace,
            "min_partitions": min_partitions,
            "require_rows": require_rows,
            "lance_conn_id": lance_conn_id,
            "poll_interval": poll_interval,
        }
        v.check_values(owner, self.argument_checks, given)
        try:
            check_partition_wait(values, filter, partition_key, min_partitions)
        except v.Refused as refused:
            raise v.error(owner, refused) from None
        if isinstance(values, Mapping):
            values = [values]
        self.namespace = namespace
        self.values = [dict(item) for item in values] if values else None
        self.filter = filter
        self.partition_key = (
            partition_key
            if partition_key is None or isinstance(partition_key, str)
            else list(partition_key)
        )
        self.min_partitions = min_partitions
        self.require_rows = require_rows
        self.poll_interval = poll_interval
        self.lance_conn_id = lance_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "namespace": self.namespace,
                "values": self.values,
                "filter": self.filter,
                "partition_key": self.partition_key,
                "min_partitions": self.min_partitions,
                "require_rows": self.require_rows,
                "poll_interval": self.poll_interval,
                "lance_conn_id": self.lance_conn_id,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = LancePartitionedHook(self.lance_conn_id)
        try:
            config = await hook.aget_config()
            uri = config.namespace_uri(self.namespace)
        except Exception as exc:  # the connection itself is unusable: nothing to wait for
            yield TriggerEvent(  # type: ignore[no-untyped-call]
                {"status": "error", "message": describe_error(exc)}
            )
            return
        while True:
            try:
                check = await asyncio.to_thread(
                    check_partitions,
                    hook,
                    uri,
                    values=self.values,
                    filter=self.filter,
                    partition_key=self.partition_key,
                    min_partitions=self.min_partitions,
                    require_rows=self.require_rows,
                )
            except LanceNamespaceError as exc:
                if not is_retryable(exc):  # bad input: waiting longer cannot help
                    yield TriggerEvent(  # type: ignore[no-untyped-call]
                        {"status": "error", "message": describe_error(exc)}
                    )
                    return
                # storage hiccups, conflicts: keep waiting
                self.log.warning("checking %s failed, retrying: %s", uri, describe_error(exc))
            else:
                if check.done:
                    yield TriggerEvent(  # type: ignore[no-untyped-call]
                        {"status": "success", "uri": uri, "partitions": check.partitions}
                    )
                    return
                self.log.info("waiting for %s: %s", uri, check.reason)
            await asyncio.sleep(self.poll_interval)
