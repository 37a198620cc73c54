"""What a commit publishes: the stages of a transaction merged into one :class:`Plan`
(fixed at the seal, so a committer that takes over publishes exactly what was claimed),
and the one rule for what staged files may be published onto (:func:`check_staged_against`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import StaleStage
from airflow_provider_lance.namespace.format.manifest import OBJECT_ID, READ_VERSION
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import ReadVersionIs, Requirement, RowExists
from airflow_provider_lance.namespace.results import value_text
from airflow_provider_lance.namespace.write.leaf_commit import schema_digest
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition

#: What a stage saw of a partition: stages that saw it differently cannot be merged.
_SEEN = attrgetter("rewrite", "base_read_version", "existed", "schema")


def merge_stages(stages: Mapping[str, Stage] | Sequence[Stage]) -> dict[str, StagedPartition]:
    """All partitions of all stages, files and row counts added up (the stages are left as
    they are). Stages that saw one partition differently (on either side of a publish, a
    drop or a re-creation) can never be merged: :class:`StaleStage`."""
    merged: dict[str, StagedPartition] = {}
    first: dict[str, Stage] = {}  # the stage each merged partition came from first
    copied: set[str] = set()
    for stage in stages.values() if isinstance(stages, Mapping) else stages:
        for oid, part in stage.partitions.items():
            into = merged.get(oid)
            if into is None:
                merged[oid], first[oid] = part, stage
                continue
            if _SEEN(part) != _SEEN(into):
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
                    into, values=dict(into.values), listed=list(into.fragments)
                )
            # Each rewriting stage copied the published rows: only the first copy is kept.
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
    """The one rule for what staged files may be published onto (seal and direct publish
    alike; ``unmet``: the :func:`~.kernel.staged_requirements` the rows now miss): a
    partition staged into as existing must still have a row (a drop is not undone), and
    one the stage replaces must still be at the version it replaces. Else
    :class:`StaleStage` (not retryable), with ``remedy(stale partition ids)``."""
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
    discard: those that saw it otherwise than ``state`` publishes it."""
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


def common_leaf_schema(
    state: NamespaceState, txn_id: str, stages: Sequence[Stage]
) -> pa.Schema | None:
    """The leaf schema every stage of ``txn_id`` was written with (None: none recorded one);
    if they differ (a schema change happened while staging), :class:`StaleStage` naming
    those written before the change."""
    schemas = {schema_digest(s.leaf_schema): s.leaf_schema for s in stages if s.leaf_schema}
    if len(schemas) <= 1:
        return next(iter(schemas.values()), None)
    now = schema_digest(state.schema.leaf_schema())
    held: dict[str, list[str]] = {}
    for stage in stages:
        if stage.leaf_schema is not None and schema_digest(stage.leaf_schema) != now:
            held.setdefault(stage.txn_id, []).append(stage.stage_id)
    raise StaleStage(
        "stages of one transaction were written under different namespace schemas (a "
        "schema change happened while staging)",
        (),
        restage_remedy(txn_id, held),
    )


def stage_digest(raw: Mapping[str, Any]) -> str:
    """Identifies one recorded content of a stage (a re-recorded stage has another)."""
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


@dataclass(frozen=True)
class Plan:
    """What a sealed transaction publishes: the stages it includes (transaction,
    incarnation, stage id, content digest) and their merged partitions."""

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
        merged = Stage("plan", self.plan_id, self.mode, self.spec_version, self.partitions)
        merged.leaf_schema = self.leaf_schema
        stages = [list(s) for s in self.stages]
        return {"plan_id": self.plan_id, "stages": stages, "merged": merged.to_json()}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Plan:
        m = Stage.from_json(raw["merged"])
        stages = tuple((str(t), int(k), str(s), str(d)) for t, k, s, d in raw["stages"])
        return cls(raw["plan_id"], m.mode, m.spec_version, stages, m.partitions, m.leaf_schema)
