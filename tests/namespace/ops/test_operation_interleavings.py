"""An adversarial review of the table operations (delete, drop, merge, optimize, the sweep).

Each test forces one interleaving or crash on real Lance datasets and checks the promise
of every publish: all or nothing, nothing lost, duplicated or resurrected, at every
``__manifest`` version; every published ``read_version`` readable with raw pylance; no
claim left behind by a finished operation; the namespace writable afterwards.

The first tests are the findings of the review (the fixed ones pass; the open ones are
``xfail(strict=True)`` and say why), the matrices after them the races found sound.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
)
from airflow_provider_lance.namespace.format.manifest import row as manifest_row
from airflow_provider_lance.namespace.testing import FailpointError, hold
from airflow_provider_lance.namespace.txn.spec_fence import INTENT_PREFIX, fence_id, new_intent_id
from tests.support import (
    BY_PART,
    TAGGED,
    Worker,
    by_id,
    claims,
    crashing,
    ids,
    no_duplicates,
    other,
    read_latest,
    state_of,
    tagged_rows,
)

NOW = dt.timedelta(0)
Rows = Counter[tuple[Any, ...]]


def upserts(pairs: list[tuple[int, int]], tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i for i, _ in pairs], pa.int64()),
            "part": pa.array([p for _, p in pairs], pa.int32()),
            "tag": [tag] * len(pairs),
        },
        schema=TAGGED,
    )


def rows_at(ns: PartitionedNamespace, version: int | None = None) -> Rows:
    """Every row (as a tuple of its values, sorted columns) at a manifest version."""
    table = ns.to_table(version=version)
    names = sorted(table.column_names)
    return Counter(tuple(r[n] for n in names) for r in table.to_pylist())


def manifest_versions(ns: PartitionedNamespace, since: int) -> list[int]:
    found = lance.dataset(ns.uri + "/__manifest").versions()
    return [int(v["version"]) for v in found if int(v["version"]) >= since]


def published_readable(ns: PartitionedNamespace, version: int | None = None) -> None:
    """Every leaf version the manifest ``version`` publishes reads whole with raw pylance
    (its data and deletion files are there)."""
    for p in ns.state(version).partitions():
        lance.dataset(p.location, version=p.read_version).to_table()


def serial_only(ns: PartitionedNamespace, since: int, *states: Rows) -> None:
    """Every manifest version since ``since`` shows one of ``states`` (the rows before,
    between and after the operations in one serial order), the latest the last, and each
    is readable: nothing half visible, nothing out of order, nothing unreadable."""
    for version in manifest_versions(ns, since):
        assert rows_at(ns, version) in states, f"v{version}: {sorted(rows_at(ns, version))}"
        published_readable(ns, version)
    assert rows_at(ns) == states[-1]


def healthy(ns: PartitionedNamespace, *parts: int) -> None:
    """No claim left; a later append to ``parts`` publishes and reads back."""
    assert claims(ns) == []
    published_readable(ns)
    if parts:
        before = rows_at(ns)
        ns.write(tagged_rows("later", list(parts), 1, first_id=9000))
        assert sum((rows_at(ns) - before).values()) == len(parts)
        published_readable(ns)


# == findings ==================================================================================
# -- 1. a foreign commit to a "read the latest" partition rolled back -------------------------


@pytest.mark.parametrize("kind", ["delete", "merge", "optimize"])
def test_an_operation_never_rolls_back_a_foreign_commit_to_a_read_latest_partition(
    three_parts, kind
) -> None:
    """Partition 2 reads its leaf's latest version. The operation computes its change on
    that version and parks; a foreign writer appends rows 700-701 straight to the leaf
    (for such a partition that commit is the publish: readers see the rows at once). The
    operation used to take the foreign version for an unpublished one of a crashed
    writer, roll it back and publish its own: rows 700-701 were lost. It must compute
    again on the foreign version instead. Fixed in the roll-back guard of
    ``leaf_commit.commit_change`` (``LeafMoved``)."""
    three_parts.write(tagged_rows("more", [2], 1, first_id=50))  # a second fragment, for optimize
    location = read_latest(three_parts, 2)
    calls: dict[str, Callable[[PartitionedNamespace], Any]] = {
        "delete": lambda h: h.delete("id % 2 = 0"),
        "merge": lambda h: h.merge(upserts([(5, 2)], "m"), ["id", "part"]),
        "optimize": lambda h: h.optimize("part = 2"),
    }
    with hold(f"{kind}.computed") as parked:
        operation = Worker(calls[kind], other(three_parts))
        operation.start()
        parked.wait_reached()
        lance.write_dataset(tagged_rows("foreign", [2], 2, first_id=700), location, mode="append")
        assert {700, 701} <= set(ids(three_parts))  # published: readers see them
    operation.outcome()
    got = no_duplicates(three_parts)
    assert 701 in got
    assert (700 in got) == (kind != "delete")
    published_readable(three_parts)
    assert claims(three_parts) == []


# -- 2. maintain removing the version an operation computed on --------------------------------
@pytest.mark.parametrize("point", ["delete.selected", "delete.computed", "leaf.before_commit"])
def test_an_operation_whose_base_was_published_over_and_cleaned_up_computes_again(
    three_parts, point
) -> None:
    """The delete read partition 1 at read_version R and parks (before computing, with
    its change computed, or about to commit it on R); an append publishes R' over it and
    ``maintain(older_than=0)`` removes R. That is a lost race like any other: the delete
    must compute again on R' and publish, not fail with a raw ``OSError`` (it did: reading
    R to check the content after the change, "…/_versions/1.manifest was not found") or a
    ``StorageError`` from committing on a removed version. Fixed in
    ``leaf_commit.commit_change`` and ``OperationRunner``."""
    since = three_parts.version
    seed = rows_at(three_parts)
    with hold(point) as parked:  # the delete reaches it first: the append passes it
        deleter = Worker(other(three_parts).delete, "id IN (0, 5, 100)")
        deleter.start()
        parked.wait_reached()
        other(three_parts).write(tagged_rows("a", [1], 1, first_id=100))
        other(three_parts).maintain(older_than=NOW)
    result = deleter.outcome()
    assert result.rows_removed == 3
    assert sorted(ids(three_parts)) == [1, 2, 3, 4, *range(6, 12)]
    appended = seed + Counter({(100, 1, "a"): 1})
    final = Counter({r: n for r, n in appended.items() if r[0] not in (0, 5, 100)})
    serial_only(three_parts, since, seed, appended, final)
    healthy(three_parts, 1, 2, 3)


# -- 3. a change computed under an older schema reused after a schema change -------------------
NOTED = pa.schema([*TAGGED, pa.field("note", pa.utf8())])


def noted(rows: pa.Table, notes: list[str | None]) -> pa.Table:
    return rows.append_column(NOTED.field("note"), pa.array(notes, pa.utf8()))


def test_a_change_computed_before_a_schema_change_is_not_reused_after_it(root) -> None:
    """The delete of ``note = 'x'`` computes both partitions under s1 and parks before its
    swap. Another handle drops ``note``, adds a new ``note`` (another field id: the old
    values read as NULL) and appends to partition 2 a row with the new ``note = 'x'``.
    The delete's swap fails on partition 2; its retry recomputed partition 2 under s2
    but reused partition 1's change computed under s1: it deleted the old-x row 0 of
    partition 1 *and* the new-x row 100, keeping the old-x row 2: no serial order does
    that (before the change: 0 and 2 go, 100 stays; after it: only 100 goes). A change is
    reused only under the schema it was computed with. Fixed in
    ``OperationRunner._compute``."""
    ns = PartitionedNamespace.create(root, schema=NOTED, partition_fields=BY_PART)
    ns.write(noted(tagged_rows("seed", [1, 2], 2, first_id=0), ["x", "y", "x", "y"]))
    with hold("delete.before_publish") as parked:
        deleter = Worker(other(ns).delete, "note = 'x'")
        deleter.start()
        parked.wait_reached()
        changer = other(ns)
        changer.drop_column("note")
        changer.add_column(pa.field("note", pa.utf8()))
        changer.write(noted(tagged_rows("new", [2], 2, first_id=100), ["x", "y"]))
    deleter.outcome()
    # Serially before the change it would leave [1, 3, 100, 101]; its swap came after the
    # change (which conflicts with no row), so it is serially after it:
    assert ids(ns) == [0, 1, 2, 3, 101]
    published_readable(ns)
    assert claims(ns) == []


def test_a_merge_computed_before_a_schema_change_is_not_reused_after_it(root) -> None:
    """The same for a merge: its source is conformed to the schema; a partition whose
    change was computed under s1 (the merged ``note`` written to the dropped field) must
    not be published next to one computed under s2 (``note`` in the new field)."""
    ns = PartitionedNamespace.create(root, schema=NOTED, partition_fields=BY_PART)
    ns.write(noted(tagged_rows("seed", [1, 2], 2, first_id=0), ["a", "b", "c", "d"]))
    source = noted(upserts([(0, 1), (2, 2)], "m"), ["x", "x"])
    with hold("merge.before_publish") as parked:
        merger = Worker(other(ns).merge, source, ["id", "part"])
        merger.start()
        parked.wait_reached()
        changer = other(ns)
        changer.drop_column("note")
        changer.add_column(pa.field("note", pa.utf8()))
        changer.write(noted(tagged_rows("new", [2], 1, first_id=100), ["n"]))
    merger.outcome()
    notes = by_id(ns.to_table(), "note")
    assert notes[0] == notes[2] == "x"  # merged after the change, in both partitions
    assert notes == {0: "x", 1: None, 2: "x", 3: None, 100: "n"}
    published_readable(ns)


# -- 4. an unknown swap outcome of a merge that only creates partitions -----------------------
def test_a_merge_creating_partitions_whose_swap_reported_a_failure_but_committed(
    three_parts, monkeypatch
) -> None:
    """The swap of a merge that only inserts into new partitions commits, then reports a
    storage error. Its own leaf versions name the publish: it is a success (it was
    reported as the error, although every row was there)."""
    with crashing(monkeypatch, "manifest.after_swap", "error"):
        result = three_parts.merge(upserts([(100, 8), (101, 9)], "m"), ["id", "part"])
    assert result.manifest_version == three_parts.version
    assert result.rows_inserted == 2
    assert ids(three_parts) == [*range(12), 100, 101]


# -- 5. a partition spec change between a merge's routing and its swap (fixed: spec_fence) ---
def intents(ns: PartitionedNamespace) -> list[str]:
    """Ids of the merge intent rows in the latest manifest version."""
    rows = lance.dataset(ns.uri + "/__manifest").to_table(columns=["object_id"])
    return [i for i in rows.column("object_id").to_pylist() if i.startswith(INTENT_PREFIX)]


def across_a_spec_change(ns: PartitionedNamespace, *, seed_tag_m: bool) -> Any:
    """M1 (spec v2 = [tag]) merges key 500 into partition tag=m (new, or holding key 400
    with ``seed_tag_m``) and parks before its swap; the spec evolves to v3 = [part] (its
    column exists: a metadata commit and a fence) and M2 merges the same key under v3,
    where it lands in the new partition part=9 (M1's row is not published). Serially the
    later merge updates the earlier one's row; M1's result."""
    ns.evolve_partition_spec([PartitionField("tag", "tag")])
    if seed_tag_m:
        ns.merge(upserts([(400, 9)], "m"), ["id", "part", "tag"])
    row = upserts([(500, 9)], "m")
    with hold("merge.before_publish") as parked:
        first = Worker(other(ns).merge, row, ["id", "part", "tag"])
        first.start()
        parked.wait_reached()
        changer = other(ns)
        changer.evolve_partition_spec([PartitionField("part", "part")])
        second = changer.merge(row, ["id", "part", "tag"])
        assert (second.rows_inserted, second.rows_updated) == (1, 0)
    return first.outcome()


@pytest.mark.parametrize("seed_tag_m", [False, True], ids=["new-partition", "existing"])
def test_two_merges_of_a_new_key_across_a_spec_change_insert_it_once(
    three_parts, seed_tag_m
) -> None:
    """The review found the key inserted twice: the swap was conditional on partition rows
    only, and the two merges' rows (one per spec) do not overlap. The evolution's fence
    now rewrites M1's intent row, M1's swap (which deletes that row) loses, and M1 computes
    again under v3: it finds M2's row and updates it."""
    since = three_parts.version
    first = across_a_spec_change(three_parts, seed_tag_m=seed_tag_m)
    assert (first.rows_inserted, first.rows_updated) == (0, 1)
    assert ids(three_parts).count(500) == 1
    assert three_parts.to_table(filter="id = 500").column("tag").to_pylist() == ["m"]
    for version in manifest_versions(three_parts, since):  # never twice, at any version
        assert three_parts.to_table(version=version, filter="id = 500").num_rows <= 1
    assert intents(three_parts) == []
    healthy(three_parts, 1, 9)


def test_a_merge_fences_the_spec_an_evolver_died_before_fencing(three_parts, monkeypatch) -> None:
    """The evolver dies between installing v3 and fencing it: M1 (computed under v2) is
    parked before its swap and no fence rewrote its intent. M2, the first merge under
    v3, fences v3 itself before it computes, so M1's swap still loses."""
    three_parts.evolve_partition_spec([PartitionField("tag", "tag")])
    row = upserts([(500, 9)], "m")
    with hold("merge.before_publish") as parked:
        first = Worker(other(three_parts).merge, row, ["id", "part", "tag"])
        first.start()
        parked.wait_reached()
        with crashing(monkeypatch, "spec.before_fence"), pytest.raises(FailpointError):
            other(three_parts).evolve_partition_spec([PartitionField("part", "part")])
        assert three_parts.spec_version == 3
        assert not other(three_parts).state().existing([fence_id(3)])
        other(three_parts).merge(row, ["id", "part", "tag"])
        assert other(three_parts).state().existing([fence_id(3)])
    assert first.outcome().rows_updated == 1
    assert ids(three_parts).count(500) == 1
    assert intents(three_parts) == []


def test_a_merge_that_registers_its_intent_after_a_spec_change_computes_under_it(
    three_parts,
) -> None:
    """M1 computes under v2 and parks before registering its intent; v3 is installed and
    fenced and M2 inserts the key under v3. M1's intent lands after the fence: it
    computes again on a version under v3 and updates M2's row."""
    three_parts.evolve_partition_spec([PartitionField("tag", "tag")])
    row = upserts([(500, 9)], "m")
    with hold("merge.before_intent") as parked:
        first = Worker(other(three_parts).merge, row, ["id", "part", "tag"])
        first.start()
        parked.wait_reached()
        changer = other(three_parts)
        changer.evolve_partition_spec([PartitionField("part", "part")])
        changer.merge(row, ["id", "part", "tag"])
    assert first.outcome().rows_updated == 1
    assert ids(three_parts).count(500) == 1


def test_merge_intents_are_removed_whatever_the_merge_ends_in(three_parts, monkeypatch) -> None:
    """A published merge's swap deletes its intent; a refused, failed or crashed one
    withdraws it; bad input writes none (the manifest version does not move); what a
    killed process leaves is removed by ``maintain`` once stale, and ``maintain`` leaves
    a live merge's intent alone."""
    three_parts.merge(upserts([(0, 1), (600, 4)], "m"), ["id", "part"])
    assert intents(three_parts) == []
    version = three_parts.version
    with pytest.raises(LanceNamespaceError):
        three_parts.merge(upserts([(0, 1)], "m"), ["id"])  # the key lacks the partition column
    assert (intents(three_parts), three_parts.version) == ([], version)
    with crashing(monkeypatch, "merge.before_publish"), pytest.raises(FailpointError):
        three_parts.merge(upserts([(601, 4)], "m"), ["id", "part"])
    assert intents(three_parts) == []
    # A process killed after registering leaves its row: fresh, it is kept; stale, removed.
    with hold("merge.before_publish") as parked:
        live = Worker(other(three_parts).merge, upserts([(602, 4)], "m"), ["id", "part"])
        live.start()
        parked.wait_reached()
        assert len(intents(three_parts)) == 1
        assert three_parts.maintain().merge_intents_removed == 0
        assert len(intents(three_parts)) == 1
    live.outcome()
    assert intents(three_parts) == []
    dead = manifest_row(new_intent_id(), "namespace", metadata='{"started_at":0}')
    three_parts._manifest.insert_absent(three_parts.state().rows_table([dead]))
    assert three_parts.maintain().merge_intents_removed == 1
    assert intents(three_parts) == []
    assert sorted(i for i in ids(three_parts) if i >= 600) == [600, 602]


# -- 6. a merge rewriting a partition column of an older spec's partition is refused ---------
def test_a_merge_never_leaves_a_row_in_a_partition_its_values_do_not_name(three_parts) -> None:
    """Spec v1 partitions by ``part``; after evolving to v2 = [tag], a merge on [id, tag]
    would update row 0 in its part=1 partition with part=7: the row would sit where its
    values do not say (a read of ``part = 7`` would miss it, ``delete("part = 1")`` would
    drop it). The merge is refused with a clear error and nothing changes."""
    three_parts.evolve_partition_spec([PartitionField("tag", "tag")])
    before = rows_at(three_parts)
    version = three_parts.version
    with pytest.raises(InvalidArgumentError, match="would move rows out of partition"):
        three_parts.merge(upserts([(0, 7)], "seed"), ["id", "tag"])
    assert (rows_at(three_parts), three_parts.version) == (before, version)
    three_parts.merge(
        upserts([(0, 1)], "seed"), ["id", "tag"]
    )  # the same partition: updated in place
    assert three_parts.to_table(filter="part = 1 AND id = 0").num_rows == 1


# == races found sound ============================================================================
SEED = tagged_rows("seed", [1, 2, 3], 4, first_id=0)
OPERATIONS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "delete": lambda h: h.delete("id % 2 = 0"),
    "drop_partitions": lambda h: h.drop_partitions("part = 1"),
    "merge": lambda h: h.merge(upserts([(0, 1), (5, 2), (100, 1), (101, 4)], "m"), ["id", "part"]),
    "optimize": lambda h: h.optimize(),
}
WRITES: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "append": lambda h: h.write(tagged_rows("a", [1, 2], 2, first_id=200)),
    "overwrite": lambda h: h.write(tagged_rows("o", [1], 2, first_id=300), "overwrite"),
}


