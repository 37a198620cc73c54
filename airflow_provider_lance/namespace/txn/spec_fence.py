"""Merges against partition spec changes: intents and fences in ``__manifest``.

Across a spec change two merges of one key do not conflict (one under S inserts into a
partition of S, one under S+1 into a partition of S+1: the key is there twice), and Lance
rebases a ``merge_insert`` over the spec change (pylance fact: tests/namespace/
test_pylance_facts.py::test_fact_merge_insert_conflict_retries_0_is_rebased_over_any_update_config).
So the order goes through rows:

* every merge *registers an intent* (row ``__merge$<id>``) before the state it computes
  on, and its swap deletes that row;
* after spec S+1 is installed, a *fence* (row ``__fence$v<S+1>``) is inserted in one
  commit that rewrites every intent row present: a merge whose intent was rewritten
  after the version it computed on loses its swap and computes again under S+1;
* a merge computes under S+1 only at a version holding its fence (fencing it itself if
  the evolver died first).

So every merge under S published before the fence of S+1 or fails. Spec 1 needs no fence.
``maintain`` removes intents older than :data:`INTENT_MAX_AGE`.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import uuid

from airflow_provider_lance.namespace.errors import CommitConflict
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import (
    FENCE_PREFIX,
    INTENT_PREFIX,
    METADATA,
    NAMESPACE,
    OBJECT_ID,
    Manifest,
    row,
)
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.format.swap import Swap

log = logging.getLogger(__name__)

#: Intents older than this are taken for those of merges that died.
INTENT_MAX_AGE = dt.timedelta(hours=6)


def fence_id(spec_version: int) -> str:
    return f"{FENCE_PREFIX}{spec_version}"


def new_intent_id() -> str:
    return f"{INTENT_PREFIX}{uuid.uuid4().hex}"


def _payload(**values: object) -> str:
    return json.dumps(values, separators=(",", ":"), sort_keys=True)


def needs_fence(state: NamespaceState) -> bool:
    """Whether a merge may not compute under ``state``'s spec yet (not the first spec,
    and not fenced at this version)."""
    version = state.spec_version
    return version > min(state.specs) and not state.existing([fence_id(version)])


def register_intent(manifest: Manifest, state: NamespaceState, intent: str, owner: str) -> None:
    """Insert the intent row ``intent`` (a fresh id: Lance rebases the insert over
    whatever was committed meanwhile)."""
    failpoint("merge.before_intent")
    metadata = _payload(owner=owner, started_at=time.time())
    manifest.insert_absent(state.rows_table([row(intent, NAMESPACE, metadata=metadata)]))


def fence_spec(manifest: Manifest, state: NamespaceState, spec_version: int) -> bool:
    """Insert the fence of ``spec_version`` and rewrite every intent row of ``state`` in
    one commit against its version; False if a concurrent commit changed one of them."""
    intents = state.view.intent_rows()
    for r in intents:
        payload = json.loads(str(r.get(METADATA) or "{}"))
        payload["fenced_by"] = spec_version
        r[METADATA] = _payload(**payload)
    marker = row(fence_id(spec_version), NAMESPACE, metadata=_payload(fenced_at=time.time()))
    failpoint("spec.before_fence")
    try:
        manifest.commit(Swap(state.view, [marker, *intents]))
    except CommitConflict as exc:
        log.info("fencing partition spec v%d lost a race: %s", spec_version, exc)
        return False
    log.info("partition spec v%d fenced (%d merge(s) in flight)", spec_version, len(intents))
    return True


def stale_intents(state: NamespaceState, max_age: dt.timedelta = INTENT_MAX_AGE) -> list[str]:
    """Ids of intent rows older than ``max_age`` (their merges died, or run that long)."""
    cutoff = time.time() - max_age.total_seconds()
    out = []
    for r in state.view.intent_rows():
        started = json.loads(str(r.get(METADATA) or "{}")).get("started_at", 0.0)
        if float(started) < cutoff:
            out.append(str(r[OBJECT_ID]))
    return out
