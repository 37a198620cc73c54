"""``LanceManifestTrigger`` driven for real: its async ``run()`` loop polls a real namespace
while another thread publishes into it.

Every publish is reported exactly once, in manifest order, naming its version; what one
poll found is one event whose top level sums its publishes up (every partition published,
once, at its latest read_version), bounded however far behind the trigger was; changes
readers do not see are not reported; a trigger built again from its serialised kwargs and
the watermark (what the triggerer does after a restart) neither repeats nor skips a publish.
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
from airflow_provider_lance.triggers import manifest
from airflow_provider_lance.triggers.manifest import LanceManifestTrigger, watermark_key
from tests.support import EVENTS_SCHEMA, events

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
    event payloads (waiting ``quiet`` seconds past the ``expected``-th publish reported for
    any extra one) and the publishes ``meanwhile`` reported."""
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
        while (thread.is_alive() or len(reported(seen)) < expected) and (
            time.monotonic() < deadline
        ):
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


def reported(payloads: list[dict[str, Any]]) -> list[int]:
    """The manifest versions of the publishes the events reported, in the order reported
    (an event without ``publishes`` is one publish, as the trigger fired them before)."""
    return [
        p["manifest_version"] for payload in payloads for p in payload.get("publishes", [payload])
    ]


def as_published(payload: dict[str, Any]) -> tuple[int, set[tuple[str, int]]]:
    return payload["manifest_version"], {
        (p["object_id"], p["read_version"]) for p in payload["partitions"]
    }


def of(*results: CommitResult) -> tuple[int, set[tuple[str, int]]]:
    """What an event reporting ``results`` says: the last version, and every partition they
    published once, at its latest read_version."""
    latest = {p.object_id: p.read_version for r in results for p in r.partitions}
    return results[-1].manifest_version, set(latest.items())


def expected(
    payloads: list[dict[str, Any]], results: list[CommitResult]
) -> list[tuple[int, set[tuple[str, int]]]]:
    """What ``payloads`` should say, grouping ``results`` as the events reported them."""
    by_version = {r.manifest_version: r for r in results}
    return [of(*(by_version[p["manifest_version"]] for p in e["publishes"])) for e in payloads]