def fragmented(root: Path) -> PartitionedNamespace:
    """The seed in two appends (two fragments per leaf: something for optimize to do)."""
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(SEED.slice(0, 6))
    ns.write(SEED.slice(6))
    return ns


#: Serial orders already run, by their calls: they depend on nothing else, and the races
#: below compare against the same few dozen of them hundreds of times.
_SERIAL: dict[tuple[Callable[[PartitionedNamespace], Any], ...], list[Rows]] = {}


def serially(tmp: Path, *calls: Callable[[PartitionedNamespace], Any]) -> list[Rows]:
    """The rows before and after each call, run one after the other on a fresh copy."""
    if calls not in _SERIAL:
        ns = fragmented(tmp)
        out = [rows_at(ns)]
        for call in calls:
            call(ns)
            out.append(rows_at(ns))
        _SERIAL[calls] = out
    return [Counter(rows) for rows in _SERIAL[calls]]


def points(kind: str) -> list[str]:
    leaf = [] if kind == "drop_partitions" else [f"{kind}.leaf_committed"]
    return [f"{kind}.selected", f"{kind}.computed", *leaf, f"{kind}.before_publish"]


def settle(worker: Worker) -> LanceNamespaceError | None:
    try:
        worker.outcome()
    except CommitConflict as exc:  # refused (retryable), nothing of it published
        return exc
    return None


