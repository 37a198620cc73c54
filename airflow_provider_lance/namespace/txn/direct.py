"""Direct publish: a write no other process knows commits in one ``__manifest`` swap.

``ns.write()`` without a ``txn_id`` is such a write: nobody else stages into it, commits it
or retries it, so nothing has to be fenced, no plan has to be durable for anyone else and no
claim has to be held while its leaves commit. It takes the optimistic path of Delta and
Iceberg instead of the claim protocol of :mod:`.commit`:

1. the rows are staged against manifest version S, partitions in parallel: each leaf is
   written and committed in one Lance call on its published version (a new partition's
   leaf is created), which is what Lance's own write costs;
2. the touched partition rows are read at S;
3. a leaf version made in step 1 right above the version still published (it holds
   exactly that version's rows plus the write's) is used as it is; any other leaf is
   committed now on its published ``read_version`` (in parallel, tagged and verified like
   every leaf commit: :func:`~.leaf_commit.commit_leaf`), rolling back what lies above it;
4. one compare-and-swap against S sets the new ``read_version``\\ s and inserts the rows
   of new partitions. It fails if any of those rows changed since S, and the write goes
   back to 2 at the newer version.

Why this is safe next to the claim protocol: the swap needs every touched row unclaimed at
S and unchanged since, so it never publishes a partition a committing transaction holds,
and a claim placed after S makes it fail. A leaf version this write committed but did not
publish lies above the published one: whoever commits that leaf next rolls it back (as it
does a crashed committer's), and the published version, immutable, stays readable whatever
happens above it. A partition that is claimed, or a write that keeps losing the race, hands
its staged files to the claim protocol, which waits its turn instead of racing.

A failure before the swap deletes the staged files (nothing can reference them); a swap
whose outcome is unknown (the store failed mid-commit) is decided by reading the manifest
again. A process killed mid-write leaves data files no version references, as a killed
Delta or Iceberg write does: wasted space, never read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_lance.namespace.errors import OutcomeUnknown
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import NoLiveClaim, Swap, requirements_unmet
from airflow_provider_lance.namespace.results import CommitResult
from airflow_provider_lance.namespace.retry import Budget, Outcome, Retry, Spent
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition, discard_stage

from .kernel import (
    StillPublished,
    TransactionContext,
    check_works_files,
    staged_requirements,
    staged_work,
)
from .plan import check_staged_against, merge_stages
from .publish import Prepared, publish
from .publish_result import commit_result, empty_result

log = logging.getLogger(__name__)

#: Swaps lost to concurrent publishes of the same partitions before the write is handed
#: to the claim protocol (which waits for its turn instead of racing again).
DIRECT_ATTEMPTS = 4


def publish_stage(
    ctx: TransactionContext, state: NamespaceState, stage: Stage, *, owner: str
) -> CommitResult:
    """Publish ``stage`` (staged against ``state``) in one swap; :class:`~..retry.Spent`
    when a partition is claimed or the races were lost: the claim protocol must publish
    it (its files are kept for that).

    ``owner`` (``txn#incarnation``) tags the leaf versions. The staged files are deleted
    when this raises an error before the swap (not when the outcome is unknown); once the
    swap succeeded nothing raises, so a caller never retries, and duplicates, a published
    write.
    """
    strategy: DirectWrite | None = None
    try:
        failpoint("direct.staged")
        strategy = DirectWrite(ctx, state, stage, owner)
        if not strategy.parts:
            return empty_result(state.version, stage.mode, stage.txn_id)
        if DIRECT_ATTEMPTS < 1:  # none at all: every write takes the claim protocol
            raise Spent
        budgets = {
            Outcome.LOST: Budget(Spent, attempts=DIRECT_ATTEMPTS),
            Outcome.CLAIMED: Budget(Spent, attempts=1),
        }
        return publish(ctx, strategy, budgets)
    except (Spent, OutcomeUnknown):
        raise  # handed over (files kept), or maybe published: nothing may delete its files
    except (Exception, KeyboardInterrupt) as exc:
        # Once published, its files are the partitions' data. An interrupt once a swap was
        # built may have come while it committed (raised when Lance returns): kept too.
        maybe = strategy is not None and strategy.swapped and not isinstance(exc, Exception)
        if strategy is None or not (strategy.published or maybe):
            discard_stage(stage, ctx.storage)
        raise


@dataclass
class _Read:
    """The touched partition rows as an attempt read them (by object id)."""

    current: dict[str, dict[str, Any]]


class DirectWrite:
    """The direct write as a :class:`~.publish.PublishStrategy`: no claim, requirements
    checked on the rows read at the attempt's state, leaf versions made while staging
    reused where still exactly right; a claimed partition ends the attempt CLAIMED (the
    caller hands the write to the claim protocol)."""

    name: str = "direct"
    kind: str | None = None

    def __init__(
        self, ctx: TransactionContext, state: NamespaceState, stage: Stage, owner: str
    ) -> None:
        self.ctx = ctx
        self.state = state
        self.stage = stage
        self.owner = owner
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
        # (read even for partitions staged as new: one a transaction is creating exists,
        # claimed, though no reader sees it; a dead claim is the claim protocol's to clear)
        claims = [NoLiveClaim(oid) for oid in current]
        unmet = requirements_unmet([*claims, *self.requirements], current, None)
        if any(isinstance(r, NoLiveClaim) for r in unmet):
            log.info("partitions of %s are claimed: committing through the claim protocol", owner)
            raise Retry(Outcome.CLAIMED)
        # A stale stage is this write's: discarded by publish_stage, and write() says
        # "write again"
        check_staged_against(parts, unmet, lambda stale: "")
        storage = self.ctx.storage
        works = [
            staged_work(
                storage, p, current.get(oid), self.leaf_schema, replace=self.overwrite or p.rewrite
            )
            for oid, p in parts.items()
        ]
        for work in works:  # a version the stager made, if still exactly right to publish
            work.committed = _made_while_staging(parts[work.object_id], current)
        check_works_files(storage, [w for w in works if w.committed is None], self.owner, True)
        guard = StillPublished(self.ctx.manifest, storage)
        self.last = Prepared(state, works, guard, self.owner, _Read(current))
        return self.last

    def swap(self, prepared: Prepared[_Read]) -> Swap:
        self.swapped = True
        versions = prepared.versions
        if self.retried:
            # A lost race's winner rolled back the leaf versions of the first attempt, and
            # ``maintain`` may remove what lies below a published version, their files too:
            # checked once committed again (above the published version nothing is removed;
            # once a publish passes them, the swap fails and this runs again).
            check_works_files(self.ctx.storage, prepared.works, self.owner, True)
        current = prepared.detail.current
        rows = [dict(row, **{READ_VERSION: versions[oid]}) for oid, row in current.items()]
        new = [p for oid, p in self.parts.items() if oid not in current]
        if new:
            created = prepared.state.plan_partitions(
                [tuple(p.values.values()) for p in new],
                read_version=None,
                spec_version=self.stage.spec_version,
            ).rows
            for r in created:  # fresh rows: set in place (copies cost 1 ms per 1,000)
                r[READ_VERSION] = versions.get(r[OBJECT_ID])
            rows += created
        claims = [NoLiveClaim(oid) for oid in current]
        return Swap(prepared.state.view, rows, requires=claims, read=current)

    def finish(self, prepared: Prepared[_Read], version: int | None) -> CommitResult:
        assert version is not None  # (a stage with partitions always swaps)
        before = {oid: row[READ_VERSION] for oid, row in prepared.detail.current.items()}
        stage = self.stage
        return commit_result(
            version, stage.mode, stage.txn_id, self.parts, prepared.versions, before
        )


def _made_while_staging(part: StagedPartition, current: Mapping[str, Any]) -> int | None:
    """The leaf version the stager committed, if it is exactly right to publish: made on
    the version still published (a new partition: still new)."""
    row = current.get(part.object_id)
    published = None if row is None else row[READ_VERSION]
    if (row is not None) == part.existed and published == part.staged_on:
        return part.committed_version
    return None
