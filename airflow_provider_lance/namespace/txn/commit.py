"""Publishing a staged transaction (the claim protocol): one bounded loop of steps.

Each attempt reads the transaction's row and takes the step its state calls for:

* **STAGED: seal.** One swap moves the row STAGED -> COMMITTING with a *plan* (the stages
  included, written to ``plan-<id>.json`` first), claims every partition it touches
  (``txn#k``) and inserts the rows of partitions it creates (invisible until published).
  A partition another live transaction claims is waited for (CLAIMED, up to
  ``claim_timeout``); stages that can never be published fail with :class:`StaleStage`.
  A transaction that staged nothing is published at once (STAGED -> PUBLISHED).
* **COMMITTING, ours: publish** (:class:`ClaimPublish` over :func:`~.publish.publish_once`):
  each leaf gets one commit of exactly its published version plus the staged files, tagged
  ``txn#k``; then one swap, allowed only while our fence token owns the row, sets every
  ``read_version``, releases the claims and moves the row to PUBLISHED.
* **COMMITTING, another's: take over** (steal the token, publish the same plan), unless
  we owned it before: then another took over, and we wait for its outcome (TAKEN_OVER).
* **PUBLISHED**: the result (recorded, or rebuilt from the plan); **ABORTED**: the error;
  **MERGED**: the same steps for the combined transaction.

A step that loses a race ends its attempt (LOST); the next reads the row again, under one
set of budgets. Nothing here deletes files: only an abort does, after fencing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar

import pyarrow as pa
from lance.fragment import FragmentMetadata

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    ManifestError,
    OutcomeUnknown,
    StaleStage,
    TransactionAborted,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import CLAIM, OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import ClaimedBy, Swap, requirements_unmet
from airflow_provider_lance.namespace.format.txn_row import (
    TransactionHeader,
    TxnRecord,
    TxnState,
    incarnation_tag,
    new_token,
    parse_incarnation_tag,
)
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Budget, Outcome, Retry, retry_until
from airflow_provider_lance.namespace.write.leaf_commit import check_append_schema
from airflow_provider_lance.namespace.write.staging import Stage

from .abort import abort_abandoned
from .kernel import (
    ClaimWait,
    CommitOptions,
    HeldClaim,
    TransactionContext,
    best_effort,
    check_works_files,
    staged_requirements,
    staged_work,
)
from .lifecycle import merged, published, record_and_rows, sealed, stolen
from .plan import (
    Plan,
    check_staged_against,
    common_leaf_schema,
    merge_stages,
    outdated_stages,
    restage_remedy,
    stage_digest,
)
from .publish import Prepared, publish_once
from .publish_result import commit_result, published_at, rebuilt_result
from .records import current_of, resolve, staged_source, stored_header
from .store import check_txn_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sealed:
    """What this committer's seal wrote (``claimed``: the claimed rows as written, by id)."""

    record: TxnRecord
    plan: Plan
    state: NamespaceState
    claimed: Mapping[str, Mapping[str, Any]]
    version: int


