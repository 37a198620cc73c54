"""Table operations (drop_partitions, delete, merge, optimize, relocate): each ONE
``__manifest`` swap, as a strategy of :func:`~.publish.publish_once`. One attempt:

1. read manifest version S; the operation *selects* what it touches (prune, route);
2. a touched partition held by a live committing transaction is waited for, up to
   ``claim_timeout``, then :class:`CommitConflict` names the holder (a claim whose holder
   can no longer publish is cleared by the swap);
3. *compute*, per partition and in parallel, the Lance change against its published
   ``read_version`` R (deletion files, a merge's uncommitted ``Update``, a compaction's
   ``Rewrite``), or stage the files of a partition it creates; a change an earlier attempt
   computed against the same R, schema, spec and input is reused;
4. commit each change as leaf version R+1 exactly (versions above R rolled back, a
   rebased commit made again, tagged with the operation's owner);
5. ONE compare-and-swap against S sets the new ``read_version``\\ s, inserts the rows of
   created partitions, deletes those of dropped ones and, with a ``txn_id``, moves the
   transaction row to PUBLISHED: the linearisation point. It fails if any of those rows
   changed, was inserted or was claimed since S; the operation then starts again at 1,
   recomputing only partitions whose ``read_version`` moved.

Nothing is lost: a change is computed on the published R, committed only as exactly R+1
and published only if the row still says R at the swap; a concurrent publish of R' makes
the swap fail and the change is computed again on R'. Committed but unpublished versions
lie above the published one and the next commit to that leaf rolls them back. A version
above R that no writer of ours made is a foreign writer's publish to a "read the latest"
partition, never rolled back. When what an attempt read is gone (``maintain`` removed R or
S), the attempt lost a race and the next one starts from the newer version.

Crashes: before the swap nothing is visible (what it left is rolled back by the next commit
of each leaf and reclaimed by ``maintain(sweep_orphans=True)``); after it, all of it is. With
a ``txn_id`` the swap also records the transaction row (naming its outcome, saved before):
a retry after a crash before the swap redoes the operation, one after it returns the first
result and changes nothing.
"""

from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import lance
import pyarrow as pa
from lance import LanceOperation
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    ManifestError,
    StorageError,
    TableNotFoundError,
    TransactionAborted,
    VersionCleanedUp,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import CLAIM, OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.naming import leaf_directory
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.format.txn_row import (
    TransactionHeader,
    TxnRecord,
    TxnState,
    incarnation_tag,
)
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.results import OperationResult, PartitionOutcome, SkipReason
from airflow_provider_lance.namespace.retry import Budget, Outcome, Retry, backoff, retry_until
from airflow_provider_lance.namespace.txn.abort import abort_abandoned
from airflow_provider_lance.namespace.txn.kernel import (
    ApplyChange,
    ClaimWait,
    CommitOptions,
    LeafWork,
    ReplaceLeaf,
    StillPublished,
    TransactionContext,
    best_effort,
    moved_on,
)
from airflow_provider_lance.namespace.txn.lifecycle import load_records, operation_published
from airflow_provider_lance.namespace.txn.publish import Prepared, publish_once
from airflow_provider_lance.namespace.txn.publish_result import operation_result, published_at
from airflow_provider_lance.namespace.txn.records import resolve
from airflow_provider_lance.namespace.txn.spec_fence import (
    fence_spec,
    needs_fence,
    new_intent_id,
    register_intent,
)
from airflow_provider_lance.namespace.txn.store import check_txn_id
from airflow_provider_lance.namespace.write.leaf_commit import (
    base_version,
    schema_digest,
    stage_fragments,
)

log = logging.getLogger(__name__)

#: Swaps lost to concurrent publishes before an operation gives up.
OPERATION_ATTEMPTS = 8


@dataclass
class ComputedChange:
    """What an operation does to one existing partition: ``operation`` computed against
    its published version ``base`` (None: nothing to change there)."""

    partition: Partition
    base: int
    operation: LanceOperation.BaseOperation | None
    change: PartitionOutcome
    #: The leaf version its commit made (set once committed).
    committed: int | None = None
    #: The operation's input for this partition (see :meth:`TableOperation.inputs`).
    inputs: str = ""
    #: Why the operation leaves this partition alone (reported in the result).
    skip: str | None = None
    #: The leaf opened at ``base`` to compute the change, reused by its commit.
    leaf: lance.LanceDataset | None = field(default=None, repr=False, compare=False)


