"""Publishing a staged transaction: seal, commit leaves, publish, each step fenced.

1. **Seal.** One ``__manifest`` compare-and-swap moves the transaction row STAGED ->
   COMMITTING with a *plan* (the stages it includes, written to ``plan-<id>.json`` first),
   claims every partition it touches (claim column = ``txn#incarnation``) and inserts the
   rows of partitions it creates (invisible until published). A partition claimed by
   another live transaction is waited for, up to ``claim_timeout``; an overwrite whose base
   ``read_version`` moved fails with :class:`CommitConflict` and seals nothing.
2. **Commit leaves.** Each leaf table gets one Lance commit holding exactly its published
   version plus the staged files, tagged with the incarnation; the content is verified, so a
   zombie's concurrent commit is never published.
3. **Publish.** One compare-and-swap, conditional on this committer's own fence token,
   sets every ``read_version``, releases the claims and moves the row to PUBLISHED.

A retry (``commit`` again, from any process, after any crash) steals the fence token and
finishes the same plan; the committer it replaced can no longer publish and returns the
published result instead. Nothing here deletes files: only an abort does, after fencing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

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
from airflow_provider_lance.namespace.format.txn_row import (
    TransactionHeader,
    TxnRecord,
    TxnState,
    incarnation_tag,
    new_token,
    parse_incarnation_tag,
)
from airflow_provider_lance.namespace.results import CommitResult, value_text
from airflow_provider_lance.namespace.retry import Budget, Outcome, retry_until
from airflow_provider_lance.namespace.write.leaf_commit import (
    LeafMoved,
    check_append_schema,
    schema_digest,
)
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition

from .kernel import (
    ClaimedBy,
    CommitOptions,
    HeldClaim,
    NoLiveClaim,
    ReadVersionIs,
    Requirement,
    RowExists,
    Swap,
    TransactionContext,
    check_works_files,
    names_versions,
    requirements_unmet,
    staged_requirements,
    staged_work,
)
from .lifecycle import (
    TransitionRefused,
    claim_owners,
    claims_timed_out,
    load_records,
    publish_claimed,
    publish_empty,
    record_and_rows,
    seal,
    steal,
)
from .publish import Prepared, publish
from .publish_result import commit_result, empty_result, published_at, rebuilt_result
from .store import TransactionStore

log = logging.getLogger(__name__)


def merge_stages(stages: Mapping[str, Stage] | Sequence[Stage]) -> dict[str, StagedPartition]:
    """All partitions of all stages, their data files and row counts added up (the
    stages are left as they are: a partition is copied only when a second one joins it).

    Stages that saw one partition differently (staged on either side of a publish, a drop
    or a re-creation of it) cannot be merged, now or later: :class:`StaleStage`."""
    merged: dict[str, StagedPartition] = {}
    first: dict[str, Stage] = {}  # the stage each merged partition came from first
    copied: set[str] = set()
    for stage in stages.values() if isinstance(stages, Mapping) else stages:
        for oid, part in stage.partitions.items():
            into = merged.get(oid)
            if into is None:
                merged[oid] = part
                first[oid] = stage
                continue
            if (part.rewrite, part.base_read_version, part.existed, part.schema) != (
                into.rewrite,
                into.base_read_version,
                into.existed,
                into.schema,
            ):
                raise StaleStage(
                    f"stages {stage_name(first[oid])} and {stage_name(stage)} saw partition "
                    f"{partition_text(part)} differently ({seen_as(into)}, {seen_as(part)}): "
                    "it was published, dropped or created between them (different versions "
                    "of a partition)",
                    [oid],
                    "discard the stage staged before that change and stage its rows again, "
                    "or abort the transaction and begin it again",
                )
            if oid not in copied:
                copied.add(oid)
                into = merged[oid] = replace(
                    into,
                    values=dict(into.values),
                    listed=list(into.fragments),
                    superseded=list(into.superseded),
                )
            # A second copy of the published rows (each rewriting stage made one) is never
            # committed: the rows would be there twice.
            into.superseded = [*into.superseded, *part.base_fragments]
            into.fragments += [f for f in part.fragments if f not in part.base_fragments]
            into.rows += part.rows
    return merged


def stage_name(stage: Stage) -> str:
    return f"{stage.stage_id!r} of {stage.txn_id}"


def partition_text(part: StagedPartition) -> str:
    """A partition as users name it (``part=1, country=NULL``), not by its object id."""
    texts = [f"{k}={'NULL' if v is None else value_text(v)}" for k, v in part.values.items()]
    return ", ".join(texts) or part.object_id


def seen_as(part: StagedPartition) -> str:
    """What a stage saw of a partition, in words."""
    if not part.existed:
        return "as a new partition"
    version = "its latest" if part.base_read_version is None else part.base_read_version
    return f"{'rewriting' if part.rewrite else 'at'} leaf version {version}"


def check_staged_against(
    parts: Mapping[str, StagedPartition],
    unmet: Sequence[Requirement],
    remedy: Callable[[list[str]], str],
) -> None:
    """The one rule for what staged files may be published onto, for the claim
    protocol's seal and the direct publish alike: ``unmet``, the
    :func:`~.kernel.staged_requirements` the partitions' rows now do not meet (claimed
    ones included; absent: no such partition).

    * A partition the data was staged into as existing that has no row now was dropped
      since. The commit fails rather than create it anew: the user dropped the partition
      after these rows were routed into it, and bringing it back holding only them is a
      decision the commit cannot make for them (a drop is deliberate: retention, a
      removal request, a re-load); their files were written into the dropped leaf (on
      its version, with its field ids), which belongs to the orphan sweep now. A
      partition created again since (it has a row) takes the append as any other.
    * A partition the stage replaces (overwrite, rewrite) must still be at the version
      it replaces, else the rows published over it would be lost.

    Neither heals by waiting or committing again, so this raises :class:`StaleStage` (not
    retryable), with ``remedy(stale partition ids)``: how to stage again.
    """
    dropped = [parts[r.object_id] for r in unmet if isinstance(r, RowExists)]
    moved = [parts[r.object_id] for r in unmet if isinstance(r, ReadVersionIs)]
    if not dropped and not moved:
        return
    problems = []
    if dropped:
        named = "; ".join(partition_text(p) for p in dropped[:10])
        problems.append(
            f"staged partitions no longer exist: they were dropped after the data was staged "
            f"into them ({named})"
        )
    if moved:
        named = "; ".join(partition_text(p) for p in moved[:10])
        problems.append(
            f"it replaces partitions another writer published after it was staged ({named})"
        )
    stale = [p.object_id for p in (*dropped, *moved)]
    raise StaleStage("; ".join(problems), stale, remedy(stale))


def outdated_stages(
    state: NamespaceState, txn_id: str, stages: Sequence[Stage], conflict: StaleStage
) -> StaleStage:
    """``conflict`` (stages that saw a partition differently) naming the stages to
    discard: those that saw it otherwise than it is published at ``state`` (e.g. the
    stage of an earlier task attempt, made before the partition was dropped, when the
    retry staged under a new stage id)."""
    rows = {r[OBJECT_ID]: r for r in state.full_rows(conflict.partitions).to_pylist()}
    held: dict[str, list[str]] = {}
    for stage in stages:
        for oid in conflict.partitions:
            part, row = stage.partitions.get(oid), rows.get(oid)
            if part is None:
                continue
            now = (row is not None, None if row is None else row[READ_VERSION])
            if (part.existed, part.staged_on) != now:
                held.setdefault(stage.txn_id, []).append(stage.stage_id)
                break
    return StaleStage(conflict.problem, conflict.partitions, restage_remedy(txn_id, held))


def restage_remedy(txn_id: str, held: Mapping[str, Sequence[str]]) -> str:
    """What to do about stale stages of ``txn_id``: ``held`` names them by transaction."""
    calls = " and ".join(
        f"ns.transaction({t!r}).discard({sorted(set(ids))!r})" for t, ids in sorted(held.items())
    )
    return (
        f"nothing was published, and committing {txn_id} again cannot succeed: discard "
        f"those stages ({calls or 'Transaction.discard'}) and stage their rows again "
        "(staging again under the same stage id replaces a stage), or abort the "
        f"transaction (ns.abort({txn_id!r})) and begin it again"
    )


def common_leaf_schema(stages: Sequence[Stage]) -> pa.Schema | None:
    """The leaf schema every stage was written with (None: none recorded one);
    :class:`StaleStage` if they differ: a schema change happened while staging, and the
    stages written before it must be staged again."""
    schemas = {schema_digest(s.leaf_schema): s.leaf_schema for s in stages if s.leaf_schema}
    if len(schemas) > 1:
        raise StaleStage(
            "stages of one transaction were written under different namespace schemas (a "
            "schema change happened while staging)",
            (),
            "stage again those written before the change, or abort the transaction",
        )
    return next(iter(schemas.values()), None)


def stage_digest(raw: Mapping[str, Any]) -> str:
    """Identifies one recorded content of a stage (a re-recorded stage has another)."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Plan:
    """What a sealed transaction publishes, fixed at the seal: the stages it includes (by
    transaction, incarnation, stage id and content digest) and their merged partitions."""

    plan_id: str
    mode: str
    spec_version: int
    stages: tuple[tuple[str, int, str, str], ...]
    partitions: dict[str, StagedPartition]
    #: The leaf schema the stages were written with (see :attr:`Stage.leaf_schema`).
    leaf_schema: pa.Schema | None = None

    def included(self, txn_id: str, incarnation: int, stage_id: str) -> str | None:
        """The digest of the stage content this plan includes, or None."""
        for t, k, s, digest in self.stages:
            if (t, k, s) == (txn_id, incarnation, stage_id):
                return digest
        return None

    def to_json(self) -> dict[str, Any]:
        merged = Stage(
            "plan", self.plan_id, self.mode, self.spec_version, self.partitions, self.leaf_schema
        )
        return {
            "plan_id": self.plan_id,
            "stages": [list(s) for s in self.stages],
            "merged": merged.to_json(),
        }

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Plan:
        merged = Stage.from_json(raw["merged"])
        return cls(
            raw["plan_id"],
            merged.mode,
            merged.spec_version,
            tuple((str(t), int(k), str(s), str(d)) for t, k, s, d in raw["stages"]),
            merged.partitions,
            merged.leaf_schema,
        )