def follows(shown: list[Rows], order: list[Rows]) -> bool:
    """Whether the states ``shown`` (oldest first) are states of ``order``, never going
    back to an earlier one."""
    at = 0
    for rows in shown:
        later = [i for i in range(at, len(order)) if order[i] == rows]
        if not later:
            return False
        at = later[0]
    return True


def check_race(
    ns: PartitionedNamespace,
    tmp: Path,
    since: int,
    first: Callable[[PartitionedNamespace], Any],
    second: Callable[[PartitionedNamespace], Any],
    refused: bool,
) -> None:
    """The outcome is one serial order of the two calls (``second`` alone refused: the
    first only), at every manifest version since ``since``."""
    if refused:
        orders = [serially(tmp / "alone", first)]
    else:
        orders = [serially(tmp / "ab", first, second), serially(tmp / "ba", second, first)]
    final = rows_at(ns)
    matching = [o for o in orders if o[-1] == final]
    assert matching, f"no serial order ends with {sorted(final)}"
    shown = [rows_at(ns, v) for v in manifest_versions(ns, since)]
    assert any(follows(shown, order) for order in matching), (
        f"the versions since v{since} follow no serial order: {[sorted(r) for r in shown]}"
    )
    for version in manifest_versions(ns, since):
        published_readable(ns, version)
    assert max(final.values(), default=1) == 1  # nothing duplicated
    healthy(ns, 1, 2, 3)


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize(
    ("kind", "point"),
    [(k, p) for k in OPERATIONS for p in points(k)]
    + [(k, p) for k in OPERATIONS for p in ("direct.staged", "direct.before_publish")],
)
def test_an_operation_racing_a_direct_write(root, tmp_path, kind, point, write) -> None:
    """One side parks at ``point`` (the operation having read its state, computed its
    changes, committed its leaves, or about to swap; the write having staged, or with its
    leaves committed before its swap); the other runs whole. The result is one serial
    order of the two at every manifest version (an overwrite staged before the operation
    published may be refused, retryably, with nothing of it visible)."""
    ns = fragmented(root)
    since = ns.version
    operation, writing = OPERATIONS[kind], WRITES[write]
    parked_side = "write" if point.startswith("direct.") else "operation"
    error: LanceNamespaceError | None = None
    with hold(point) as parked:
        if parked_side == "operation":
            worker = Worker(operation, other(ns))
            worker.start()
            parked.wait_reached()
            try:
                writing(other(ns))
            except CommitConflict as exc:  # refused (retryable), nothing of it published
                error = exc
        else:
            worker = Worker(writing, other(ns))
            worker.start()
            parked.wait_reached()
            operation(other(ns))
    if parked_side == "write":
        error = settle(worker)
    else:
        worker.outcome()
    check_race(ns, tmp_path / "serial", since, operation, writing, refused=error is not None)


