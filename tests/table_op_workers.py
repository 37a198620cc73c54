"""Processes of the table-operation chaos test (tests/namespace/ops/test_operations_chaos.py).

Every write is a *batch*: ``count`` rows with ids ``first_id..first_id+count`` dealt
round-robin over some partitions, tagged ``<batch>~0``. A merge of a batch rewrites all
its rows with the tag ``<batch>~<n>``; a delete removes whole batches (by id range). So at
any ``__manifest`` version a batch must be absent, or present with every row and one
tag: a half-applied write, delete or merge shows up as a batch with missing rows or
mixed tags.

Each process appends what it does to JSON-lines files in the run directory: intents
(fsynced before the call) and acknowledgements (after it returned), so the checks can tell
what must be, may be and must not be visible. Deleters and mergers use a ``txn_id`` and
retry their last intent after a restart (they are killed too): the retry must return
the first result and change nothing more.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace
from tests.support import TAGGED
from tests.workers import (
    _chaos_process,
    _chaos_ready,
    _chaos_stopping,
    chaos_append,
    chaos_lines,
)

PARTS = 6
#: Ids per batch: batch ``s`` of appender ``i`` owns ``i * APPENDER_IDS + s * BATCH_IDS``..
BATCH_IDS = 1_000
APPENDER_IDS = 10**9


def batch_rows(batch: str, parts: list[int], count: int, first_id: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + count), pa.int64()),
            "part": pa.array([parts[i % len(parts)] for i in range(count)], pa.int32()),
            "tag": [tag] * count,
        },
        schema=TAGGED,
    )


def batch_of(tag: str) -> tuple[str, int]:
    """``(batch, merge generation)`` of a row's tag."""
    batch, _, generation = tag.rpartition("~")
    return batch, int(generation)


@_chaos_process
def appender(root: str, run_dir: str, name: str, index: int, seed: int, life: int) -> None:
    """Append batches without a txn_id until ``stop``; each intent fsynced first, each
    success acknowledged (with its manifest version)."""
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    intents = f"{run_dir}/intents-{name}.jsonl"
    earlier = chaos_lines(intents)
    seq = earlier[-1]["seq"] + 1 if earlier else 0
    _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir):
        parts = sorted(rng.sample(range(PARTS), rng.randint(1, 3)))
        intent = {
            "seq": seq,
            "batch": f"{name}s{seq}",
            "parts": parts,
            "count": rng.randint(len(parts), 10),
            "first_id": index * APPENDER_IDS + seq * BATCH_IDS,
        }
        chaos_append(intents, intent, sync=True)
        rows = batch_rows(
            intent["batch"], parts, intent["count"], intent["first_id"], f"{intent['batch']}~0"
        )
        try:
            result = ns.write(rows)
        except CommitConflict as exc:
            chaos_append(
                f"{run_dir}/events-{name}.jsonl",
                {"batch": intent["batch"], "error": str(exc)[:200]},
            )
        else:
            chaos_append(
                f"{run_dir}/acks-{name}.jsonl",
                {**intent, "manifest_version": result.manifest_version},
                sync=True,
            )
        seq += 1
        time.sleep(rng.uniform(0.0, 0.1))


def _acked(run_dir: str, appender_name: str) -> list[dict]:
    return chaos_lines(f"{run_dir}/acks-{appender_name}.jsonl")


def _operate(
    ns: PartitionedNamespace, run_dir: str, name: str, intent: dict[str, Any], call: Any
) -> None:
    """Run one table operation intent (a retry after a restart runs it again with its
    txn_id); acknowledge its result."""
    try:
        result = call()
    except CommitConflict as exc:
        chaos_append(
            f"{run_dir}/events-{name}.jsonl", {"seq": intent["seq"], "error": str(exc)[:200]}
        )
        return
    chaos_append(
        f"{run_dir}/acks-{name}.jsonl",
        {**intent, "result": result.to_dict(), "manifest_version": result.manifest_version},
        sync=True,
    )


@_chaos_process
def deleter(root: str, run_dir: str, name: str, victim: str, seed: int, life: int) -> None:
    """Delete random acknowledged batches of appender ``victim`` (whole, by id range),
    several per delete, with a txn_id; a restart retries the last intent first."""
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    intents = f"{run_dir}/intents-{name}.jsonl"
    earlier = chaos_lines(intents)
    acked = {a["seq"] for a in chaos_lines(f"{run_dir}/acks-{name}.jsonl")}
    _chaos_ready(run_dir, name, life)

    def run(intent: dict[str, Any]) -> None:
        where = " OR ".join(f"(id >= {a} AND id < {b})" for a, b in intent["ranges"])
        _operate(ns, run_dir, name, intent, lambda: ns.delete(where, txn_id=intent["txn_id"]))

    if earlier and earlier[-1]["seq"] not in acked:
        run(earlier[-1])  # the killed one, again
    seq = earlier[-1]["seq"] + 1 if earlier else 0
    done = {b for i in earlier for b in i["batches"]}
    while not _chaos_stopping(run_dir):
        time.sleep(rng.uniform(0.2, 0.6))
        candidates = [a for a in _acked(run_dir, victim) if a["batch"] not in done]
        if not candidates:
            continue
        chosen = rng.sample(candidates, min(len(candidates), rng.randint(1, 3)))
        intent = {
            "seq": seq,
            "txn_id": f"{name}-del-{seq}",
            "batches": [c["batch"] for c in chosen],
            "ranges": [[c["first_id"], c["first_id"] + c["count"]] for c in chosen],
        }
        chaos_append(intents, intent, sync=True)
        done.update(intent["batches"])
        run(intent)
        seq += 1


