"""The transaction state machine: every state, every transition, one arbiter.

A transaction's fate is its row in ``__manifest`` (``__txn$<txn_id>``, state in ``metadata``). Every
transition is one compare-and-swap that fails if the row (or a partition row it touches) changed
since it was read, so no two processes both move a transaction, and the move that publishes sets the
``read_version``\\ s (the linearisation point). Abort and recovery *fence* the row before deleting
anything; a committer whose fence is gone cannot publish.

States (``k`` = incarnation, ``X#k`` = its tag)::

    STAGED      stages may be recorded (no row yet, or a row with a stage epoch)
    COMMITTING  sealed: a plan fixes what is published; partitions claimed (claim = X#k);
                ``owner`` is the fence token of the one committer allowed to publish
    PUBLISHED   terminal: the read_versions are published, claims released
    ABORTED     terminal for incarnation k: can never publish; ``begin`` starts k+1
    MERGED      its stages belong to a combined transaction (``merged_into``)

Transitions (each a :class:`~..format.swap.TxnMove`, checked by
:meth:`~..format.manifest.Manifest.commit` against :data:`~..format.swap.TRANSITIONS`)::

    STAGED     -> STAGED      record: a stager bumps the epoch after writing its stage file
    STAGED     -> COMMITTING  seal: plan, claims, new partition rows (sources -> MERGED)
    COMMITTING -> COMMITTING  steal: a retry takes over from a dead or stale committer
    COMMITTING -> PUBLISHED   publish, conditional on the committer's own token
    STAGED | COMMITTING -> ABORTED  abort (claims released in the same commit)
    ABORTED    -> STAGED      implicitly, when ``begin`` writes the next incarnation

A write without a ``txn_id`` has no row (:mod:`.direct`); a table operation with one
writes its row PUBLISHED in its one swap (:func:`operation_published`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_provider_lance.namespace.errors import CommitConflict
from airflow_provider_lance.namespace.format.manifest import (
    CLAIM,
    OBJECT_ID,
    READ_VERSION,
    Manifest,
)
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import Swap, TxnMove
from airflow_provider_lance.namespace.format.txn_row import (
    TxnRecord,
    TxnState,
    claim_is_live,
    parse_incarnation_tag,
    row_id,
)


def load_records(state: NamespaceState, txn_ids: Iterable[str]) -> dict[str, TxnRecord]:
    """The stored rows of these transactions as of ``state`` (absent ids are left out)."""
    ids = sorted({row_id(t) for t in txn_ids})
    if not ids:
        return {}
    table = state.full_rows(ids)
    return {r.txn_id: r for r in map(TxnRecord.from_row, table.to_pylist())}


def record_and_rows(
    state: NamespaceState, txn_id: str, object_ids: Iterable[str]
) -> tuple[TxnRecord | None, dict[str, dict[str, Any]]]:
    """A transaction's stored row and these partition rows as of ``state``, in one scan."""
    found = {r[OBJECT_ID]: r for r in state.full_rows([*object_ids, row_id(txn_id)]).to_pylist()}
    stored = found.pop(row_id(txn_id), None)
    return (None if stored is None else TxnRecord.from_row(stored)), found


def all_records(state: NamespaceState) -> list[TxnRecord]:
    """Every stored transaction row as of ``state``."""
    return [TxnRecord.from_row(r) for r in state.view.txn_rows()]