def current_of(
    txn_id: str,
    stored: TxnRecord | None,
    header_of: Callable[[int], TransactionHeader | None],
) -> TxnRecord | None:
    """The current incarnation of ``txn_id``, from its stored row and its headers.

    No row and a header: incarnation 1, STAGED. A row ABORTED in incarnation k and a header
    for k+1 (``begin`` after the abort): incarnation k+1, STAGED. Otherwise the row.
    """
    if stored is None:
        header = header_of(1)
        return None if header is None else TxnRecord.staged(header)
    if stored.state is TxnState.ABORTED:
        header = header_of(stored.incarnation + 1)
        if header is not None:
            return TxnRecord.staged(header)
    return stored


def resolve(ctx: TransactionContext, state: NamespaceState, txn_id: str) -> TxnRecord | None:
    """The current incarnation of ``txn_id`` as of ``state`` (None: no such transaction).

    A header stands for a STAGED incarnation only while it is in storage: read after
    ``state``, never from this process's cache. The row of a finished anonymous transaction
    is deleted (:func:`~.lifecycle.collect_finished`), its records first; a header its own
    writer still holds in memory would make one aborted meanwhile look staged again, and
    its commit would publish the empty plan its abort left (found by the chaos test).
    """
    stored = load_records(state, [txn_id]).get(txn_id)
    return current_of(txn_id, stored, stored_header(ctx.store, txn_id))


