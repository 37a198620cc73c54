"""Code that tests run in other OS processes (spawned pools and killed subprocesses)."""

from __future__ import annotations

import json
import random
import sys
import time

import pyarrow as pa

from airflow_provider_lance.namespace import CommitConflict, PartitionedNamespace
from tests.support import TAGGED, tagged_rows


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
    if txn.state == "staged":  # a retry after the commit started just commits
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


# -- chaos test (tests/namespace/txn/test_chaos.py): processes killed at random moments ---------
#: Partitions the chaos writers spread their rows over (``part`` 0..CHAOS_PARTS-1).
CHAOS_PARTS = 6
#: Row ids per writer attempt: attempt ``s`` of writer ``w`` owns ids from
#: ``w * CHAOS_WRITER_IDS + s * CHAOS_ATTEMPT_IDS``, so every intended row id is unique.
CHAOS_ATTEMPT_IDS = 100_000
CHAOS_WRITER_IDS = 10**10
#: Partitions only direct overwrites write (named writers and direct appends never touch
#: them): an overwrite replaces a partition whole, so rows of anything else living there
#: could vanish, and "acknowledged means visible" would no longer hold for them.
CHAOS_OVERWRITE_PARTS = (6, 7)


def chaos_kind(tag: str) -> str:
    """What wrote rows tagged ``tag``: ``named`` (``pool-<g>-<k>.<writer>s<seq>-n<count>``,
    a write with a txn_id), ``direct`` (``direct.<writer>s<seq>-n<count>``, an append
    without one) or ``overwrite`` (``over.<writer>s<seq>.<part>+<part>-n<count>``, a
    direct overwrite of those partitions)."""
    return {"direct": "direct", "over": "overwrite"}.get(tag.split(".", 1)[0], "named")


def chaos_dealt(parts: list[int], count: int, first_id: int) -> dict[int, list[int]]:
    """The ids :func:`chaos_rows` puts in each partition (dealt round-robin)."""
    out: dict[int, list[int]] = {part: [] for part in parts}
    for i in range(count):
        out[parts[i % len(parts)]].append(first_id + i)
    return out


def chaos_part_counts(tag: str) -> dict[int, int]:
    """Rows per partition of a direct overwrite, from its tag (see :func:`chaos_kind`)."""
    count = int(tag.rsplit("-n", 1)[1])
    parts = [int(p) for p in tag.split(".")[2].rsplit("-n", 1)[0].split("+")]
    return {part: len(ids) for part, ids in chaos_dealt(parts, count, 0).items()}


def chaos_rows(tag: str, parts: list[int], count: int, first_id: int) -> pa.Table:
    """``count`` rows tagged ``tag`` with ids ``first_id..``, dealt round-robin to ``parts``."""
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + count), pa.int64()),
            "part": pa.array([parts[i % len(parts)] for i in range(count)], pa.int32()),
            "tag": [tag] * count,
        },
        schema=TAGGED,
    )


def chaos_append(path: str, obj: dict, *, sync: bool = False) -> None:
    """Append one JSON line (one ``write``: a kill leaves the whole line or none of it)."""
    import os as _os

    line = (json.dumps(obj, sort_keys=True, default=str) + "\n").encode()
    fd = _os.open(path, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o644)
    try:
        _os.write(fd, line)
        if sync:
            _os.fsync(fd)
    finally:
        _os.close(fd)


def chaos_save(path: str, obj: dict) -> None:
    """Replace a small JSON file atomically (temp file, fsync, rename)."""
    import os as _os

    tmp = f"{path}.tmp"
    with open(tmp, "w") as out:
        json.dump(obj, out, sort_keys=True)
        out.flush()
        _os.fsync(out.fileno())
    _os.replace(tmp, path)


def chaos_load(path: str) -> dict | None:
    try:
        with open(path) as f:
            loaded: dict = json.load(f)
            return loaded
    except FileNotFoundError:
        return None


