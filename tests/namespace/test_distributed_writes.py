"""The public pieces of a write from many processes: route, stage, summarise, commit."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    MissingPartitionSourceError,
    PartitionedNamespace,
    PartitionField,
    PartitionRouter,
    Stage,
    StaleStage,
    TransactionSummary,
)
from tests.support import EVENTS_SCHEMA, events


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    fields = [PartitionField("event_date", "event_date"), PartitionField("country", "country")]
    ns = PartitionedNamespace.create(tmp_path / "ns", EVENTS_SCHEMA, fields)
    ns.write(events(12))
    return ns


def test_routing_keys_are_equal_exactly_within_a_partition(ns: PartitionedNamespace) -> None:
    data = events(200, days=5)
    keys = PartitionRouter(ns.state()).keys(data).to_pylist()
    partitions = [
        (d, c)
        for d, c in zip(data["event_date"].to_pylist(), data["country"].to_pylist(), strict=True)
    ]
    assert len(set(keys)) == len(set(partitions)) == 20  # 5 days x (3 countries and NULL)
    assert len(set(zip(keys, partitions, strict=True))) == 20  # one key per partition
    # batches are conformed first, as a write conforms them (an int32 id, a string date)
    loose = pa.table(
        {"id": pa.array([1], pa.int32()), "event_date": ["2025-12-10"], "country": ["US"]}
    )
    one = pa.table({"id": [1], "event_date": [dt.date(2025, 12, 10)], "country": ["US"]})
    router = PartitionRouter(ns.state())
    assert router.keys(loose.to_batches()[0]) == router.keys(one)
    assert router.conform(loose).schema == ns.schema


def test_the_driver_refuses_data_a_write_would_refuse(ns: PartitionedNamespace) -> None:
    router = PartitionRouter(ns.state())
    router.check(EVENTS_SCHEMA)
    with pytest.raises(MissingPartitionSourceError, match="'country'"):
        router.check(EVENTS_SCHEMA.remove(EVENTS_SCHEMA.get_field_index("country")))
    with pytest.raises(MissingPartitionSourceError, match="'country'"):  # and on a worker
        router.keys(events(3).drop_columns(["country"]))


def test_stages_from_workers_are_summed_up_then_published_once(ns: PartitionedNamespace) -> None:
    txn = ns.begin("append", txn_id="engine-1")
    version = ns.version
    sent = []
    for i, part in enumerate((events(30, first_id=100), events(10, first_id=200))):
        worker = PartitionedNamespace.open(ns.uri).transaction("engine-1")  # another process
        stage = worker.stage(part, f"task-{i}", record=False, manifest_version=version)
        sent.append(json.dumps(stage.to_json()))
    stages = [Stage.from_json(json.loads(s)) for s in sent]
    before = TransactionSummary.of(ns, txn, {s.stage_id: s for s in stages})
    txn.record_all(stages)
    summary = TransactionSummary.of(ns, txn)
    assert summary == before
    assert summary.rows == 40
    assert summary.files >= len(summary.partitions) == 12  # 3 days x 4 countries
    assert sum(p["rows"] for p in summary.partitions) == 40
    assert Path(summary.record_uri.removeprefix("file://")).is_dir()  # its stage records
    assert summary.state == "staged"
    result = ns.commit(txn)
    assert result.rows == 40
    assert ns.count_rows(filter="id >= 100") == 40
    assert TransactionSummary.of(ns, txn).state == "published"


def test_stages_that_saw_a_partition_differently_cannot_be_summed(ns: PartitionedNamespace) -> None:
    txn = ns.begin("overwrite", txn_id="engine-2")
    first = txn.stage(events(4), "a", record=False)
    ns.write(events(4, first_id=50))  # publishes the partitions between the two stages
    second = txn.stage(events(4), "b", record=False)
    with pytest.raises(StaleStage):
        TransactionSummary.of(ns, txn, {"a": first, "b": second})