def stored_header(
    store: TransactionStore, txn_id: str
) -> Callable[[int], TransactionHeader | None]:
    """``header_of`` for :func:`current_of`: ``txn_id``'s headers as storage holds them
    now, never from this process's cache (see :func:`resolve`)."""
    return lambda k: store.load(txn_id, k, fresh=True)


def only(header: TransactionHeader) -> Callable[[int], TransactionHeader | None]:
    """``header_of`` for :func:`current_of` when one header is all that is known (and was
    listed from storage after the state was read)."""
    return lambda k: header if k == header.incarnation else None


def staged_source(ctx: TransactionContext, state: NamespaceState, txn_id: str) -> TxnRecord:
    """A source of a combined transaction: it must exist and still be staged."""
    record = resolve(ctx, state, txn_id)
    if record is None:
        raise InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
    if record.state is not TxnState.STAGED:
        into = f" into {record.merged_into}" if record.merged_into else ""
        raise InvalidArgumentError(
            f"transaction {txn_id} is {record.state.value}{into}; only staged transactions "
            "can be committed together"
        )
    return record


#: Anonymous transactions (``txn#k``) whose publishing swap this process ran and did not
#: see lose: published, or with an unknown outcome. Their finished records are collected
#: like those of aborted ones, so without this a commit that finds none could not tell the
#: two apart. Bounded: only a retry after that many other such commits forgets one.
_PUBLISH_TRIED: OrderedDict[str, None] = OrderedDict()
_PUBLISH_TRIED_MAX = 10_000
_PUBLISH_TRIED_LOCK = threading.Lock()


def refuse_if_maybe_published(txn_tag: str) -> None:
    """For anonymous ``txn#k`` whose records are gone: :class:`OutcomeUnknown` if this
    process ran a publishing swap of it that did not lose (finished records are collected,
    published or not; "aborted" would invite writing its rows again)."""
    if txn_tag in _PUBLISH_TRIED:
        raise OutcomeUnknown(
            f"transaction {txn_tag}: this process ran a publish of it that may have "
            "committed, and its records were collected since; read the data to see whether "
            "it was published before writing it again"
        )


@contextmanager
def publishing(record: TxnRecord) -> Iterator[None]:
    """Around a swap that publishes ``record``: remembered unless it lost (a conflict or a
    refusal commits nothing)."""
    if not record.anonymous:
        yield
        return
    with _PUBLISH_TRIED_LOCK:
        _PUBLISH_TRIED[record.incarnation_tag] = None
        while len(_PUBLISH_TRIED) > _PUBLISH_TRIED_MAX:
            _PUBLISH_TRIED.popitem(last=False)
    try:
        yield
    except (CommitConflict, TransitionRefused):
        with _PUBLISH_TRIED_LOCK:
            _PUBLISH_TRIED.pop(record.incarnation_tag, None)
        raise


@dataclass(frozen=True)
class Sealed:
    """What this committer's seal wrote: the sealed record and its plan, the state the
    seal read, the claimed partition rows as its swap wrote them (by id) and the manifest
    version it made. While ``__manifest`` is still at that version, the rows are current
    and need not be read again."""

    record: TxnRecord
    plan: Plan
    state: NamespaceState
    claimed: Mapping[str, Mapping[str, Any]]
    version: int


