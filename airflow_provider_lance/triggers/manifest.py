"""``LanceManifestTrigger``: an event whenever a namespace publishes (event-driven scheduling).

Every publish of a partitioned namespace is one ``__manifest`` commit that gives partitions
a new ``read_version`` (or creates them). The trigger walks the manifest versions after its
watermark one by one and compares each version's partition rows with the version before:
a version that published fires one event naming the version and the partitions it
published; versions that changed nothing readers see (claims, transaction records,
compaction, schema changes) fire nothing. Publishes are reported one event each, in
manifest order, however many happened between two polls.

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

A trigger cannot learn when the triggerer has stored the events it yielded, so the
watermark is written one poll interval after the events it covers were handed to the
triggerer (which stores events every few seconds): a triggerer killed within that window
reports those publishes again after its restart, never skips them; each event names its
manifest version, so a consumer can tell a repeat. Versions removed by maintenance before
the trigger read them are reported with the next version still there; if even the
watermark's own version is gone the event says ``"history_lost": true`` and lists every
published partition. Without a store (Airflow before 3.3, or one trigger shared by several
assets: the store then refuses to pick one) the watermark lives in memory only, and a
restart watches from the latest version (or ``after_version``).

Usable in ``AssetWatcher(name=..., trigger=LanceManifestTrigger(namespace=...))``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

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
    from airflow_provider_lance.namespace import Partition, PartitionedNamespace
    from airflow_provider_lance.namespace.catalog import NamespaceState

#: Key of the watermark in the asset state store: this prefix and the namespace URI.
WATERMARK_KEY_PREFIX = "lance.manifest_version "
#: The store's keys are at most 512 characters; longer URIs are named by a digest.
_MAX_KEY = 512
#: Manifest versions read per poll; a trigger far behind catches up without sleeping.
VERSIONS_PER_POLL = 256
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


def _read_versions(state: NamespaceState) -> list[tuple[str, int | None]]:
    """``(object_id, read_version)`` of every partition row of a state, in row order."""
    from airflow_provider_lance.namespace.manifest import OBJECT_ID, READ_VERSION

    tables = state.tables
    ids = tables.column(OBJECT_ID).to_pylist()
    return list(zip(ids, tables.column(READ_VERSION).to_pylist(), strict=True))


def published_between(before: NamespaceState | None, after: NamespaceState) -> list[Partition]:
    """The partitions ``after`` published: new ones, and those with another
    ``read_version`` than in ``before`` (None: every published partition)."""
    import pyarrow as pa

    old = dict(_read_versions(before)) if before is not None else {}
    changed = [
        row
        for row, (oid, rv) in enumerate(_read_versions(after))
        if rv is not None and (before is None or old.get(oid) != rv)
    ]
    return after.partitions_from_rows(after.tables.take(pa.array(changed, pa.int64())))


def scan_publishes(
    ns: PartitionedNamespace, after: int, *, limit: int = VERSIONS_PER_POLL
) -> tuple[list[Publish], int]:
    """The publishes of versions ``after + 1 ...`` (at most ``limit`` versions read), and
    the last version read (``after`` when there is nothing new)."""
    latest = ns.version
    last = min(latest, after + limit)
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


class LanceManifestTrigger(BaseEventTrigger):
    """Fire one event per publish of a partitioned namespace (for ``AssetWatcher``).

    The event: ``{"namespace", "manifest_version", "previous_version", "partition_count",
    "partitions": [{"object_id", "values", "read_version", "spec_version", "key"}, ...first
    max_partitions...], "truncated", "history_lost"}`` (``key``: the partition's Airflow
    partition key, :mod:`airflow_provider_lance.partition_keys`). Downstream tasks find it
    as ``triggering_asset_events[asset][i].extra["payload"]`` and can read the namespace as
    of ``manifest_version``.

    Blocking Lance I/O runs in a worker thread; the connection is read with the async API.
    Errors are logged and polled through (a watcher that raises is restarted at once by the
    triggerer), a namespace that does not exist yet is waited for, and all its publishes
    are reported once it appears.

    :param namespace: relative name or full URI.
    :param lance_conn_id: the ``lance`` connection.
    :param poll_interval: seconds between polls (and before a watermark is stored).
    :param after_version: report publishes after this manifest version when no watermark
        is stored yet (default: the latest version at the first start).
    :param max_partitions: partitions listed per event (the rest are counted).
    """

    def __init__(
        self,
        *,
        namespace: str | None = None,
        lance_conn_id: str = DEFAULT_CONN_ID,
        poll_interval: float = 60.0,
        after_version: int | None = None,
        max_partitions: int = 20,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.namespace = namespace
        self.lance_conn_id = lance_conn_id
        self.poll_interval = poll_interval
        self.after_version = after_version
        self.max_partitions = max_partitions

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "namespace": self.namespace,
                "lance_conn_id": self.lance_conn_id,
                "poll_interval": self.poll_interval,
                "after_version": self.after_version,
                "max_partitions": self.max_partitions,
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

    # -- events ----------------------------------------------------------------------------
    def _payload(self, uri: str, publish: Publish, state: NamespaceState) -> dict[str, Any]:
        from airflow_provider_lance.partition_keys import summary_key

        listed = []
        for p in publish.partitions[: self.max_partitions]:
            summary = p.to_dict()
            try:
                key: str | None = summary_key(state, summary)
            except LanceNamespaceError:  # e.g. longer than Airflow keeps
                key = None
            listed.append(
                {
                    "object_id": p.object_id,
                    "values": summary["values"],
                    "read_version": p.read_version,
                    "spec_version": p.spec_version,
                    "key": key,
                }
            )
        return {
            "namespace": uri,
            "manifest_version": publish.version,
            "previous_version": publish.previous_version,
            "partition_count": len(publish.partitions),
            "partitions": listed,
            "truncated": len(publish.partitions) > len(listed),
            "history_lost": publish.history_lost,
        }

    def _poll(self, hook: LancePartitionedHook, uri: str, after: int | None) -> _Poll:
        """One poll (blocking: runs in a worker thread)."""
        try:
            ns = hook.open(uri)
        except NamespaceNotFoundError:
            return _Poll(0 if after is None else after, [], exists=False)
        if after is None:
            return _Poll(ns.version, [])
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
        payloads = [self._payload(uri, p, ns.state()) for p in publishes]
        return _Poll(last, payloads, caught_up=last >= ns.version)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = LancePartitionedHook(self.lance_conn_id)
        uri = await self._resolve(hook)
        watermark = await self._load_watermark(uri)
        pending: int | None = None  # reported, to be stored once the triggerer kept the events
        if watermark is not None:
            self.log.info("watching %s after manifest version %d", uri, watermark)
        while True:
            try:
                poll = await asyncio.to_thread(self._poll, hook, uri, watermark)
            except LanceNamespaceError as exc:
                self.log.warning("polling %s failed, retrying: %s", uri, describe_error(exc))
                await asyncio.sleep(self.poll_interval)
                continue
            if watermark is None:  # the first start: watch from here, and remember it now
                self.log.info("watching %s after manifest version %d", uri, poll.version)
                await self._save_watermark(uri, poll.version)
            elif not poll.exists:
                self.log.info("waiting for %s to be created", uri)
            for payload in poll.payloads:
                self.log.info(
                    "%s published %d partition(s) at manifest version %d",
                    uri,
                    payload["partition_count"],
                    payload["manifest_version"],
                )
                yield TriggerEvent(payload)  # type: ignore[no-untyped-call]
            if watermark is not None and poll.version != watermark:
                pending = poll.version
            watermark = poll.version
            if poll.caught_up:  # (behind: read on at once, store the watermark later)
                await asyncio.sleep(self.poll_interval)
                if pending is not None:  # the triggerer had a poll interval to keep them
                    await self._save_watermark(uri, pending)
                    pending = None

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
    """What one poll found: the version it read up to and the events to fire."""

    version: int
    payloads: list[dict[str, Any]]
    exists: bool = True
    caught_up: bool = True
