"""The swap as data (``format/swap.py``): the state machine's transitions, the owner check
of a publish, each requirement kind, and :meth:`Swap.made`, the rule that decides a swap
reported as failed. Exact unit tests of the rules every ``__manifest`` commit goes through
(``Manifest.commit``), next to the interleavings in tests/namespace/txn/ that show why each
rule is there.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.format.manifest import (
    TABLE,
    Manifest,
    ManifestView,
    row,
)
from airflow_provider_lance.namespace.format.swap import (
    ClaimedBy,
    NoLiveClaim,
    ReadVersionIs,
    RequirementsUnmet,
    RowExists,
    Swap,
    TransitionRefused,
    TxnMove,
    requirements_unmet,
)
from airflow_provider_lance.namespace.format.txn_row import TxnRecord, TxnState

S = TxnState
#: The state machine of txn/lifecycle.py, from the state read (None: no row of this
#: incarnation) to the state written; every other pair must be refused.
ALLOWED = {
    (S.STAGED, S.STAGED),  # a recorded stage bumps the epoch
    (S.STAGED, S.COMMITTING),  # the seal
    (S.STAGED, S.MERGED),  # a source of a combined seal
    (S.STAGED, S.PUBLISHED),  # a seal with nothing staged
    (S.COMMITTING, S.COMMITTING),  # a steal
    (S.COMMITTING, S.PUBLISHED),  # the publish
    (S.STAGED, S.ABORTED),
    (S.COMMITTING, S.ABORTED),
    (S.MERGED, S.ABORTED),  # with its combined transaction
    (None, S.PUBLISHED),  # a table operation's row, sealed and published at once
}


def record(state: TxnState, incarnation: int = 1, owner: str | None = None) -> TxnRecord:
    return TxnRecord("X", incarnation, state, owner=owner)


@pytest.mark.parametrize(
    ("before", "after"), list(itertools.product([None, *TxnState], list(TxnState)))
)
def test_a_move_is_checked_against_the_state_machine(
    before: TxnState | None, after: TxnState
) -> None:
    """Every pair of states: a move is accepted exactly when the state machine has it.
    Among the refused: COMMITTING -> STAGED (a stager's epoch bump read after the seal:
    it must learn the transaction closed, not reopen it), ABORTED -> PUBLISHED and
    PUBLISHED -> anything (terminal), MERGED -> anything but ABORTED (its stages are the
    combined transaction's)."""
    move = TxnMove(None if before is None else record(before), record(after))
    if (before, after) in ALLOWED:
        move.check()
    else:
        with pytest.raises(TransitionRefused):
            move.check()


def test_a_publish_needs_the_owners_token() -> None:
    """A publish (``owner`` set) moves a row only if the row read names that fence token:
    a committer whose row was stolen (COMMITTING under another token) or fenced (ABORTED,
    no owner) cannot publish, whatever else it checked."""
    sealed = record(S.COMMITTING, owner="mine")
    TxnMove(sealed, sealed.moved(S.PUBLISHED, owner=None), owner="mine").check()
    stolen = record(S.COMMITTING, owner="theirs")
    with pytest.raises(TransitionRefused):
        TxnMove(stolen, stolen.moved(S.PUBLISHED, owner=None), owner="mine").check()
    with pytest.raises(TransitionRefused):
        TxnMove(None, record(S.PUBLISHED), owner="mine").check()


def test_a_move_stays_within_one_incarnation_of_one_transaction() -> None:
    """The row read and the row written are the same incarnation of the same transaction:
    a move built from another incarnation's row (or another transaction's) is refused."""
    with pytest.raises(TransitionRefused):
        TxnMove(record(S.STAGED, 1), record(S.COMMITTING, 2)).check()
    with pytest.raises(TransitionRefused):
        TxnMove(record(S.STAGED), TxnRecord("Y", 1, S.COMMITTING)).check()


def partition(read_version: int | None, claim: str | None = None) -> dict[str, Any]:
    return row("p", TABLE, location="p", read_version=read_version, claim=claim)


HOLDERS = {
    "live": TxnRecord("live", 2, S.COMMITTING),
    "done": TxnRecord("done", 1, S.PUBLISHED),
    "old": TxnRecord("old", 3, S.COMMITTING),  # claims of incarnation 2 are dead
}

#: (requirement, the row read (None: no row), holders) -> met?
CASES: list[tuple[Any, dict[str, Any] | None, dict[str, TxnRecord] | None, bool]] = [
    (RowExists("p"), partition(3), None, True),
    (RowExists("p"), None, None, False),  # dropped since it was staged into
    (ReadVersionIs("p", 3), partition(3), None, True),
    (ReadVersionIs("p", 3), partition(4), None, False),  # replaced over another version
    (ReadVersionIs("p", 3), partition(None), None, False),
    (ReadVersionIs("p", None), partition(None), None, True),
    (ReadVersionIs("p", 3), None, None, True),  # no row: a new partition
    (NoLiveClaim("p"), partition(3), HOLDERS, True),
    (NoLiveClaim("p"), None, HOLDERS, True),
    (NoLiveClaim("p"), partition(3, "live#2"), HOLDERS, False),
    (NoLiveClaim("p"), partition(3, "done#1"), HOLDERS, True),  # dead: published
    (NoLiveClaim("p"), partition(3, "old#2"), HOLDERS, True),  # dead: older incarnation
    (NoLiveClaim("p"), partition(3, "gone#1"), HOLDERS, True),  # dead: no row
    (NoLiveClaim("p"), partition(3, "done#1"), None, False),  # no holders: every claim live
    (NoLiveClaim("p", mine="live#2"), partition(3, "live#2"), HOLDERS, True),
    (NoLiveClaim("p", mine="live#2"), partition(3, "live#2"), None, True),
    (ClaimedBy("p", "live#2"), partition(3, "live#2"), None, True),
    (ClaimedBy("p", "live#2"), partition(3, "live#1"), None, False),
    (ClaimedBy("p", "live#2"), partition(3), None, False),  # released: fenced or finished
    (ClaimedBy("p", "live#2"), None, None, False),
]


@pytest.mark.parametrize(("requirement", "read", "holders", "met"), CASES)
def test_each_requirement_kind_against_the_row_read(
    requirement: Any,
    read: dict[str, Any] | None,
    holders: dict[str, TxnRecord] | None,
    met: bool,
) -> None:
    rows = {} if read is None else {"p": read}
    unmet = requirements_unmet([requirement], rows, holders)
    assert unmet == ([] if met else [requirement])


@pytest.fixture
def view(daily: PartitionedNamespace) -> Callable[[], ManifestView]:
    manifest = Manifest(daily.storage)
    return manifest.latest


def test_a_swap_that_cannot_win_commits_nothing(
    daily: PartitionedNamespace, view: Callable[[], ManifestView]
) -> None:
    """``Manifest.commit`` checks every swap before it sends it, whichever path built it:
    a refused move or an unmet requirement raises and leaves ``__manifest`` as it was."""
    manifest = Manifest(daily.storage)
    base = view()
    reopen = record(S.COMMITTING, owner="t")
    refused = Swap(base, moves=[TxnMove(reopen, reopen.moved(S.STAGED, epoch=1))])
    with pytest.raises(TransitionRefused):
        manifest.commit(refused)
    unmet = Swap(base, [partition(4)], requires=[ReadVersionIs("p", 3)], read={"p": partition(4)})
    with pytest.raises(RequirementsUnmet) as raised:
        manifest.commit(unmet)
    assert raised.value.unmet == [ReadVersionIs("p", 3)]
    assert manifest.latest().version == base.version


def test_made_names_only_the_rows_that_swap_writes(view: Callable[[], ManifestView]) -> None:
    """``made(row)``: the row, read at a later version, is one only this swap writes: its
    transaction row in the state and incarnation it moved it to, or a partition row naming
    the leaf version it set. A row in the state read, another incarnation's, a partition
    at another version, a row the swap writes without a version (a row any writer may
    write alike) or a row it does not write at all are not evidence that it committed."""
    sealed = record(S.COMMITTING, owner="t")
    publish = TxnMove(sealed, sealed.moved(S.PUBLISHED, owner=None), owner="t")
    swap = Swap(
        view(),
        [
            row("p", TABLE, location="p", read_version=7),
            row("pending", TABLE, location="n", read_version=None),
        ],
        moves=[publish],
    )
    assert swap.made(publish.after.to_row())
    assert not swap.made(sealed.to_row())  # still COMMITTING: not this swap's
    assert not swap.made(record(S.PUBLISHED, incarnation=2).to_row())
    assert swap.made(row("p", TABLE, location="p", read_version=7))
    assert not swap.made(row("p", TABLE, location="p", read_version=6))
    assert not swap.made(row("pending", TABLE, location="n", read_version=None))
    assert not swap.made(row("other", TABLE, location="o", read_version=7))
    assert sorted(swap.object_ids) == ["__txn$X", "p", "pending"]


def test_a_swap_with_moves_alone_is_found_by_its_transaction_row(
    view: Callable[[], ManifestView],
) -> None:
    """The publish of a transaction that staged nothing writes no partition row: only its
    transaction row (STAGED -> PUBLISHED) and its sources' (-> MERGED) say it committed."""
    staged = record(S.STAGED)
    source = TxnRecord("S", 1, S.STAGED)
    merged = TxnMove(source, source.moved(S.MERGED, merged_into="X#1"))
    swap = Swap(view(), moves=[TxnMove(staged, staged.moved(S.PUBLISHED)), merged])
    assert swap.made(staged.moved(S.PUBLISHED).to_row())
    assert swap.made(merged.after.to_row())
    assert not swap.made(staged.to_row())
    assert not swap.made(source.to_row())