def chaos_lines(path: str) -> list[dict]:
    """The JSON lines of a file written with :func:`chaos_append` (none if absent)."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def _chaos_error(run_dir: str, who: str, what: str, exc: BaseException) -> None:
    import traceback

    chaos_append(
        f"{run_dir}/errors.jsonl",
        {
            "who": who,
            "what": what,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
            "t": time.time(),
        },
        sync=True,
    )


def _chaos_process(target):  # type: ignore[no-untyped-def]
    """Record anything that escapes a chaos process's body in ``errors.jsonl`` (the
    supervisor only sees the exit code); the supervisor asks a process that does not stop
    for its threads' stacks (SIGUSR1, written to ``stacks-<name>-<life>.txt``)."""
    import faulthandler
    import functools
    import signal

    @functools.wraps(target)
    def run(**kwargs) -> None:  # type: ignore[no-untyped-def]
        path = f"{kwargs['run_dir']}/stacks-{kwargs['name']}-{kwargs['life']}.txt"
        with open(path, "w") as stacks:
            faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
            try:
                target(**kwargs)
            except Exception as exc:
                _chaos_error(kwargs["run_dir"], kwargs["name"], f"life {kwargs['life']}", exc)
                raise

    return run


def _chaos_ready(run_dir: str, name: str, life: int) -> float:
    """Say this process is up, then wait for the supervisor's go; returns the start time."""
    open(f"{run_dir}/ready-{name}-{life}", "w").close()
    while True:
        go = chaos_load(f"{run_dir}/go.json")
        if go is not None:
            return float(go["start"])
        time.sleep(0.02)


def _chaos_stopping(run_dir: str, flag: str = "stop") -> bool:
    import os as _os

    return _os.path.exists(f"{run_dir}/{flag}")


def _chaos_attempt(
    ns: PartitionedNamespace, run_dir: str, name: str, intent: dict, retry: bool
) -> str:
    """Write one intent with its transaction id; acknowledge it only if the published
    result is this intent's (ids are shared by writers: a published id returns the result
    of whoever's stage it published, so the row counts, unique per attempt, tell)."""
    from airflow_provider_lance.namespace import (
        InvalidArgumentError,
        TransactionAborted,
        TransactionClosed,
    )

    rows = chaos_rows(intent["tag"], intent["parts"], intent["count"], intent["first_id"])
    event = {k: intent[k] for k in ("seq", "txn_id", "tag", "count")}
    event.update(retry=retry, started=time.time())
    outcome, message = "", ""
    try:
        result = ns.write(rows, txn_id=intent["txn_id"])
    except TransactionClosed as exc:
        outcome, message = "closed", str(exc)
    except TransactionAborted as exc:
        outcome, message = "aborted", str(exc)
    except InvalidArgumentError as exc:
        outcome, message = "invalid", str(exc)
    except CommitConflict as exc:  # "aborted meanwhile" comes as a (retryable) conflict
        aborted = isinstance(exc.__cause__, TransactionAborted)
        outcome, message = "aborted" if aborted else "conflict", str(exc)
    except Exception as exc:
        outcome, message = "error", f"{type(exc).__name__}: {exc}"
        _chaos_error(run_dir, name, f"write {intent['tag']}", exc)
    else:
        mine = result.txn_id == intent["txn_id"] and result.rows == intent["count"]
        expected: dict[int, int] = {}
        for part in rows.column("part").to_pylist():
            expected[part] = expected.get(part, 0) + 1
        got = {int(p.values["part"]): p.rows for p in result.partitions}
        if mine and got != expected:
            outcome = "error"
            message = f"result has this intent's row count but partitions {got} != {expected}"
            _chaos_error(run_dir, name, f"write {intent['tag']}", AssertionError(message))
        elif mine:
            outcome = "acknowledged"
            chaos_append(
                f"{run_dir}/acks-{name}.jsonl",
                {
                    "txn_id": intent["txn_id"],
                    "tag": intent["tag"],
                    "count": intent["count"],
                    "first_id": intent["first_id"],
                    "manifest_version": result.manifest_version,
                    "rows": result.rows,
                    "retry": retry,
                },
                sync=True,
            )
        else:
            outcome, message = "foreign", f"published with {result.rows} rows by another writer"
    event.update(outcome=outcome, message=message[:300], ended=time.time())
    chaos_append(f"{run_dir}/events-{name}.jsonl", event)
    chaos_save(f"{run_dir}/intent-{name}.json", dict(intent, done=True, outcome=outcome))
    return outcome