@dataclass
class NewLeaf:
    """A partition an operation creates (a merge inserting new partition values): data
    files staged in its directory, committed as a new leaf table."""

    object_id: str
    directory: str
    values: dict[str, Any]
    fragments: list[FragmentMetadata]
    rows: int
    leaf_schema: pa.Schema
    spec_version: int
    inputs: str = ""
    committed: int | None = None


@dataclass
class Selection:
    """What an operation touches as of one manifest version."""

    #: Partitions whose leaf may change (computed per partition).
    targets: dict[str, Partition] = field(default_factory=dict)
    #: Partitions whose ``__manifest`` row goes.
    drops: dict[str, Partition] = field(default_factory=dict)
    #: New partitions: object id -> partition values (in spec order).
    creates: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: The spec version new partitions are created under.
    spec_version: int = 1
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def object_ids(self) -> list[str]:
        return [*self.targets, *self.drops, *self.creates]


class TableOperation(ABC):
    """One kind of table operation: what it touches and how it changes one leaf."""

    #: The operation's name (results, transaction records, logs, failpoints).
    kind: ClassVar[str]
    #: Skip (not wait for) partitions a transaction holds or whose version keeps moving.
    skips_busy: ClassVar[bool] = False
    #: Inserts a key only where no partition holds it (a merge): ordered against spec
    #: changes by an intent row (see :mod:`.spec_fence`).
    reads_keys: ClassVar[bool] = False

    #: The state last selected on and its selection (see :meth:`selection`).
    _selected: tuple[NamespaceState, Selection] | None = None

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def validate(self, state: NamespaceState) -> None:
        """Raise a project error for bad input before anything is written."""
        self.selection(state)

    @abstractmethod
    def select(self, state: NamespaceState) -> Selection:
        """The partitions touched as of ``state``."""

    def selection(self, state: NamespaceState) -> Selection:
        """:meth:`select`, made once per state (the check before the run and its first
        attempt read one state); a copy, the caller's to change."""
        if self._selected is None or self._selected[0] is not state:
            self._selected = (state, self.select(state))
        made = self._selected[1]
        return replace(
            made,
            targets=dict(made.targets),
            drops=dict(made.drops),
            creates=dict(made.creates),
            skipped=dict(made.skipped),
        )

    @abstractmethod
    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        """The change to ``partition``'s leaf computed on its published version ``base``."""

    def close(self) -> None:  # noqa: B027 (most operations hold nothing)
        """The run ended (published or failed): release what it holds (a build record)."""

    def manifest_rows(self, state: NamespaceState) -> tuple[list[dict[str, Any]], list[str]]:
        """Bookkeeping rows (reserved ``__`` ids) the swap upserts and deletes besides the
        partitions' (as of the last :meth:`select`): an index declaration."""
        return [], []

    def depends_on(self, state: NamespaceState) -> list[dict[str, Any]]:
        """Bookkeeping rows of ``state`` the changes were computed from (as of the last
        :meth:`select`: the index declarations a build follows). A swap that changes
        anything writes them again unchanged, so a concurrent change to them (a dropped or
        replaced index) makes it lose its race and compute again."""
        return []

    def inputs(self, object_id: str) -> str:
        """What the change to ``object_id`` is computed from besides its published version
        (as of the last :meth:`select`): an earlier change is reused only for the same."""
        return ""

    def create(self, state: NamespaceState, object_id: str, values: tuple[Any, ...]) -> NewLeaf:
        """Stage the data files of a partition the operation creates."""
        raise NotImplementedError(f"{self.kind} creates no partitions")

    def stage_rows(
        self, state: NamespaceState, uri: str, rows: pa.Table
    ) -> tuple[pa.Schema, list[FragmentMetadata]]:
        """``rows`` (namespace schema) staged at ``uri`` as the files of a whole leaf
        version in the namespace's leaf schema: that schema and the files."""
        schema = state.schema.leaf_schema()
        rows = state.schema.to_leaf(rows, schema)
        return schema, stage_fragments(self.storage, uri, rows, overwrite=True)

    def stage_new_leaf(
        self, state: NamespaceState, oid: str, values: tuple[Any, ...], rows: pa.Table, inputs: str
    ) -> NewLeaf:
        """``rows`` staged as a new partition's leaf under the current spec."""
        directory = leaf_directory(oid)
        schema, fragments = self.stage_rows(state, self.storage.uri(directory), rows)
        named = dict(zip([f.name for f in state.current_spec], values, strict=True))
        n, spec = rows.num_rows, state.spec_version
        return NewLeaf(oid, directory, named, fragments, n, schema, spec, inputs)

    def dropped(self, partition: Partition) -> PartitionOutcome:
        """What dropping ``partition`` removes: its rows at its published version."""
        leaf = self.storage.table(partition.location, partition.read_version)
        removed, before = int(leaf.count_rows()), len(leaf.get_fragments())
        return PartitionOutcome(
            partition.object_id, partition.values, None, removed, fragments_before=before
        )


