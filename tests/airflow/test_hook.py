"""``LancePartitionedHook`` on real namespaces on disk (connection from the environment)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.hooks.specs import parse_partition_fields, parse_schema, parse_type
from airflow_provider_lance.namespace import (
    FilterError,
    NamespaceNotFoundError,
    PartitionSpecError,
    SchemaError,
)
from tests.support import BUCKET, events
from tests.support import tree as files_below

SCHEMA = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "event_date", "type": "date32"},
    {"name": "country", "type": "string"},
    {"name": "amount", "type": "double"},
]
BY_DAY = [{"name": "event_date", "source": "event_date"}]


@pytest.fixture
def hook(lance_test_root: Path) -> LancePartitionedHook:
    return LancePartitionedHook("lance_test")


def test_type_and_schema_specs() -> None:
    assert parse_type("timestamp[us, tz=UTC]") == pa.timestamp("us", tz="UTC")
    assert parse_type("decimal128(12, 2)") == pa.decimal128(12, 2)
    assert parse_type({"type": "timestamp", "unit": "ms"}) == pa.timestamp("ms")
    assert parse_type("long") == pa.int64()
    schema = parse_schema(SCHEMA)
    assert schema.field("id").nullable is False
    assert schema.field("country").type == pa.utf8()
    fields = parse_partition_fields(
        [
            {
                "name": "m",
                "source": "event_date",
                "expression": "date_trunc('month', col)",
                "result_type": "date32",
            }
        ]
    )
    assert (fields[0].source, fields[0].result_type) == ("event_date", pa.date32())
    with pytest.raises(SchemaError, match="unknown keys"):
        parse_schema([{"name": "x", "type": "int64", "nulable": True}])
    with pytest.raises(SchemaError, match="column 'x'"):
        parse_schema([{"name": "x", "type": "int65"}])


def test_create_or_open_is_idempotent_and_checks_the_spec(hook: LancePartitionedHook) -> None:
    ns, created = hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    assert created
    assert ns.uri == hook.namespace_uri("events")
    again, created = hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    assert (again.uri, created, again.version) == (ns.uri, False, ns.version)
    with pytest.raises(PartitionSpecError, match=r"partitioned by \['event_date'\]"):
        hook.create_or_open(
            "events", schema=SCHEMA, partition_fields=[{"name": "country", "source": "country"}]
        )
    with pytest.raises(SchemaError, match=r"no column\(s\) \['channel'\]"):
        hook.create_or_open(
            "events", schema=[*SCHEMA, {"name": "channel", "type": "utf8"}], partition_fields=BY_DAY
        )
    with pytest.raises(NamespaceNotFoundError):
        hook.open("missing")


def test_partitions_prune_describe(hook: LancePartitionedHook) -> None:
    hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    created = hook.create_partitions(
        [{"event_date": "2025-12-01"}, {"event_date": dt.date(2025, 12, 2)}], "events"
    )
    assert [p["values"] for p in created] == [
        {"event_date": "2025-12-01"},
        {"event_date": "2025-12-02"},
    ]
    assert all(p["read_version"] is not None for p in created)
    assert json.loads(json.dumps(created)) == created  # XCom-ready
    pruned = hook.prune("event_date = DATE '2025-12-02'", "events")
    assert [p["object_id"] for p in pruned] == [created[1]["object_id"]]
    assert len(hook.prune(None, "events")) == 2
    with pytest.raises(FilterError, match="no_such_column"):
        hook.prune("no_such_column = 1", "events")
    info = hook.describe("events")
    assert info["partition_count"] == info["published_count"] == 2
    assert info["partition_specs"]["1"][0]["name"] == "event_date"
    assert [c["name"] for c in info["schema"]] == ["id", "event_date", "country", "amount"]


def test_commit_publishes_several_staged_transactions_atomically(
    hook: LancePartitionedHook,
) -> None:
    ns, _ = hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    staged = []
    for i, day in enumerate([dt.date(2025, 12, 1), dt.date(2025, 12, 5)]):
        txn = ns.begin("append", txn_id=f"load-{i}")
        txn.stage(events(30, start=day, days=2, first_id=i * 100), stage_id="task")
        staged.append(txn.txn_id)
    before = ns.version
    assert ns.count_rows() == 0
    result = hook.commit(staged, txn_id="combined-load", namespace="events")
    assert result["txn_id"] == "combined-load"
    assert len(result["partitions"]) == 4
    assert sum(p["rows"] for p in result["partitions"]) == 60
    assert ns.count_rows() == 60
    # a retry returns the recorded result and publishes nothing
    again = hook.commit(staged, txn_id="combined-load", namespace="events")
    assert again == result
    assert ns.count_rows() == 60
    assert result["manifest_version"] > before
    states = {t["txn_id"]: t["state"] for t in hook.transactions("events")}
    assert states["combined-load"] == "published"


def test_evolve_partition_spec_is_idempotent(hook: LancePartitionedHook) -> None:
    hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    by_country = [{"name": "country", "source": "country"}]
    assert hook.evolve_partition_spec(by_country, "events") == 2
    assert hook.evolve_partition_spec(by_country, "events") == 2
    assert hook.open("events").spec_version == 2


def test_recover_aborts_abandoned_transactions(hook: LancePartitionedHook) -> None:
    ns, _ = hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    txn = ns.begin("append", txn_id="abandoned")
    txn.stage(events(10), stage_id="s")
    assert hook.recover(lease_seconds=3600, namespace="events") == []
    assert hook.recover(lease_seconds=0, namespace="events") == ["abandoned"]
    assert ns.count_rows() == 0


def test_test_connection(hook: LancePartitionedHook, lance_test_root: Path) -> None:
    ok, message = hook.test_connection()
    assert ok
    assert "reachable" in message
    hook.create_or_open(str(lance_test_root), schema=SCHEMA, partition_fields=BY_DAY)
    ok, message = LancePartitionedHook("lance_test").test_connection()
    assert ok
    assert "partitioned namespace with 0 partition(s)" in message


def test_test_connection_reports_any_failure_as_a_failed_test() -> None:
    ok, message = LancePartitionedHook("lance_not_defined").test_connection()
    assert not ok  # not an exception (the UI would show a 500)
    assert "lance_not_defined" in message


def test_check_partitions_waits_for_publication(hook: LancePartitionedHook) -> None:
    check = hook.check_partitions("events", values=[{"event_date": "2025-12-10"}])
    assert not check.done
    assert "not a partitioned namespace" in check.reason
    ns, _ = hook.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    assert not hook.check_partitions("events", values=[{"event_date": "2025-12-10"}]).done
    hook.create_partitions([{"event_date": "2025-12-10"}], "events")
    assert hook.check_partitions("events", values=[{"event_date": "2025-12-10"}]).done
    empty = hook.check_partitions(
        "events", filter="event_date >= DATE '2025-12-01'", require_rows=True
    )
    assert not empty.done
    ns.write(events(8, start=dt.date(2025, 12, 10), days=1))
    full = hook.check_partitions(
        "events", filter="event_date >= DATE '2025-12-01'", require_rows=True
    )
    assert full.done
    assert [p["values"] for p in full.partitions] == [{"event_date": "2025-12-10"}]
    with pytest.raises(PartitionSpecError):
        hook.check_partitions("events", values=[{"country": "DE"}])


@pytest.mark.integration
@pytest.mark.s3
def test_hook_on_s3_through_the_connection(
    monkeypatch: pytest.MonkeyPatch,
    storage_options: dict[str, str],
) -> None:
    """The convenience fields reach Lance: a namespace on a local S3 server (moto)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_S3",
        json.dumps(
            {
                "conn_type": "lance",
                "login": storage_options["aws_access_key_id"],
                "password": storage_options["aws_secret_access_key"],
                "extra": {
                    "root": f"s3://{BUCKET}/warehouse",
                    "endpoint": storage_options["aws_endpoint"],
                    "region": storage_options["aws_region"],
                    "allow_http": True,
                },
            }
        ),
    )
    s3 = LancePartitionedHook("lance_s3")
    ns, created = s3.create_or_open("events", schema=SCHEMA, partition_fields=BY_DAY)
    assert created
    assert ns.uri == f"s3://{BUCKET}/warehouse/events"
    ns.write(events(12))
    assert [p["values"]["event_date"] for p in s3.prune(None, "events")] == [
        "2025-12-10",
        "2025-12-11",
        "2025-12-12",
    ]
    ok, message = s3.test_connection()
    assert ok, message


def test_no_io_on_construction(tmp_path: Path) -> None:
    before = files_below(tmp_path)
    LancePartitionedHook("connection_that_does_not_exist")  # lazily read: no error yet
    assert files_below(tmp_path) == before
