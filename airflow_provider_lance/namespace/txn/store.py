"""Transaction records under the namespace root: ``_transactions/<txn_id>/<k>/``.

``k`` is the *incarnation* (an id begun again after an abort gets a new directory). Per
incarnation: ``txn.json`` (the header, written once by ``begin``), ``stage-<stage_id>.json``
(one per staging attempt), ``plan-<plan_id>.json`` (fixed at the seal), ``result.json`` (a
commit's result, after its publish) and ``outcome-<token>.json`` (a table operation's,
before its publish). These files decide nothing: a transaction's state is its
``__manifest`` row (:mod:`.lifecycle`). Each is written whole in one atomic PUT.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, TypeVar

from airflow_provider_lance.namespace.errors import InvalidArgumentError, LanceNamespaceError
from airflow_provider_lance.namespace.format.naming import TXN_ID_PATTERN
from airflow_provider_lance.namespace.format.txn_row import TransactionHeader
from airflow_provider_lance.namespace.io.storage import Storage

TXN_DIR = "_transactions"
HEADER = "txn.json"
RESULT = "result.json"
#: Record files written at once.
IO_THREADS = 16
#: Publishes of anonymous transactions a handle remembers (see ``may_have_published``).
PUBLISHES_KEPT = 10_000

#: The name of a stage record, at the end of its path.
_STAGE = re.compile(r"/stage-[^/]*\.json$")

T = TypeVar("T")
R = TypeVar("R")


def check_txn_id(txn_id: str) -> str:
    if not isinstance(txn_id, str) or not TXN_ID_PATTERN.match(txn_id):
        raise InvalidArgumentError(
            f"transaction id {txn_id!r} must be 1-200 characters of letters, digits and _.=:+- "
            "starting with a letter or digit"
        )
    return txn_id


def _in_parallel(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``fn`` over ``items``, :data:`IO_THREADS` at once (one: on this thread)."""
    if len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=IO_THREADS) as pool:
        return list(pool.map(fn, items))


