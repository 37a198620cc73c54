"""One ``__manifest`` compare-and-swap as data (pyiceberg's updates + requirements).

A :class:`Swap` says what one commit writes (rows upserted and dropped, transaction rows
moved between states) and what it requires of the rows it read at its base version.
:meth:`~.manifest.Manifest.commit` checks the moves against the state machine and the
requirements against the rows read, then writes in one ``merge_insert`` that fails if any
of those rows changed since. Nothing else writes ``__manifest`` rows under a condition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import CommitConflict

from .manifest import CLAIM, OBJECT_ID, READ_VERSION, ManifestView
from .txn_row import TxnRecord, TxnState, claim_is_live, row_id


@dataclass(frozen=True)
class RowExists:
    """A partition staged into as existing still has a row (it was not dropped since)."""

    object_id: str


@dataclass(frozen=True)
class ReadVersionIs:
    """A partition replaced whole (overwrite, rewrite) still publishes the version it
    replaces (no row: a new partition, met)."""

    object_id: str
    read_version: int | None


@dataclass(frozen=True)
class NoLiveClaim:
    """No live transaction holds the partition, other than ``mine`` (``txn#k``)."""

    object_id: str
    mine: str | None = None


@dataclass(frozen=True)
class ClaimedBy:
    """The partition's row is claimed by ``holder`` (``txn#k``)."""

    object_id: str
    holder: str


Requirement = RowExists | ReadVersionIs | NoLiveClaim | ClaimedBy


def requirements_unmet(
    requirements: Iterable[Requirement],
    rows: Mapping[str, Mapping[str, Any]],
    holders: Mapping[str, TxnRecord] | None,
) -> list[Requirement]:
    """The requirements the ``rows`` read (by object id) do not meet. ``holders``: the
    transactions holding claims among them (None: every claim counts as live)."""

    def met(req: Requirement) -> bool:
        row = rows.get(req.object_id)
        if isinstance(req, RowExists):
            return row is not None
        if isinstance(req, ReadVersionIs):
            return row is None or row[READ_VERSION] == req.read_version
        claim = None if row is None else row.get(CLAIM)
        if isinstance(req, ClaimedBy):
            return claim == req.holder
        if not claim or claim == req.mine:
            return True
        return holders is not None and not claim_is_live(claim, holders)

    return [r for r in requirements if not met(r)]


class TransitionRefused(Exception):
    """A transaction row's move is no transition of the state machine from ``record``."""

    def __init__(self, record: TxnRecord) -> None:
        super().__init__(f"transaction {record.incarnation_tag} is {record.state.value}")
        self.record = record


#: The transitions of the state machine (see :mod:`~..txn.lifecycle`): from the state
#: read (None: no row, or an earlier incarnation's ABORTED one) to the state written.
TRANSITIONS: frozenset[tuple[TxnState | None, TxnState]] = frozenset(
    {
        (TxnState.STAGED, TxnState.STAGED),  # a recorded stage bumps the epoch
        (TxnState.STAGED, TxnState.COMMITTING),  # seal
        (TxnState.STAGED, TxnState.MERGED),  # a source of a combined seal
        (TxnState.STAGED, TxnState.PUBLISHED),  # a seal with nothing staged
        (TxnState.COMMITTING, TxnState.COMMITTING),  # steal: a new committer takes over
        (TxnState.COMMITTING, TxnState.PUBLISHED),  # publish, by the owning committer
        (TxnState.STAGED, TxnState.ABORTED),
        (TxnState.COMMITTING, TxnState.ABORTED),
        (TxnState.MERGED, TxnState.ABORTED),  # aborted with its combined transaction
        (None, TxnState.PUBLISHED),  # a table operation: sealed and published at once
    }
)


@dataclass(frozen=True)
class TxnMove:
    """A transaction row moved from ``before`` (as read; None: no row of this incarnation)
    to ``after``; ``owner``: the fence token that must own ``before`` (a publish)."""

    before: TxnRecord | None
    after: TxnRecord
    owner: str | None = None

    def check(self) -> None:
        """:class:`TransitionRefused` unless this is a transition of the state machine."""
        before = self.before
        if before is not None and (
            before.incarnation != self.after.incarnation or before.txn_id != self.after.txn_id
        ):
            raise TransitionRefused(before)
        state = None if before is None else before.state
        if (state, self.after.state) not in TRANSITIONS:
            raise TransitionRefused(before or self.after)
        if self.owner is not None and (before is None or before.owner != self.owner):
            raise TransitionRefused(before or self.after)


@dataclass(frozen=True)
class Swap:
    """One conditional ``__manifest`` commit against ``base`` (the version its rows were
    read at): ``rows`` upserted, ``drops`` deleted, ``moves`` applied, if none of them
    changed since ``base`` and ``requires`` holds for the rows ``read`` (and ``holders``)."""

    base: ManifestView
    rows: Sequence[Mapping[str, Any]] = ()
    drops: Sequence[str] = ()
    moves: Sequence[TxnMove] = ()
    requires: Sequence[Requirement] = ()
    read: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    holders: Mapping[str, TxnRecord] | None = None

    @property
    def base_version(self) -> int:
        return int(self.base.version)

    @property
    def is_empty(self) -> bool:
        return not (self.rows or self.drops or self.moves)

    @property
    def object_ids(self) -> list[str]:
        """Every row it writes or deletes."""
        moved = [row_id(m.after.txn_id) for m in self.moves]
        return [*moved, *(str(r[OBJECT_ID]) for r in self.rows), *self.drops]

    def check(self) -> None:
        """Every move a transition, every requirement met: else :class:`TransitionRefused`
        or :class:`RequirementsUnmet`."""
        for move in self.moves:
            move.check()
        unmet = requirements_unmet(self.requires, self.read, self.holders)
        if unmet:
            raise RequirementsUnmet(unmet)

    def table(self) -> pa.Table:
        """The rows written, moved transaction rows first, in ``base``'s schema."""
        rows = [*(m.after.to_row() for m in self.moves), *self.rows]
        return pa.Table.from_pylist(rows, schema=self.base.schema)

    def made(self, row: Mapping[str, Any]) -> bool:
        """Whether ``row`` (read at a later version) is one only this swap writes: a
        transaction row in the state it moved it to, or a partition row naming the leaf
        version it set (no other writer publishes those)."""
        oid = str(row[OBJECT_ID])
        for move in self.moves:
            if row_id(move.after.txn_id) == oid:
                found, after = TxnRecord.from_row(row), move.after
                return (found.incarnation, found.state) == (after.incarnation, after.state)
        for mine in self.rows:
            if mine[OBJECT_ID] == oid and mine[READ_VERSION] is not None:
                return bool(row[READ_VERSION] == mine[READ_VERSION])
        return False


class RequirementsUnmet(CommitConflict):
    """A swap's requirements do not hold for the rows it read (``unmet``): nothing committed."""

    def __init__(self, unmet: Sequence[Requirement]) -> None:
        ids = sorted({r.object_id for r in unmet})
        super().__init__("the rows this commit depends on changed", ids)
        self.unmet = list(unmet)