@_chaos_process
def chaos_writer(
    root: str,
    run_dir: str,
    name: str,
    index: int,
    writers: int,
    pool: int,
    generation_seconds: float,
    seed: int,
    life: int,
) -> None:
    """Write to transaction ids of a small shared pool until ``<run_dir>/stop-writers``.

    Each attempt's intent (id, tag, rows) is saved before ``write``; a restarted writer
    first retries its last unfinished intent with the same id and rows. Ids are
    ``pool-<generation>-<k>``: the generation moves on every ``generation_seconds`` after
    the supervisor's go (a published id is final), so ids collide, get reused after aborts,
    and new ones come.
    The row count of attempt ``s`` is ``index + 1 + writers * s``: unique per attempt.
    """
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    intent_path = f"{run_dir}/intent-{name}.json"
    intent = chaos_load(intent_path)
    start = _chaos_ready(run_dir, name, life)
    if intent is not None and not intent.get("done"):
        _chaos_attempt(ns, run_dir, name, intent, retry=True)
    seq = 0 if intent is None else intent["seq"] + 1
    published: set[str] = set()  # ids this process saw published: final, not worth a try
    while not _chaos_stopping(run_dir, "stop-writers"):
        generation = int((time.time() - start) / generation_seconds)
        free = [f"pool-{generation}-{k}" for k in range(pool)]
        free = [t for t in free if t not in published]
        if not free:
            time.sleep(0.05)
            continue
        txn_id = rng.choice(free)
        count = index + 1 + writers * seq
        parts = sorted(rng.sample(range(CHAOS_PARTS), rng.randint(1, 3)))
        intent = {
            "seq": seq,
            "txn_id": txn_id,
            "tag": f"{txn_id}.{name}s{seq}-n{count}",
            "parts": parts,
            "count": count,
            "first_id": index * CHAOS_WRITER_IDS + seq * CHAOS_ATTEMPT_IDS,
        }
        chaos_save(intent_path, intent)
        if _chaos_attempt(ns, run_dir, name, intent, retry=False) in ("acknowledged", "foreign"):
            published.add(txn_id)
        seq += 1


def _chaos_direct_attempt(ns: PartitionedNamespace, run_dir: str, name: str, intent: dict) -> str:
    """Write one intent without a txn_id (``mode`` append or overwrite): acknowledged only
    if the result reports exactly this intent's rows per partition. Nothing retries it."""
    from airflow_provider_lance.namespace import TransactionAborted, TransactionClosed

    rows = chaos_rows(intent["tag"], intent["parts"], intent["count"], intent["first_id"])
    event = {k: intent[k] for k in ("seq", "tag", "mode", "count")}
    event.update(started=time.time())
    outcome, message = "", ""
    try:
        result = ns.write(rows, intent["mode"])
    except CommitConflict as exc:  # "aborted meanwhile" (claim protocol) comes as a conflict
        aborted = isinstance(exc.__cause__, TransactionAborted)
        outcome, message = "aborted" if aborted else "conflict", str(exc)
    except TransactionAborted as exc:
        outcome, message = "aborted", str(exc)
    except TransactionClosed as exc:  # handed over, then aborted by the operator
        outcome, message = "closed", str(exc)
    except Exception as exc:
        outcome, message = "error", f"{type(exc).__name__}: {exc}"
        _chaos_error(run_dir, name, f"write {intent['tag']}", exc)
    else:
        expected: dict[int, int] = {}
        for part in rows.column("part").to_pylist():
            expected[part] = expected.get(part, 0) + 1
        got = {int(p.values["part"]): p.rows for p in result.partitions}
        if got != expected or result.mode != intent["mode"]:
            outcome = "error"
            message = (
                f"write() returned {result.mode} {got}, not {intent['mode']} {expected}: "
                f"{json.dumps(result.to_dict())}"
            )
            try:  # raised, so that the recorded traceback carries the message
                raise AssertionError(message)
            except AssertionError as exc:
                _chaos_error(run_dir, name, f"write {intent['tag']}", exc)
        else:
            outcome = "acknowledged"
            chaos_append(
                f"{run_dir}/acks-{name}.jsonl",
                {
                    "tag": intent["tag"],
                    "mode": intent["mode"],
                    "parts": intent["parts"],
                    "count": intent["count"],
                    "first_id": intent["first_id"],
                    "manifest_version": result.manifest_version,
                    "rows": result.rows,
                    "txn_id": result.txn_id,
                },
                sync=True,
            )
    event.update(outcome=outcome, message=message[:300], ended=time.time())
    chaos_append(f"{run_dir}/events-{name}.jsonl", event)
    return outcome


