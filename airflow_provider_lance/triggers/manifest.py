"""``LanceManifestTrigger``: an event whenever a namespace publishes (event-driven scheduling).

Every publish of a partitioned namespace is one ``__manifest`` commit that gives partitions
a new ``read_version`` (or creates them). The trigger walks the manifest versions after its
watermark one by one and compares each version's partition rows with the version before:
a version that published is a publish naming the version and the partitions it published;
versions that changed nothing readers see (claims, transaction records, compaction, schema
changes) are none.

**One event carries every publish one poll found**, in manifest order, and two events of a
trigger are at least a poll interval apart. Why not one event per publish: Airflow (3.3.2)
queues an asset-triggered run as one ``AssetDagRunQueue`` row per (asset, DAG) that keeps
the ``created_at`` of the first event queued (``AssetManager._queue_dagruns_nonpartitioned_*``
merges or skips on conflict), and the scheduler's run takes only the events up to that time
and then deletes the row (``SchedulerJobRunner._create_dag_runs_asset_triggered``): a second
event queued before the scheduler's next loop waits, unconsumed, for an event after it. The
triggerer hands the events of one sync to the database together, so events yielded back to
back usually met that case. One event carrying all a poll found is consumed whole, and a
poll interval between events gives the scheduler (which takes that step every loop) time to
take each one on its own. A trigger far behind reads ``VERSIONS_PER_POLL`` versions
at a time without sleeping and reports what it found at most once a poll interval, in an
event bounded by ``max_partitions`` and ``max_publishes`` however far behind it was.

**The watermark** (the last manifest version reported) lives in Airflow 3.3's asset state
store of the watched asset, under a key naming the namespace. Why there:

* trigger kwargs cannot hold it: Airflow serialises them once, when the DAG is parsed, and
  identifies a watcher's trigger by the hash of its kwargs; a running trigger's kwargs are
  never written back, so a watermark kept on ``self`` is lost on every triggerer restart;
* the asset state store is what Airflow offers watchers for exactly this (the triggerer
  hands it to event triggers that watch assets): it sits in the metadata database next to
  the asset's events, moves with the trigger to any triggerer, survives restarts and
  lives as long as the asset; a Variable is global and nobody's, and a JSON object next to
  the namespace would need write access to the lake from the triggerer (watchers usually
  read only) and outlive an Airflow whose history it no longer matches;
* Airflow's asset event history would be the tightest record (an event and its watermark
  in one row) but a trigger cannot read it.

**At least once.** A trigger cannot learn when the triggerer has stored an event it
yielded: the trigger runner sends its queued events to the triggerer's supervisor about
once a second (``TriggerRunner.sync_state_to_supervisor``) and the supervisor writes them
at the end of its loop (``TriggerRunnerSupervisor.handle_events``), while a watermark
written to the store goes to the database at once. On a graceful stop neither loop runs
again after the stop signal (``while not self.stop``), so events yielded in the last second
are dropped, not stored: writing the watermark before yielding (or when the trigger is
cancelled) could skip a publish, so it is not done. The watermark covering an event is
written ``max(poll_interval, MIN_WATERMARK_DELAY)`` seconds after the event was yielded.
Hence the rule: the trigger stopping for any reason (a crash, a graceful triggerer stop or
restart, a deploy, the trigger moving to another triggerer, the DAG paused) within that
delay after an event reports that event's publishes again when it runs next, possibly
together with newer ones; it never skips one. Every publish names its manifest version, so
a consumer tells a repeat by versions it has already processed (``publishes[*]
.manifest_version``, or the event's ``previous_version`` being before the last
``manifest_version`` it processed).

Versions removed by maintenance before the trigger read them are reported with the next
version still there; if even the watermark's own version is gone the publish says
``"history_lost": true`` and lists every published partition. Without a store (Airflow
before 3.3, or one trigger shared by several assets: the store then refuses to pick one)
the watermark lives in memory only, and a restart watches from the latest version (or
``after_version``).

Usable in ``AssetWatcher(name=..., trigger=LanceManifestTrigger(namespace=...))``.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_provider_lance import validation as v
from airflow_provider_lance.common import describe_error
from airflow_provider_lance.hooks.lance import DEFAULT_CONN_ID, LancePartitionedHook
from airflow_provider_lance.namespace.errors import (
    LanceNamespaceError,
    ManifestError,
    NamespaceNotFoundError,
    VersionBeforeCreationError,
    VersionNotFoundError,
)

if TYPE_CHECKING:
    from airflow_provider_lance.namespace import NamespaceState, Partition, PartitionedNamespace

#: Key of the watermark in the asset state store: this prefix and the namespace URI.
WATERMARK_KEY_PREFIX = "lance.manifest_version "
#: The store's keys are at most 512 characters; longer URIs are named by a digest.
_MAX_KEY = 512
#: Manifest versions read per poll; a trigger far behind catches up without sleeping.
VERSIONS_PER_POLL = 256
#: Seconds at least between yielding an event and storing the watermark that covers it:
#: the triggerer stores an event within about two seconds (its runner syncs every second,
#: its supervisor writes each loop), so a crash never skips one even with a short poll.
MIN_WATERMARK_DELAY = 5.0
#: Raised by AssetStateStoreAccessors when the trigger watches several assets.
_MULTI_ASSET_ERROR = "concrete inlets and outlets"


def watermark_key(uri: str) -> str:
    """The asset state store key of a namespace's watermark."""
    key = WATERMARK_KEY_PREFIX + uri
    if len(key) <= _MAX_KEY:
        return key
    return WATERMARK_KEY_PREFIX + "blake2b:" + hashlib.blake2b(uri.encode()).hexdigest()