@pytest.mark.integration
def test_every_publish_is_reported_once_in_order_and_nothing_else_is(
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
        # back to back: several publishes between two polls, reported together
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
        time.sleep(4 * POLL)
        created.extend(ns.create_partitions([{"event_date": day(7), "country": "IT"}]))
        created_at.append(ns.version)
        return out

    created: list[Any] = []
    created_at: list[int] = []
    seen, published = watch(trigger, and_an_empty_partition, expected=7)
    # the schema change, abort and compaction: not reported
    assert reported(seen) == [r.manifest_version for r in published] + created_at
    (partition,) = created  # created empty, and published: readers see it
    # (the creation as a result: the version and the partition it published)
    published.append(CommitResult(created_at[0], "create", [partition]))  # type: ignore[list-item]
    assert [as_published(e) for e in seen] == expected(seen, published)
    for event in seen:  # the top level sums the publishes up
        assert event["namespace"] == ns.uri
        assert event["previous_version"] == event["publishes"][0]["previous_version"]
        assert event["manifest_version"] == event["publishes"][-1]["manifest_version"]
        assert event["publish_count"] == len(event["publishes"])
        assert event["partition_count"] == len(event["partitions"])
        assert event["publishes_truncated"] is event["truncated"] is event["history_lost"] is False
        previous = event["previous_version"]
        for entry in event["publishes"]:
            assert previous <= entry["previous_version"] < entry["manifest_version"]
            previous = entry["manifest_version"]
    assert before.manifest_version == seen[0]["previous_version"]  # history before: not reported
    first = seen[0]["partitions"]
    assert {p["key"] for p in first} == {
        f"{p['values']['event_date']}|{p['values']['country'] or '%null'}" for p in first
    }
    assert "2025-12-08|IT" in {p["key"] for p in seen[-1]["partitions"]}


@pytest.mark.integration
def test_publishes_found_in_one_poll_are_one_event(lance_test_root: Path) -> None:
    """What one poll finds is one event: Airflow makes one run of the events queued between
    two scheduler loops and consumes only those up to the first (see the module docstring
    of ``triggers.manifest``), so events yielded back to back would strand all but one."""
    ns = make_namespace(lance_test_root)
    ns.write(events(4, start=day(0), days=1))
    watermark = ns.version
    # while no trigger runs: day 1, day 1 again with day 2, day 3 (10 partitions, 2 of them twice)
    published = [
        ns.write(events(4, start=day(1), days=1)),
        ns.write(events(8, start=day(1), days=2, first_id=10)),
        ns.write(events(4, start=day(3), days=1, first_id=20)),
    ]
    trigger = LanceManifestTrigger(
        namespace="watched", lance_conn_id=CONN, poll_interval=30.0, after_version=watermark
    )
    seen, _ = watch(trigger, list, expected=3, quiet=3 * POLL)
    (event,) = seen
    assert reported(seen) == [r.manifest_version for r in published]
    assert as_published(event) == of(*published)
    assert (event["previous_version"], event["publish_count"], event["partition_count"]) == (
        watermark,
        3,
        len({p.object_id for r in published for p in r.partitions}),
    )
    assert [p["partition_count"] for p in event["publishes"]] == [
        len(r.partitions) for r in published
    ]


@pytest.mark.integration
def test_an_event_stays_small_however_far_behind_the_trigger_is(
    lance_test_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(4, start=day(0), days=1))
    watermark = ns.version
    published = [ns.write(events(2, start=day(1 + i), days=1, first_id=10 * i)) for i in range(9)]
    monkeypatch.setattr(manifest, "VERSIONS_PER_POLL", 2)  # behind: read 2 versions a time
    trigger = LanceManifestTrigger(
        namespace="watched",
        lance_conn_id=CONN,
        poll_interval=30.0,
        after_version=watermark,
        max_partitions=3,
        max_publishes=4,
    )
    seen, _ = watch(trigger, list, expected=4, quiet=3 * POLL)
    (event,) = seen  # caught up within a poll interval: one event
    partitions = [(p.object_id, p.read_version) for r in published for p in r.partitions]
    assert reported(seen) == [r.manifest_version for r in published[:4]]
    assert event["publish_count"] == 9
    assert event["publishes_truncated"] is True
    assert (event["previous_version"], event["manifest_version"]) == (
        watermark,
        published[-1].manifest_version,
    )
    assert event["partition_count"] == len(partitions) == 18
    assert [(p["object_id"], p["read_version"]) for p in event["partitions"]] == partitions[:3]
    assert event["truncated"] is True


def _staged(ns: PartitionedNamespace, txn_id: str, start: dt.date, first_id: int) -> str:
    txn = ns.begin("append", txn_id=txn_id)
    txn.stage(events(3, start=start, days=1, first_id=first_id), stage_id="s")
    return txn.txn_id


@pytest.mark.integration
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
    assert reported(seen) == [r.manifest_version for r in published]
    assert [as_published(e) for e in seen] == expected(seen, published)
    watermark = seen[-1]["manifest_version"]

    # the triggerer is down: two publishes happen meanwhile
    down = [ns.write(events(2, start=day(5 + i), days=1, first_id=50 + i)) for i in range(2)]
    # the restart: the trigger from its serialised kwargs, the watermark as the store keeps it
    restarted = rebuilt(first, after_version=watermark)

    def one_more() -> list[CommitResult]:
        time.sleep(4 * POLL)  # after the restart's first poll
        return [ns.write(events(2, start=day(9), days=1, first_id=90))]

    again, after = watch(restarted, one_more, expected=3)
    assert reported(again) == [r.manifest_version for r in [*down, *after]]
    # the publishes made while it was down: found by one poll, one event
    assert [as_published(e) for e in again] == [of(*down), of(*after)]
    assert again[0]["previous_version"] == watermark


def test_the_first_start_watches_from_the_latest_version(lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    for i in range(3):
        ns.write(events(2, start=day(i), days=1, first_id=10 * i))
    trigger = LanceManifestTrigger(namespace="watched", lance_conn_id=CONN, poll_interval=POLL)
    seen, published = watch(
        trigger, lambda: [ns.write(events(2, start=day(8), days=1, first_id=80))], expected=1
    )
    assert [as_published(e) for e in seen] == [of(*published)]


@pytest.mark.integration
def test_a_namespace_created_while_watched_reports_every_publish(lance_test_root: Path) -> None:
    trigger = LanceManifestTrigger(namespace="later", lance_conn_id=CONN, poll_interval=POLL)

    def create_and_publish() -> list[CommitResult]:
        ns = make_namespace(lance_test_root, "later")
        return [ns.write(events(2, start=day(i), days=1, first_id=10 * i)) for i in range(2)]

    seen, published = watch(trigger, create_and_publish, expected=2)
    assert reported(seen) == [r.manifest_version for r in published]
    assert [as_published(e) for e in seen] == expected(seen, published)


@pytest.mark.integration
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
    assert [p["history_lost"] for p in seen[0]["publishes"]] == [True]
    assert seen[0]["manifest_version"] == ns.version
    assert {p["object_id"] for p in seen[0]["partitions"]} == {p.object_id for p in ns.partitions()}


@pytest.mark.integration
def test_the_watermark_key_names_the_namespace() -> None:
    assert watermark_key("file:///data/ns") == "lance.manifest_version file:///data/ns"
    long = "s3://bucket/" + "x" * 600
    key = watermark_key(long)
    assert len(key) <= 512
    assert key != watermark_key(long + "y")


@pytest.mark.integration
@pytest.mark.parametrize("poll", [0.5, POLL])  # 0 is refused: a poll loop without a pause
def test_serialize_round_trips(poll: float) -> None:
    trigger = LanceManifestTrigger(
        namespace="n",
        lance_conn_id=CONN,
        poll_interval=poll,
        after_version=7,
        max_partitions=3,
        max_publishes=5,
    )
    again = rebuilt(trigger)
    assert again.serialize() == trigger.serialize()
