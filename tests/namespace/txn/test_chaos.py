"""Chaos: real OS processes against one namespace, writers SIGKILLed at random moments.

* writers (:data:`WRITERS`) write to transaction ids from a small shared pool (they collide
  and are reused after aborts); each saves its intent before ``write`` and, on success,
  appends the result to an fsynced acknowledgement file; a restarted writer first retries
  its last intent with the same id and rows;
* direct writers (:data:`DIRECT_WRITERS`) write without a txn_id (one optimistic
  ``__manifest`` swap, or the claim protocol when a partition is claimed), appends to the
  writers' partitions and some overwrites of partitions only they write; killed the same
  way, never retried (a killed direct write may or may not be published, never partly);
* an operator runs ``recover(lease_seconds=0)`` and aborts everything staged or committing
  every ~:data:`OPERATOR_PAUSE` s (it is killed now and then too);
* evolvers add columns while all this goes on;
* a reader reads fixed versions and reports every broken invariant.

At the end every acknowledged write is visible exactly once, every visible write is
complete and was acknowledged or published, and nothing was ever seen half-done. Every
``__manifest`` version is then read again for the direct writes: each is whole or absent
at every version, first visible at the version its acknowledgement names, and a direct
write that raised is visible at none.
Each run picks a seed for every random choice and prints it; ``LANCE_CHAOS_SEED=<seed>``
replays a run.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests import workers
from tests.support import (
    TAGGED,
    Slot,
    chaos_seconds,
    chaos_seed,
    stop_slots,
    supervise,
    wait_until_up,
)
from tests.workers import (
    CHAOS_OVERWRITE_PARTS,
    chaos_dealt,
    chaos_kind,
    chaos_lines,
    chaos_load,
    chaos_save,
)

#: Seconds of chaos (writers killed and restarted); starting the processes (~6-25 s on
#: two cores), stopping them and the checks come on top.
CHAOS_SECONDS = chaos_seconds(30.0)
WRITERS = 3
#: Transaction ids per generation (``pool-<generation>-<k>``): small, so writers collide.
POOL = 4
#: A published id is final, so the pool moves on to fresh ids this often.
GENERATION_SECONDS = 4.0
#: Writers without a txn_id (``write(data)``), killed like the writers; they append to the
#: writers' partitions and overwrite :data:`~.workers.CHAOS_OVERWRITE_PARTS` (only theirs).
DIRECT_WRITERS = 2
#: Share of the direct writes that are overwrites.
OVERWRITE_SHARE = 0.25
EVOLVERS = 2
COLUMNS_PER_EVOLVER = 3
OPERATOR_PAUSE = 0.3
#: A writer is killed this long (s) after it is up (namespace opened, about to write).
WRITER_KILL_DELAY = (0.05, 1.5)
#: ... and the operator this long after it is up (mid-recover or mid-abort, sometimes).
OPERATOR_KILL_DELAY = (2.0, 8.0)


@pytest.mark.slow
def test_chaos_killed_writers_operator_evolvers_and_a_checking_reader(tmp_path: Path) -> None:
    seed = chaos_seed(tmp_path / "ns")
    began = time.time()
    root, run = str(tmp_path / "ns"), tmp_path / "run"
    run.mkdir()
    first_version = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    ).version
    rng = random.Random(seed)
    ctx = mp.get_context("spawn")
    common = {"root": root, "run_dir": str(run), "seed": seed}
    writers = [
        Slot(
            f"w{i}",
            workers.chaos_writer,
            {
                **common,
                "index": i,
                "writers": WRITERS,
                "pool": POOL,
                "generation_seconds": GENERATION_SECONDS,
            },
            kill_delay=WRITER_KILL_DELAY,
        )
        for i in range(WRITERS)
    ]
    directs = [
        Slot(
            f"d{i}",
            workers.chaos_direct_writer,
            {**common, "index": WRITERS + i, "overwrite_share": OVERWRITE_SHARE},
            kill_delay=WRITER_KILL_DELAY,
        )
        for i in range(DIRECT_WRITERS)
    ]
    operator = Slot(
        "operator",
        workers.chaos_operator,
        {**common, "pause": OPERATOR_PAUSE},
        kill_delay=OPERATOR_KILL_DELAY,
    )
    evolvers = [
        Slot(
            f"evolver{i}",
            workers.chaos_evolver,
            {
                **common,
                "index": i,
                "columns": COLUMNS_PER_EVOLVER,
                "spread": CHAOS_SECONDS * 0.7,
            },
            restart=False,
        )
        for i in range(EVOLVERS)
    ]
    reader = Slot("reader", workers.chaos_reader, dict(common), restart=False)
    slots = [*writers, *directs, operator, *evolvers, reader]
    try:
        for slot in slots:
            slot.spawn(ctx)
        wait_until_up(slots, run)
        start = time.time()
        chaos_save(run / "go.json", {"start": start})
        print(f"  processes up after {start - began:.1f}s")
        supervise(slots, ctx, run, rng, start + CHAOS_SECONDS)
        # writers first (the operator keeps releasing what killed ones held), then the rest
        stuck = stop_slots([*writers, *directs], run, "stop-writers")
        others = slots[WRITERS + DIRECT_WRITERS :]
        stuck += [f"{n} (must stop by itself)" for n in stop_slots(others, run, "stop")]
    finally:
        for slot in slots:
            if slot.proc is not None and slot.proc.is_alive():
                slot.proc.kill()
                slot.proc.join()
    chaos_seconds = time.time() - start

    ns = PartitionedNamespace.open(root)
    final_recovered = ns.recover(lease_seconds=0)

    # -- what the processes recorded ---------------------------------------------------------
    errors = chaos_lines(run / "errors.jsonl")
    violations = chaos_lines(run / "violations.jsonl")
    status = chaos_load(run / "status-reader.json") or {}
    ack_lines = [a for w in writers for a in chaos_lines(run / f"acks-{w.name}.jsonl")]
    acks: dict[str, dict] = {}
    ack_disagreements = []
    for ack in ack_lines:  # a retry after a kill between ack and "done" acknowledges again
        first = acks.setdefault(ack["tag"], ack)
        if (first["manifest_version"], first["rows"]) != (ack["manifest_version"], ack["rows"]):
            ack_disagreements.append((first, ack))
    events = [e for w in writers for e in chaos_lines(run / f"events-{w.name}.jsonl")]
    outcomes = Counter(e["outcome"] for e in events)
    retries = Counter(e["outcome"] for e in events if e["retry"])
    invalid = Counter(e["message"][:90] for e in events if e["outcome"] in ("invalid", "conflict"))
    op_events = chaos_lines(run / "events-operator.jsonl")
    aborts = sum(len(e["aborted"]) for e in op_events)
    recoveries = sum(len(e["recovered"]) for e in op_events)
    evolved = [e for ev in evolvers for e in chaos_lines(run / f"events-{ev.name}.jsonl")]
    kills = sum(w.kills for w in writers)
    exits = [f"{s.name}: {x}" for s in slots for x in s.exits]

    # -- the final state -----------------------------------------------------------------------
    table, unreadable = _read_version(ns, ["id", "tag"])
    ids = table.column("id").to_pylist()
    by_tag: dict[str, list[int]] = {}  # the named writes' tags (direct ones: see below)
    for row_id, tag in zip(ids, table.column("tag").to_pylist(), strict=True):
        if chaos_kind(tag) == "named":
            by_tag.setdefault(tag, []).append(row_id)
    states = {info.txn_id: info.state for info in ns.transactions()}
    txn_of = {tag: tag.split(".", 1)[0] for tag in by_tag}
    figures = {
        "seed": seed,
        "acknowledged": len(acks),
        "ack_lines": len(ack_lines),
        "kills": kills,
        "operator_kills": operator.kills,
        "aborts": aborts,  # by the operator's abort() of listed staged/committing ones
        "recoveries": recoveries,  # transactions recover(lease_seconds=0) aborted
        "operator_rounds": len(op_events),
        "final_recovered": len(final_recovered),
        "reads": status.get("reads", 0),
        "rereads": status.get("rereads", 0),
        "violations": len(violations),
        "errors": len(errors),
        "visible_tags": len(by_tag),
        "visible_rows": len(ids),
        "unacknowledged_published": sorted(t for t in by_tag if t not in acks),
        "outcomes": dict(outcomes),
        "retry_outcomes": dict(retries),
        "invalid_or_conflict_messages": dict(invalid.most_common(8)),
        "states": dict(Counter(states.values())),
        "columns_added": [(e["column"], e["outcome"], e["conflicts"]) for e in evolved],
        "manifest_version": ns.version,
        "chaos_seconds": round(chaos_seconds, 1),
        "test_seconds": round(time.time() - began, 1),
    }

    # -- the direct writes: every manifest version read again -----------------------------------
    intent_lines = [i for d in directs for i in chaos_lines(run / f"intents-{d.name}.jsonl")]
    intents = {i["tag"]: i for i in intent_lines}
    direct_ack_lines = [a for d in directs for a in chaos_lines(run / f"acks-{d.name}.jsonl")]
    direct_acks = {a["tag"]: a for a in direct_ack_lines}
    direct_events = [e for d in directs for e in chaos_lines(run / f"events-{d.name}.jsonl")]
    raised = {e["tag"] for e in direct_events if e["outcome"] in ("conflict", "aborted", "closed")}
    scan_began = time.time()
    history, blind, direct_problems = _read_every_version(ns, first_version, ns.version)
    direct_problems += _direct_problems(history, blind, intents, direct_acks, raised)
    final_direct = history.get(ns.version, {})
    ever_visible = {t for rows in history.values() for t in rows}
    figures.update(
        {
            "direct_intents": len(intent_lines),
            "direct_acknowledged": sum(a["mode"] == "append" for a in direct_acks.values()),
            "direct_acknowledged_overwrites": sum(
                a["mode"] == "overwrite" for a in direct_acks.values()
            ),
            "direct_kills": sum(d.kills for d in directs),
            "direct_outcomes": dict(Counter(e["outcome"] for e in direct_events)),
            "direct_messages": dict(
                Counter(e["message"][:90] for e in direct_events if e["message"]).most_common(6)
            ),
            "direct_visible_at_end": len(final_direct),
            "direct_unacknowledged_visible": sorted(ever_visible - set(direct_acks)),
            "versions_read_again": len(history),
            "reading_again_seconds": round(time.time() - scan_began, 1),
            "test_seconds": round(time.time() - began, 1),
        }
    )
    chaos_save(run / "figures.json", figures)
    for key, value in figures.items():
        print(f"  {key}: {value}")

    # -- the invariants (all checked, then reported together) ----------------------------------
    problems: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            problems.append(what)

    check(not violations, f"the reader saw {len(violations)} violations: {violations[:20]}")
    check(not unreadable, f"partitions unreadable at the end: {unreadable}")
    for e in errors[:10]:
        problems.append(f"unexpected error in {e['who']} ({e['what']}):\n{e['traceback']}")
    check(not stuck, f"processes that did not stop: {stuck}")
    check(not exits, f"processes that died by themselves: {exits}")
    check(not ack_disagreements, f"a retry returned another result: {ack_disagreements[:5]}")
    twice = sorted(i for i, n in Counter(ids).items() if n > 1)
    check(not twice, f"ids visible twice: {twice[:20]}")
    for tag, rows in sorted(by_tag.items()):
        expected_rows = int(tag.rsplit("-n", 1)[1])
        check(len(rows) == expected_rows, f"{tag} has {len(rows)} of {expected_rows} rows")
    per_txn = Counter(txn_of.values())
    check(
        all(n == 1 for n in per_txn.values()),
        f"ids published twice: {sorted(t for t, n in per_txn.items() if n > 1)}",
    )
    acked_per_txn = Counter(a["txn_id"] for a in acks.values())
    check(
        all(n == 1 for n in acked_per_txn.values()),
        f"ids acknowledged twice: {sorted(t for t, n in acked_per_txn.items() if n > 1)}",
    )
    for tag, ack in sorted(acks.items()):
        expected_ids = list(range(ack["first_id"], ack["first_id"] + ack["count"]))
        got = sorted(by_tag.get(tag, []))
        check(got == expected_ids, f"acknowledged {tag}: {len(got)} of its rows visible")
        state = states.get(ack["txn_id"])
        check(state == "published", f"acknowledged {tag}: its transaction is {state}")
    for tag in sorted(by_tag):
        state = states.get(txn_of[tag])
        check(
            tag in acks or state == "published",
            f"{tag} is visible but neither acknowledged nor published ({state})",
        )
    open_ = sorted(t for t, s in states.items() if s in ("staged", "committing"))
    check(not open_, f"still open after the final recover(0): {open_}")
    schema = ns.stored_schema
    for e in evolved:
        check(e["outcome"] == "ok", f"add_column {e['column']}: {e}")
        check(e["column"] in schema.names, f"added column {e['column']} is missing")
    check(len(evolved) == EVOLVERS * COLUMNS_PER_EVOLVER, f"columns added: {len(evolved)}")
    field_ids = [f.metadata[b"lance:field_id"] for f in schema]
    check(len(field_ids) == len(set(field_ids)), f"field ids reused: {field_ids}")
    check(len(acks) > 0, "nothing was acknowledged")
    check(kills > 0, "no writer was killed")
    problems += direct_problems
    check(len(intents) == len(intent_lines), "a direct writer reused a tag")
    check(len(direct_acks) == len(direct_ack_lines), "a direct write was acknowledged twice")
    check(len(direct_acks) > 0, "no direct write was acknowledged")
    check(figures["direct_kills"] > 0, "no direct writer was killed")
    check(status.get("reads", 0) > 0, "the reader read nothing")
    assert not problems, f"{len(problems)} problems (namespace kept at {root}):\n" + "\n".join(
        problems
    )


def _read_version(
    ns: PartitionedNamespace, columns: list[str], version: int | None = None
) -> tuple[pa.Table, dict[int, str]]:
    """The rows of a version; if the read fails (a missing file), each partition is read on
    its own and the unreadable ones are returned (``part`` -> error), so that the checks
    still run on whatever is readable."""
    try:
        return ns.to_table(version=version, columns=columns), {}
    except Exception:
        pass
    tables, unreadable = [], {}
    for partition in ns.prune(version=version):
        value = int(partition.values["part"])
        try:
            tables.append(ns.to_table(version=version, columns=columns, filter=f"part = {value}"))
        except Exception as exc:
            unreadable[value] = f"{partition.object_id}: {type(exc).__name__}: {str(exc)[:300]}"
    empty = TAGGED.empty_table().select(columns)
    return (pa.concat_tables(tables) if tables else empty), unreadable


def _read_every_version(
    ns: PartitionedNamespace, first: int, last: int
) -> tuple[dict[int, dict[str, dict[int, list[int]]]], dict[int, set[int]], list[str]]:
    """Every ``__manifest`` version from ``first`` to ``last`` read whole, as ``to_table``
    reads it: each partition the version lists, at its ``read_version`` (a published leaf
    version is immutable, so each is read once). Per version the rows of direct writes
    (tag -> partition -> sorted ids) and the partitions that could not be read; those and
    ids seen twice are problems."""
    import lance

    leaves: dict[tuple[str, int], pa.Table | str] = {}  # (location, version) -> rows or error

    def leaf(location: str, version: int | None) -> pa.Table | str:
        key = (location, version)
        if version is None or key not in leaves:  # None: "read the latest", not immutable
            try:
                rows = lance.dataset(location, version=version).to_table(columns=["id", "tag"])
            except Exception as exc:
                rows = f"{type(exc).__name__}: {str(exc)[:300]}"
            if version is None:
                return rows
            leaves[key] = rows
        return leaves[key]

    history: dict[int, dict[str, dict[int, list[int]]]] = {}
    blind: dict[int, set[int]] = {}
    problems: list[str] = []
    doubled: list[int] = []  # versions with ids seen twice
    for version in range(first, last + 1):
        rows: dict[str, dict[int, list[int]]] = {}
        ids: list[int] = []
        unreadable: dict[int, str] = {}
        for partition in ns.prune(version=version):
            part = int(partition.values["part"])
            table = leaf(partition.location, partition.read_version)
            if isinstance(table, str):
                unreadable[part] = f"{partition.object_id}@{partition.read_version}: {table}"
                continue
            part_ids = table.column("id").to_pylist()
            ids += part_ids
            for row_id, tag in zip(part_ids, table.column("tag").to_pylist(), strict=True):
                if chaos_kind(tag) != "named":
                    rows.setdefault(tag, {}).setdefault(part, []).append(row_id)
        if unreadable:
            if not blind:
                problems.append(f"v{version}: partitions unreadable: {unreadable}")
            blind[version] = set(unreadable)
        twice = sorted(i for i, n in Counter(ids).items() if n > 1)
        if twice and not doubled:
            problems.append(f"v{version}: ids seen twice: {twice[:10]}")
        doubled += [version] if twice else []
        history[version] = {t: {p: sorted(i) for p, i in ps.items()} for t, ps in rows.items()}
    if doubled:
        problems.append(
            f"ids seen twice at {len(doubled)} versions (v{doubled[0]}..v{doubled[-1]})"
        )
    if blind:
        failed = sorted(blind)
        problems.append(
            f"partitions unreadable at {len(failed)} versions (v{failed[0]}..v{failed[-1]}): "
            f"{sorted(set().union(*blind.values()))}"
        )
    return history, blind, problems


def _direct_problems(
    history: dict[int, dict[str, dict[int, list[int]]]],
    blind: dict[int, set[int]],
    intents: dict[str, dict],
    acks: dict[str, dict],
    raised: set[str],
) -> list[str]:
    """What the direct writes promise, version by version (the first problem of each kind
    per tag or partition is reported; partitions unreadable at a version, reported already,
    are left out of the checks at that version):

    * a visible direct write was intended, and its rows are exactly the intended ones:
      an append all of them, an overwrite all of those of each partition it still holds;
    * an overwrite appears in all its partitions at once (its first version);
    * an append, once visible, stays; a write that raised is visible at no version;
    * an overwritten partition holds exactly one overwrite, never empties again and never
      goes back to an overwrite it held before (each replaces the partition whole);
    * an acknowledged write first appears at the version its result names; an
      acknowledged append is visible at the end, an acknowledged overwrite is replaced
      only by overwrites that appeared after it.
    """
    problems: dict[tuple[str, object], str] = {}

    def flag(key: tuple[str, object], text: str) -> None:
        problems.setdefault(key, text)

    first_seen: dict[str, int] = {}
    occupants: dict[int, list[str]] = {part: [] for part in CHAOS_OVERWRITE_PARTS}
    appended: set[str] = set()
    for version, rows in sorted(history.items()):
        unseen = blind.get(version, set())
        for tag, parts in sorted(rows.items()):
            first_seen.setdefault(tag, version)
            intent = intents.get(tag)
            if intent is None:
                flag(("unintended", tag), f"v{version}: {tag} is visible but was never intended")
                continue
            dealt = chaos_dealt(intent["parts"], intent["count"], intent["first_id"])
            got = {p: len(i) for p, i in parts.items()}
            whole = {p: i for p, i in dealt.items() if i and p not in unseen}
            if intent["mode"] == "append" and parts != whole:
                flag(("partial", tag), f"v{version}: direct append {tag} visible as {got}")
            if intent["mode"] == "overwrite":
                if any(ids != dealt.get(p) for p, ids in parts.items()):
                    flag(("partial", tag), f"v{version}: overwrite {tag} visible as {got}")
                if version == first_seen[tag] and sorted(parts) != sorted(whole):
                    flag(("torn", tag), f"v{version}: overwrite {tag} appeared only in {got}")
            if tag in raised:
                flag(("raised", tag), f"v{version}: {tag} is visible but its write raised")
        gone = [t for t in sorted(appended - set(rows)) if not unseen & {*intents[t]["parts"]}]
        for tag in gone:
            flag(("gone", tag), f"v{version}: direct append {tag} visible before is gone")
        appended = {t for t in rows if chaos_kind(t) == "direct" and t in intents}
        for part, held in occupants.items():
            if part in unseen:
                continue
            holders = sorted(t for t, parts in rows.items() if part in parts)
            if len(holders) > 1:
                flag(("mixed", part), f"v{version}: partition {part} holds {holders}")
            elif holders and (not held or held[-1] != holders[0]):
                if holders[0] in held:
                    flag(("back", part), f"v{version}: partition {part} back to {holders[0]}")
                held.append(holders[0])
            elif not holders and held:
                flag(("emptied", part), f"v{version}: partition {part} held {held[-1]}, now none")
    last = max(history, default=0)
    final = history.get(last, {})
    for tag, ack in sorted(acks.items()):
        at, parts = ack["manifest_version"], set(ack["parts"])
        if first_seen.get(tag) != at and not blind.get(at, set()) & parts:
            flag(("ack", tag), f"acknowledged {tag} (v{at}) first visible at {first_seen.get(tag)}")
        hidden = blind.get(last, set()) & parts
        if ack["mode"] == "append" and tag not in final and not hidden:
            flag(("ack-end", tag), f"acknowledged direct append {tag} (v{at}) is not visible")
        for part in sorted(parts - hidden) if ack["mode"] == "overwrite" else ():
            holder = occupants[part][-1] if occupants[part] else None
            if holder != tag and first_seen.get(holder or "", 0) <= at:
                flag(
                    ("ack-end", tag),
                    f"acknowledged overwrite {tag} (v{at}): partition {part} holds {holder} "
                    f"(first visible at v{first_seen.get(holder or '')})",
                )
    return list(problems.values())


# -- deterministic reproductions of what the chaos test found ---------------------------------
def test_a_header_saved_while_another_process_reads_it_is_not_unreadable(tmp_path: Path) -> None:
    """Two writers ``begin`` the same id: one reads ``txn.json`` (absent) while the other
    saves it, so the download fails and the existence check then succeeds. Seen in the chaos
    test as a non-retryable "record is unreadable" that failed the whole write; the record
    must be read again instead."""
    import threading

    from airflow_provider_lance.namespace.format.txn_row import TransactionHeader
    from airflow_provider_lance.namespace.io.storage import Storage
    from airflow_provider_lance.namespace.testing import hold
    from airflow_provider_lance.namespace.txn.store import TransactionStore

    reader = TransactionStore(Storage(str(tmp_path)))
    writer = TransactionStore(Storage(str(tmp_path)))
    outcome: dict[str, Any] = {}

    def load() -> None:
        try:
            outcome["loaded"] = reader.load("X", 1)
        except Exception as exc:
            outcome["loaded"] = exc

    with hold("txnstore.read_failed") as point:  # the download found nothing
        thread = threading.Thread(target=load)
        thread.start()
        point.wait_reached()
        writer.save(TransactionHeader("X", "append"))  # the other begin() lands here
    thread.join(60)
    assert isinstance(outcome["loaded"], TransactionHeader)
    assert outcome["loaded"].txn_id == "X"


def test_two_committers_creating_one_leaf_both_get_its_version(tmp_path: Path) -> None:
    """Two committers of one incarnation (a retry stole the commit) finish the same plan of
    a partition being created: both find no leaf table, the first creates version 1, the
    second's ``Overwrite`` at base 0 then fails in Lance with ``OSError: Dataset at path
    .../_versions/0.manifest was not found``, which ``is_conflict`` does not recognise, so
    ``commit_leaf`` raised it instead of looking again (and ``write`` then aborts the
    transaction the other committer was publishing)."""
    import threading

    import pyarrow as pa

    from airflow_provider_lance.namespace.io.storage import Storage
    from airflow_provider_lance.namespace.testing import hold
    from airflow_provider_lance.namespace.write.leaf_commit import commit_leaf, stage_fragments

    uri, storage = str(tmp_path / "leaf"), Storage(str(tmp_path))
    data = workers.chaos_rows("t-n3", [1], 3, first_id=0)
    fragments = stage_fragments(storage, uri, data, overwrite=True)
    options: dict[str, Any] = {
        "replace": False,
        "schema": pa.schema(TAGGED),
        "published": None,
        "exists": False,
        "owner": "T#1",
    }
    outcome: dict[str, Any] = {}

    def late() -> None:
        try:
            outcome["late"] = commit_leaf(storage, uri, fragments, **options)
        except Exception as exc:
            outcome["late"] = exc

    with hold("leaf.before_commit") as point:  # parks the first committer before its commit
        thread = threading.Thread(target=late)
        thread.start()
        point.wait_reached()
        outcome["first"] = commit_leaf(storage, uri, fragments, **options)
    thread.join(60)
    assert outcome == {"first": 1, "late": 1}