def outcome(partition: Partition, **counts: Any) -> PartitionOutcome:
    """The change to ``partition`` (at its published version) with these counts."""
    return PartitionOutcome(partition.object_id, partition.values, partition.read_version, **counts)


def leaf_rows(
    state: NamespaceState, leaf: lance.LanceDataset, columns: list[str] | None = None
) -> pa.Table:
    """The rows of ``leaf`` in the namespace schema, projected on ``columns`` (None: all)."""
    plan = state.schema.read_plan(leaf.schema, columns)
    return plan.apply(leaf.to_table(columns=plan.leaf_columns))


@dataclass
class _Attempt:
    """What one attempt computed: reused by the next one where it still applies."""

    works: dict[str, ComputedChange] = field(default_factory=dict)
    created: dict[str, NewLeaf] = field(default_factory=dict)
    #: The namespace schema and spec version it was computed under.
    shape: tuple[str, int] | None = None


_Rows = dict[str, dict[str, Any]]
_Changed = dict[str, ComputedChange]
_Created = dict[str, NewLeaf]


@dataclass
class _Computed:
    """An attempt's changes, ready for their leaf commits (``result``: set by ``swap``)."""

    selection: Selection
    attempt: _Attempt
    changed: _Changed
    current: _Rows
    result: OperationResult | None = None
    #: The operation's own rows upserted and deleted (see TableOperation.manifest_rows).
    own: tuple[list[dict[str, Any]], list[str]] = ([], [])

    @property
    def changes_anything(self) -> bool:
        created, own = self.attempt.created, self.own[0] or self.own[1]
        return bool(self.changed or self.selection.drops or created or own)


#: Errors of an attempt that are a lost race if the namespace moved on under it.
_STALE = (StorageError, TableNotFoundError, ManifestError, VersionCleanedUp, OSError, ValueError)