def claim_owners(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {parse_incarnation_tag(r[CLAIM])[0] for r in rows if r.get(CLAIM)}


#: How long an anonymous transaction may hold its claims before a writer waiting for them
#: aborts it (nobody else can finish it), plus this much per partition it holds.
ANONYMOUS_LEASE_SECONDS = 60.0
ANONYMOUS_LEASE_PER_PARTITION = 0.01


def abandoned(
    state: NamespaceState, blocked: Mapping[str, str], records: Mapping[str, TxnRecord]
) -> list[TxnRecord]:
    """The anonymous holders of ``blocked`` claims (partition -> ``txn#k``) committing for
    longer than their lease. Aborting one is safe even if its writer runs: the fence stops
    its publish (its ``write()`` fails, retryably)."""
    found = []
    for tag in sorted(set(blocked.values())):
        record = records.get(parse_incarnation_tag(tag)[0])
        if record is None or not record.anonymous or not claim_is_live(tag, records):
            continue
        if record.age > ANONYMOUS_LEASE_SECONDS and record.age > anonymous_lease(state, tag):
            found.append(record)
    return found


def anonymous_lease(state: NamespaceState, tag: str) -> float:
    """The lease of anonymous transaction ``tag`` (``txn#k``) as of ``state``."""
    held = len(state.view.claimed_by(tag))
    return ANONYMOUS_LEASE_SECONDS + held * ANONYMOUS_LEASE_PER_PARTITION


def claims_timed_out(
    blocked: Mapping[str, str],
    records: Mapping[str, TxnRecord],
    timeout: float,
    *,
    what: str = "",
    after: str = "",
) -> CommitConflict:
    """The error once a wait for claimed partitions spent its timeout, naming each holder
    (``blocked``: partition -> ``txn#k``) with its age, and the remedy."""
    ages = {c: records[parse_incarnation_tag(c)[0]].age for c in blocked.values()}
    held = sorted(f"{claim} (committing for {age:.0f}s)" for claim, age in ages.items())
    return CommitConflict(
        f"{what}partitions are held by other transactions {held} for longer than the "
        f"claim timeout ({timeout:g}s); they are still committing, or crashed: retry "
        "the holder's commit to finish it, or PartitionedNamespace.recover(lease_seconds=...)"
        " aborts those idle longer than the lease (a write without a txn_id, once past "
        f"{ANONYMOUS_LEASE_SECONDS:g}s, is aborted by the next writer waiting for it){after}",
        dict(blocked),
    )


def released(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The published ones of claimed rows, claim cleared (unpublished rows keep their dead
    claim: invisible, dropped by :func:`drop_pending` or taken over)."""
    return [dict(r, **{CLAIM: None}) for r in rows if r[READ_VERSION] is not None]


def drop_pending(
    manifest: Manifest, state: NamespaceState, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Delete never-published rows, only if unchanged since ``state`` (else a committer
    took the dead claim over)."""
    manifest.commit(Swap(state.view, drops=[str(r[OBJECT_ID]) for r in rows]))


def bumped(record: TxnRecord) -> TxnMove:
    """STAGED -> STAGED: order a recorded stage before any later seal."""
    return TxnMove(record, record.moved(TxnState.STAGED, epoch=record.epoch + 1))


def sealed(
    record: TxnRecord, *, token: str, plan: str | None, sources: Iterable[TxnRecord] = ()
) -> list[TxnMove]:
    """STAGED -> COMMITTING with the plan (combined: each source STAGED -> MERGED)."""
    moved = record.moved(TxnState.COMMITTING, owner=token, plan=plan)
    return [TxnMove(record, moved), *merged(sources, record, plan)]


def merged(sources: Iterable[TxnRecord], into: TxnRecord, plan: str | None) -> list[TxnMove]:
    """STAGED sources -> MERGED into ``into`` (a combined transaction's seal takes them)."""
    tag = into.incarnation_tag
    return [TxnMove(s, s.moved(TxnState.MERGED, merged_into=tag, plan=plan)) for s in sources]


def stolen(record: TxnRecord, token: str) -> TxnMove:
    """COMMITTING -> COMMITTING under a new owner: the old one can no longer publish."""
    return TxnMove(record, record.moved(TxnState.COMMITTING, owner=token))


def published(record: TxnRecord, token: str | None) -> TxnMove:
    """COMMITTING (owned by ``token``) -> PUBLISHED, or STAGED -> PUBLISHED for a
    transaction that staged nothing (``token`` None): the linearisation point."""
    return TxnMove(record, record.moved(TxnState.PUBLISHED, owner=None), owner=token)


def operation_published(record: TxnRecord) -> TxnMove:
    """A table operation's row, PUBLISHED in its one swap."""
    return TxnMove(None, record)


def aborted(record: TxnRecord, reason: str, sources: Iterable[TxnRecord] = ()) -> list[TxnMove]:
    """STAGED | COMMITTING -> ABORTED; sources merged into it are aborted with it."""
    tag, error = record.incarnation_tag, f"{reason} (merged into {record.incarnation_tag})"
    moves = [TxnMove(record, record.moved(TxnState.ABORTED, owner=None, error=reason))]
    into_it = [s for s in sources if s.state is TxnState.MERGED and s.merged_into == tag]
    return moves + [TxnMove(s, s.moved(TxnState.ABORTED, error=error)) for s in into_it]


def collect_finished(
    manifest: Manifest, state: NamespaceState, forget: Callable[[str], None]
) -> int:
    """Delete the rows of finished anonymous transactions (nobody can retry an id never seen);
    returns how many (0: a concurrent commit won). Their records go first (``forget``): a header
    without a row reads as staged, and aborting that would delete a published one's files."""
    done = [r for r in all_records(state) if r.anonymous and r.state.is_terminal]
    if not done:
        return 0
    for record in done:
        forget(record.txn_id)
    try:
        manifest.commit(Swap(state.view, drops=[row_id(r.txn_id) for r in done]))
    except CommitConflict:
        return 0
    return len(done)