@_chaos_process
def chaos_direct_writer(
    root: str,
    run_dir: str,
    name: str,
    index: int,
    overwrite_share: float,
    seed: int,
    life: int,
) -> None:
    """Write without a txn_id until ``<run_dir>/stop-writers``: appends to the writers'
    partitions, and (a share ``overwrite_share``) overwrites of :data:`CHAOS_OVERWRITE_PARTS`.

    Each intent (tag, mode, partitions, ids) is appended, fsynced, to
    ``intents-<name>.jsonl`` before ``write``; a write killed midway has no identity to
    retry with, so a restarted writer goes on with the next ``seq`` (the killed one may
    or may not have been published). Ids of attempt ``s``:
    ``index * CHAOS_WRITER_IDS + s * CHAOS_ATTEMPT_IDS``.. (``index`` after the writers').
    """
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    intents_path = f"{run_dir}/intents-{name}.jsonl"
    before = chaos_lines(intents_path)
    seq = before[-1]["seq"] + 1 if before else 0
    _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir, "stop-writers"):
        if rng.random() < overwrite_share:
            mode = "overwrite"
            parts = sorted(rng.sample(CHAOS_OVERWRITE_PARTS, rng.randint(1, 2)))
            count = rng.randint(len(parts), 8)
            tag = f"over.{name}s{seq}.{'+'.join(map(str, parts))}-n{count}"
        else:
            mode = "append"
            parts = sorted(rng.sample(range(CHAOS_PARTS), rng.randint(1, 3)))
            count = rng.randint(len(parts), 12)
            tag = f"direct.{name}s{seq}-n{count}"
        intent = {
            "seq": seq,
            "tag": tag,
            "mode": mode,
            "parts": parts,
            "count": count,
            "first_id": index * CHAOS_WRITER_IDS + seq * CHAOS_ATTEMPT_IDS,
            "life": life,
        }
        chaos_append(intents_path, intent, sync=True)
        _chaos_direct_attempt(ns, run_dir, name, intent)
        seq += 1