@dataclass(frozen=True)
class Publish:
    """One manifest version that published partitions."""

    version: int
    previous_version: int
    partitions: list[Partition]
    history_lost: bool = False


def published_between(before: NamespaceState | None, after: NamespaceState) -> list[Partition]:
    """The partitions ``after`` published: new ones, and those with another
    ``read_version`` than in ``before`` (None: every published partition)."""
    import pyarrow as pa

    old = dict(before.read_versions()) if before is not None else {}
    changed = [
        row
        for row, (oid, rv) in enumerate(after.read_versions())
        if rv is not None and (before is None or old.get(oid) != rv)
    ]
    return after.partitions_from_rows(after.tables.take(pa.array(changed, pa.int64())))


def scan_publishes(
    ns: PartitionedNamespace, after: int, *, limit: int | None = None
) -> tuple[list[Publish], int]:
    """The publishes of versions ``after + 1 ...`` (at most ``limit`` versions read, by
    default ``VERSIONS_PER_POLL``), and the last version read (``after`` when there is
    nothing new)."""
    latest = ns.version
    last = min(latest, after + (VERSIONS_PER_POLL if limit is None else limit))
    if last <= after:
        return [], after
    previous, lost = _state_or_none(ns, after)
    found: list[Publish] = []
    compared = after
    for version in range(after + 1, last + 1):
        state, gone = _state_or_none(ns, version)
        if state is None:
            if not gone:  # the namespace was still being created at that version
                compared = version
            continue
        partitions = published_between(previous, state)
        if partitions:
            found.append(Publish(version, compared, partitions, history_lost=lost))
        previous, compared, lost = state, version, False
    return found, last


def _state_or_none(ns: PartitionedNamespace, version: int) -> tuple[NamespaceState | None, bool]:
    """``(state, gone)``: the state at ``version``, or None because the version was removed
    (``gone``) or the namespace had no spec yet at that version (version 0 included)."""
    if version <= 0:
        return None, False
    try:
        return ns.state(version), False
    except (NamespaceNotFoundError, VersionBeforeCreationError):
        return None, False
    except (ManifestError, VersionNotFoundError):
        return None, True


