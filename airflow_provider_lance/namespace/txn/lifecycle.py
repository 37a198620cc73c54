"""The transaction state machine: every state, every transition, one arbiter.

The fate of a transaction is decided in exactly one place: its row in ``__manifest``
(``object_id = "__txn$<txn_id>"``, state in ``metadata``), next to the partition rows it
claims and publishes. Every transition below is one ``__manifest`` compare-and-swap that
fails if the row (or any partition row it touches) changed since it was read, so two
processes can never both move a transaction, and the move that publishes is the same
commit that sets the ``read_version``s. That commit is the transaction's linearisation
point. This is Percolator's primary lock: whoever changes the row first wins; abort and
recovery *fence* the row before they delete anything, and a committer whose fence is gone
cannot publish.

States and what each means on disk (``k`` = incarnation, ``X#k`` = its tag)::

    STAGED      stages may be recorded (no row yet, or a row with a stage epoch)
    COMMITTING  sealed: a plan fixes what is published; partitions claimed (claim = X#k);
                ``owner`` is the fence token of the one committer allowed to publish
    PUBLISHED   terminal: the read_versions are published, claims released
    ABORTED     terminal for incarnation k: can never publish; ``begin`` starts k+1
    MERGED      its stages belong to a combined transaction (``merged_into``) whose fate
                is its own

Transitions (each a single compare-and-swap):

    STAGED     -> STAGED      record: a stager bumps the epoch after writing its stage file
    STAGED     -> COMMITTING  seal: the plan, the claims, new partition rows (and each
                              source of a combined transaction -> MERGED) in one commit
    COMMITTING -> COMMITTING  steal: a retry takes over from a dead or stale committer
    COMMITTING -> PUBLISHED   publish, conditional on the committer's own token
    STAGED | COMMITTING -> ABORTED  mark_aborted (claims released in the same commit)
    ABORTED    -> STAGED      implicitly, when ``begin`` writes the next incarnation's header

A write no other process knows (``ns.write()`` without a ``txn_id``) has no row and no
states: it publishes its partition rows directly, in one swap conditional on each being
unclaimed and unchanged (:func:`publish_direct`, see :mod:`.direct`).
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
from airflow_provider_lance.namespace.format.txn_row import (
    TxnRecord,
    TxnState,
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


def claim_is_live(claim: str, records: Mapping[str, TxnRecord]) -> bool:
    """Whether a claim is held by a transaction that may still publish.

    A claim ``X#k`` is live only while X's row is COMMITTING in incarnation k; one held by
    an aborted, merged, published, newer or missing incarnation is dead and anyone may
    take it over (Percolator's rule for a secondary lock whose primary rolled back).
    """
    txn_id, incarnation = parse_incarnation_tag(claim)
    record = records.get(txn_id)
    return (
        record is not None
        and record.state.holds_claims
        and record.incarnation == incarnation
        and incarnation > 0
    )


def claim_owners(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {parse_incarnation_tag(r[CLAIM])[0] for r in rows if r.get(CLAIM)}


#: How long a write without a ``txn_id`` that was handed to the claim protocol (an
#: anonymous transaction) may hold its claims before a writer waiting for them takes its
#: process for dead and aborts it; plus this much per partition it holds (its leaf commits).
#: Nobody else can finish or retry such a write: it keeps no plan, and its id was never
#: given out. (A named transaction waits for its owner's retry, or ``recover``.)
ANONYMOUS_LEASE_SECONDS = 60.0
ANONYMOUS_LEASE_PER_PARTITION = 0.01


def abandoned(
    state: NamespaceState, blocked: Mapping[str, str], records: Mapping[str, TxnRecord]
) -> list[TxnRecord]:
    """The anonymous transactions among the holders of ``blocked`` claims (partition ->
    ``txn#k``, with their ``records``) that have been committing for longer than their
    lease (see :data:`ANONYMOUS_LEASE_SECONDS`). Aborting one is safe even if its writer
    still runs: the abort fences its row, and a committer whose fence is gone cannot
    publish (its ``write()`` then fails, retryably)."""
    found = []
    for tag in sorted(set(blocked.values())):
        record = records.get(parse_incarnation_tag(tag)[0])
        if (
            record is None
            or not record.anonymous
            or not claim_is_live(tag, records)
            or record.age <= ANONYMOUS_LEASE_SECONDS
        ):
            continue
        if record.age > anonymous_lease(state, tag):
            found.append(record)
    return found


def anonymous_lease(state: NamespaceState, tag: str) -> float:
    """The lease of anonymous transaction ``tag`` (``txn#k``) committing as of ``state``:
    :data:`ANONYMOUS_LEASE_SECONDS`, plus a little per partition it holds."""
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
    """The error once a wait for partitions other transactions hold spent its claim
    timeout: ``blocked`` maps each partition to its claim (``txn#k``), ``records`` the
    holders' records (named with how long each has been committing), and the remedy."""
    held = sorted(
        {
            f"{claim} (committing for {records[parse_incarnation_tag(claim)[0]].age:.0f}s)"
            for claim in blocked.values()
        }
    )
    return CommitConflict(
        f"{what}partitions are held by other transactions {held} for longer than the "
        f"claim timeout ({timeout:g}s); they are still committing, or crashed: retry "
        "the holder's commit to finish it, or PartitionedNamespace.recover(lease_seconds=...)"
        " aborts those idle longer than the lease (a write without a txn_id, once past "
        f"{ANONYMOUS_LEASE_SECONDS:g}s, is aborted by the next writer waiting for it){after}",
        dict(blocked),
    )


def swap(
    manifest: Manifest,
    state: NamespaceState,
    records: Iterable[TxnRecord],
    rows: Iterable[Mapping[str, Any]] = (),
) -> int:
    """THE transition primitive: transaction rows and partition rows in one
    compare-and-swap against ``state.version``; :class:`CommitConflict` if any changed."""
    table = state.rows_table([*(r.to_row() for r in records), *rows])
    return manifest.compare_and_swap(table, state.version)


def released(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The published ones of claimed partition rows, their claim cleared. Rows of partitions
    that were being created (never published) keep their dead claim: invisible, and dropped
    by :func:`drop_pending` or taken over by the next claimer."""
    return [dict(r, **{CLAIM: None}) for r in rows if r[READ_VERSION] is not None]


def drop_pending(
    manifest: Manifest, state: NamespaceState, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Delete never-published partition rows, only if unchanged since ``state`` (a new
    committer may have taken the dead claim over meanwhile: then they stay)."""
    if rows:
        manifest.compare_and_swap(
            state.rows_table([dict(r) for r in rows]),
            state.version,
            delete=True,
        )


# -- the transitions -----------------------------------------------------------------------
class TransitionRefused(Exception):
    """A transition's precondition does not hold in the state read (``record`` says why);
    the caller decides what that means (e.g. a stager whose transaction was sealed)."""

    def __init__(self, record: TxnRecord) -> None:
        super().__init__(f"transaction {record.incarnation_tag} is {record.state.value}")
        self.record = record


def _expect(record: TxnRecord, *states: TxnState) -> None:
    if record.state not in states:
        raise TransitionRefused(record)


def _merged(sources: Iterable[TxnRecord], into: TxnRecord, plan: str | None) -> list[TxnRecord]:
    """STAGED sources -> MERGED into ``into`` (a combined transaction's seal takes them)."""
    out = []
    for source in sources:
        _expect(source, TxnState.STAGED)
        out.append(source.moved(TxnState.MERGED, merged_into=into.incarnation_tag, plan=plan))
    return out


def bump(manifest: Manifest, state: NamespaceState, record: TxnRecord) -> TxnRecord:
    """STAGED -> STAGED: order a recorded stage before any later seal."""
    _expect(record, TxnState.STAGED)
    moved = record.moved(TxnState.STAGED, epoch=record.epoch + 1)
    swap(manifest, state, [moved])
    return moved


def seal(
    manifest: Manifest,
    state: NamespaceState,
    record: TxnRecord,
    *,
    token: str,
    plan: str | None,
    claims: Iterable[Mapping[str, Any]],
    sources: Iterable[TxnRecord] = (),
) -> tuple[TxnRecord, int]:
    """STAGED -> COMMITTING with the plan, the claims and (combined) sources -> MERGED;
    returns the moved record and the manifest version the swap made."""
    _expect(record, TxnState.STAGED)
    moved = record.moved(TxnState.COMMITTING, owner=token, plan=plan)
    version = swap(manifest, state, [moved, *_merged(sources, record, plan)], claims)
    return moved, version


def steal(manifest: Manifest, state: NamespaceState, record: TxnRecord, token: str) -> TxnRecord:
    """COMMITTING -> COMMITTING under a new owner: the old one can no longer publish."""
    _expect(record, TxnState.COMMITTING)
    moved = record.moved(TxnState.COMMITTING, owner=token)
    swap(manifest, state, [moved])
    return moved


def publish_claimed(
    manifest: Manifest,
    state: NamespaceState,
    record: TxnRecord,
    token: str,
    rows: Iterable[Mapping[str, Any]],
) -> int:
    """COMMITTING (owned by ``token``) -> PUBLISHED with the new read_versions; returns the
    manifest version: the linearisation point of the transaction."""
    _expect(record, TxnState.COMMITTING)
    if record.owner != token:
        raise TransitionRefused(record)
    return swap(manifest, state, [record.moved(TxnState.PUBLISHED, owner=None)], rows)


def publish_direct(
    manifest: Manifest, state: NamespaceState, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Partition rows with their new read_versions (and the rows of new partitions), with
    no transaction row: one swap against ``state``, failing if any of them changed since
    (a concurrent publish, a claim, an insert of the same partition). Only for rows that
    were unclaimed at ``state``; returns the manifest version: the write's linearisation
    point."""
    if any(r.get(CLAIM) for r in rows):
        raise ValueError("a direct publish never writes claims")
    return swap(manifest, state, [], rows)


def publish_empty(
    manifest: Manifest, state: NamespaceState, record: TxnRecord, sources: Iterable[TxnRecord]
) -> int:
    """STAGED -> PUBLISHED for a transaction that staged nothing (its sources MERGED)."""
    _expect(record, TxnState.STAGED)
    merged = _merged(sources, record, None)
    return swap(manifest, state, [record.moved(TxnState.PUBLISHED), *merged])


def mark_aborted(
    manifest: Manifest,
    state: NamespaceState,
    record: TxnRecord,
    reason: str,
    claimed: Iterable[Mapping[str, Any]],
    sources: Iterable[TxnRecord] = (),
) -> TxnRecord:
    """STAGED | COMMITTING -> ABORTED; releases the claims of published partitions in the
    same commit (rows of partitions it was creating keep their now dead claim: invisible,
    and taken over or dropped later). Sources merged into it are aborted with it."""
    _expect(record, TxnState.STAGED, TxnState.COMMITTING)
    keep = released(claimed)
    moved = record.moved(TxnState.ABORTED, owner=None, error=reason)
    dead = [
        s.moved(TxnState.ABORTED, error=f"{reason} (merged into {record.incarnation_tag})")
        for s in sources
        if s.state is TxnState.MERGED and s.merged_into == record.incarnation_tag
    ]
    swap(manifest, state, [moved, *dead], keep)
    return moved


def collect_finished(
    manifest: Manifest, state: NamespaceState, forget: Callable[[str], None]
) -> int:
    """Delete the rows of finished anonymous transactions (``write()`` without an id):
    nobody can retry or reuse an id they never saw, so their rows decide nothing any more.
    Named transactions keep theirs (a retry must find it published; a reused id must get
    a new incarnation). Returns how many rows went; a concurrent commit makes it skip.

    Their records go first (``forget(txn_id)``): a header without a row reads as a staged
    transaction, which ``recover`` or an operator would abort, deleting the files of a
    published one. (A writer killed after its publish never deleted them; a Spark
    driver's anonymous transaction keeps them.) Killed in between, the row stays. A
    ``state`` older than the latest finds fewer, or its drop conflicts and skips.
    """
    done = [r for r in all_records(state) if r.anonymous and r.state.is_terminal]
    if not done:
        return 0
    for record in done:
        forget(record.txn_id)
    try:
        drop_pending(manifest, state, [dict(r.to_row(), **{CLAIM: None}) for r in done])
    except CommitConflict:
        return 0
    return len(done)
