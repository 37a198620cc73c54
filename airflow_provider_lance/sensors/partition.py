"""``LancePartitionSensor``: wait until partitions are published (poke, reschedule or defer)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.common.compat.sdk import (
    AirflowException,
    AirflowFailException,
    BaseSensorOperator,
    PokeReturnValue,
    conf,
)

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import lance_errors, values_list
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.triggers.partition import (
    PARTITION_WAIT_ARGUMENTS,
    LancePartitionTrigger,
    check_partition_wait,
    check_partitions,
)

if TYPE_CHECKING:
    from airflow.providers.common.compat.sdk import Context


class LancePartitionSensor(v.ArgumentChecks, BaseSensorOperator):
    """Wait until partitions are published (have a non-null ``read_version``).

    Give ``values`` (each partition must exist under the current spec and be published),
    ``partition_key`` (the same, the partitions named by Airflow partition keys, e.g.
    ``"{{ partition_key }}"`` in a partitioned run; see
    :mod:`airflow_provider_lance.partition_keys`) or ``filter`` (at least
    ``min_partitions`` published partitions match). A
    namespace that does not exist yet is waited for; a malformed filter or unknown
    partition field fails the task at once. With ``deferrable=True`` the wait happens in
    the triggerer (:class:`LancePartitionTrigger`), freeing the worker slot.

    :param values: partition field -> value mapping(s), e.g. ``{"event_date": "{{ ds }}"}``
        (templated).
    :param filter: SQL boolean expression (templated).
    :param partition_key: a partition key or a list of them (templated).
    :param namespace: relative name or full URI (templated).
    :param min_partitions: with ``filter``: how many published partitions are enough.
    :param require_rows: also require at least one row in each partition (freshly created
        partitions are published but empty).
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    :return: (XCom) the matching published partitions.
    """

    template_fields: Sequence[str] = ("values", "filter", "partition_key", "namespace")
    ui_color = "#e6f1f2"
    argument_checks = {**PARTITION_WAIT_ARGUMENTS, "deferrable": v.flag()}

    def __init__(
        self,
        *,
        values: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
        filter: str | None = None,
        partition_key: str | Sequence[str] | None = None,
        namespace: str | None = None,
        min_partitions: int = 1,
        require_rows: bool = False,
        lance_conn_id: str = DEFAULT_CONN_ID,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.values = values
        self.filter = filter
        self.partition_key = partition_key
        self.namespace = namespace
        self.min_partitions = min_partitions
        self.require_rows = require_rows
        self.lance_conn_id = lance_conn_id
        self.deferrable = deferrable
        self.check_arguments()

    def check_combination(self, known: Mapping[str, Any]) -> None:
        check_partition_wait(self.values, self.filter, self.partition_key, self.min_partitions)

    def _wanted(self) -> list[Mapping[str, Any]] | None:
        return values_list(self.values) if self.values is not None else None

    def poke(self, context: Context) -> PokeReturnValue:
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = hook.namespace_uri(self.namespace)
        with lance_errors(f"checking partitions of {uri}"):
            check = check_partitions(
                hook,
                uri,
                values=self._wanted(),
                filter=v.filter_value(self.filter),
                partition_key=self.partition_key,
                min_partitions=self.min_partitions,
                require_rows=self.require_rows,
            )
        if not check.done:
            self.log.info("waiting for %s: %s", uri, check.reason)
        return PokeReturnValue(check.done, check.partitions if check.done else None)

    def execute(self, context: Context) -> Any:  # noqa: RET503 (defer() raises)
        self.check_arguments(rendered=True)
        if not self.deferrable:
            return super().execute(context)
        first = self.poke(context)  # no trip through the triggerer when it is already there
        if first.is_done:
            return first.xcom_value
        self.defer(
            trigger=LancePartitionTrigger(
                namespace=self.namespace,
                values=self._wanted(),
                filter=v.filter_value(self.filter),
                partition_key=self.partition_key,
                min_partitions=self.min_partitions,
                require_rows=self.require_rows,
                poll_interval=self.poke_interval,
                lance_conn_id=self.lance_conn_id,
            ),
            method_name="execute_complete",
            timeout=dt.timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        if not event:
            raise AirflowException("the trigger ended without an event")
        if event.get("status") != "success":
            raise AirflowFailException(f"waiting for partitions failed: {event.get('message')}")
        self.log.info("%d partition(s) published in %s", len(event["partitions"]), event["uri"])
        return event["partitions"]