@_chaos_process
def chaos_operator(root: str, run_dir: str, name: str, pause: float, seed: int, life: int) -> None:
    """Every ~``pause`` s: ``recover(lease_seconds=0)``, then abort every transaction
    listed as staged or committing. Until ``<run_dir>/stop``."""
    from airflow_provider_lance.namespace import InvalidArgumentError

    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    _chaos_ready(run_dir, name, life)
    while not _chaos_stopping(run_dir):
        time.sleep(rng.uniform(0.5 * pause, 1.5 * pause))
        event: dict = {"life": life, "t": time.time(), "recovered": [], "aborted": []}
        event["skipped"] = []
        try:
            event["recovered"] = ns.recover(lease_seconds=0)
        except CommitConflict as exc:
            event["skipped"].append(f"recover: {exc}")
        except Exception as exc:
            _chaos_error(run_dir, name, "recover", exc)
        try:
            listed = ns.transactions()
        except Exception as exc:
            _chaos_error(run_dir, name, "transactions", exc)
            listed = []
        for info in listed:
            if info.state not in ("staged", "committing"):
                continue
            try:
                ns.abort(info.txn_id, reason="chaos operator")
            except (InvalidArgumentError, CommitConflict) as exc:
                event["skipped"].append(f"{info.txn_id}: {exc}"[:200])
            except Exception as exc:
                _chaos_error(run_dir, name, f"abort {info.txn_id}", exc)
            else:
                event["aborted"].append(f"{info.txn_id}#{info.incarnation}:{info.state}")
        chaos_append(f"{run_dir}/events-{name}.jsonl", event)


@_chaos_process
def chaos_evolver(
    root: str,
    run_dir: str,
    name: str,
    index: int,
    columns: int,
    spread: float,
    seed: int,
    life: int,
) -> None:
    """Add ``columns`` utf8 columns ``e<index>_<i>``, pausing up to ``spread / columns`` s
    before each; a CommitConflict (concurrent commits kept winning) is retried."""
    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    _chaos_ready(run_dir, name, life)
    for i in range(columns):
        time.sleep(rng.uniform(0.2, spread / columns))
        column = f"e{index}_{i}"
        conflicts, outcome, message = 0, "", ""
        started = time.time()
        while not outcome:
            try:
                returned = ns.add_column(pa.field(column, pa.utf8()))
            except CommitConflict as exc:
                conflicts += 1
                message = str(exc)
                if _chaos_stopping(run_dir):
                    outcome = "gave up at stop"
                time.sleep(rng.uniform(0.05, 0.3))
            except Exception as exc:
                outcome, message = "error", f"{type(exc).__name__}: {exc}"
                _chaos_error(run_dir, name, f"add_column {column}", exc)
            else:
                outcome, message = "ok", repr(returned)
        chaos_append(
            f"{run_dir}/events-{name}.jsonl",
            {
                "column": column,
                "outcome": outcome,
                "returned": message[:300],
                "conflicts": conflicts,
                "seconds": time.time() - started,
                "in_schema_after": column in ns.schema.names,
            },
            sync=True,
        )