@dataclass
class Found:
    """The publishes a trigger found since its last event, bounded for the event reporting them.

    The first ``max_publishes`` publishes are listed and the first ``max_partitions``
    partitions (each once, at the latest ``read_version`` any of the publishes gave it); the
    rest are counted only, so an event stays small however far behind the trigger was (event
    payloads are stored in the asset event's ``extra`` and shown in the UI). The set of
    partition ids it counts is as large as the partitions published, never larger than the
    namespace's partition rows the trigger reads anyway.
    """

    max_partitions: int
    max_publishes: int
    publish_count: int = 0
    previous_version: int | None = None
    manifest_version: int | None = None
    history_lost: bool = False
    publishes: list[dict[str, Any]] = field(default_factory=list)
    #: the listed partitions by object_id (insertion order: the order they were published)
    partitions: dict[str, dict[str, Any]] = field(default_factory=dict)
    partition_ids: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return self.publish_count > 0

    def add(self, publish: Publish, state: NamespaceState) -> None:
        """Take one more publish (``state``, the latest: the partitions' keys)."""
        if self.previous_version is None:
            self.previous_version = publish.previous_version
        self.manifest_version = publish.version
        self.publish_count += 1
        self.history_lost = self.history_lost or publish.history_lost
        if len(self.publishes) < self.max_publishes:
            self.publishes.append(
                {
                    "manifest_version": publish.version,
                    "previous_version": publish.previous_version,
                    "partition_count": len(publish.partitions),
                    "history_lost": publish.history_lost,
                }
            )
        for partition in publish.partitions:
            self.partition_ids.add(partition.object_id)
            if partition.object_id in self.partitions or len(self.partitions) < self.max_partitions:
                self.partitions[partition.object_id] = _listed(partition, state)

    def payload(self, uri: str) -> dict[str, Any]:
        """The event payload (see :class:`LanceManifestTrigger`)."""
        return {
            "namespace": uri,
            "manifest_version": self.manifest_version,
            "previous_version": self.previous_version,
            "publish_count": self.publish_count,
            "publishes": list(self.publishes),
            "publishes_truncated": self.publish_count > len(self.publishes),
            "partition_count": len(self.partition_ids),
            "partitions": list(self.partitions.values()),
            "truncated": len(self.partition_ids) > len(self.partitions),
            "history_lost": self.history_lost,
        }


def _listed(partition: Partition, state: NamespaceState) -> dict[str, Any]:
    """A partition as an event lists it (``key``: None when it has no Airflow key)."""
    from airflow_provider_lance.partition_keys import summary_key

    summary = partition.to_dict()
    try:
        key: str | None = summary_key(state, summary)
    except LanceNamespaceError:  # e.g. longer than Airflow keeps
        key = None
    return {
        "object_id": partition.object_id,
        "values": summary["values"],
        "read_version": partition.read_version,
        "spec_version": partition.spec_version,
        "key": key,
    }


_ARGUMENTS: dict[str, v.Check] = {
    "namespace": v.namespace,
    "lance_conn_id": v.conn_id,
    "poll_interval": v.interval(positive=True),
    "after_version": v.whole(minimum=0, optional=True, none_means="the latest version"),
    "max_partitions": v.whole(minimum=0),
    "max_publishes": v.whole(minimum=0),
}