@pytest.mark.parametrize("second", list(OPERATIONS))
@pytest.mark.parametrize(
    ("first", "point"),
    [(k, p) for k in OPERATIONS for p in points(k) if not p.endswith(".selected")],
)
def test_two_operations_racing(root, tmp_path, first, point, second) -> None:
    """``first`` parks (changes computed, leaves committed, or before its swap) while
    ``second`` runs whole on the same partitions: both apply, in one serial order."""
    ns = fragmented(root)
    since = ns.version
    with hold(point) as parked:
        worker = Worker(OPERATIONS[first], other(ns))
        worker.start()
        parked.wait_reached()
        OPERATIONS[second](other(ns))
    worker.outcome()
    check_race(ns, tmp_path / "serial", since, OPERATIONS[first], OPERATIONS[second], False)


X_ROWS = tagged_rows("x", [1, 4], 2, first_id=400)  # an existing partition and a new one


@pytest.mark.parametrize("fate", ["publish", "abort", "recover"])
@pytest.mark.parametrize("x_point", ["commit.after_claim", "commit.before_publish"])
@pytest.mark.parametrize("kind", list(OPERATIONS))
def test_an_operation_against_a_named_transaction_holding_its_claims(
    root, tmp_path, kind, x_point, fate
) -> None:
    """X (named append to partition 1 and new partition 4) is sealed, holding its claims,
    parked after its seal or with its leaves committed; the operation starts. It waits
    for X (optimize leaves the claimed partition alone instead). X then publishes, or is
    aborted (``abort``, or ``recover(lease_seconds=0)``) and its committer released. The
    result is X then the operation, or the operation alone; X's claims never outlive it."""
    ns = fragmented(root)
    since = ns.version
    ns.begin("append", "X").stage(X_ROWS)
    operation = OPERATIONS[kind]
    with hold(x_point) as x_parked:
        committer = Worker(other(ns).commit, "X")
        committer.start()
        x_parked.wait_reached()
        worker = Worker(operation, other(ns))
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() == (kind != "optimize")  # waiting for X's claims
        if fate == "abort":
            other(ns).abort("X")
        elif fate == "recover":
            assert other(ns).recover(lease_seconds=0) == ["X"]
    if fate == "publish":
        committer.outcome()
    else:
        with pytest.raises(TransactionAborted):
            committer.outcome()
    result = worker.outcome()
    assert state_of(ns, "X") == ("published" if fate == "publish" else "aborted")

    def publish_x(h: PartitionedNamespace) -> None:
        h.write(X_ROWS)

    if fate == "publish" and kind == "optimize":
        p1 = ns.partition({"part": 1}).object_id
        assert result.skipped == {p1: "claimed"}
    expected = (
        serially(tmp_path / "serial", publish_x, operation)
        if fate == "publish"
        else serially(tmp_path / "serial", operation)
    )
    serial_only(ns, since, *expected)
    healthy(ns, 1, 2, 3, 4)


