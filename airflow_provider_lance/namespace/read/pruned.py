"""The partitions a filter keeps, remembered per ``__manifest`` version (:class:`PruneCache`).

A ``__manifest`` version never changes, so what a filter prunes it to never does either: a
handle that reads the same filter again (a search service asking for one date) skips the
prune. The key is the version (and whether the reader named it, which its errors say), so
a new publish is a new key and is never hidden. Results of many partitions are not kept:
they cost more memory than their prune.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from airflow_provider_lance.namespace.format.state import NamespaceState, Partition

from .coverage import pruned_rows

#: Prune results a handle keeps.
ENTRIES = 256
#: Partitions the kept results hold in all (a larger result is not kept).
PARTITIONS = 1 << 16


def prune(state: NamespaceState, filter: str | None) -> list[Partition]:
    """The partitions of ``state`` that may hold rows matching the SQL ``filter``."""
    if filter is None:
        return state.partitions()
    return state.partitions_from_rows(pruned_rows(state, filter))


class PruneCache:
    """The last ``entries`` prune results of one namespace, holding at most ``partitions``
    partitions in all; safe to share between threads."""

    def __init__(self, entries: int = ENTRIES, partitions: int = PARTITIONS) -> None:
        self.entries, self.partitions = entries, partitions
        self._kept: OrderedDict[tuple[int, bool, str], tuple[Partition, ...]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, state: NamespaceState, filter: str | None) -> list[Partition] | None:
        """The kept result of ``filter`` on ``state``'s version (None: not kept, or no
        ``filter``: a state's own partitions are read from its version, which a handle's
        state that is no longer the latest may not have any more)."""
        if filter is None:
            return None
        key = (state.version, state.pinned, filter)
        with self._lock:
            kept = self._kept.get(key)
            if kept is None:
                return None
            self._kept.move_to_end(key)
        return list(kept)

    def prune(self, state: NamespaceState, filter: str | None) -> list[Partition]:
        """:func:`prune`, from the kept result when there is one (then kept)."""
        if filter is None:
            return state.partitions()  # the state keeps them
        kept = self.get(state, filter)
        if kept is not None:
            return kept
        found = prune(state, filter)
        if len(found) <= self.partitions:
            self._keep((state.version, state.pinned, filter), tuple(found))
        return found

    def _keep(self, key: tuple[int, bool, str], found: tuple[Partition, ...]) -> None:
        with self._lock:
            old = self._kept.pop(key, None)
            self._held += len(found) - (0 if old is None else len(old))
            self._kept[key] = found
            while len(self._kept) > self.entries or self._held > self.partitions:
                self._held -= len(self._kept.popitem(last=False)[1])