class OperationRunner:
    """Runs one table operation to its publish (see the module docstring)."""

    def __init__(
        self,
        ctx: TransactionContext,
        operation: TableOperation,
        *,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
    ) -> None:
        self.ctx = ctx
        self.op = operation
        #: The PublishStrategy's failpoint prefix and leaf-version tag.
        self.name: str = operation.kind
        self.kind: str | None = operation.kind
        self.txn_id = None if txn_id is None else check_txn_id(txn_id)
        timeout = CommitOptions.for_claim_timeout(claim_timeout).claim_timeout
        self.incarnation = 1
        self.owner = incarnation_tag(self.txn_id or uuid.uuid4().hex, 1)
        self.token = uuid.uuid4().hex[:16]
        self._previous = _Attempt()
        #: The attempt that got as far as its leaf commits and has not published.
        self._last: Prepared[_Computed] | None = None
        #: The swap that attempt sent (None: it sent none).
        self._sent: Swap | None = None
        #: Partition -> how often its published version moved under an attempt's swap.
        self._moves: dict[str, int] = {}
        #: The state the next attempt starts from.
        self._entry: NamespaceState | None = None
        #: This run's intent row while it has one (see :mod:`.spec_fence`).
        self._intent: str | None = None
        self._claims = ClaimWait(
            ctx,
            timeout,
            lambda state, live, holders: abort_abandoned(ctx, state, live, holders),
            name=operation.kind,
            what=f"{operation.kind}: ",
            after="; nothing was changed",
        )

    # -- entry -----------------------------------------------------------------------------
    def run(self, state: NamespaceState | None = None) -> OperationResult:
        """``state``: the latest namespace as the caller just read it (None: read here),
        what the input is checked against and the first attempt starts from."""
        state = self.ctx.load_state() if state is None else state
        record = None
        if self.txn_id is not None:  # a retry of a published run returns its first result
            record = resolve(self.ctx, state, self.txn_id)
            if (done := self._first_result(state, record)) is not None:
                return done
        self.op.validate(state)  # bad input changes nothing, records none
        self._entry = state
        if self.txn_id is not None:
            self._begin(state, record)
        try:
            return self._run()
        finally:
            self._withdraw_intent()
            self.op.close()

    def _run(self) -> OperationResult:
        kind = self.op.kind
        budgets = {
            Outcome.LOST: Budget(
                lambda: CommitConflict(
                    f"{kind}: concurrent writers kept publishing the same partitions "
                    f"({OPERATION_ATTEMPTS} attempts); nothing was published, try again"
                ),
                attempts=OPERATION_ATTEMPTS,
            ),
            Outcome.CLAIMED: Budget(self._claims.timed_out, seconds=self._claims.timeout),
            # Each one means a concurrent operation depending on the same rows published.
            Outcome.QUEUED: Budget(
                lambda: CommitConflict(
                    f"{kind}: concurrent operations depending on the same index declarations "
                    f"kept publishing first for {self._claims.timeout:g} s; nothing was "
                    "published, try again"
                ),
                seconds=self._claims.timeout,
            ),
            # The first is this run registering its intent (no wait); then spec changes race it.
            Outcome.ORDERED: Budget(
                lambda: CommitConflict(
                    f"{kind}: could not order itself against concurrent partition spec "
                    "changes; nothing was published, try again"
                ),
                attempts=1 + 2 * OPERATION_ATTEMPTS,
                free=1,
            ),
        }
        outcome = retry_until(self._attempt, budgets, sleep=lambda n: backoff(n + 1))
        changes, version = len(outcome.partitions), outcome.manifest_version
        log.info("%s published %d partition change(s) (manifest v%s)", kind, changes, version)
        return outcome

    def _attempt(self, attempt: int) -> OperationResult | Outcome:
        """The first result if a concurrent run of this ``txn_id`` published, else one attempt."""
        state, self._entry = self._entry or self.ctx.load_state(), None
        if self.txn_id is not None and attempt and (done := self._published(state)) is not None:
            return done
        self._entry = state
        got = publish_once(self.ctx, self, attempt)
        if got is Outcome.LOST and self._rewritten_unchanged():
            return Outcome.QUEUED
        return got

    def _rewritten_unchanged(self) -> bool:
        """Whether the swap just lost only to commits that wrote its rows as they were at
        its base (operations depending on one index declaration rewrite it unchanged): the
        leaf versions it publishes are still the next ones, its inputs still hold."""
        swap, self._sent = self._sent, None
        if swap is None:
            return False
        latest = self.ctx.manifest.latest()
        if latest.version == swap.base_version:
            return False
        ids = swap.object_ids
        return swap.base.rows_by_id(ids) == latest.rows_by_id(ids)

    # -- ordering against spec changes (see spec_fence) --------------------------------------
    def _ordered(self, state: NamespaceState) -> bool:
        """Whether a change computed on ``state`` may be published: its spec fenced and
        this run's intent in it. Otherwise fences or registers (one commit) and returns
        False: the attempt starts again on the newer version."""
        if needs_fence(state):
            fence_spec(self.ctx.manifest, state, state.spec_version)
            return False
        if self._intent is not None and state.existing([self._intent]):
            return True
        self._intent = self._intent or new_intent_id()
        register_intent(self.ctx.manifest, state, self._intent, self.owner)
        return False

    def _withdraw_intent(self) -> None:
        """Delete this run's intent row if its swap did not (best effort)."""
        if self._intent is None:
            return
        intent, self._intent = self._intent, None
        try:
            self.ctx.manifest.delete_rows([intent])
        except (OSError, LanceNamespaceError) as exc:
            log.warning("could not remove the merge intent %s: %s", intent, exc)

    # -- transaction record (txn_id) -----------------------------------------------------
    def _first_result(
        self, state: NamespaceState, record: TxnRecord | None
    ) -> OperationResult | None:
        """The first result if this ``txn_id`` (``record``) published as of ``state``."""
        assert self.txn_id is not None
        if record is None:
            return None
        header = self.ctx.store.load(self.txn_id, record.incarnation)
        mode = header.mode if header is not None else record.mode
        if mode != self.op.kind:
            raise InvalidArgumentError(
                f"transaction id {self.txn_id!r} belongs to a {mode} "
                f"({record.state.value}); a {self.op.kind} needs an id of its own"
            )
        if record.state is not TxnState.PUBLISHED:
            return None
        log.info("%s %s was published already: its first result", self.op.kind, self.txn_id)
        return self._outcome(state, record)

    def _begin(self, state: NamespaceState, record: TxnRecord | None) -> None:
        """Write the header of the incarnation to run (a crashed attempt's is reused)."""
        assert self.txn_id is not None
        incarnation = 1
        if record is not None:
            incarnation = record.incarnation + (record.state is TxnState.ABORTED)
        self.incarnation = incarnation
        self.owner = incarnation_tag(self.txn_id, incarnation)
        if record is None or record.state is TxnState.ABORTED:
            self.ctx.store.save(
                TransactionHeader(
                    self.txn_id, self.op.kind, incarnation, state.version, state.spec_version
                )
            )

    def _published(self, state: NamespaceState) -> OperationResult | None:
        """The first result if a concurrent run of this ``txn_id`` published it as of
        ``state``; an error if it was aborted while this one ran."""
        assert self.txn_id is not None
        record = load_records(state, [self.txn_id]).get(self.txn_id)
        if record is None or record.incarnation < self.incarnation:
            return None  # an aborted earlier incarnation: this one replaces its row
        if record.state is TxnState.PUBLISHED and record.incarnation == self.incarnation:
            return self._outcome(state, record)
        raise TransactionAborted(
            f"{self.op.kind} {self.txn_id} was {record.state.value} while it ran "
            f"(incarnation {record.incarnation}): nothing of it was published"
        )

    def _outcome(self, state: NamespaceState, record: TxnRecord) -> OperationResult:
        """The recorded result of a published operation (its manifest version found again
        after a crash between the swap and the record's completion)."""
        assert self.txn_id is not None
        doc = None
        if record.outcome is not None:
            doc = self.ctx.store.result(self.txn_id, record.incarnation, record.outcome)
        if doc is not None:
            types = {f.name: f.type for f in state.partition_columns}
            result = OperationResult.from_dict(doc, types)
        else:
            what = f"{self.op.kind} {self.txn_id}"
            log.warning("the outcome of %s is missing: reported without its partitions", what)
            result = operation_result(self.op.kind, [], self.txn_id, {})
        if result.manifest_version is None:
            result = replace(result, manifest_version=published_at(self.ctx.load_state, record))
            if record.outcome is not None:
                self._save(record.incarnation, record.outcome, result)
        return result

    def _save(self, incarnation: int, token: str, result: OperationResult) -> None:
        assert self.txn_id is not None
        self.ctx.store.save_result(self.txn_id, incarnation, result.to_dict(), token=token)

    # -- one attempt: the PublishStrategy of txn/publish.py ---------------------------------
    def prepare(self, attempt: int) -> Prepared[_Computed]:
        """Select, check claims, compute, order against spec changes; raises
        :class:`~..retry.Retry` CLAIMED (wait for a holder), LOST (what it read was cleaned
        up) or ORDERED (a merge fenced its spec or registered its intent: go again)."""
        state, self._entry = self._entry or self.ctx.load_state(), None
        last, self._last = self._last, None
        if last is not None:  # it lost its race: reuse what it computed where it applies
            self._previous = last.detail.attempt
            self._note_moves(last.detail.attempt)
        try:
            self._last = self._prepare(state)
        except _STALE as exc:
            if isinstance(exc, InvalidArgumentError) or not moved_on(self.ctx, state):
                raise
            log.info("%s: %s; the namespace moved on meanwhile: computing again", self.op.kind, exc)
            raise Retry(Outcome.LOST) from exc
        return self._last

    def _prepare(self, state: NamespaceState) -> Prepared[_Computed]:
        failpoint(f"{self.op.kind}.selected")
        selection = self.op.selection(state)
        if self.op.skips_busy:
            for oid in [o for o in selection.targets if self._moves.get(o, 0) >= 2]:
                del selection.targets[oid]
                selection.skipped[oid] = SkipReason.KEPT_MOVING
        current = {r[OBJECT_ID]: r for r in state.full_rows(selection.object_ids).to_pylist()}
        self._check_claims(state, selection, current)
        attempt = self._compute(state, selection)
        selection.skipped.update((o, w.skip) for o, w in attempt.works.items() if w.skip)
        changed = {oid: w for oid, w in attempt.works.items() if w.operation is not None}
        guard = StillPublished(self.ctx.manifest, self.ctx.storage)
        own = self.op.manifest_rows(state)
        if changed or attempt.created:
            own = ([*own[0], *self.op.depends_on(state)], own[1])
        computed = _Computed(selection, attempt, changed, current, own=own)
        if not computed.changes_anything and self.txn_id is None:
            return Prepared(state, [], guard, self.owner, computed)  # nothing to publish
        failpoint(f"{self.op.kind}.computed")
        if self.op.reads_keys and not self._ordered(state):
            self._previous = attempt
            raise Retry(Outcome.ORDERED)
        works = self._leaf_works(changed, attempt.created)
        return Prepared(state, works, guard, self.owner, computed)

    def swap(self, prepared: Prepared[_Computed]) -> Swap:
        """The rows of the changed, created and dropped partitions, this run's intent
        dropped, and with a ``txn_id`` its row PUBLISHED naming the outcome (saved first)."""
        computed = prepared.detail
        changed, created = computed.changed, computed.attempt.created
        for w in changed.values():  # a later attempt reusing a change opens its leaf anew
            w.leaf = None
        for oid, version in prepared.versions.items():
            (changed[oid] if oid in changed else created[oid]).committed = version
        changes = self._changes(computed.selection, changed, created)
        result = operation_result(self.op.kind, changes, self.txn_id, computed.selection.skipped)
        computed.result = result
        if not computed.changes_anything and self.txn_id is None:
            return Swap(prepared.state.view)  # nothing to publish
        rows = self._rows(prepared.state, computed.current, changed, created)
        rows += computed.own[0]
        moves = []
        if self.txn_id is not None:
            self._save(self.incarnation, self.token, result)
            kind, published = self.op.kind, TxnState.PUBLISHED
            record = TxnRecord(self.txn_id, self.incarnation, published, kind, outcome=self.token)
            moves.append(operation_published(record))
        drops = sorted(computed.selection.drops) + computed.own[1]
        if self._intent is not None:  # conflicts with a fence that rewrote it since
            drops.append(self._intent)
        self._sent = Swap(prepared.state.view, rows, drops, moves)
        return self._sent

    def finish(self, prepared: Prepared[_Computed], version: int | None) -> OperationResult:
        """The result, with the manifest version the swap made (None: nothing published)."""
        assert prepared.detail.result is not None
        if version is None:
            return prepared.detail.result
        self._intent = None  # deleted by the swap
        result = replace(prepared.detail.result, manifest_version=version)
        if self.txn_id is not None:  # completed when asked again if this fails
            best_effort(
                f"completing the outcome of {self.txn_id}",
                lambda: self._save(self.incarnation, self.token, result),
            )
        return result

    def _note_moves(self, attempt: _Attempt) -> None:
        """After a lost swap: count the partitions whose published version moved."""
        state = self.ctx.load_state()
        now = state.find(list(attempt.works))
        for oid, work in attempt.works.items():
            partition = now.get(oid)
            if partition is None or partition.read_version != work.partition.read_version:
                self._moves[oid] = self._moves.get(oid, 0) + 1

    def _check_claims(self, state: NamespaceState, selection: Selection, current: _Rows) -> None:
        """Wait (CLAIMED) while a live committing transaction holds a touched partition,
        or drop it from ``selection`` if the operation skips busy partitions."""
        live, holders = self._claims.live(state, current)
        if not live:
            return
        if self.op.skips_busy:
            for oid in live:
                selection.targets.pop(oid, None)
                selection.skipped[oid] = SkipReason.CLAIMED
            return
        raise self._claims.wait(state, live, holders)

    def _compute(self, state: NamespaceState, selection: Selection) -> _Attempt:
        """Every touched partition's change, in parallel: the previous attempt's where its
        base, input, schema (columns and field ids) and spec (routing) are the same."""
        shape = (state.schema.to_json(), state.spec_version)
        previous = self._previous if self._previous.shape == shape else _Attempt()

        def work(oid: str) -> ComputedChange:
            partition = selection.targets[oid]
            base = self._base(partition)
            earlier = previous.works.get(oid)
            same = (base, self.op.inputs(oid))
            if earlier is not None and (earlier.base, earlier.inputs) == same:
                return replace(earlier, partition=partition, committed=None)
            return self.op.compute(state, partition, base)

        def create(oid: str) -> NewLeaf:
            earlier = previous.created.get(oid)
            same = (selection.spec_version, self.op.inputs(oid))
            if earlier is not None and (earlier.spec_version, earlier.inputs) == same:
                return replace(earlier, committed=None)
            return self.op.create(state, oid, selection.creates[oid])

        storage = self.ctx.storage
        targets, creates = list(selection.targets), list(selection.creates)
        return _Attempt(
            dict(zip(targets, storage.map(work, targets), strict=True)),
            dict(zip(creates, storage.map(create, creates), strict=True)),
            shape,
        )

    def _base(self, partition: Partition) -> int:
        """The published version (for "read the latest", the newest none of our writers made)."""
        if partition.read_version is not None:
            return partition.read_version
        ds = self.ctx.storage.table(partition.location)
        found = base_version(ds, None)
        return int(ds.version) if found is None else found

    def _leaf_works(self, changed: _Changed, created: _Created) -> list[LeafWork]:
        """Each change as exactly the next version of its base, each new partition a new leaf."""
        works = [
            LeafWork(oid, w.partition.location, w.partition.read_version, True, change)
            for oid, w in changed.items()
            if w.operation is not None
            for change in [ApplyChange(w.operation, w.base, w.leaf)]
        ]
        for oid, leaf in created.items():
            schema = leaf.leaf_schema
            replace_leaf = ReplaceLeaf(leaf.fragments, schema, schema_digest(schema))
            works.append(
                LeafWork(oid, self.ctx.storage.uri(leaf.directory), None, False, replace_leaf)
            )
        return works

    def _rows(
        self,
        state: NamespaceState,
        current: _Rows,
        changed: _Changed,
        created: _Created,
    ) -> list[dict[str, Any]]:
        """The ``__manifest`` rows the swap writes: changed partitions with their new
        read_version (a dead claim cleared), created ones with their namespaces (a
        never-published row with a dead claim taken over)."""
        rows = [
            dict(current[oid], **{READ_VERSION: w.committed, CLAIM: None})
            for oid, w in changed.items()
        ]
        rows += [
            dict(current[oid], **{READ_VERSION: leaf.committed, CLAIM: None})
            for oid, leaf in created.items()
            if oid in current
        ]
        fresh = [leaf for oid, leaf in created.items() if oid not in current]
        by_spec: dict[int, list[NewLeaf]] = {}
        for leaf in fresh:
            by_spec.setdefault(leaf.spec_version, []).append(leaf)
        for spec_version, leaves in by_spec.items():
            versions = {leaf.object_id: leaf.committed for leaf in leaves}
            planned = state.plan_partitions(
                [tuple(leaf.values.values()) for leaf in leaves],
                read_version=None,
                spec_version=spec_version,
            ).rows
            rows += [
                dict(r, **{READ_VERSION: versions[r[OBJECT_ID]]}) if r[OBJECT_ID] in versions else r
                for r in planned
            ]
        return rows

    def _changes(
        self, selection: Selection, changed: _Changed, created: _Created
    ) -> list[PartitionOutcome]:
        out = list(self.ctx.storage.map(self.op.dropped, list(selection.drops.values())))
        out += [replace(w.change, read_version=w.committed) for w in changed.values()]
        out += [
            PartitionOutcome(
                oid,
                leaf.values,
                leaf.committed,
                rows_inserted=leaf.rows,
                created=True,
                fragments_after=len(leaf.fragments),
            )
            for oid, leaf in created.items()
        ]
        return out


def run_operation(
    ctx: TransactionContext,
    operation: TableOperation,
    *,
    txn_id: str | None = None,
    claim_timeout: float | None = None,
    state: NamespaceState | None = None,
) -> OperationResult:
    """Run ``operation`` to its one publish; ``state``: the latest as just read (None: here)."""
    runner = OperationRunner(ctx, operation, txn_id=txn_id, claim_timeout=claim_timeout)
    return runner.run(state)
