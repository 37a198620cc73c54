"""The fragments of one ``get_fragments`` (what DataFusion reads) are read ahead together:
several leaves at once, at most ``concurrency`` not yet asked for, each opened once, and
none once the fragments are dropped. Leaf opens are watched through ``Storage.table``."""

from __future__ import annotations

import datetime as dt
import gc
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from datafusion import SessionContext

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.io.storage import Storage
from tests.support import events, sort_rows

D = dt.date
SINCE = pc.field("event_date") >= D(2025, 12, 1)
WAIT = 10  # seconds a test waits for a thread before it fails (never reached when it passes)


def watch_opens(
    monkeypatch: pytest.MonkeyPatch, before_open: Callable[[str], None] = lambda uri: None
) -> list[str]:
    """The URIs of the tables opened from now on (``before_open`` runs first)."""
    opened: list[str] = []
    table = Storage.table

    def spied(self: Storage, uri: str, version: int | None = None, **kwargs: Any) -> Any:
        opened.append(uri)
        before_open(uri)
        return table(self, uri, version, **kwargs)

    monkeypatch.setattr(Storage, "table", spied)
    return opened


def six_days(daily: PartitionedNamespace, concurrency: int) -> PartitionedNamespace:
    daily.write(events(60, start=D(2025, 12, 1), days=6))
    return PartitionedNamespace.open(daily.uri, concurrency=concurrency)


def partition_rows(ns: PartitionedNamespace, day: D, columns: list[str]) -> list[dict]:
    return sort_rows(ns.to_table(filter=f"event_date = DATE '{day}'", columns=columns))


def test_fragments_are_read_several_at_once(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first leaf's open waits until the second is opened: read one fragment at a
    time, it would wait in vain."""
    ns = six_days(daily, concurrency=4)
    fragments = ns.to_pyarrow_dataset().get_fragments(SINCE)
    first, second = (f.partition.location for f in fragments[:2])
    second_opened = threading.Event()
    waited: list[bool] = []

    def before_open(uri: str) -> None:
        if uri == second:
            second_opened.set()
        if uri == first:
            waited.append(second_opened.wait(WAIT))

    watch_opens(monkeypatch, before_open)
    table = fragments[0].to_table(columns=["id"], filter=SINCE)
    assert waited == [True]
    assert sort_rows(table) == partition_rows(ns, fragments[0].values["event_date"], ["id"])


def test_at_most_concurrency_fragments_are_read_ahead_each_once(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = six_days(daily, concurrency=2)
    fragments = ns.to_pyarrow_dataset().get_fragments(SINCE)
    locations = [f.partition.location for f in fragments]
    want = [partition_rows(ns, f.values["event_date"], ["id", "country"]) for f in fragments]
    opened = watch_opens(monkeypatch)
    got = [sort_rows(fragments[0].to_table(columns=["id", "country"], filter=SINCE))]
    assert set(opened) <= set(locations[:3])  # the one asked for and two ahead
    got += [sort_rows(f.to_table(columns=["id", "country"], filter=SINCE)) for f in fragments[1:]]
    assert got == want
    assert sorted(opened) == sorted(locations)  # every leaf read once, ahead or not


def test_other_columns_or_a_second_read_of_a_fragment_read_alone(
    daily: PartitionedNamespace,
) -> None:
    ns = six_days(daily, concurrency=4)
    fragments = ns.to_pyarrow_dataset().get_fragments(SINCE)
    days = [f.values["event_date"] for f in fragments]
    ids = fragments[0].to_table(columns=["id"], filter=SINCE)  # what is read ahead
    other = fragments[1].to_table(columns=["id", "amount"], filter=pc.field("amount") > 30.0)
    again = fragments[0].to_table(columns=["id"], filter=SINCE)
    counted = fragments[2].count_rows(SINCE)
    assert sort_rows(ids) == sort_rows(again) == partition_rows(ns, days[0], ["id"])
    want = ns.to_table(filter=f"event_date = DATE '{days[1]}' AND amount > 30", columns=["id"])
    assert sort_rows(other.select(["id"])) == sort_rows(want)
    assert counted == len(partition_rows(ns, days[2], ["id"]))


def test_fragments_asked_for_after_a_scan_of_their_filter_are_read_at_once(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DataFusion scans the dataset with its columns and filter, then asks for the
    fragments of that filter: their leaves are read from then on, in its batch size."""
    ns = six_days(daily, concurrency=2)
    ds = ns.to_pyarrow_dataset()
    want = sort_rows(ds.to_table(columns=["id"], filter=SINCE))
    a_leaf_opened = threading.Event()
    opened = watch_opens(monkeypatch, lambda uri: a_leaf_opened.set())
    ds.scanner(columns=["id"], filter=SINCE)
    fragments = ds.get_fragments(SINCE)
    assert a_leaf_opened.wait(WAIT)  # before any fragment's scan
    scans = [f.scanner(ds.schema, columns=["id"], filter=SINCE, batch_size=4) for f in fragments]
    batches = [b for scan in scans for b in scan.to_batches()]
    assert max(b.num_rows for b in batches) == 4
    assert sort_rows(pa.Table.from_batches(batches)) == want
    assert sorted(opened) == sorted(f.partition.location for f in fragments)


def test_dropped_fragments_open_no_more_leaves(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one thread, the second leaf waits behind the first; dropping the fragments
    (an engine stopped, Ctrl-C) before it runs means it never opens."""
    ns = six_days(daily, concurrency=1)
    fragments = ns.to_pyarrow_dataset().get_fragments(SINCE)
    first = fragments[0].partition.location
    entered, release = threading.Event(), threading.Event()

    def before_open(uri: str) -> None:
        if uri == first:
            entered.set()
            release.wait(WAIT)

    opened = watch_opens(monkeypatch, before_open)
    batches = fragments[0].scanner(columns=["id"]).to_batches()  # starts the read-ahead
    assert entered.wait(WAIT)
    del fragments, batches
    gc.collect()
    release.set()
    ns.storage.beside(lambda: None).result()  # runs after whatever was queued before it
    assert opened == [first]


def test_datafusion_reads_every_kept_leaf_once(
    daily: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = six_days(daily, concurrency=3)
    kept = [p.location for p in ns.prune("event_date >= DATE '2025-12-02'")]
    want = ns.to_table(filter="event_date >= DATE '2025-12-02'", columns=["amount"])
    opened = watch_opens(monkeypatch)
    ctx = SessionContext()
    ctx.register_dataset("events", ns.to_pyarrow_dataset())
    query = "SELECT sum(amount) AS s, count(*) AS n FROM events WHERE event_date >= '2025-12-02'"
    got = ctx.sql(query).to_arrow_table().to_pylist()
    assert got == [{"s": pc.sum(want.column("amount")).as_py(), "n": want.num_rows}]
    assert sorted(opened) == sorted(kept)
