"""What a read made once and that never changes (a parsed filter, the prune and the plan of
one ``__manifest`` version, a leaf version opened, an index model), kept for the next read:
a small LRU (:class:`Remembered`), and one per storage (:class:`KeptPerStorage`)."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from airflow_provider_lance.namespace.io.storage import Storage

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


class Remembered(Generic[K, V]):
    """The last ``entries`` values used, by key, weighing at most ``budget`` in all
    (``weight`` of each; one heavier than the budget is not kept); safe to share between
    threads."""

    def __init__(
        self,
        entries: int,
        budget: int | None = None,
        weight: Callable[[V], int] | None = None,
    ) -> None:
        self.entries, self.budget = entries, budget
        self._weight = weight or (lambda _: 0)
        self._kept: OrderedDict[K, V] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._kept

    def get(self, key: K) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._kept.get(key)
            if value is not None:
                self._kept.move_to_end(key)
            return value

    def keep(self, key: K, value: V) -> None:
        """Keep ``value`` for ``key``; the least recently used go while over the bounds."""
        weight = self._weight(value)
        if self.budget is not None and weight > self.budget:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            self._held += weight - (0 if old is None else self._weight(old))
            self._kept[key] = value
            while len(self._kept) > self.entries or (
                self.budget is not None and self._held > self.budget
            ):
                self._held -= self._weight(self._kept.popitem(last=False)[1])

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``make()`` (called outside the lock), kept."""
        value = self.get(key)
        if value is None:
            value = make()
            self.keep(key, value)
        return value

    def values(self) -> list[V]:
        """The values kept, least recently used first."""
        with self._lock:
            return list(self._kept.values())


class KeptPerStorage(Generic[K, R]):
    """The last ``size`` values made per storage, by key: for what a leaf version, which
    never changes, fixes (the open table, its document counts)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._kept: weakref.WeakKeyDictionary[Storage, Remembered[K, R]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def _of(self, storage: Storage) -> Remembered[K, R]:
        with self._lock:
            kept = self._kept.get(storage)
            if kept is None:
                kept = self._kept[storage] = Remembered(self.size)
            return kept

    def get(self, storage: Storage, key: K, make: Callable[[], R]) -> R:
        return self._of(storage).get_or_make(key, make)

    def kept(self, storage: Storage) -> list[R]:
        """The values kept for ``storage``, least recently used first."""
        return self._of(storage).values()
