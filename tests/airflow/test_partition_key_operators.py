"""Operators, the sensor and the trigger with partition keys, in real ``dag.test()`` runs.

The commit keys the events of an ``Asset`` outlet by the partitions it published (capped);
left to its default it keys nothing outside partitioned runs, so asset-scheduled DAGs that
are not partition-aware keep running. The sensor (poke and deferred) and the prune operator
name partitions by key.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.triggers import LancePartitionTrigger
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
ASSET_NAME = "lance_test_keyed_events"


def make_namespace(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[
            PartitionField("event_date", "event_date"),
            PartitionField("country", "country"),
        ],
    )


def keyed_events(name: str = ASSET_NAME) -> list[tuple[str | None, dict[str, Any]]]:
    """``(partition_key, extra)`` of every event of the asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == name)
            .order_by(AssetEvent.id)
            .all()
        )
        return [(r.partition_key, dict(r.extra)) for r in rows]


def _stage(ns: PartitionedNamespace, txn_id: str, n: int, days: int) -> str:
    txn = ns.begin("append", txn_id=txn_id)
    txn.stage(events(n, start=dt.date(2025, 12, 1), days=days), stage_id="w")
    return txn.txn_id


requires_3_3 = pytest.mark.skipif(
    not AIRFLOW_V_3_3_PLUS, reason="keyed asset events (add_partitions) are Airflow 3.3+"
)


@requires_3_3
def test_commit_keys_its_asset_events_by_the_published_partitions(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    before = len(keyed_events())
    staged = _stage(ns, "keyed-0", 12, 3)  # 3 days x 4 countries (one NULL): 12 partitions
    run = run_dag("lance_test_keyed_commit", conf={"transactions": [staged]})
    assert run.state == "success", run.output[-3000:]
    summary = run.xcom("commit")
    assert summary["partition_count"] == 12
    listed = {p["key"] for p in summary["partitions"]}
    assert len(listed) == 12
    assert {"2025-12-01|US", "2025-12-02|DE", "2025-12-01|%null"} <= listed

    new = keyed_events()[before:]
    keys = [k for k, _ in new]
    assert len(keys) == 3  # max_partition_keys=3: one event per key, the first three
    assert set(keys) <= listed
    extra = new[0][1]
    assert extra["keys_truncated"] is True
    assert extra["manifest_version"] == summary["manifest_version"]
    assert "partitions published: their asset events carry the first 3 keys" in run.output

    # every key names its partition again (under the namespace's spec)
    from airflow_provider_lance.partition_keys import fields_of, partition_values

    state = ns.state()
    by_key = {p["key"]: p for p in summary["partitions"]}
    for key in keys:
        partition = ns.partition(partition_values(key, fields_of(state)))
        assert partition.read_version == by_key[key]["read_version"]


@requires_3_3
def test_created_partitions_key_the_create_operators_asset_events(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    make_namespace(lance_test_root)
    values = [
        {"event_date": "2025-12-09", "country": "DE"},
        {"event_date": "2025-12-09", "country": None},
    ]
    run = run_dag("lance_test_keyed_create", conf={"partition_values": values})
    assert run.state == "success", run.output[-3000:]
    keys = [k for k, _ in keyed_events("lance_test_keyed_created")]
    assert sorted(keys) == ["2025-12-09|%null", "2025-12-09|DE"]


def test_commit_outside_partitioned_runs_keys_nothing_by_default(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """A keyed event would no longer schedule DAGs that are not partition-aware."""
    ns = make_namespace(lance_test_root)
    before = len(keyed_events())
    run = run_dag("lance_test_unkeyed_commit", conf={"transactions": [_stage(ns, "u-0", 4, 1)]})
    assert run.state == "success", run.output[-3000:]
    new = keyed_events()[before:]
    assert [k for k, _ in new] == [None]
    assert "keys_truncated" not in new[0][1]
    assert all(p["key"] for p in run.xcom("commit")["partitions"])  # XCom lists them anyway


def test_sensor_and_prune_name_partitions_by_key(run_dag: RunDag, lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(8, start=dt.date(2025, 12, 2), days=1))  # another day only

    def publish_after_first_poke(output: Callable[[], str]) -> None:
        deadline = time.monotonic() + 90
        while "waiting for" not in output() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        ns.write(events(8, start=dt.date(2025, 12, 1), days=1))

    run = run_dag(
        "lance_test_keyed_wait",
        conf={"partition_key": "2025-12-01|DE"},
        meanwhile=publish_after_first_poke,
    )
    assert run.state == "success", run.output[-3000:]
    assert "waiting for" in run.output  # it poked before the partition was there
    expected = {"event_date": "2025-12-01", "country": "DE"}
    assert [p["values"] for p in run.xcom("wait")] == [expected]
    assert [p["values"] for p in run.xcom("wait_deferred")] == [expected]
    assert "[DAG TEST] running trigger in line" not in run.output  # already there: no defer
    assert [p["values"] for p in run.xcom("prune")] == [expected]
    assert run.xcom("prune")[0]["object_id"] == ns.partition(expected).object_id


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("2025-12-01", "has 1 value(s); the partition spec has 2 field(s)"),
        ("2025-13-01|DE", "field 'event_date'"),
    ],
)
def test_a_key_the_spec_cannot_read_fails_at_once(
    run_dag: RunDag, lance_test_root: Path, key: str, message: str
) -> None:
    make_namespace(lance_test_root)
    run = run_dag("lance_test_keyed_wait", conf={"partition_key": key})
    assert run.state == "failed"
    assert run.tries["wait"] == 1
    assert "InvalidArgumentError" in run.output
    assert message in run.output


def test_trigger_waits_for_keyed_partitions_of_a_namespace_not_there_yet(
    lance_test_root: Path,
) -> None:
    from airflow.sdk.module_loading import import_string

    classpath, kwargs = LancePartitionTrigger(
        namespace="events",
        partition_key=["2025-12-01|FR", "2025-12-01|%null"],
        require_rows=True,
        poll_interval=0.2,
        lance_conn_id="lance_test",
    ).serialize()
    assert kwargs["partition_key"] == ["2025-12-01|FR", "2025-12-01|%null"]
    trigger = import_string(classpath)(**kwargs)

    async def scenario() -> Any:
        waiting = asyncio.ensure_future(anext(trigger.run()))
        await asyncio.sleep(0.8)
        assert not waiting.done()  # no namespace yet
        ns = await asyncio.to_thread(make_namespace, lance_test_root)
        await asyncio.sleep(0.6)
        assert not waiting.done()  # no such partitions yet
        await asyncio.to_thread(ns.write, events(8, start=dt.date(2025, 12, 1), days=1))
        return await asyncio.wait_for(waiting, timeout=60)

    event = asyncio.run(scenario())
    assert event.payload["status"] == "success"
    assert [p["values"] for p in event.payload["partitions"]] == [
        {"event_date": "2025-12-01", "country": "FR"},
        {"event_date": "2025-12-01", "country": None},
    ]


def test_trigger_reports_an_unreadable_key_at_once(lance_test_root: Path) -> None:
    make_namespace(lance_test_root)
    trigger = LancePartitionTrigger(
        namespace="events", partition_key="x|y|z", poll_interval=0.2, lance_conn_id="lance_test"
    )
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=60))
    assert event.payload["status"] == "error"
    assert "InvalidArgumentError: partition key 'x|y|z' has 3 value(s)" in event.payload["message"]