class LanceManifestTrigger(BaseEventTrigger):
    """Fire an event for what a partitioned namespace published (for ``AssetWatcher``).

    One event per poll that found publishes (events at least ``poll_interval`` apart):
    ``{"namespace", "manifest_version", "previous_version", "publish_count", "publishes":
    [{"manifest_version", "previous_version", "partition_count", "history_lost"}, ...first
    max_publishes...], "publishes_truncated", "partition_count", "partitions": [{"object_id",
    "values", "read_version", "spec_version", "key"}, ...first max_partitions...],
    "truncated", "history_lost"}``. The top level sums the publishes up: the
    ``previous_version`` of the first, the ``manifest_version`` of the last, every partition
    any of them published once (``partition_count`` of them), at its latest ``read_version``,
    and ``history_lost`` if any publish lost history; an event of one publish is what the
    trigger fired per publish before. ``key``: the partition's Airflow partition key
    (:mod:`airflow_provider_lance.partition_keys`). Downstream tasks find it as
    ``triggering_asset_events[asset][i].extra["payload"]`` and read the partitions as of
    ``manifest_version`` (or, truncated, everything published after ``previous_version``).

    Delivery is at least once (the module docstring says exactly when a publish is reported
    again); every publish names its manifest version.

    Blocking Lance I/O runs in a worker thread; the connection is read with the async API.
    Errors are logged and polled through (a watcher that raises is restarted at once by the
    triggerer), a namespace that does not exist yet is waited for, and all its publishes
    are reported once it appears.

    :param namespace: relative name or full URI.
    :param lance_conn_id: the ``lance`` connection.
    :param poll_interval: seconds between polls and at least between two events (a watermark
        is stored this long, and at least ``MIN_WATERMARK_DELAY``, after its event).
    :param after_version: report publishes after this manifest version when no watermark
        is stored yet (default: the latest version at the first start).
    :param max_partitions: partitions listed per event (the rest are counted).
    :param max_publishes: publishes listed per event (the rest are counted).
    """

    #: Checked in ``__init__``: in the DAG file, and again where the triggerer builds it.
    argument_checks: ClassVar[Mapping[str, v.Check]] = _ARGUMENTS

    def __init__(
        self,
        *,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 60.0,
        after_version: int | None = None,
        max_partitions: int = 20,
        max_publishes: int = 50,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        given = {
            "namespace": namespace,
            "lance_conn_id": lance_conn_id,
            "poll_interval": poll_interval,
            "after_version": after_version,
            "max_partitions": max_partitions,
            "max_publishes": max_publishes,
        }
        v.check_values(type(self).__name__, self.argument_checks, given)
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.poll_interval = poll_interval
        self.after_version = after_version
        self.max_partitions = max_partitions
        self.max_publishes = max_publishes

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "namespace": self.namespace,
                "lance_conn_id": self.lance_conn_id,
                "poll_interval": self.poll_interval,
                "after_version": self.after_version,
                "max_partitions": self.max_partitions,
                "max_publishes": self.max_publishes,
            },
        )

    # -- the watermark ---------------------------------------------------------------------
    def _store(self) -> Any | None:
        """The asset state store the triggerer handed over (Airflow 3.3+), if any."""
        return getattr(self, "asset_state_store", None)

    async def _load_watermark(self, uri: str) -> int | None:
        store = self._store()
        if store is not None:
            try:
                stored = await store.aget(watermark_key(uri))
            except ValueError as exc:
                if _MULTI_ASSET_ERROR not in str(exc):
                    raise
                self.log.warning(
                    "the watcher of %s is shared by several assets: its watermark is kept in "
                    "memory only, so a triggerer restart watches from the latest version",
                    uri,
                )
                self.asset_state_store = None
            else:
                if isinstance(stored, int) and not isinstance(stored, bool) and stored >= 0:
                    return stored
                if stored is not None:
                    self.log.warning("ignoring the stored watermark %r of %s", stored, uri)
        return self.after_version

    async def _save_watermark(self, uri: str, version: int) -> None:
        store = self._store()
        if store is not None:
            await store.aset(watermark_key(uri), version)

    async def _store_due(self, uri: str, unstored: deque[tuple[float, int]]) -> None:
        """Store the latest watermark whose events have had their delay to be stored."""
        now = time.monotonic()
        due: int | None = None
        while unstored and unstored[0][0] <= now:
            due = unstored.popleft()[1]
        if due is not None:
            await self._save_watermark(uri, due)

    # -- polling ---------------------------------------------------------------------------
    def _poll(self, hook: LancePartitionedHook, uri: str, after: int | None, found: Found) -> _Poll:
        """One poll (blocking: runs in a worker thread); adds the publishes to ``found``."""
        try:
            ns = hook.open(uri)
        except NamespaceNotFoundError:
            return _Poll(0 if after is None else after, exists=False)
        if after is None:
            return _Poll(ns.version)
        if ns.version < after:  # the namespace was dropped and created again
            self.log.warning(
                "%s is at manifest version %d, before the watermark %d: it was created "
                "again; reporting its publishes from the start",
                uri,
                ns.version,
                after,
            )
            after = 0
        publishes, last = scan_publishes(ns, after)
        if publishes:
            state = ns.state()
            for publish in publishes:
                found.add(publish, state)
        return _Poll(last, caught_up=last >= ns.version)

    def _found(self) -> Found:
        return Found(max_partitions=self.max_partitions, max_publishes=self.max_publishes)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = await self._resolve(hook)
        watermark = await self._load_watermark(uri)
        if watermark is not None:
            self.log.info("watching %s after manifest version %d", uri, watermark)
        delay = max(self.poll_interval, MIN_WATERMARK_DELAY)
        found = self._found()
        found_at = math.inf  # when ``found`` took its first publish
        last_event = -math.inf  # when the last event was yielded
        # (store at, version): reported versions whose events the triggerer may not have
        # stored yet; ``queued`` the last of them (or the watermark loaded)
        unstored: deque[tuple[float, int]] = deque()
        queued = watermark
        while True:
            try:
                poll = await asyncio.to_thread(self._poll, hook, uri, watermark, found)
            except LanceNamespaceError as exc:
                self.log.warning("polling %s failed, retrying: %s", uri, describe_error(exc))
                await asyncio.sleep(self.poll_interval)
                continue
            if watermark is None:  # the first start: watch from here, and remember it now
                self.log.info("watching %s after manifest version %d", uri, poll.version)
                await self._save_watermark(uri, poll.version)
                queued = poll.version
            elif not poll.exists:
                self.log.info("waiting for %s to be created", uri)
            watermark = poll.version
            if found:
                found_at = min(found_at, time.monotonic())
                # behind: read on, and report at most once a poll interval
                due = max(found_at, last_event) + self.poll_interval
                if poll.caught_up or time.monotonic() >= due:
                    if (wait := last_event + self.poll_interval - time.monotonic()) > 0:
                        await asyncio.sleep(wait)  # never two events within a poll interval
                    payload = found.payload(uri)
                    self.log.info(
                        "%s published %d partition(s) in %d publish(es), manifest versions "
                        "%d to %d",
                        uri,
                        payload["partition_count"],
                        payload["publish_count"],
                        payload["previous_version"],
                        payload["manifest_version"],
                    )
                    yield TriggerEvent(payload)  # type: ignore[no-untyped-call]
                    found, found_at, last_event = self._found(), math.inf, time.monotonic()
            if not found and watermark != queued:  # all read is reported (or had nothing)
                unstored.append((time.monotonic() + delay, watermark))
                queued = watermark
            await self._store_due(uri, unstored)
            if poll.caught_up:
                await asyncio.sleep(self.poll_interval)
                await self._store_due(uri, unstored)

    async def _resolve(self, hook: LancePartitionedHook) -> str:
        """The namespace URI (waits, logging, while the connection cannot be read)."""
        while True:
            try:
                config = await hook.aget_config()
                return config.namespace_uri(self.namespace)
            except Exception as exc:  # a watcher never gives up: it would be restarted at once
                self.log.error(
                    "cannot read the connection %r: %s", self.lance_conn_id, describe_error(exc)
                )
                await asyncio.sleep(self.poll_interval)


@dataclass(frozen=True)
class _Poll:
    """What one poll found: the version it read up to (its publishes went to ``Found``)."""

    version: int
    exists: bool = True
    caught_up: bool = True
