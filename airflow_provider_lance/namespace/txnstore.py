"""Durable transaction records under the namespace root: ``_transactions/<txn_id>/``.

A transaction is a header (``txn.json``: id, mode, state, base manifest version, result) and
one stage file per staging attempt (``stage-<stage_id>.json``: the data files written for
each partition). Records live next to the data, in the same object store, written through
Lance's own object-store client with the namespace's storage options; each file is written
whole in one PUT (atomic on object stores and, through rename, on local disks).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lance.file import LanceFileSession

from .errors import InvalidArgumentError, LanceNamespaceError

TXN_DIR = "_transactions"
HEADER = "txn.json"
#: Transaction and stage ids: safe as object-store path segments.
TXN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=:+-]{0,199}$")

STAGED = "staged"
COMMITTING = "committing"
PUBLISHED = "published"
ABORTED = "aborted"
#: Its stages were handed to another transaction (``merged_into``) that commits them.
MERGED = "merged"
STATES = (STAGED, COMMITTING, PUBLISHED, ABORTED, MERGED)


def check_txn_id(txn_id: str) -> str:
    if not isinstance(txn_id, str) or not TXN_ID_PATTERN.match(txn_id):
        raise InvalidArgumentError(
            f"transaction id {txn_id!r} must be 1-200 characters of letters, digits and _.=:+- "
            "starting with a letter or digit"
        )
    return txn_id


@dataclass
class TransactionHeader:
    """What ``txn.json`` holds."""

    txn_id: str
    mode: str
    state: str = STAGED
    base_version: int = 0
    spec_version: int = 1
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    result: dict[str, Any] | None = None
    error: str | None = None
    #: Identifies one incarnation: an aborted id may be begun again, and a stale committer
    #: of the old incarnation must then not go on.
    nonce: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: For a merged transaction: the transaction that commits its stages.
    merged_into: str | None = None
    #: For a combined transaction: the transactions whose stages it commits.
    sources: list[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TransactionHeader:
        known = {k: obj[k] for k in cls.__dataclass_fields__ if k in obj}
        return cls(**known)


class TransactionStore:
    """Reads and writes transaction records of one namespace."""

    def __init__(self, root: str, storage_options: Mapping[str, str] | None) -> None:
        self.root = root
        self._session = LanceFileSession(root, storage_options=dict(storage_options or {}) or None)

    # -- raw JSON files ----------------------------------------------------------------
    def _put(self, path: str, obj: Any) -> None:
        fd, local = tempfile.mkstemp(suffix=".json")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(obj, out, separators=(",", ":"))
            self._session.upload_file(local, path)
        finally:
            os.unlink(local)

    def _get(self, path: str) -> Any:
        fd, local = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            self._session.download_file(path, local)
            with open(local) as f:
                return json.load(f)
        except (OSError, ValueError) as exc:
            if not self._session.contains(path):
                raise KeyError(path) from exc
            raise LanceNamespaceError(f"transaction record {path} is unreadable: {exc}") from exc
        finally:
            os.unlink(local)

    # -- headers -----------------------------------------------------------------------
    def header_path(self, txn_id: str) -> str:
        return f"{TXN_DIR}/{check_txn_id(txn_id)}/{HEADER}"

    def load(self, txn_id: str) -> TransactionHeader | None:
        try:
            return TransactionHeader.from_json(self._get(self.header_path(txn_id)))
        except KeyError:
            return None

    def save(self, header: TransactionHeader) -> None:
        header.updated_at = time.time()
        self._put(self.header_path(header.txn_id), asdict(header))

    def headers(self) -> Iterator[TransactionHeader]:
        for path in self._session.list(TXN_DIR):
            if path.endswith("/" + HEADER):
                txn_id = path.split("/")[-2]
                header = self.load(txn_id)
                if header is not None:
                    yield header

    # -- stages ------------------------------------------------------------------------
    def _stage_path(self, txn_id: str, stage_id: str) -> str:
        return f"{TXN_DIR}/{check_txn_id(txn_id)}/stage-{check_txn_id(stage_id)}.json"

    def save_stage(self, txn_id: str, stage_id: str, stage: Mapping[str, Any]) -> None:
        self._put(self._stage_path(txn_id, stage_id), stage)

    def stage(self, txn_id: str, stage_id: str) -> Any | None:
        """One stage record, or None (without listing or reading the others)."""
        try:
            return self._get(self._stage_path(txn_id, stage_id))
        except KeyError:
            return None

    def delete_stage(self, txn_id: str, stage_id: str) -> None:
        self._session.delete_file(self._stage_path(txn_id, stage_id))

    def stages(self, txn_id: str) -> dict[str, Any]:
        prefix = f"{TXN_DIR}/{check_txn_id(txn_id)}/stage-"
        out = {}
        for path in sorted(self._session.list(f"{TXN_DIR}/{txn_id}")):
            if path.startswith(prefix) and path.endswith(".json"):
                out[path[len(prefix) : -len(".json")]] = self._get(path)
        return out

    def delete_stages(self, txn_id: str) -> None:
        prefix = f"{TXN_DIR}/{check_txn_id(txn_id)}/stage-"
        for path in self._session.list(f"{TXN_DIR}/{txn_id}"):
            if path.startswith(prefix):
                self._session.delete_file(path)

    def delete(self, txn_id: str) -> None:
        for path in self._session.list(f"{TXN_DIR}/{check_txn_id(txn_id)}"):
            self._session.delete_file(path)