@pytest.mark.parametrize("kind", list(OPERATIONS))
def test_a_crashed_operation_aborted_by_recover_then_retried(
    three_parts, monkeypatch, kind
) -> None:
    """An operation with a ``txn_id`` crashes with its leaves committed, before its swap;
    ``recover(lease_seconds=0)`` aborts the id's record (nothing was published); a retry
    with the same id runs as its next incarnation and publishes; a different operation
    under that id is refused, changing nothing."""
    before = rows_at(three_parts)
    with crashing(monkeypatch, f"{kind}.before_publish"), pytest.raises(FailpointError):
        OPERATIONS_WITH_ID[kind](three_parts, "op")
    assert rows_at(three_parts) == before
    assert other(three_parts).recover(lease_seconds=0) == ["op"]
    assert state_of(three_parts, "op") == "aborted"
    other_kind = "delete" if kind != "delete" else "merge"
    with pytest.raises(InvalidArgumentError, match="needs an id of its own"):
        OPERATIONS_WITH_ID[other_kind](three_parts, "op")
    result = OPERATIONS_WITH_ID[kind](three_parts, "op")
    assert state_of(three_parts, "op") == "published"
    assert OPERATIONS_WITH_ID[kind](three_parts, "op") == result
    healthy(three_parts, 1, 2, 3)