class TransactionStore:
    """Reads and writes the transaction records of one namespace."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        #: Headers are written once per incarnation and never change: keep those seen.
        self._headers: dict[tuple[str, int], TransactionHeader] = {}
        #: Anonymous ``txn#k`` whose publishing swap this handle sent and did not lose.
        self._publishing: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def sending_publish(self, tag: str) -> None:
        """A publishing swap of anonymous incarnation ``tag`` is about to be sent."""
        with self._lock:
            self._publishing[tag] = None
            while len(self._publishing) > PUBLISHES_KEPT:
                self._publishing.popitem(last=False)

    def publish_lost(self, tag: str) -> None:
        """That swap lost (it committed nothing)."""
        with self._lock:
            self._publishing.pop(tag, None)

    def may_have_published(self, tag: str) -> bool:
        """Whether this handle sent a publish of anonymous ``tag`` that may have committed:
        once its records are collected, only this tells "aborted" from "maybe published"."""
        return tag in self._publishing

    def _maybe(self, path: str) -> Any | None:
        try:
            return self.storage.get_json(path)
        except KeyError:
            return None

    @staticmethod
    def directory(txn_id: str, incarnation: int) -> str:
        return f"{TXN_DIR}/{check_txn_id(txn_id)}/{int(incarnation)}"

    def load(self, txn_id: str, incarnation: int, fresh: bool = False) -> TransactionHeader | None:
        """A header (immutable: cached), or None; ``fresh`` asks storage whether it is
        still there (see :func:`.records.resolve`)."""
        cached = None if fresh else self._headers.get((txn_id, incarnation))
        if cached is not None:
            return cached
        raw = self._maybe(f"{self.directory(txn_id, incarnation)}/{HEADER}")
        if raw is None:
            self._headers.pop((txn_id, incarnation), None)
            return None
        header = self._headers[(txn_id, incarnation)] = TransactionHeader.from_json(raw)
        return header

    def newest_known(self, txn_id: str) -> TransactionHeader | None:
        """The newest header of ``txn_id`` this process has seen (a hint: its row decides)."""
        known = [h for (t, _), h in self._headers.items() if t == txn_id]
        return max(known, key=lambda h: h.incarnation, default=None)

    def save(self, header: TransactionHeader) -> None:
        path = f"{self.directory(header.txn_id, header.incarnation)}/{HEADER}"
        self.storage.put_json(path, asdict(header))
        self._headers[(header.txn_id, header.incarnation)] = header

    def headers(self) -> Iterator[TransactionHeader]:
        """The header of the newest incarnation of every transaction with records."""
        newest: dict[str, int] = {}
        for path in self.storage.list(TXN_DIR):
            parts = path.split("/")
            if len(parts) == 4 and parts[-1] == HEADER and parts[2].isdigit():
                newest[parts[1]] = max(newest.get(parts[1], 0), int(parts[2]))
        for txn_id, incarnation in sorted(newest.items()):
            header = self.load(txn_id, incarnation)
            if header is not None:
                yield header

    def _stage_path(self, txn_id: str, incarnation: int, stage_id: str) -> str:
        return f"{self.directory(txn_id, incarnation)}/stage-{check_txn_id(stage_id)}.json"

    def save_stages(self, txn_id: str, incarnation: int, stages: Mapping[str, Any]) -> None:
        """Write stage records (in parallel)."""
        paths = {self._stage_path(txn_id, incarnation, sid): raw for sid, raw in stages.items()}
        _in_parallel(lambda path: self.storage.put_json(path, paths[path]), list(paths))

    def stage(self, txn_id: str, incarnation: int, stage_id: str) -> Any | None:
        """One stage record, or None (without listing or reading the others)."""
        return self._maybe(self._stage_path(txn_id, incarnation, stage_id))

    def delete_stage(self, txn_id: str, incarnation: int, stage_id: str) -> None:
        self.storage.delete(self._stage_path(txn_id, incarnation, stage_id))

    def stages_of_every_incarnation(self, txn_id: str) -> list[Any]:
        """Every stage record of ``txn_id``, of any incarnation (with or without a header)."""
        return list(self._load_stages(f"{TXN_DIR}/{check_txn_id(txn_id)}").values())

    def stages(self, txn_id: str, incarnation: int) -> dict[str, Any]:
        prefix = f"{self.directory(txn_id, incarnation)}/stage-"
        loaded = self._load_stages(self.directory(txn_id, incarnation))
        return {p[len(prefix) : -len(".json")]: raw for p, raw in loaded.items()}

    def _load_stages(self, directory: str) -> dict[str, Any]:
        """The stage records below ``directory`` by path, in order (read in parallel)."""
        listed = self.storage.list(directory)
        paths = sorted(p for p in listed if p.startswith(f"{directory}/") and _STAGE.search(p))
        loaded = _in_parallel(self._maybe, paths)  # None: withdrawn meanwhile
        return {p: raw for p, raw in zip(paths, loaded, strict=True) if raw is not None}

    def save_plan(self, txn_id: str, incarnation: int, plan_id: str, plan: Any) -> None:
        path = f"{self.directory(txn_id, incarnation)}/plan-{check_txn_id(plan_id)}.json"
        self.storage.put_json(path, plan)

    def plan(self, txn_id: str, incarnation: int, plan_id: str) -> Any:
        path = f"{self.directory(txn_id, incarnation)}/plan-{check_txn_id(plan_id)}.json"
        raw = self._maybe(path)
        if raw is None:
            raise LanceNamespaceError(
                f"the commit plan {path} of transaction {txn_id} is missing; it was deleted "
                "by hand or by a tool that does not know partitioned namespaces"
            )
        return raw

    def save_result(
        self, txn_id: str, incarnation: int, result: Any, *, token: str | None = None
    ) -> None:
        """Write a commit's result (``result.json``), or with ``token`` a table operation's
        (``outcome-<token>.json``, before the swap whose row names the token)."""
        self.storage.put_json(self._result_path(txn_id, incarnation, token), result)

    def result(self, txn_id: str, incarnation: int, token: str | None = None) -> Any | None:
        return self._maybe(self._result_path(txn_id, incarnation, token))

    def _result_path(self, txn_id: str, incarnation: int, token: str | None) -> str:
        name = RESULT if token is None else f"outcome-{check_txn_id(token)}.json"
        return f"{self.directory(txn_id, incarnation)}/{name}"

    def delete(self, txn_id: str, incarnation: int | None = None) -> None:
        """Delete every record of one incarnation (or of every incarnation)."""
        every = f"{TXN_DIR}/{check_txn_id(txn_id)}"
        prefix = every if incarnation is None else self.directory(txn_id, incarnation)
        for key in [k for k in self._headers if k[0] == txn_id and incarnation in (None, k[1])]:
            del self._headers[key]
        for path in self.storage.list(prefix):
            self.storage.delete(path)
