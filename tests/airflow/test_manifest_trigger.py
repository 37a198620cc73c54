"""``LanceManifestTrigger`` driven for real: its async ``run()`` loop polls a real namespace
while another thread publishes into it.

Each publish fires exactly one event, in manifest order, naming the version and the
partitions it published, however the publishes fall between polls; changes readers do not
see fire nothing; a trigger built again from its serialised kwargs and the watermark (what
the triggerer does after a restart) neither repeats nor skips a publish.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import CommitResult, PartitionedNamespace, PartitionField
from airflow_provider_lance.triggers.manifest import LanceManifestTrigger, watermark_key
from tests.conftest import EVENTS_SCHEMA, events

CONN = "lance_test"
POLL = 0.2


def make_namespace(root: Path, name: str = "watched") -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / name,
        schema=EVENTS_SCHEMA,
        partition_fields=[
            PartitionField("event_date", "event_date"),
            PartitionField("country", "country"),
        ],
    )


def rebuilt(trigger: LanceManifestTrigger, **changes: Any) -> LanceManifestTrigger:
    """The trigger as the triggerer builds it: from its classpath and serialised kwargs."""
    from airflow.sdk.module_loading import import_string

    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_provider_lance.triggers.manifest.LanceManifestTrigger"
    built = import_string(classpath)(**{**kwargs, **changes})
    assert isinstance(built, LanceManifestTrigger)
    return built


def day(n: int) -> dt.date:
    return dt.date(2025, 12, 1) + dt.timedelta(days=n)


def watch(
    trigger: LanceManifestTrigger,
    meanwhile: Callable[[], list[CommitResult]],
    *,
    expected: int,
    quiet: float = 6 * POLL,
) -> tuple[list[dict[str, Any]], list[CommitResult]]:
    """Run the trigger's loop while ``meanwhile`` publishes in another thread; return the
    event payloads (waiting ``quiet`` seconds past the ``expected``-th for any extra one)
    and the publishes ``meanwhile`` reported."""
    published: list[CommitResult] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            published.extend(meanwhile())
        except BaseException as exc:
            errors.append(exc)

    async def scenario() -> list[dict[str, Any]]:
        seen: list[dict[str, Any]] = []
        events_ = trigger.run()

        async def consume() -> None:
            async for event in events_:
                seen.append(event.payload)

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(3 * POLL)  # the trigger took its first look
        thread = threading.Thread(target=writer)
        thread.start()
        deadline = time.monotonic() + 120
        while (thread.is_alive() or len(seen) < expected) and time.monotonic() < deadline:
            assert not consumer.done(), consumer.exception()
            await asyncio.sleep(0.05)
        await asyncio.sleep(quiet)  # nothing more comes
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
        await events_.aclose()
        thread.join()
        return seen

    seen = asyncio.run(scenario())
    if errors:
        raise errors[0]
    return seen, published


def as_published(payload: dict[str, Any]) -> tuple[int, set[tuple[str, int]]]:
    return payload["manifest_version"], {
        (p["object_id"], p["read_version"]) for p in payload["partitions"]
    }


def of(result: CommitResult) -> tuple[int, set[tuple[str, int]]]:
    return result.manifest_version, {(p.object_id, p.read_version) for p in result.partitions}


def test_each_publish_fires_one_event_in_order_and_nothing_else_fires(
    lance_test_root: Path,
) -> None:
    ns = make_namespace(lance_test_root)
    before = ns.write(events(8, start=day(0), days=2))  # published before the watch began
    trigger = rebuilt(
        LanceManifestTrigger(namespace="watched", lance_conn_id=CONN, poll_interval=POLL)
    )

    def publishes() -> list[CommitResult]:
        out = [ns.write(events(8, start=day(1), days=2, first_id=100))]  # day 1 again + day 2
        out.append(ns.write(events(4, start=day(3), days=1, first_id=200), mode="overwrite"))
        # back to back: several publishes between two polls, each its own event
        out += [ns.write(events(2, start=day(4 + i), days=1, first_id=300 + i)) for i in range(3)]
        ns.add_column(pa.field("note", pa.utf8()))  # a schema change: nothing published
        txn = ns.begin("append", txn_id="left-staged")  # staged, never committed
        txn.stage(events(4, start=day(9), days=1, first_id=900), stage_id="s")
        ns.abort("left-staged")
        ns.maintain()  # compaction rewrites __manifest rows, publishes nothing
        time.sleep(4 * POLL)
        out.append(ns.commit(_staged(ns, "late", day(5), first_id=500)))  # through a commit
        return out

    def and_an_empty_partition() -> list[CommitResult]:
        out = publishes()
        created.extend(ns.create_partitions([{"event_date": day(7), "country": "IT"}]))
        return out

    created: list[Any] = []
    seen, published = watch(trigger, and_an_empty_partition, expected=7)
    assert (len(published), len(seen)) == (6, 7)  # the schema change, abort, compaction: none
    assert [as_published(e) for e in seen[:6]] == [of(r) for r in published]
    (partition,) = created  # created empty, and published: readers see it
    assert as_published(seen[6])[1] == {(partition.object_id, partition.read_version)}
    versions = [e["manifest_version"] for e in seen]
    assert versions == sorted(set(versions))
    assert before.manifest_version < versions[0]  # history before the watch: not reported
    first = seen[0]
    assert first["namespace"] == ns.uri
    assert first["previous_version"] < first["manifest_version"]
    assert first["partition_count"] == len(first["partitions"]) == 4
    assert first["truncated"] is False
    assert first["history_lost"] is False
    keys = {p["key"] for p in first["partitions"]}
    assert keys == {
        f"{p['values']['event_date']}|{p['values']['country'] or '%null'}"
        for p in first["partitions"]
    }
    assert {p["key"] for p in seen[-1]["partitions"]} == {"2025-12-08|IT"}


def _staged(ns: PartitionedNamespace, txn_id: str, start: dt.date, first_id: int) -> str:
    txn = ns.begin("append", txn_id=txn_id)
    txn.stage(events(3, start=start, days=1, first_id=first_id), stage_id="s")
    return txn.txn_id


def test_a_restarted_trigger_neither_repeats_nor_skips(lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(4, start=day(0), days=1))
    first = rebuilt(
        LanceManifestTrigger(
            namespace="watched", lance_conn_id=CONN, poll_interval=POLL, after_version=ns.version
        )
    )

    def three() -> list[CommitResult]:
        return [ns.write(events(2, start=day(1 + i), days=1, first_id=10 * i)) for i in range(3)]

    seen, published = watch(first, three, expected=3)
    assert [as_published(e) for e in seen] == [of(r) for r in published]
    watermark = seen[-1]["manifest_version"]

    # the triggerer is down: two publishes happen meanwhile
    down = [ns.write(events(2, start=day(5 + i), days=1, first_id=50 + i)) for i in range(2)]
    # the restart: the trigger from its serialised kwargs, the watermark as the store keeps it
    restarted = rebuilt(first, after_version=watermark)

    def one_more() -> list[CommitResult]:
        return [ns.write(events(2, start=day(9), days=1, first_id=90))]

    again, after = watch(restarted, one_more, expected=3)
    assert [as_published(e) for e in again] == [of(r) for r in [*down, *after]]
    assert again[0]["previous_version"] == watermark


def test_the_first_start_watches_from_the_latest_version(lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    for i in range(3):
        ns.write(events(2, start=day(i), days=1, first_id=10 * i))
    trigger = LanceManifestTrigger(namespace="watched", lance_conn_id=CONN, poll_interval=POLL)
    seen, published = watch(
        trigger, lambda: [ns.write(events(2, start=day(8), days=1, first_id=80))], expected=1
    )
    assert [as_published(e) for e in seen] == [of(r) for r in published]


def test_a_namespace_created_while_watched_reports_every_publish(lance_test_root: Path) -> None:
    trigger = LanceManifestTrigger(namespace="later", lance_conn_id=CONN, poll_interval=POLL)

    def create_and_publish() -> list[CommitResult]:
        ns = make_namespace(lance_test_root, "later")
        return [ns.write(events(2, start=day(i), days=1, first_id=10 * i)) for i in range(2)]

    seen, published = watch(trigger, create_and_publish, expected=2)
    assert [as_published(e) for e in seen] == [of(r) for r in published]


def test_versions_removed_before_they_were_read_are_reported_as_lost_history(
    lance_test_root: Path,
) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(4, start=day(0), days=1))
    watermark = ns.version
    for i in range(3):
        ns.write(events(2, start=day(1 + i), days=1, first_id=10 * i))
    report = ns.maintain(older_than=dt.timedelta(0))  # the watermark's version is removed
    assert report.retained_manifest_versions[0] > watermark
    trigger = LanceManifestTrigger(
        namespace="watched", lance_conn_id=CONN, poll_interval=POLL, after_version=watermark
    )
    seen, _ = watch(trigger, list, expected=1)
    assert len(seen) == 1
    assert seen[0]["history_lost"] is True
    assert seen[0]["manifest_version"] == ns.version
    assert {p["object_id"] for p in seen[0]["partitions"]} == {p.object_id for p in ns.partitions()}


def test_the_watermark_key_names_the_namespace() -> None:
    assert watermark_key("file:///data/ns") == "lance.manifest_version file:///data/ns"
    long = "s3://bucket/" + "x" * 600
    key = watermark_key(long)
    assert len(key) <= 512
    assert key != watermark_key(long + "y")


@pytest.mark.parametrize("poll", [0.0, POLL])
def test_serialize_round_trips(poll: float) -> None:
    trigger = LanceManifestTrigger(
        namespace="n", lance_conn_id=CONN, poll_interval=poll, after_version=7, max_partitions=3
    )
    again = rebuilt(trigger)
    assert again.serialize() == trigger.serialize()