class Committer:
    """Runs the claim protocol for one transaction (see the module docstring)."""

    def __init__(self, ctx: TransactionContext, options: CommitOptions | None = None) -> None:
        self.ctx, self.manifest, self.store = ctx, ctx.manifest, ctx.store
        self.options = options or CommitOptions()
        self.token = new_token()
        self._planned: Plan | None = None  # the last seal's, reused for the same stages
        self._saved_plans: set[str] = set()
        self._claims = ClaimWait(
            ctx, self.options.claim_timeout, partial(abort_abandoned, ctx), name="commit"
        )
        self._publishing: ClaimPublish | None = None  # what this committer sealed or took over

    def commit(self, txn_id: str) -> CommitResult:
        """Publish ``txn_id`` (or finish or return an earlier commit of it), waiting up to
        ``claim_timeout`` for claims and ``swap_timeout`` for lost races and a committer
        that took over: a spent bound is a retryable CommitConflict saying what to do."""
        target = [check_txn_id(txn_id)]
        known = self.store.newest_known(txn_id)

        def attempt(n: int) -> CommitResult | Outcome:
            if n == 0 and known is not None and not known.sources:
                # This process began it: its row is read with the partition rows.
                done = self._seal(self.ctx.load_state(), None, header=known)
                if done is not None:
                    return done
            return self._step(target, known)

        seconds = self.options.swap_timeout
        endless = InvalidArgumentError(f"transaction {txn_id} merges without end")
        budgets = {
            Outcome.CLAIMED: Budget(self._claims.timed_out, seconds=self.options.claim_timeout),
            Outcome.LOST: Budget(lambda: self._spent(target[0]), seconds=seconds),
            Outcome.TAKEN_OVER: Budget(lambda: self._spent(target[0], True), seconds=seconds),
            Outcome.AGAIN: Budget(lambda: endless, attempts=64),
        }
        return retry_until(attempt, budgets)

    def _spent(self, txn_id: str, taken_over: bool = False) -> CommitConflict:
        seconds = self.options.swap_timeout
        if taken_over:
            return CommitConflict(
                f"transaction {txn_id} is being committed by another process; "
                "its outcome is not known yet: commit it again later"
            )
        if self._publishing is None:
            return CommitConflict(
                f"could not seal transaction {txn_id} within {seconds:g}s (the swap "
                "timeout): concurrent commits to its row or its partitions kept winning "
                "(stages still being recorded into it, or another committer); nothing was "
                "published: commit it again once they are done"
            )
        return CommitConflict(
            f"could not publish transaction {txn_id} within {seconds:g}s of concurrent "
            "commits; commit it again to finish it",
            list(self._publishing.plan.partitions),
        )

    def _step(self, target: list[str], known: TransactionHeader | None) -> CommitResult | Outcome:
        """One attempt: the step ``target[0]``'s row calls for (MERGED: its combined one)."""
        state = self.ctx.load_state()
        record = resolve(self.ctx, state, target[0])
        if record is None:
            raise self._gone(target[0], known)
        if record.state is TxnState.PUBLISHED:
            return self.result(record, state)
        if record.state is TxnState.ABORTED:
            raise TransactionAborted(
                f"transaction {record.incarnation_tag} was aborted: {record.error}; begin "
                "it again to start a new incarnation"
            )
        if record.state is TxnState.MERGED:
            assert record.merged_into is not None
            target[0] = parse_incarnation_tag(record.merged_into)[0]
            return Outcome.AGAIN
        if record.state is TxnState.COMMITTING:
            return self._committing(state, record)
        sealed_now = self._seal(state, record)
        assert sealed_now is not None  # (None only without a record)
        return sealed_now

    def _gone(self, txn_id: str, known: TransactionHeader | None) -> LanceNamespaceError:
        """No row and no header: never begun, or finished and its records collected."""
        if known is None:
            return InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
        tag = incarnation_tag(known.txn_id, known.incarnation)
        if self.store.may_have_published(tag):
            return OutcomeUnknown(
                f"transaction {tag}: a publish of it sent through this handle may have "
                "committed, and its records were collected since; read the data to see "
                "whether it was published before writing it again"
            )
        return TransactionAborted(f"transaction {tag} was aborted meanwhile (its records are gone)")

    def _committing(self, state: NamespaceState, record: TxnRecord) -> CommitResult | Outcome:
        """COMMITTING: publish what we sealed, or take it over (or wait for whoever did)."""
        running = self._publishing
        if running is not None and running.record.incarnation_tag == record.incarnation_tag:
            if record.owner != self.token:  # another committer took it over
                log.info("transaction %s was taken over; waiting", record.incarnation_tag)
                return Outcome.TAKEN_OVER
            return self._publish(running)
        if record.plan is None and record.anonymous:  # not taken over: it may be live
            raise InvalidArgumentError(
                f"transaction {record.incarnation_tag} is an anonymous write committing in its own "
                "process, or one whose process stopped while committing it (such a write keeps no "
                "plan for anyone else to finish): nothing of it is published yet; if its process "
                "is gone, abort it or let recover() release it, then write again"
            )
        if record.plan is None:
            raise ManifestError(
                f"transaction {record.incarnation_tag} is committing without a plan"
            )
        try:
            move = stolen(record, self.token)
            self.manifest.commit(Swap(state.view, moves=[move]))
        except CommitConflict:
            return Outcome.LOST
        log.info("transaction %s: taking over an unfinished commit", record.incarnation_tag)
        self._publishing = ClaimPublish(self, move.after, self.load_plan(record), None)
        return self._publish(self._publishing)

    def _publish(self, publishing: ClaimPublish) -> CommitResult | Outcome:
        got = publish_once(self.ctx, publishing, 0)
        if isinstance(got, Outcome):  # (lost: its swap, if sent, committed nothing)
            self.store.publish_lost(publishing.record.incarnation_tag)
        return got

    def _seal(
        self,
        state: NamespaceState,
        record: TxnRecord | None,
        *,
        header: TransactionHeader | None = None,
    ) -> CommitResult | Outcome | None:
        """Seal and claim in one swap, then publish; an Outcome when the swap lost or
        others hold partitions; None (only without ``record``) when the row was not as
        expected. Without ``record`` the row is read with the partition rows at ``state``,
        after the stages were listed: the seal is ordered after every stager whose epoch bump
        it does not conflict with."""
        if header is None:
            assert record is not None
            header = self.store.load(record.txn_id, record.incarnation)
            if header is None:
                raise InvalidArgumentError(f"transaction {record.incarnation_tag} has no record")
        txn = TxnRecord.staged(header) if record is None else record
        txn = replace(
            txn, mode=header.mode, sources=tuple(header.sources), anonymous=header.anonymous
        )
        sources = [staged_source(self.ctx, state, source) for source in header.sources]
        failpoint("commit.before_seal")
        try:
            plan = self._plan(state, header, [txn, *sources])
        except CommitConflict:
            if record is None:  # the row has not been read yet: it decides first
                return None
            raise
        stored, current = record_and_rows(state, header.txn_id, plan.partitions)
        if record is None:
            found = current_of(header.txn_id, stored, stored_header(self.store, header.txn_id))
            staged = (TxnState.STAGED, header.incarnation)
            if found is None or (found.state, found.incarnation) != staged:
                return None  # not the staged incarnation this process knows: look properly
            if found.stored:
                txn = replace(found, sources=txn.sources, anonymous=txn.anonymous)
        if not plan.partitions:  # nothing staged: published at once, against this state
            empty = Sealed(txn, plan, state, {}, state.version)
            return self._publish(ClaimPublish(self, txn, plan, empty, sources=sources))
        # The plan is written while the claims are worked out, durable before the swap.
        plan_id = None if txn.anonymous else plan.plan_id
        saving = None if plan_id is None else self._save_plan(txn, plan)
        try:
            claims = self._claimed_rows(state, txn, plan, current)
            if saving is not None:
                saving.result()
            moves = sealed(txn, token=self.token, plan=plan_id, sources=sources)
            try:
                version = self.manifest.commit(Swap(state.view, claims, moves=moves))
            except CommitConflict:
                return Outcome.LOST
        finally:
            if saving is not None:
                wait([saving])
        failpoint("commit.after_claim")
        # Only this transaction changes rows it holds claims on: they stay as written.
        claimed = {r[OBJECT_ID]: r for r in claims if r[OBJECT_ID] in plan.partitions}
        sealed_at = Sealed(moves[0].after, plan, state, claimed, version)
        self._publishing = ClaimPublish(self, sealed_at.record, plan, sealed_at)
        return self._publish(self._publishing)

    def _save_plan(self, record: TxnRecord, plan: Plan) -> Future[None] | None:
        """Write ``plan`` in the background, unless this committer wrote it already."""
        if plan.plan_id in self._saved_plans:
            return None

        def save() -> None:
            self.store.save_plan(record.txn_id, record.incarnation, plan.plan_id, plan.to_json())
            self._saved_plans.add(plan.plan_id)

        return self.ctx.storage.beside(save)

    def _plan(
        self, state: NamespaceState, header: TransactionHeader, txns: list[TxnRecord]
    ) -> Plan:
        """The stages of ``txns`` (the transaction, then its sources) recorded now (read after
        the state: none recorded before an epoch bump is missed) and their merged partitions."""
        refs: list[tuple[str, int, str, str]] = []
        raws: list[Mapping[str, Any]] = []
        for txn in txns:
            for stage_id, raw in self.store.stages(txn.txn_id, txn.incarnation).items():
                refs.append((txn.txn_id, txn.incarnation, stage_id, stage_digest(raw)))
                raws.append(raw)
        last = self._planned
        if last is not None and last.stages == tuple(refs) and last.mode == header.mode:
            return last  # the same stages as the last attempt: the same plan (and its file)
        stages = [Stage.from_json(raw) for raw in raws]
        try:
            merged_parts = merge_stages(stages)
        except StaleStage as exc:
            raise outdated_stages(state, header.txn_id, stages, exc) from None
        schema = common_leaf_schema(state, header.txn_id, stages)
        self._planned = Plan(
            new_token()[:16], header.mode, header.spec_version, tuple(refs), merged_parts, schema
        )
        return self._planned

    def _claimed_rows(
        self, state: NamespaceState, record: TxnRecord, plan: Plan, current: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """The claimed and created rows for the seal (``current``: the plan's rows at
        ``state``); Retry (CLAIMED) while others hold partitions, :class:`StaleStage` when
        the stages can never be published."""
        tag, overwrite = record.incarnation_tag, plan.mode == "overwrite"
        blocked, holders = self._claims.live(state, current, mine=tag)
        required = staged_requirements(plan.partitions, overwrite=overwrite)
        unmet = requirements_unmet(required, current, holders)
        check_staged_against(plan.partitions, unmet, partial(self._remedy, plan, record.txn_id))
        if blocked:
            raise self._claims.wait(state, blocked, holders)
        rows = [dict(current[oid], **{CLAIM: tag}) for oid in plan.partitions if oid in current]
        new = [p for oid, p in plan.partitions.items() if oid not in current]
        if not overwrite:
            self._check_append_schemas(plan, current)
        if new:
            values, spec = [tuple(p.values.values()) for p in new], plan.spec_version
            rows += state.plan_partitions(
                values, read_version=None, claim=tag, spec_version=spec
            ).rows
        return rows

    def _remedy(self, plan: Plan, txn_id: str, partitions: Sequence[str]) -> str:
        """:func:`restage_remedy` naming the stages of ``plan`` that hold ``partitions``."""
        wanted = set(partitions)
        held: dict[str, list[str]] = {}
        for source, incarnation, stage_id, _ in plan.stages:
            raw = self.store.stage(source, incarnation, stage_id)
            if raw is not None and wanted & {p["object_id"] for p in raw["partitions"]}:
                held.setdefault(source, []).append(stage_id)
        return restage_remedy(txn_id, held)

    def _check_append_schemas(self, plan: Plan, current: Mapping[str, Mapping[str, Any]]) -> None:
        """Before claiming: appended files go only onto a leaf version whose schema gives
        their field ids the meaning they were staged with."""
        bases = {oid: p.base_read_version for oid, p in plan.partitions.items() if not p.rewrite}
        moved = [
            (oid, v)
            for oid, row in current.items()
            if oid in bases and (v := row[READ_VERSION]) not in (None, bases[oid])
        ]

        storage = self.ctx.storage

        def check(item: tuple[str, int]) -> None:
            oid, published_version = item
            part, uri = plan.partitions[oid], storage.uri(current[oid]["location"])
            check_append_schema(storage, uri, published_version, part.staged_on, part.schema)

        storage.map(check, moved)

    def still_mine(self, record: TxnRecord) -> bool:
        """Whether ``record``'s incarnation is still committing (not finished, not aborted)."""
        now = resolve(self.ctx, self.ctx.load_state(), record.txn_id)
        return (
            now is not None and now.incarnation == record.incarnation and not now.state.is_terminal
        )

    def load_plan(self, record: TxnRecord) -> Plan:
        assert record.plan is not None
        return Plan.from_json(self.store.plan(record.txn_id, record.incarnation, record.plan))

    def save_result(self, record: TxnRecord, result: CommitResult) -> None:
        if not record.anonymous:  # else nobody can ask for it again
            best_effort(
                f"recording the result of {record.incarnation_tag}",
                lambda: self.store.save_result(record.txn_id, record.incarnation, result.to_dict()),
            )

    def result(self, record: TxnRecord, state: NamespaceState) -> CommitResult:
        """The result of a published transaction, equal to the one its publish returned:
        recorded, or rebuilt from its plan (an anonymous one without a plan keeps neither:
        InvalidArgumentError). Values get the types of ``state``'s partition columns."""
        raw = self.store.result(record.txn_id, record.incarnation)
        if raw is not None:
            types = {f.name: f.type for f in state.partition_columns}
            try:
                return CommitResult.from_dict(raw, types)
            except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
                tag = record.incarnation_tag
                log.warning("the recorded result of %s does not read (%s): rebuilt", tag, exc)
        if record.anonymous and record.plan is None:  # no plan, no result kept: unknown
            raise InvalidArgumentError(
                f"anonymous transaction {record.incarnation_tag} was published already (in "
                f"__manifest version {published_at(self.ctx.load_state, record)}); it keeps no "
                "records, so its result is not kept: read the namespace for what it wrote"
            )
        plan = None if record.plan is None else self.load_plan(record)
        mode = (record.mode or "append") if plan is None else plan.mode
        parts = None if plan is None else plan.partitions
        result = rebuilt_result(self.ctx.load_state, record, mode, parts)
        self.save_result(record, result)
        return result


@dataclass
class _Held:
    """The row as read right before the swap, and each partition's prior ``read_version``."""

    record: TxnRecord
    before: dict[str, int | None]


@dataclass(eq=False)
class ClaimPublish:
    """The claim protocol's publish strategy: the leaves are committed once under the
    claims (:class:`~.kernel.HeldClaim`); the swap moves the row COMMITTING -> PUBLISHED
    under our token and requires every partition still claimed by us. With nothing staged,
    the swap is STAGED -> PUBLISHED (``sources`` MERGED) alone."""

    name: ClassVar[str] = "commit"
    kind: ClassVar[str | None] = None
    committer: Committer
    record: TxnRecord
    plan: Plan
    sealed: Sealed | None
    sources: Sequence[TxnRecord] = ()
    prepared: Prepared[_Held | None] | None = None

    @property
    def ctx(self) -> TransactionContext:
        return self.committer.ctx

    def prepare(self, attempt: int) -> Prepared[_Held | None]:
        """The leaf work, built and checked once (a retry after a lost swap reuses it)."""
        if self.prepared is not None:
            return self.prepared
        record, plan, storage = self.record, self.plan, self.ctx.storage
        rows: Mapping[str, Mapping[str, Any]]
        if self.sealed is not None:
            state, rows = self.sealed.state, self.sealed.claimed
        else:  # taken over (or nothing staged): the rows as they are now
            state = self.ctx.load_state()
            rows = {r[OBJECT_ID]: r for r in state.full_rows(list(plan.partitions)).to_pylist()}
            self._check_claims(rows)
        schema = plan.leaf_schema or state.schema.leaf_schema()
        overwrite = plan.mode == "overwrite"
        works = [
            staged_work(storage, part, dict(rows[oid]), schema, replace=overwrite or part.rewrite)
            for oid, part in plan.partitions.items()
        ]
        tag, mine = record.incarnation_tag, partial(self.committer.still_mine, record)
        check_works_files(storage, works, tag, record.anonymous, mine)
        self.prepared = Prepared(state, works, HeldClaim(self.ctx.manifest, tag), tag, None)
        return self.prepared

    def _check_claims(self, rows: Mapping[str, Mapping[str, Any]]) -> None:
        """The claims are held; else another committer finished or fenced it (TAKEN_OVER),
        or another tool rewrote ``__manifest``."""
        record = self.record
        claims = [ClaimedBy(o, record.incarnation_tag) for o in self.plan.partitions]
        if not requirements_unmet(claims, rows, None):
            return
        if not self.committer.still_mine(record):
            raise Retry(Outcome.TAKEN_OVER)
        raise ManifestError(
            f"transaction {record.incarnation_tag} is committing but does not hold its claims "
            "(was __manifest rewritten by another tool?)"
        )

    def swap(self, prepared: Prepared[_Held | None]) -> Swap:
        """The rows with their new versions and claims released, and the transaction row
        PUBLISHED, against the latest state."""
        record, plan, sealed_at = self.record, self.plan, self.sealed
        if record.anonymous:
            self.committer.store.sending_publish(record.incarnation_tag)
        if not plan.partitions:  # nothing staged: STAGED -> PUBLISHED, sources MERGED
            assert sealed_at is not None
            prepared.detail = _Held(record, {})
            moves = [published(record, None), *merged(self.sources, record, None)]
            return Swap(sealed_at.state.view, moves=moves)
        state = self.ctx.load_state()
        now: TxnRecord | None
        if sealed_at is not None and state.version == sealed_at.version:
            now, rows = record, [dict(r) for r in sealed_at.claimed.values()]
        else:
            now, found = record_and_rows(state, record.txn_id, plan.partitions)
            rows = list(found.values())
        if now is None or now.incarnation != record.incarnation:
            raise TransactionAborted(f"transaction {record.incarnation_tag} was aborted")
        held = {r[OBJECT_ID]: dict(r) for r in rows}  # as read (the rows are changed below)
        claims = [ClaimedBy(o, record.incarnation_tag) for o in plan.partitions]
        if now.owner == self.committer.token and requirements_unmet(claims, held, None):
            raise ManifestError(
                f"transaction {record.incarnation_tag} lost its claim on "
                f"{requirements_unmet(claims, held, None)[0].object_id}"
            )
        prepared.detail = _Held(now, {oid: r[READ_VERSION] for oid, r in held.items()})
        for r in rows:
            r[READ_VERSION] = prepared.versions[r[OBJECT_ID]]
            r[CLAIM] = None
        move = published(now, self.committer.token)
        return Swap(state.view, rows, moves=[move], requires=claims, read=held)

    def finish(self, prepared: Prepared[_Held | None], version: int | None) -> CommitResult:
        held, record, plan = prepared.detail, self.record, self.plan
        assert held is not None
        assert version is not None
        result = commit_result(
            version, plan.mode, record.txn_id, plan.partitions, prepared.versions, held.before
        )
        self.committer.save_result(record, result)
        best_effort("deleting superseded copies", self._drop_superseded)
        tag, n = record.incarnation_tag, len(result.partitions)
        log.info("transaction %s published %d partitions (manifest v%d)", tag, n, version)
        return result

    def _drop_superseded(self) -> None:
        """Delete the copies of published rows that rewriting stages made and the plan left out."""
        storage = self.ctx.storage
        for part in self.plan.partitions.values():
            if part.superseded:
                doomed = [FragmentMetadata.from_json(f) for f in part.superseded]
                storage.delete_data_files(storage.uri(part.directory), doomed)