@_chaos_process
def chaos_reader(root: str, run_dir: str, name: str, seed: int, life: int) -> None:
    """Read fixed versions until ``<run_dir>/stop``; every broken invariant is appended to
    ``violations.jsonl``: a read at a fixed version failing (a missing file), an id twice,
    a tag with another row count than its ``-n<count>``, a tag that disappears, a
    partition's ``read_version`` going back, an old version reading differently later.
    Direct overwrites (tags ``over.``, in :data:`CHAOS_OVERWRITE_PARTS` only) replace
    what was there, so instead: each such partition holds all its rows of exactly one
    overwrite, never empties again, and never goes back to an overwrite it held before."""
    import hashlib

    rng = random.Random(f"{seed}-{name}-{life}")
    ns = PartitionedNamespace.open(root)
    _chaos_ready(run_dir, name, life)
    violations = 0

    def violation(text: str) -> None:
        nonlocal violations
        violations += 1
        if violations <= 200:
            chaos_append(f"{run_dir}/violations.jsonl", {"t": time.time(), "what": text}, sync=True)

    def digest(table: pa.Table) -> str:
        ids = sorted(table.column("id").to_pylist())
        return hashlib.blake2b(json.dumps(ids).encode(), digest_size=12).hexdigest()

    read_versions: dict[str, tuple[int, int]] = {}  # object id -> (read_version, at version)
    visible: dict[str, int] = {}  # tag -> first manifest version that showed it
    snapshots: dict[int, str] = {}
    occupants: dict[int, list[str]] = {}  # overwritten partition -> its overwrites, in order
    last, reads, rereads = 0, 0, 0
    while not _chaos_stopping(run_dir):
        try:
            version = ns.version
        except Exception as exc:
            violation(f"ns.version failed: {type(exc).__name__}: {exc}")
            time.sleep(0.1)
            continue
        if version < last:
            violation(f"ns.version went back from v{last} to v{version}")
        last = max(last, version)
        try:
            table = ns.to_table(version=version, columns=["id", "tag", "part"])
            partitions = ns.prune(version=version)
        except Exception as exc:
            violation(f"v{version}: read at a fixed version failed: {type(exc).__name__}: {exc}")
            continue
        reads += 1
        ids = table.column("id").to_pylist()
        if len(ids) != len(set(ids)):
            twice = sorted({i for i in ids if ids.count(i) > 1})[:10]
            violation(f"v{version}: ids seen twice: {twice}")
        counts: dict[str, int] = {}
        for tag in table.column("tag").to_pylist():
            counts[tag] = counts.get(tag, 0) + 1
        for tag, count in sorted(counts.items()):
            if chaos_kind(tag) == "overwrite":
                continue  # a later overwrite may replace part of it: checked per partition
            expected = int(tag.rsplit("-n", 1)[1])
            if count != expected:
                violation(f"v{version}: {tag} has {count} of its {expected} rows")
            visible.setdefault(tag, version)
        gone = sorted(t for t in visible if t not in counts)
        if gone:  # appends only: nothing published ever goes away
            violation(f"v{version}: tags visible before are gone: {gone[:10]}")
        held: dict[int, dict[str, int]] = {}  # overwritten partition -> tag -> rows
        for tag, part in zip(
            table.column("tag").to_pylist(), table.column("part").to_pylist(), strict=True
        ):
            if part in CHAOS_OVERWRITE_PARTS or chaos_kind(tag) == "overwrite":
                held.setdefault(part, {})
                held[part][tag] = held[part].get(tag, 0) + 1
        for part, tags in sorted(held.items()):
            for tag, count in sorted(tags.items()):
                if chaos_kind(tag) != "overwrite":
                    violation(f"v{version}: partition {part} holds rows of {tag}")
                elif count != chaos_part_counts(tag).get(part):
                    expected = chaos_part_counts(tag).get(part)
                    violation(f"v{version}: {tag} has {count} of its {expected} rows in {part}")
            history = occupants.setdefault(part, [])
            if len(tags) != 1:
                violation(f"v{version}: overwritten partition {part} holds {sorted(tags)}")
            elif not history or history[-1] not in tags:
                (tag,) = tags
                if tag in history:
                    violation(f"v{version}: partition {part} went back to {tag}: {history}")
                history.append(tag)
        for part, history in sorted(occupants.items()):
            if history and part not in held:
                violation(f"v{version}: partition {part} held {history[-1]}, now nothing")
        for p in partitions:
            rv = p.read_version or 0
            before, at = read_versions.get(p.object_id, (0, 0))
            if rv < before:
                violation(f"v{version}: {p.object_id} read_version {rv} < {before} seen at v{at}")
            read_versions[p.object_id] = (max(rv, before), version if rv >= before else at)
        snapshots.setdefault(version, digest(table))
        if reads % 4 == 0 and len(snapshots) > 1:  # an older version must read the same
            old = rng.choice(sorted(snapshots)[:-1])
            try:
                again = ns.to_table(version=old, columns=["id", "tag"])
            except Exception as exc:
                violation(f"re-read of v{old} failed: {type(exc).__name__}: {exc}")
            else:
                rereads += 1
                if digest(again) != snapshots[old]:
                    violation(f"re-read of v{old} returned other rows than the first read")
        if reads % 10 == 0:
            chaos_save(
                f"{run_dir}/status-{name}.json",
                {"reads": reads, "rereads": rereads, "violations": violations, "last": last},
            )
    chaos_save(
        f"{run_dir}/status-{name}.json",
        {
            "reads": reads,
            "rereads": rereads,
            "violations": violations,
            "last": last,
            "done": True,
        },
    )