DROP_POINTS = [
    "drop_partitions.selected",
    "drop_partitions.computed",
    "drop_partitions.before_publish",
    "manifest.before_swap",
    "manifest.after_swap",
    "drop_partitions.after_publish",
]


@pytest.mark.parametrize("point", DROP_POINTS)
def test_a_crashed_drop_is_all_or_nothing_and_its_retry_returns_the_first_result(
    three_parts, monkeypatch, point
) -> None:
    """A named drop of partitions 1 and 2 crashes at each step. Before its swap nothing
    is gone, after it both are; the retry completes it (or returns the first result,
    its manifest version found again), drops nothing a later write created, and the
    partitions can be written again."""
    with crashing(monkeypatch, point), pytest.raises(FailpointError):
        three_parts.drop_partitions("part <= 2", txn_id="drop")
    published = point in ("manifest.after_swap", "drop_partitions.after_publish")
    assert ids(three_parts) == (list(range(8, 12)) if published else list(range(12)))
    published_readable(three_parts)
    result = three_parts.drop_partitions("part <= 2", txn_id="drop")
    assert result.rows_removed == 8
    # (a result read back from its record carries partition values in their string form)
    assert sorted(str(p.values["part"]) for p in result.dropped) == ["1", "2"]
    assert result.manifest_version is not None
    assert sorted(
        three_parts.to_table(version=result.manifest_version).column("id").to_pylist()
    ) == [
        8,
        9,
        10,
        11,
    ]
    three_parts.write(tagged_rows("again", [1], 1, first_id=100))
    assert three_parts.drop_partitions("part <= 2", txn_id="drop") == result
    assert ids(three_parts) == [8, 9, 10, 11, 100]
    healthy(three_parts, 1, 2, 3)


OPERATIONS_WITH_ID: dict[str, Callable[[PartitionedNamespace, str], Any]] = {
    "delete": lambda h, t: h.delete("id % 2 = 0", txn_id=t),
    "drop_partitions": lambda h, t: h.drop_partitions("part = 1", txn_id=t),
    "merge": lambda h, t: h.merge(upserts([(0, 1), (100, 4)], "m"), ["id", "part"], txn_id=t),
    "optimize": lambda h, t: h.optimize(txn_id=t, target_rows_per_fragment=2),
}


