"""Build records: what a table operation wrote and no leaf version or ``__manifest`` row
names yet (an index build's segments and shared model), for the orphan sweep to keep.

One JSON document per running operation, ``_transactions/_builds/<token>.json`` (no
transaction id starts with ``_``), rewritten whole with each path added and deleted when the
operation ends. A record is live while younger than :data:`LEASE_SECONDS` (``recover``'s
lease): each write refreshes it, so only an operation that writes nothing for that long, or
died, loses its protection; the sweep removes expired records.
"""

from __future__ import annotations

import logging
import threading
import time

from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.namespace.io.storage import Storage

from .abort import DEFAULT_LEASE_SECONDS
from .store import TXN_DIR

log = logging.getLogger(__name__)

BUILDS_DIR = f"{TXN_DIR}/_builds"
#: A record not rewritten for this long belongs to an operation that died.
LEASE_SECONDS = DEFAULT_LEASE_SECONDS


class BuildRecord:
    """The record of one running operation: root-relative paths of files, or of
    directories (ending in ``/``), it wrote and has not published."""

    def __init__(self, storage: Storage, token: str) -> None:
        self.storage = storage
        self.path = f"{BUILDS_DIR}/{token}.json"
        self._paths: set[str] = set()
        self._lock = threading.Lock()

    def add(self, *paths: str) -> None:
        """Name ``paths`` (written before the files they name are)."""
        with self._lock:
            self._paths.update(paths)
            doc = {"paths": sorted(self._paths), "written_at": time.time()}
            self.storage.put_json(self.path, doc)

    def close(self) -> None:
        """The operation ended (published, or failed: what it left is an orphan now)."""
        with self._lock:
            if not self._paths:
                return
            try:
                self.storage.delete(self.path)
            except LanceNamespaceError as exc:  # expires after the lease
                log.warning("could not remove the build record %s: %s", self.path, exc)
            self._paths = set()


def live_paths(storage: Storage, *, remove_expired: bool = False) -> set[str]:
    """The paths live records name; with ``remove_expired``, expired records are deleted."""
    out: set[str] = set()
    now = time.time()
    for path in storage.list(BUILDS_DIR):
        try:
            doc = storage.get_json(path)
        except KeyError:  # removed meanwhile: its operation ended
            continue
        if now - float(doc.get("written_at", 0)) < LEASE_SECONDS:
            out.update(str(p) for p in doc.get("paths", ()))
        elif remove_expired:
            storage.delete(path)
    return out