@_chaos_process
def merger(root: str, run_dir: str, name: str, victim: str, seed: int, life: int) -> None:
    """Merge random acknowledged batches of appender ``victim``: every row of a batch
    rewritten with tag ``<batch>~<n>`` (n increasing), with a txn_id; a restart retries
    the last intent first."""
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    intents = f"{run_dir}/intents-{name}.jsonl"
    earlier = chaos_lines(intents)
    acked = {a["seq"] for a in chaos_lines(f"{run_dir}/acks-{name}.jsonl")}
    _chaos_ready(run_dir, name, life)

    def run(intent: dict[str, Any]) -> None:
        tables = [
            batch_rows(
                b["batch"],
                b["parts"],
                b["count"],
                b["first_id"],
                f"{b['batch']}~{intent['generation']}",
            )
            for b in intent["batches"]
        ]
        data = pa.concat_tables(tables)
        _operate(
            ns,
            run_dir,
            name,
            intent,
            lambda: ns.merge(data, on=["id", "part"], txn_id=intent["txn_id"]),
        )

    if earlier and earlier[-1]["seq"] not in acked:
        run(earlier[-1])
    seq = earlier[-1]["seq"] + 1 if earlier else 0
    while not _chaos_stopping(run_dir):
        time.sleep(rng.uniform(0.2, 0.6))
        candidates = _acked(run_dir, victim)
        if not candidates:
            continue
        chosen = rng.sample(candidates, min(len(candidates), rng.randint(1, 3)))
        intent = {
            "seq": seq,
            "txn_id": f"{name}-merge-{seq}",
            "generation": seq + 1,
            "batches": [{k: c[k] for k in ("batch", "parts", "count", "first_id")} for c in chosen],
        }
        chaos_append(intents, intent, sync=True)
        run(intent)
        seq += 1


@_chaos_process
def optimizer(root: str, run_dir: str, name: str, seed: int, life: int) -> None:
    """Compact every leaf with a few fragments, over and over, until ``stop``."""
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir):
        time.sleep(rng.uniform(0.3, 1.0))
        try:
            result = ns.optimize(target_rows_per_fragment=1000)
        except CommitConflict as exc:  # writers kept winning: allowed, reported
            chaos_append(f"{run_dir}/events-{name}.jsonl", {"error": str(exc)[:200]})
            continue
        chaos_append(
            f"{run_dir}/acks-{name}.jsonl",
            {
                "manifest_version": result.manifest_version,
                "compacted": len(result.rewritten),
                "skipped": dict(result.skipped),
            },
        )


#: New keys per second the key mergers of the spec-change chaos test both insert (so they
#: collide), and the partition specs its evolver moves between (the merge key names every
#: source column).
KEYS_PER_SECOND = 5
SPECS = (["part"], ["tag"], ["part", "tag"])


def key_row(key: int) -> pa.Table:
    """The one row of ``key``: its partition columns are fixed by the key (a merge never
    moves a row out of the partition of an older spec)."""
    return pa.table(
        {
            "id": pa.array([key], pa.int64()),
            "part": pa.array([key % PARTS], pa.int32()),
            "tag": [f"k{key % 3}"],
        },
        schema=TAGGED,
    )


@_chaos_process
def key_merger(
    root: str, run_dir: str, name: str, seed: int, life: int, pause: float = 0.0
) -> None:
    """Merge single rows of the keys the other key merger merges too, without a txn_id
    (an upsert by key is idempotent); each success acknowledged. ``pause`` (seconds,
    before each swap) widens the window in which a spec change lands mid-merge."""
    import os

    from airflow_provider_lance.namespace.testing import ENV

    if pause:
        os.environ[ENV] = f"merge.before_publish=sleep:{pause}"
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    start = _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir):
        # Mostly the key of the current fifth of a second (both mergers insert each new
        # key at about the same moment: the race), sometimes an earlier one (an update).
        key = int((time.time() - start) * KEYS_PER_SECOND) + rng.choice([0, 0, 0, -1, -5])
        key = max(key, 0)
        try:
            result = ns.merge(key_row(key), on=["id", "part", "tag"])
        except CommitConflict as exc:
            chaos_append(f"{run_dir}/events-{name}.jsonl", {"key": key, "error": str(exc)[:200]})
            continue
        chaos_append(
            f"{run_dir}/acks-{name}.jsonl",
            {"key": key, "manifest_version": result.manifest_version},
            sync=True,
        )


@_chaos_process
def evolver(root: str, run_dir: str, name: str, seed: int, life: int) -> None:
    """Move the partition spec between :data:`SPECS` at random moments."""
    from airflow_provider_lance.namespace import PartitionField

    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir):
        time.sleep(rng.uniform(0.1, 0.5))
        fields = [PartitionField(c, c) for c in rng.choice(SPECS)]
        version = ns.evolve_partition_spec(fields)
        chaos_append(f"{run_dir}/acks-{name}.jsonl", {"spec_version": version}, sync=True)