#: The operations of the races above, named: each changes what :func:`fragmented` holds.
NAMED: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "delete": lambda h: h.delete("id % 2 = 0", txn_id="op"),
    "drop_partitions": lambda h: h.drop_partitions("part = 1", txn_id="op"),
    "merge": lambda h: h.merge(
        upserts([(0, 1), (5, 2), (100, 1), (101, 4)], "m"), ["id", "part"], txn_id="op"
    ),
    "optimize": lambda h: h.optimize(txn_id="op"),
}


@pytest.mark.parametrize(("kind", "point"), [(k, p) for k in NAMED for p in points(k)])
def test_two_runs_of_one_named_operation_publish_it_once(root, kind, point) -> None:
    """Run 1 of a named operation (``txn_id="op"``, a task and its retry, say) parks at
    ``point``; run 2 with the same id runs whole and publishes; then an append puts rows
    into partitions 1-3 that the operation would change if it ran again (even ids for the
    delete, a re-created partition 1 for the drop, new fragments for optimize, a second
    leaf version for the merge's partitions). Released, run 1 must return run 2's result
    and change nothing: no partition's ``read_version`` moves and the appended rows stay."""
    ns = fragmented(root)  # partition 2 in two fragments: something for optimize to do
    with hold(point) as parked:
        first = Worker(NAMED[kind], other(ns))
        first.start()
        parked.wait_reached()
        second = NAMED[kind](other(ns))
        assert state_of(ns, "op") == "published"
        for n in range(2):  # two appends: two more fragments in each partition
            ns.write(tagged_rows(f"after-{n}", [1, 2, 3], 1, first_id=200 + 10 * n))
        published = {p.object_id: p.read_version for p in ns.partitions()}
        rows = rows_at(ns)
    result = first.outcome()
    assert result == second
    assert {p.object_id: p.read_version for p in ns.partitions()} == published
    assert rows_at(ns) == rows
    assert {200, 201, 202, 210, 211, 212} <= set(no_duplicates(ns))
    assert state_of(ns, "op") == "published"
    assert NAMED[kind](ns) == second
    healthy(ns, 1, 2, 3)


# -- the orphan sweep and version cleanup next to operations in flight ------------------------
def data_files(root: Path) -> set[Path]:
    """The data files of every leaf directory (not ``__manifest``'s)."""
    return {p for p in root.rglob("*") if p.is_file() and "$dataset/data/" in str(p)}


@pytest.mark.parametrize(
    "point", ["merge.computed", "merge.leaf_committed", "merge.before_publish"]
)
def test_the_default_sweep_keeps_an_operation_in_flight_whole(three_parts, root, point) -> None:
    """A merge (an update to partition 1, a new partition 9) parks with its files written
    (uncommitted, committed, or before its swap); ``maintain(older_than=0,
    sweep_orphans=True)`` runs with the default safety age. Its files are young: nothing
    of the merge goes, and it publishes whole. (With ``orphan_min_age=0`` the files of a
    change not yet committed are swept and the merge publishes a version that cannot be
    read: the age is what protects writes in flight, as Delta's VACUUM retention.)"""
    with hold(point) as parked:
        merger = Worker(other(three_parts).merge, upserts([(0, 1), (500, 9)], "m"), ["id", "part"])
        merger.start()
        parked.wait_reached()
        before = data_files(root)
        report = other(three_parts).maintain(older_than=NOW, sweep_orphans=True)
        assert report.orphans is not None
        assert report.orphans["files_removed"] == 0
        assert data_files(root) == before
    merger.outcome()
    assert ids(three_parts) == [*range(12), 500]
    published_readable(three_parts)
    healthy(three_parts, 1, 9)


def test_a_zero_age_sweep_keeps_what_committed_versions_and_live_transactions_name(
    three_parts, monkeypatch
) -> None:
    """With ``orphan_min_age=0``: X is staged (its files named only by its stage records),
    Y is sealed holding its claims (its plan names them), a direct append to partition 1
    parked before its swap (its leaf version committed above the published one) and an
    old tagged state still read: the sweep and ``maintain(older_than=0)`` remove none of
    it, and each publishes whole afterwards. (A write parked before its swap that creates
    a partition is not safe from a zero-age sweep: its leaf table is read by no manifest
    version yet, exactly like a crashed write's, and only the age tells them apart.)"""
    three_parts.tag("old")
    three_parts.drop_partitions("part = 3")
    three_parts.delete("id = 5")  # a deletion file in partition 2's published version
    three_parts.begin("append", "X").stage(tagged_rows("x", [1, 5], 1, first_id=100))
    three_parts.begin("append", "Y").stage(tagged_rows("y", [2, 6], 1, first_id=200))
    with crashing(monkeypatch, "commit.after_claim"), pytest.raises(FailpointError):
        three_parts.commit("Y")
    with hold("direct.before_publish") as parked:
        writer = Worker(other(three_parts).write, tagged_rows("w", [1], 2, first_id=300))
        writer.start()
        parked.wait_reached()
        other(three_parts).maintain(
            older_than=NOW, sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False
        )
    writer.outcome()
    assert sorted(three_parts.to_table(version="old").column("id").to_pylist()) == list(range(12))
    three_parts.commit("X")
    three_parts.commit("Y")
    assert ids(three_parts) == [0, 1, 2, 3, 4, 6, 7, 100, 101, 200, 201, 300, 301]
    published_readable(three_parts)
    healthy(three_parts, 1, 2, 5, 6)


