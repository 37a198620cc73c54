"""``LancePartitionSensor`` (poke and deferrable) and ``LancePartitionTrigger`` run for real."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.sensors import LancePartitionSensor
from airflow_provider_lance.triggers import LancePartitionTrigger
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
CONN = "lance_test"


def make_namespace(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("country", "country")],
    )


def rebuilt(trigger: LancePartitionTrigger) -> Any:
    """The trigger as the triggerer gets it: serialised, then built from its classpath."""
    from airflow.sdk.module_loading import import_string

    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_lance.triggers.partition.LancePartitionTrigger"
    return import_string(classpath)(**kwargs)


def test_trigger_waits_in_its_event_loop_until_partitions_are_published(
    lance_test_root: Path,
) -> None:
    ns = make_namespace(lance_test_root)
    trigger = rebuilt(
        LancePartitionTrigger(
            namespace="events",
            filter="country = 'DE'",
            require_rows=True,
            poll_interval=0.2,
            lance_conn_id="lance_test",
        )
    )

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        ticks = 0
        while ticks < 10:  # the loop stays responsive while the trigger polls
            await asyncio.sleep(0.1)
            ticks += 1
        assert not waiting.done()
        await asyncio.to_thread(ns.write, events(16, start=dt.date(2025, 12, 1), days=2))
        return await asyncio.wait_for(waiting, timeout=60)

    event = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert event.payload["uri"] == ns.uri
    assert [p["values"] for p in event.payload["partitions"]] == [{"country": "DE"}]


def test_trigger_waits_for_a_namespace_that_does_not_exist_yet(lance_test_root: Path) -> None:
    trigger = LancePartitionTrigger(
        namespace="later", values=[{"country": "FR"}], poll_interval=0.2, lance_conn_id="lance_test"
    )

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.8)
        assert not waiting.done()

        def create() -> None:
            ns = PartitionedNamespace.create(
                lance_test_root / "later",
                schema=EVENTS_SCHEMA,
                partition_fields=[PartitionField("country", "country")],
            )
            ns.create_partition({"country": "FR"})

        await asyncio.to_thread(create)
        return await asyncio.wait_for(waiting, timeout=60)

    event = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert event.payload["partitions"][0]["values"] == {"country": "FR"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"filter": "nope = 1"}, "FilterError"),
        ({"values": [{"day": "2025-12-01"}]}, "PartitionSpecError"),
    ],
)
def test_trigger_reports_bad_input_at_once(
    lance_test_root: Path, kwargs: dict[str, Any], message: str
) -> None:
    make_namespace(lance_test_root)
    trigger = rebuilt(
        LancePartitionTrigger(
            namespace="events", poll_interval=0.2, lance_conn_id="lance_test", **kwargs
        )
    )
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=60))
    assert event.payload["status"] == "error"
    assert message in event.payload["message"]


@pytest.mark.usefixtures("unreachable_lance_test")
def test_trigger_keeps_waiting_while_the_store_is_unreachable() -> None:
    """A StorageError is retryable: the trigger logs it and polls on (no error event)."""
    from airflow.sdk.log import configure_logging

    trigger = rebuilt(
        LancePartitionTrigger(
            namespace="events", filter="country = 'DE'", poll_interval=0.2, lance_conn_id=CONN
        )
    )
    log = io.StringIO()  # the trigger's log, captured as run_dag captures a run's

    def retried() -> int:
        return log.getvalue().count("failed, retrying")

    async def scenario() -> bool:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and retried() < 2 and not waiting.done():
            await asyncio.sleep(0.1)
        done = waiting.done()
        waiting.cancel()
        return done

    configure_logging(output=log, cache_logger_on_first_use=False, colored_console_log=False)
    try:
        assert not asyncio.run(scenario())  # no event: neither success nor error
    finally:
        configure_logging(cache_logger_on_first_use=False, colored_console_log=False)
    assert retried() >= 2  # two checks failed, and it kept polling
    assert "StorageError: cannot read the __manifest of s3://bucket/wh/events" in log.getvalue()


def test_deferrable_sensor_defers_and_resumes_when_published(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)

    def publish_after_first_poke(output: Callable[[], str]) -> None:
        deadline = time.monotonic() + 90
        while "waiting for" not in output() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)
        ns.write(events(12, start=dt.date(2025, 12, 1), days=3))

    run = run_dag(
        "lance_test_sensor",
        conf={"filter": "country = 'DE'"},
        meanwhile=publish_after_first_poke,
    )
    assert run.state == "success", run.output[-3000:]
    assert "[DAG TEST] running trigger in line" in run.output
    assert [p["values"] for p in run.xcom("wait")] == [{"country": "DE"}]


def test_deferrable_sensor_fails_fast_on_a_malformed_filter(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    make_namespace(lance_test_root)
    run = run_dag("lance_test_sensor", conf={"filter": "country ="})
    assert run.state == "failed"
    assert "FilterError: filter 'country =' is not a valid expression" in run.output
    assert "running trigger in line" not in run.output


def test_sensor_needs_values_or_filter_or_partition_key() -> None:
    with pytest.raises(ValueError, match="exactly one of values, filter or partition_key"):
        LancePartitionSensor(task_id="s")
    with pytest.raises(ValueError, match="exactly one of values, filter or partition_key"):
        LancePartitionSensor(task_id="s", values={"a": 1}, filter="a = 1")
    with pytest.raises(ValueError, match="exactly one of values, filter or partition_key"):
        LancePartitionSensor(task_id="s", filter="a = 1", partition_key="2025-12-01")
