"""Code that tests run in other OS processes (spawned pools and killed subprocesses)."""

from __future__ import annotations

import json
import random
import sys
import time

import pyarrow as pa

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace

TAGGED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("tag", pa.utf8()),
    ]
)


def tagged_rows(tag: str, parts: list[int], per_part: int, first_id: int) -> pa.Table:
    """Rows of one transaction: ``per_part`` rows in each of ``parts``, all tagged ``tag``."""
    ids, part_col = [], []
    for k, part in enumerate(parts):
        for j in range(per_part):
            ids.append(first_id + k * per_part + j)
            part_col.append(part)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(part_col, pa.int32()),
            "tag": [tag] * len(ids),
        },
        schema=TAGGED,
    )


def stage_in_process(root: str, txn_id: str, stage_id: str, table_json: str) -> dict:
    """Stage a table (given as pylist JSON) into an existing transaction; return the stage."""
    ns = PartitionedNamespace.open(root)
    table = pa.Table.from_pylist(json.loads(table_json), schema=TAGGED)
    return ns.transaction(txn_id).stage(table, stage_id=stage_id).to_json()


def writer(root: str, writer_id: int, transactions: int, seed: int) -> list[str]:
    """Commit ``transactions`` multi-partition appends on overlapping partitions."""
    rng = random.Random(seed)
    ns = PartitionedNamespace.open(root)
    acknowledged = []
    for i in range(transactions):
        parts = sorted(rng.sample(range(6), rng.randint(1, 4)))
        per_part = rng.randint(1, 5)
        tag = f"w{writer_id}-t{i}-n{per_part * len(parts)}"
        data = tagged_rows(tag, parts, per_part, first_id=(writer_id * 1000 + i) * 100)
        for attempt in range(20):
            try:
                ns.write(data, txn_id=f"{tag}")
                acknowledged.append(tag)
                break
            except CommitConflict:
                time.sleep(0.05 * (attempt + 1))
    return acknowledged


def reader(root: str, seconds: float) -> dict:
    """Check invariants 1 and 3 continuously: all-or-nothing per tag, read_versions monotone."""
    ns = PartitionedNamespace.open(root)
    deadline = time.time() + seconds
    reads, violations = 0, []
    seen: dict[str, int] = {}
    while time.time() < deadline:
        version = ns.version
        table = ns.to_table(version=version)
        counts: dict[str, int] = {}
        for tag in table.column("tag").to_pylist():
            counts[tag] = counts.get(tag, 0) + 1
        for tag, count in counts.items():
            expected = int(tag.rsplit("-n", 1)[1])
            if count != expected:
                violations.append(f"v{version}: {tag} has {count} of {expected} rows")
        for p in ns.prune(version=version):
            last = seen.get(p.object_id, 0)
            if (p.read_version or 0) < last:
                violations.append(f"v{version}: {p.object_id} read_version went back")
            seen[p.object_id] = p.read_version or 0
        reads += 1
    return {"reads": reads, "violations": violations}


def crash_run(root: str, txn_id: str, mode: str, rows_json: str) -> None:
    """Begin (or resume), stage and commit one transaction; used with LANCE_PNS_FAILPOINTS."""
    ns = PartitionedNamespace.open(root)
    txn = ns.begin(mode, txn_id)
    if txn.header.state == "staged":  # a retry after the commit started just commits
        table = pa.Table.from_pylist(json.loads(rows_json), schema=TAGGED)
        txn.stage(table, stage_id="only")
    result = ns.commit(txn_id)
    print(json.dumps(result.to_dict()))


def combine_run(root: str, txn_id: str, *sources: str) -> None:
    """Commit several staged transactions as one; used with LANCE_PNS_FAILPOINTS."""
    result = PartitionedNamespace.open(root).commit(list(sources), txn_id=txn_id)
    print(json.dumps(result.to_dict()))


if __name__ == "__main__":
    if sys.argv[1] == "combine":
        combine_run(*sys.argv[2:])
    else:
        crash_run(*sys.argv[1:5])