class Background:
    """One call run in its own thread (I/O that overlaps other work); :meth:`result` waits
    and re-raises its error. A plain thread, not a pool: safe in forked Spark workers."""

    def __init__(self, call: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                call()
            except BaseException as exc:  # handed to result()
                self._error = exc

        self._thread = threading.Thread(target=run, name="lance-namespace-io", daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join()

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


class Committer:
    """Runs the seal / commit leaves / publish protocol for one transaction."""

    def __init__(self, ctx: TransactionContext, options: CommitOptions | None = None) -> None:
        self.ctx = ctx
        self.manifest = ctx.manifest
        self.store = ctx.store
        self.options = options or CommitOptions()
        self.token = new_token()
        #: The plan of the last seal attempt, reused while the stages are the same.
        self._planned: Plan | None = None
        self._saved_plans: set[str] = set()
        #: Partitions the last seal attempt found claimed by others, and their holders
        #: (named by the error once the claim timeout is spent).
        self._blocked: tuple[dict[str, str], Mapping[str, TxnRecord]] = ({}, {})

    # -- entry -----------------------------------------------------------------------------
    def commit(self, txn_id: str) -> CommitResult:
        """Publish ``txn_id`` (or finish or return an earlier commit of it).

        Waits for partitions claimed by others up to ``claim_timeout``, and retries a seal
        that loses races (to stagers still recording into the transaction, to another
        committer) up to ``swap_timeout``: each spent bound is a retryable CommitConflict
        that says what to do, never a loop without end."""
        known = self.store.newest_known(txn_id)

        def attempt(n: int) -> CommitResult | Outcome:
            state = self.ctx.load_state()
            if n == 0 and known is not None and not known.sources:
                # This process began it: list its stages and read its row together with
                # the partition rows (one scan); any surprise falls back to the general path.
                sealed = self._seal(state, None, header=known)
                if isinstance(sealed, CommitResult):
                    return sealed
                if isinstance(sealed, Outcome):
                    return sealed
                if sealed is not None:
                    return self._finish(sealed.record, sealed.plan, sealed)
                state = self.ctx.load_state()  # not as this process knew it: look properly
            record = resolve(self.ctx, state, txn_id)
            if record is None and known is not None:  # began here: its records went since
                gone = incarnation_tag(known.txn_id, known.incarnation)
                refuse_if_maybe_published(gone)
                raise TransactionAborted(
                    f"transaction {gone} was aborted meanwhile (its records are gone)"
                )
            if record is None:
                raise InvalidArgumentError(f"no transaction {txn_id!r} in this namespace")
            if record.state is TxnState.PUBLISHED:
                return self.result(record, state)
            if record.state is TxnState.ABORTED:
                raise TransactionAborted(
                    f"transaction {record.incarnation_tag} was aborted: {record.error}; begin "
                    "it again to start a new incarnation"
                )
            if record.state is TxnState.MERGED:
                assert record.merged_into is not None
                return Committer(self.ctx, self.options).commit(
                    parse_incarnation_tag(record.merged_into)[0]
                )
            if record.state is TxnState.COMMITTING:
                if record.plan is None and record.anonymous:  # not taken over: it may be live
                    raise InvalidArgumentError(
                        f"transaction {record.incarnation_tag} is an anonymous write committing "
                        "in its own process, or one whose process stopped while committing it "
                        "(such a write keeps no plan for anyone else to finish): nothing of it is "
                        "published yet; if its process is gone, abort it or let recover() "
                        "release it, then write again"
                    )
                try:
                    record = steal(self.manifest, state, record, self.token)
                except CommitConflict:
                    return Outcome.LOST
                if record.plan is None:
                    raise ManifestError(
                        f"transaction {record.incarnation_tag} is committing without a plan"
                    )
                log.info("transaction %s: taking over an unfinished commit", record.incarnation_tag)
                return self._finish(record, self.load_plan(record))
            sealed = self._seal(state, record)
            if isinstance(sealed, Outcome):
                return sealed
            assert sealed is not None  # (None only without a record)
            if isinstance(sealed, CommitResult):  # nothing was staged
                return sealed
            return self._finish(sealed.record, sealed.plan, sealed)

        seconds = self.options.swap_timeout
        return retry_until(
            attempt,
            {
                Outcome.CLAIMED: Budget(self._claims_timed_out, seconds=self.options.claim_timeout),
                Outcome.LOST: Budget(
                    lambda: CommitConflict(
                        f"could not seal transaction {txn_id} within {seconds:g}s (the swap "
                        "timeout): concurrent commits to its row or its partitions kept "
                        "winning (stages still being recorded into it, or another committer); "
                        "nothing was published: commit it again once they are done"
                    ),
                    seconds=seconds,
                ),
            },
        )

    def _claims_timed_out(self) -> CommitConflict:
        blocked, holders = self._blocked
        return claims_timed_out(blocked, holders, self.options.claim_timeout)

    # -- 1. seal -----------------------------------------------------------------------------
    def _seal(
        self,
        state: NamespaceState,
        record: TxnRecord | None,
        *,
        header: TransactionHeader | None = None,
    ) -> Sealed | CommitResult | Outcome | None:
        """Seal and claim in one swap; an Outcome when the swap lost a race or others hold
        partitions, None when the row was not as expected (only without ``record``: look
        properly). Returns the sealed record, its plan, the partition rows as the swap
        wrote them and the manifest version it made.

        Without ``record`` (only ``header``, of a transaction without sources) the row is
        read in the same scan as the partition rows, after the stages were listed: still
        all at ``state``'s version, which is what orders the seal after every stager
        whose epoch bump it does not conflict with.
        """
        if header is None:
            assert record is not None
            header = self.store.load(record.txn_id, record.incarnation)
            if header is None:
                raise InvalidArgumentError(f"transaction {record.incarnation_tag} has no record")
        txn = TxnRecord.staged(header) if record is None else record
        txn = replace(
            txn, mode=header.mode, sources=tuple(header.sources), anonymous=header.anonymous
        )
        sources = self._sources(state, header)
        failpoint("commit.before_seal")
        try:
            plan = self._plan(state, header, txn, sources)
        except CommitConflict:
            if record is None:  # the row has not been read yet: it decides first
                return None
            raise
        # The plan is for whoever else may need it: a committer taking over, a stager
        # checking whether it got in (nobody else knows an anonymous transaction). It is
        # written while the rows are read and the claims worked out, and must be durable
        # before the swap that names it.
        plan_id = None if txn.anonymous else plan.plan_id
        saving = None if plan_id is None or not plan.partitions else self._save_plan(txn, plan)
        try:
            prepared = self._prepare(state, record, txn, header, plan, sources)
            if not isinstance(prepared, tuple):
                return prepared
            record, claims = prepared
            if saving is not None:
                saving.result()
            try:
                sealed, version = seal(
                    self.manifest,
                    state,
                    record,
                    token=self.token,
                    plan=plan_id,
                    claims=claims,
                    sources=sources,
                )
            except CommitConflict:
                return Outcome.LOST
        finally:
            if saving is not None:
                saving.join()
        failpoint("commit.after_claim")
        # Only this transaction changes rows it holds claims on: they stay as written.
        claimed = {r[OBJECT_ID]: r for r in claims if r[OBJECT_ID] in plan.partitions}
        return Sealed(sealed, plan, state, claimed, version)

    def _prepare(
        self,
        state: NamespaceState,
        record: TxnRecord | None,
        txn: TxnRecord,
        header: TransactionHeader,
        plan: Plan,
        sources: list[TxnRecord],
    ) -> tuple[TxnRecord, list[dict[str, Any]]] | CommitResult | Outcome | None:
        """The record to seal and its claims, as of ``state``; an Outcome: others hold the
        partitions, or the empty publish lost a race; None: the row is not the staged
        incarnation this process knows (look properly); a result: nothing was staged and
        the empty publish is done."""
        stored, current = record_and_rows(state, header.txn_id, plan.partitions)
        if record is None:
            found = current_of(header.txn_id, stored, stored_header(self.store, header.txn_id))
            if found is None or (found.state, found.incarnation) != (
                TxnState.STAGED,
                header.incarnation,
            ):
                return None  # not the staged incarnation this process knows: look properly
            if found.stored:
                txn = replace(found, sources=txn.sources, anonymous=txn.anonymous)
        record = txn
        if not plan.partitions:
            try:
                with publishing(record):
                    version = publish_empty(self.manifest, state, record, sources)
            except CommitConflict:
                return Outcome.LOST
            return self._save_result(record, empty_result(version, plan.mode, record.txn_id))
        claims = self._claims(state, record, plan, current)
        if claims is None:
            return Outcome.CLAIMED
        return record, claims

    def _save_plan(self, record: TxnRecord, plan: Plan) -> Background | None:
        """Write ``plan`` in the background, unless this committer wrote it already."""
        if plan.plan_id in self._saved_plans:
            return None

        def save() -> None:
            self.store.save_plan(record.txn_id, record.incarnation, plan.plan_id, plan.to_json())
            self._saved_plans.add(plan.plan_id)

        return Background(save)

    def _sources(self, state: NamespaceState, header: TransactionHeader) -> list[TxnRecord]:
        return [staged_source(self.ctx, state, source) for source in header.sources]

    def _plan(
        self,
        state: NamespaceState,
        header: TransactionHeader,
        record: TxnRecord,
        sources: list[TxnRecord],
    ) -> Plan:
        """The stages recorded now (read after the state, so none recorded before a
        stager's epoch bump is missed) and their merged partitions."""
        refs: list[tuple[str, int, str, str]] = []
        raws: list[Mapping[str, Any]] = []
        for txn in (record, *sources):
            for stage_id, raw in self.store.stages(txn.txn_id, txn.incarnation).items():
                refs.append((txn.txn_id, txn.incarnation, stage_id, stage_digest(raw)))
                raws.append(raw)
        last = self._planned
        if last is not None and last.stages == tuple(refs) and last.mode == header.mode:
            return last  # the same stages as the last attempt: the same plan (and its file)
        stages = [Stage.from_json(raw) for raw in raws]
        try:
            merged = merge_stages(stages)
        except StaleStage as exc:
            raise outdated_stages(state, record.txn_id, stages, exc) from None
        self._planned = Plan(
            new_token()[:16],
            header.mode,
            header.spec_version,
            tuple(refs),
            merged,
            self._leaf_schema(state, record.txn_id, stages),
        )
        return self._planned

    def _claims(
        self,
        state: NamespaceState,
        record: TxnRecord,
        plan: Plan,
        current: Mapping[str, dict[str, Any]],
    ) -> list[dict[str, Any]] | None:
        """The claimed and created rows for the seal (``current``: the plan's partition rows
        as of ``state``); None while other transactions hold partitions (kept in
        ``_blocked`` for the error once the claim timeout is spent)."""
        tag, overwrite = record.incarnation_tag, plan.mode == "overwrite"
        holders = load_records(state, claim_owners(current.values()))
        unmet = requirements_unmet(
            [
                *staged_requirements(plan.partitions, overwrite=overwrite),
                *(NoLiveClaim(oid, mine=tag) for oid in plan.partitions),
            ],
            current,
            holders,
        )
        check_staged_against(
            plan.partitions,
            unmet,
            lambda stale: restage_remedy(record.txn_id, self._holding(plan, stale)),
        )
        blocked = {
            r.object_id: current[r.object_id][CLAIM] for r in unmet if isinstance(r, NoLiveClaim)
        }
        rows = [dict(current[oid], **{CLAIM: tag}) for oid in plan.partitions if oid in current]
        if blocked:
            failpoint("commit.claim_blocked")
            self._blocked = (blocked, holders)
            from .transactions import abort_abandoned  # (transactions builds on this module)

            abort_abandoned(self.ctx, state, blocked, holders)
            return None
        new = [p for oid, p in plan.partitions.items() if oid not in current]
        if not overwrite:
            self._check_append_schemas(plan, current)
        if new:
            rows += state.plan_partitions(
                [tuple(p.values.values()) for p in new],
                read_version=None,
                claim=tag,
                spec_version=plan.spec_version,
            ).rows
        return rows

    @staticmethod
    def _leaf_schema(
        state: NamespaceState, txn_id: str, stages: Sequence[Stage]
    ) -> pa.Schema | None:
        """:func:`common_leaf_schema`, naming the stages written before a schema change
        (another schema than the namespace's now) when they differ."""
        try:
            return common_leaf_schema(stages)
        except StaleStage as exc:
            now = schema_digest(state.schema.leaf_schema())
            held: dict[str, list[str]] = {}
            for stage in stages:
                if stage.leaf_schema is not None and schema_digest(stage.leaf_schema) != now:
                    held.setdefault(stage.txn_id, []).append(stage.stage_id)
            raise StaleStage(exc.problem, (), restage_remedy(txn_id, held)) from None

    def _holding(self, plan: Plan, partitions: Sequence[str]) -> dict[str, list[str]]:
        """The stages of ``plan`` holding any of ``partitions``, by transaction (read
        from their records: only to name them in an error)."""
        wanted = set(partitions)
        held: dict[str, list[str]] = {}
        for txn_id, incarnation, stage_id, _ in plan.stages:
            raw = self.store.stage(txn_id, incarnation, stage_id)
            if raw is not None and wanted & {p["object_id"] for p in raw["partitions"]}:
                held.setdefault(txn_id, []).append(stage_id)
        return held

    def _check_append_schemas(self, plan: Plan, current: Mapping[str, Mapping[str, Any]]) -> None:
        """Before claiming: appended files only go onto a leaf version whose schema gives
        their field ids the meaning they were staged with (the leaf may have been rewritten
        under a new schema since: see :func:`~.leaf_commit.schema_digest`). Opens only leaves
        published anew since they were staged."""
        moved = [
            (oid, row[READ_VERSION])
            for oid, row in current.items()
            if oid in plan.partitions
            and not plan.partitions[oid].rewrite
            and row[READ_VERSION] is not None
            and row[READ_VERSION] != plan.partitions[oid].base_read_version
        ]

        def check(item: tuple[str, int]) -> None:
            oid, published = item
            part = plan.partitions[oid]
            check_append_schema(
                self.ctx.storage,
                self.ctx.storage.uri(current[oid]["location"]),
                published,
                part.staged_on,
                part.schema,
            )

        self.ctx.storage.map(check, moved)

    # -- 2. leaves and 3. publish: the ClaimPublish strategy ----------------------------------
    def _still_mine(self, record: TxnRecord) -> bool:
        """Whether ``record``'s incarnation is still being committed (not finished by
        another committer, not aborted)."""
        now = resolve(self.ctx, self.ctx.load_state(), record.txn_id)
        return (
            now is not None and now.incarnation == record.incarnation and not now.state.is_terminal
        )

    def _finish(self, record: TxnRecord, plan: Plan, sealed: Sealed | None = None) -> CommitResult:
        """Commit the leaves and publish, while this committer's token owns the row; a
        committer that lost it returns the outcome of the one that took over."""
        lost = Budget(
            lambda: CommitConflict(
                f"could not publish transaction {record.incarnation_tag} within "
                f"{self.options.swap_timeout:.0f}s of concurrent commits; commit again "
                "to finish it",
                list(plan.partitions),
            ),
            seconds=self.options.swap_timeout,
        )
        return publish(self.ctx, ClaimPublish(self, record, plan, sealed), {Outcome.LOST: lost})

    def _drop_superseded(self, plan: Plan) -> None:
        """Delete the extra copies of published rows that rewriting stages made (see
        merge_stages): published without them, nothing can reference them."""
        storage = self.ctx.storage
        for part in plan.partitions.values():
            if part.superseded:
                doomed = [FragmentMetadata.from_json(f) for f in part.superseded]
                storage.delete_data_files(storage.uri(part.directory), doomed)

    def _await_outcome(self, record: TxnRecord) -> CommitResult:
        """Another committer took this transaction over: return its outcome."""
        log.info(
            "transaction %s was taken over by another committer; waiting", record.incarnation_tag
        )

        def poll(_: int) -> CommitResult | Outcome:
            state = self.ctx.load_state()
            now = resolve(self.ctx, state, record.txn_id)
            if now is None or now.incarnation != record.incarnation:
                raise TransactionAborted(f"transaction {record.incarnation_tag} was aborted")
            if now.state is TxnState.PUBLISHED:
                return self.result(now, state)
            if now.state is TxnState.ABORTED:
                raise TransactionAborted(
                    f"transaction {record.incarnation_tag} was aborted: {now.error}"
                )
            return Outcome.TAKEN_OVER

        pending = Budget(
            lambda: CommitConflict(
                f"transaction {record.incarnation_tag} is being committed by another process; "
                "its outcome is not known yet: commit it again later"
            ),
            seconds=self.options.swap_timeout,
        )
        return retry_until(poll, {Outcome.TAKEN_OVER: pending}, sleep=lambda _: time.sleep(0.1))

    # -- results -------------------------------------------------------------------------------
    def load_plan(self, record: TxnRecord) -> Plan:
        assert record.plan is not None
        return Plan.from_json(self.store.plan(record.txn_id, record.incarnation, record.plan))

    def _save_result(self, record: TxnRecord, result: CommitResult) -> CommitResult:
        if record.anonymous:  # nobody can ask for it again
            return result
        try:
            self.store.save_result(record.txn_id, record.incarnation, result.to_dict())
        except (OSError, LanceNamespaceError) as exc:  # a cache: rebuilt when missing
            log.warning("could not record the result of %s: %s", record.incarnation_tag, exc)
        return result

    def result(self, record: TxnRecord, state: NamespaceState) -> CommitResult:
        """The result of a published transaction, equal to the one its publish returned:
        recorded, or rebuilt from its plan and the manifest version where its row turned
        PUBLISHED (after a crash right after the publish, or a record that does not read).
        An anonymous transaction keeps neither: an InvalidArgumentError says so.

        The record keeps partition values as text; they get back the types of the
        partition columns of ``state`` (a state read after the publish: it knows every
        field the plan's spec version has, which later spec versions keep)."""
        raw = self.store.result(record.txn_id, record.incarnation)
        if raw is not None:
            types = {f.name: f.type for f in state.partition_columns}
            try:
                return CommitResult.from_dict(raw, types)
            except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "the recorded result of %s does not read (%s): rebuilt",
                    record.incarnation_tag,
                    exc,
                )
        if record.anonymous and record.plan is None:  # no plan, no result kept: unknown
            raise InvalidArgumentError(
                f"anonymous transaction {record.incarnation_tag} was published already (in "
                f"__manifest version {published_at(self.ctx.load_state, record)}); it keeps no "
                "records, so its result is not kept: read the namespace for what it wrote"
            )
        plan = None if record.plan is None else self.load_plan(record)
        mode = (record.mode or "append") if plan is None else plan.mode
        parts = None if plan is None else plan.partitions
        return self._save_result(record, rebuilt_result(self.ctx.load_state, record, mode, parts))


@dataclass
class _Held:
    """What the claim publish's swap is against: the transaction row and the claimed
    partitions' versions as read right before it, at ``state``'s version."""

    state: NamespaceState
    record: TxnRecord
    #: Each partition's read_version before the swap (for the result's "created").
    before: dict[str, int | None]


class ClaimPublish:
    """The claim protocol's publish as a :class:`~.publish.PublishStrategy`: the leaves
    are committed once under the claims (:class:`~.kernel.HeldClaim`), and the swap
    requires the transaction row COMMITTING under this committer's token and every
    partition still claimed by it (nothing else changes those rows, so they are read
    only right before the swap, after the leaf commits)."""

    name: str = "commit"
    kind: str | None = None

    def __init__(
        self, committer: Committer, record: TxnRecord, plan: Plan, sealed: Sealed | None
    ) -> None:
        self.committer = committer
        self.ctx = committer.ctx
        self.record = record
        self.plan = plan
        self.sealed = sealed
        #: The leaf work, built once: a later attempt commits nothing again.
        self.prepared: Prepared[_Held | None] | None = None

    def prepare(self, attempt: int) -> Prepared[_Held | None] | CommitResult:
        """The leaf work, built (and its staged files checked) once: a later attempt
        after a lost swap commits nothing again."""
        if self.prepared is not None:  # committed already: the swap reads what it is against
            return self.prepared
        record, plan, storage = self.record, self.plan, self.ctx.storage
        rows: Mapping[str, Mapping[str, Any]]
        if self.sealed is not None:
            state, rows = self.sealed.state, self.sealed.claimed
        else:  # taken over: the rows as they are now
            state = self.ctx.load_state()
            rows = {r[OBJECT_ID]: r for r in state.full_rows(list(plan.partitions)).to_pylist()}
            if self._claims_lost(rows):
                return self.committer._await_outcome(record)
        schema = plan.leaf_schema or state.schema.leaf_schema()
        overwrite = plan.mode == "overwrite"
        works = [
            staged_work(storage, part, dict(rows[oid]), schema, replace=overwrite or part.rewrite)
            for oid, part in plan.partitions.items()
        ]
        check_works_files(
            storage,
            works,
            record.incarnation_tag,
            record.anonymous,
            lambda: self.committer._still_mine(record),
        )
        guard = HeldClaim(self.ctx.manifest, record.incarnation_tag)
        self.prepared = Prepared(state, works, guard, record.incarnation_tag, None)
        return self.prepared

    def _claims_lost(self, rows: Mapping[str, Mapping[str, Any]]) -> bool:
        """True when the claims are gone because another committer finished (or an abort
        fenced) the transaction meanwhile; an error when they are gone otherwise."""
        record = self.record
        if not requirements_unmet(
            [ClaimedBy(o, record.incarnation_tag) for o in self.plan.partitions], rows, None
        ):
            return False
        if not self.committer._still_mine(record):
            return True
        raise ManifestError(
            f"transaction {record.incarnation_tag} is committing but does not hold its claims (was "
            "__manifest rewritten by another tool?)",
        )

    def leaves_failed(self, prepared: Prepared[_Held | None], error: Exception) -> CommitResult:
        if isinstance(error, LeafMoved) and not self.committer._still_mine(self.record):
            # the claim went meanwhile: finished or aborted by another committer
            return self.committer._await_outcome(self.record)
        raise error

    def swap(
        self, prepared: Prepared[_Held | None], versions: Mapping[str, int]
    ) -> Swap | CommitResult:
        """The partition rows with their new versions and claims released, against the
        latest state; or the outcome of the committer that took the row over."""
        record, plan, sealed = self.record, self.plan, self.sealed
        state = self.ctx.load_state()
        now: TxnRecord | None
        if sealed is not None and state.version == sealed.version:
            now, rows = record, [dict(r) for r in sealed.claimed.values()]
        else:
            now, found = record_and_rows(state, record.txn_id, plan.partitions)
            rows = list(found.values())
        if now is None or now.incarnation != record.incarnation:
            raise TransactionAborted(f"transaction {record.incarnation_tag} was aborted")
        if now.state is not TxnState.COMMITTING or now.owner != self.committer.token:
            return self.committer._await_outcome(record)
        held = {r[OBJECT_ID]: r for r in rows}
        lost = requirements_unmet([ClaimedBy(o, record.incarnation_tag) for o in held], held, None)
        if lost:
            raise ManifestError(
                f"transaction {record.incarnation_tag} lost its claim on {lost[0].object_id}"
            )
        prepared.detail = _Held(state, now, {oid: r[READ_VERSION] for oid, r in held.items()})
        for r in rows:
            r[READ_VERSION] = versions[r[OBJECT_ID]]
            r[CLAIM] = None
        return Swap(state.version, rows)

    def commit_swap(self, prepared: Prepared[_Held | None], swap: Swap) -> int:
        held = prepared.detail
        assert held is not None
        with publishing(self.record):
            return publish_claimed(
                self.ctx.manifest, held.state, held.record, self.committer.token, swap.upserts
            )

    def mine(
        self, prepared: Prepared[_Held | None], versions: Mapping[str, int]
    ) -> Callable[[Mapping[str, Any]], bool]:
        return names_versions(versions)

    def lost(self, prepared: Prepared[_Held | None]) -> Outcome:
        return Outcome.LOST

    def finish(
        self, prepared: Prepared[_Held | None], versions: Mapping[str, int], version: int
    ) -> CommitResult:
        held = prepared.detail
        assert held is not None
        record, plan = self.record, self.plan
        result = commit_result(
            version, plan.mode, record.txn_id, plan.partitions, versions, held.before
        )
        self.committer._save_result(record, result)
        self.committer._drop_superseded(plan)
        log.info(
            "transaction %s published %d partitions (manifest v%d)",
            record.incarnation_tag,
            len(result.partitions),
            version,
        )
        return result
