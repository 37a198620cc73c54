"""Direct publish: a write no other process knows commits in one ``__manifest`` swap.

``ns.write()`` without a ``txn_id`` is such a write: nobody else stages into, commits or
retries it, so it needs no fence, durable plan or claim (the optimistic path of Delta):

1. staged against manifest version S, each leaf committed in one Lance call on its
   published version (a new partition's leaf is created);
2. the touched partition rows are read at S; a leaf version from step 1 right above the
   version still published is used as it is, any other leaf is committed again on its
   published ``read_version`` (:func:`~..write.leaf_commit.commit_leaf`);
3. one compare-and-swap against S sets the new ``read_version``\\ s and inserts new
   partitions' rows; if any of those rows changed since S, back to 2 at the newer version.

Safe beside the claim protocol: the swap needs every touched row unclaimed at S and
unchanged since. A leaf version committed but not published is rolled back by the next
commit to that leaf. A claimed partition, or races lost too often, hand the staged files
to the claim protocol. A failure before the swap deletes the staged files; a swap of
unknown outcome keeps them (:func:`~.kernel.published_after_all`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from airflow_provider_lance.namespace.errors import OutcomeUnknown
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import NoLiveClaim, Swap, requirements_unmet
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Budget, Outcome, Retry, Spent, retry_until
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition, discard_stage

from .kernel import (
    StillPublished,
    TransactionContext,
    check_works_files,
    staged_requirements,
    staged_work,
)
from .plan import check_staged_against, merge_stages
from .publish import Prepared, publish_once
from .publish_result import commit_result

log = logging.getLogger(__name__)

#: Swaps lost to publishes of the same partitions before the write is handed over.
DIRECT_ATTEMPTS = 4


def publish_stage(
    ctx: TransactionContext, state: NamespaceState, stage: Stage, *, owner: str
) -> CommitResult:
    """Publish ``stage`` (staged against ``state``) in one swap, its leaf versions tagged
    ``owner`` (``txn#k``); :class:`~..retry.Spent` (files kept) when a partition is claimed
    or the races were lost: the claim protocol must publish it. An error before the swap
    deletes the staged files (not an unknown outcome); after it, nothing raises."""
    strategy: DirectWrite | None = None
    try:
        failpoint("direct.staged")
        strategy = DirectWrite(ctx, state, stage, owner)
        if not strategy.parts:
            return CommitResult(state.version, stage.mode, [], stage.txn_id)
        if DIRECT_ATTEMPTS < 1:
            raise Spent
        budgets = {
            Outcome.LOST: Budget(Spent, attempts=DIRECT_ATTEMPTS),
            Outcome.CLAIMED: Budget(Spent, attempts=1),
        }
        return retry_until(lambda n: publish_once(ctx, strategy, n), budgets)
    except (Spent, OutcomeUnknown):
        raise  # handed over (files kept), or maybe published: nothing may delete its files
    except (Exception, KeyboardInterrupt) as exc:
        # Once published, its files are the partitions' data. An interrupt once a swap was
        # built may have come while it committed (raised when Lance returns): kept too.
        maybe = strategy is not None and strategy.swapped and not isinstance(exc, Exception)
        if strategy is None or not (strategy.published or maybe):
            discard_stage(stage, ctx.storage)
        raise


#: The touched partition rows as an attempt read them (by object id).
_Read = dict[str, dict[str, Any]]


class DirectWrite:
    """The direct write's publish strategy: no claim; requirements checked on the rows
    read at the attempt's state; leaf versions made while staging reused where still
    exactly right; a claimed partition ends the attempt CLAIMED (handed over)."""

    name: str = "direct"
    kind: str | None = None

    def __init__(
        self, ctx: TransactionContext, state: NamespaceState, stage: Stage, owner: str
    ) -> None:
        self.ctx, self.state, self.stage, self.owner = ctx, state, stage, owner
        self.parts = merge_stages([stage])
        self.overwrite = stage.mode == "overwrite"
        self.leaf_schema = stage.leaf_schema or state.schema.leaf_schema()
        self.requirements = staged_requirements(self.parts, overwrite=self.overwrite)
        self.retried = False
        self.last: Prepared[_Read] | None = None
        #: A swap was built (and may have been sent).
        self.swapped = False

    @property
    def published(self) -> bool:
        """Whether an attempt's swap published the stage."""
        return self.last is not None and self.last.published is not None

    def prepare(self, attempt: int) -> Prepared[_Read]:
        if attempt:
            self.state = self.ctx.load_state()
            self.retried = True
        state, parts, owner = self.state, self.parts, self.owner
        current = {r[OBJECT_ID]: r for r in state.full_rows(list(parts)).to_pylist()}
        # (partitions staged as new too: one a transaction is creating has a claimed row)
        claims = [NoLiveClaim(oid) for oid in current]
        unmet = requirements_unmet([*claims, *self.requirements], current, None)
        if any(isinstance(r, NoLiveClaim) for r in unmet):
            log.info("partitions of %s are claimed: committing through the claim protocol", owner)
            raise Retry(Outcome.CLAIMED)
        check_staged_against(parts, unmet, lambda stale: "")  # write() says "write again"
        storage, schema, overwrite = self.ctx.storage, self.leaf_schema, self.overwrite
        works = [
            staged_work(storage, p, current.get(oid), schema, replace=overwrite or p.rewrite)
            for oid, p in parts.items()
        ]
        for work in works:
            work.committed = _made_while_staging(parts[work.object_id], current)
        check_works_files(storage, [w for w in works if w.committed is None], self.owner, True)
        guard = StillPublished(self.ctx.manifest, storage)
        self.last = Prepared(state, works, guard, self.owner, current)
        return self.last

    def swap(self, prepared: Prepared[_Read]) -> Swap:
        self.swapped = True
        versions = prepared.versions
        if self.retried:
            # The winner rolled back our first versions and ``maintain`` may have removed
            # their files: checked again (a later publish makes the swap fail, and this rerun).
            check_works_files(self.ctx.storage, prepared.works, self.owner, True)
        current = prepared.detail
        rows = [dict(row, **{READ_VERSION: versions[oid]}) for oid, row in current.items()]
        new = [p for oid, p in self.parts.items() if oid not in current]
        if new:
            values, spec = [tuple(p.values.values()) for p in new], self.stage.spec_version
            created = prepared.state.plan_partitions(
                values, read_version=None, spec_version=spec
            ).rows
            for r in created:  # fresh rows: set in place
                r[READ_VERSION] = versions.get(r[OBJECT_ID])
            rows += created
        claims = [NoLiveClaim(oid) for oid in current]
        return Swap(prepared.state.view, rows, requires=claims, read=current)

    def finish(self, prepared: Prepared[_Read], version: int | None) -> CommitResult:
        assert version is not None  # (a stage with partitions always swaps)
        before = {oid: row[READ_VERSION] for oid, row in prepared.detail.items()}
        mode, txn_id = self.stage.mode, self.stage.txn_id
        return commit_result(version, mode, txn_id, self.parts, prepared.versions, before)


def _made_while_staging(part: StagedPartition, current: Mapping[str, Any]) -> int | None:
    """The leaf version the stager committed, if made on the version still published (a
    new partition: still new)."""
    row = current.get(part.object_id)
    published = None if row is None else row[READ_VERSION]
    if (row is not None) == part.existed and published == part.staged_on:
        return part.committed_version
    return None