def test_a_dropped_partition_recreated_under_a_tag_and_swept(three_parts) -> None:
    """Partition 1 is tagged, dropped and written again (its leaf directory is the same:
    the new rows go into a new leaf version replacing the old ones), then compacted,
    cleaned with ``older_than=0`` and swept with ``orphan_min_age=0``. The tag still reads
    the dropped rows, the latest state only the new ones, and neither ever shows both."""
    three_parts.tag("before-drop")
    location = three_parts.partition({"part": 1}).location
    three_parts.drop_partitions("part = 1")
    three_parts.write(tagged_rows("again", [1], 2, first_id=100))
    assert three_parts.partition({"part": 1}).location == location
    three_parts.optimize()
    three_parts.maintain(
        older_than=NOW, sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False
    )
    assert sorted(three_parts.to_table(version="before-drop").column("id").to_pylist()) == list(
        range(12)
    )
    assert ids(three_parts) == [*range(4, 12), 100, 101]
    published_readable(three_parts)
    three_parts.untag("before-drop")
    three_parts.maintain(
        older_than=NOW, sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False
    )
    assert ids(three_parts) == [*range(4, 12), 100, 101]
    healthy(three_parts, 1, 2)


def test_a_reader_holding_an_old_state_across_a_drop_and_recreation(three_parts) -> None:
    """A reader holds the state before the drop; partition 1 is dropped and created again
    in the same directory. Inside the retention window the old state still reads the old
    rows (its read_version is an older version of the same leaf), the new state the new."""
    held = three_parts.state()
    three_parts.drop_partitions("part = 1")
    three_parts.write(tagged_rows("again", [1], 1, first_id=100))
    three_parts.maintain(
        older_than=dt.timedelta(hours=1),
        sweep_orphans=True,
        orphan_min_age=NOW,
        enforce_min_age=False,
    )
    old = three_parts.to_table(version=held.version)
    assert sorted(old.column("id").to_pylist()) == list(range(12))
    assert ids(three_parts) == [*range(4, 12), 100]
    healthy(three_parts, 1)


# -- schema and data edge cases ----------------------------------------------------------------
def test_a_delete_on_partitions_older_than_a_column(three_parts) -> None:
    """Partitions 1-3 predate ``note``: it reads NULL there. A delete on ``note`` decides
    their rows by that NULL, as a read does."""
    three_parts.add_column(pa.field("note", pa.utf8()))
    three_parts.write(
        pa.table(
            {
                "id": pa.array([100, 101], pa.int64()),
                "part": pa.array([1, 4], pa.int32()),
                "tag": ["n", "n"],
                "note": ["x", None],
            }
        )
    )
    assert three_parts.delete("note = 'x'").rows_removed == 1
    assert ids(three_parts) == [*range(12), 101]
    assert three_parts.delete("note IS NULL AND part = 2").rows_removed == 4
    assert three_parts.delete("note IS NULL").rows_removed == 9
    assert ids(three_parts) == []
    healthy(three_parts, 1, 4)


def test_a_merge_with_a_renamed_column_is_refused_changing_nothing(three_parts) -> None:
    three_parts.rename_column("tag", "label")
    before, version = rows_at(three_parts), three_parts.version
    with pytest.raises(LanceNamespaceError, match="'tag' is not in the namespace schema"):
        three_parts.merge(upserts([(0, 1)], "m"), ["id", "part"])
    assert (rows_at(three_parts), three_parts.version) == (before, version)


@pytest.mark.parametrize("kind", list(OPERATIONS))
def test_an_operation_next_to_a_dead_claim_on_a_partition_never_created(
    three_parts, monkeypatch, kind
):
    """X sealed (claiming partition 1 and creating partition 4: a row with no
    read_version) and crashed; ``recover`` aborts it, leaving partition 4's row with a dead
    claim. Every operation ignores it or takes it over, and the partition can be written."""
    three_parts.begin("append", "X").stage(tagged_rows("x", [1, 4], 2, first_id=600))
    with crashing(monkeypatch, "commit.after_claim"), pytest.raises(FailpointError):
        three_parts.commit("X")
    assert other(three_parts).recover(lease_seconds=0) == ["X"]
    before = ids(three_parts)
    OPERATIONS[kind](three_parts)
    assert not {600, 601, 602, 603} & set(ids(three_parts))
    assert (ids(three_parts) == before) == (kind == "optimize")
    healthy(three_parts, 1, 2, 4)
