"""A transaction as the format records it: its ``__manifest`` row (``__txn$<id>``), its
states, the name of one incarnation (``X#k``) and ``txn.json``'s header. Only data: the
transitions are in :mod:`.swap` and ``lifecycle``."""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .manifest import NAMESPACE, OBJECT_ID, TXN_PREFIX, row


@dataclass
class TransactionHeader:
    """What ``txn.json`` holds: the description of one incarnation of a transaction."""

    txn_id: str
    mode: str
    incarnation: int = 1
    base_version: int = 0
    spec_version: int = 1
    created_at: float = field(default_factory=time.time)
    #: For a combined transaction: the transactions whose stages it commits.
    sources: list[str] = field(default_factory=list)
    #: Begun without an id by ``write()``: nobody else can stage into it or retry it.
    anonymous: bool = False

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TransactionHeader:
        return cls(**{k: obj[k] for k in cls.__dataclass_fields__ if k in obj})


class TxnState(str, enum.Enum):
    """The state of one incarnation of a transaction."""

    STAGED = "staged"
    COMMITTING = "committing"
    PUBLISHED = "published"
    ABORTED = "aborted"
    MERGED = "merged"

    @property
    def is_terminal(self) -> bool:
        return self in (TxnState.PUBLISHED, TxnState.ABORTED)

    @property
    def holds_claims(self) -> bool:
        return self is TxnState.COMMITTING


def incarnation_tag(txn_id: str, incarnation: int) -> str:
    """The name of one incarnation (in claims, leaf-version properties and records)."""
    return f"{txn_id}#{incarnation}"


def parse_incarnation_tag(text: str) -> tuple[str, int]:
    """``(txn_id, incarnation)`` of a tag (claims written before incarnations: 0)."""
    txn_id, sep, number = text.rpartition("#")
    return (txn_id, int(number)) if sep and number.isdigit() else (text, 0)


def claim_is_live(claim: str, records: Mapping[str, TxnRecord]) -> bool:
    """Whether a claim is held by a transaction that may still publish: ``X#k`` is live
    only while X's row is COMMITTING in incarnation k; else anyone may take it over
    (Percolator's rule for a secondary lock whose primary rolled back)."""
    txn_id, incarnation = parse_incarnation_tag(claim)
    record = records.get(txn_id)
    if record is None or incarnation < 1:
        return False
    return record.state.holds_claims and record.incarnation == incarnation


def row_id(txn_id: str) -> str:
    return f"{TXN_PREFIX}{txn_id}"


def new_token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class TxnRecord:
    """One transaction's ``__manifest`` row, parsed. ``stored`` is False for the implicit
    STAGED record of an incarnation that has no row yet."""

    txn_id: str
    incarnation: int
    state: TxnState
    mode: str | None = None
    #: The fence token of the committer allowed to publish (COMMITTING).
    owner: str | None = None
    #: The plan a sealed transaction publishes (``plan-<id>.json`` of its incarnation).
    plan: str | None = None
    #: MERGED: the tag of the combined transaction that commits its stages.
    merged_into: str | None = None
    #: A combined transaction: the ids of its sources.
    sources: tuple[str, ...] = ()
    #: Bumped by every recorded batch of stages (orders stagers against the seal).
    epoch: int = 0
    updated_at: float = field(default_factory=time.time)
    error: str | None = None
    anonymous: bool = False
    #: A table operation: the token naming its result document (``outcome-<token>.json``).
    outcome: str | None = None
    stored: bool = True

    @property
    def incarnation_tag(self) -> str:
        """``txn#k``: this incarnation's name."""
        return incarnation_tag(self.txn_id, self.incarnation)

    @property
    def age(self) -> float:
        return max(0.0, time.time() - self.updated_at)

    def moved(self, state: TxnState, **changes: Any) -> TxnRecord:
        """This record in ``state`` (a new row version to compare-and-swap in)."""
        return replace(self, state=state, updated_at=time.time(), stored=True, **changes)

    def to_row(self) -> dict[str, Any]:
        payload = asdict(self)
        del payload["txn_id"], payload["stored"]
        payload["state"] = self.state.value
        payload["sources"] = list(self.sources)
        metadata = json.dumps(payload, separators=(",", ":"), sort_keys=True)
        return row(row_id(self.txn_id), NAMESPACE, metadata=metadata)

    @classmethod
    def from_row(cls, raw: Mapping[str, Any]) -> TxnRecord:
        payload = json.loads(raw.get("metadata") or "{}")
        known = {k: payload[k] for k in cls.__dataclass_fields__ if k in payload}
        known["state"] = TxnState(known.get("state", TxnState.ABORTED.value))
        known["sources"] = tuple(known.get("sources") or ())
        return cls(txn_id=str(raw[OBJECT_ID])[len(TXN_PREFIX) :], **known)

    @classmethod
    def staged(cls, header: TransactionHeader) -> TxnRecord:
        """The staged incarnation ``header`` describes, before it has a row."""
        staged = (header.txn_id, header.incarnation, TxnState.STAGED, header.mode)
        return cls(*staged, stored=False, anonymous=header.anonymous)
