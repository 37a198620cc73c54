"""Adversarial interleavings of the direct publish (``ns.write()`` without a ``txn_id``).

Each test forces one interleaving of a direct write with another operation on the same
partitions (a named commit, ``abort``, ``recover``, a schema or spec change, ``maintain``,
another direct write) by parking threads at named failpoints, on real Lance datasets, and
checks the project's promise: a publish is all-or-nothing, nothing acknowledged is lost or
duplicated, every published partition stays readable (every data file its published
version references exists), and no claim is left behind by a finished operation.

Found by this file and fixed (each test fails without its fix): an append committed onto a
leaf rewritten under another schema (stages keep a digest of the schema their files were
written against: ``leaf_commit.check_append_schema``); a failure after the swap deleting the
files it had just published (nothing is discarded once published; post-publish compaction is best
effort); an operator's ``abort``/``recover`` of a write handed to the claim protocol not
fencing it (only the writer's own abort skips the fence); ``maintain`` removing the files
of a write that lost a race before it retried (``leaf_commit.check_staged_files``); and a lost race
against ``maintain`` reported as a non-retryable error (the swap's base version was
cleaned up: a ``CommitConflict``).
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_lance.namespace import (
    CommitConflict,
    LanceNamespaceError,
    OutcomeUnknown,
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
)
from airflow_provider_lance.namespace.errors import StorageError, is_retryable
from airflow_provider_lance.namespace.format.leaf_version import committed_by
from airflow_provider_lance.namespace.format.manifest import Manifest
from airflow_provider_lance.namespace.format.manifest_compaction import indexed_fragments
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from airflow_provider_lance.namespace.txn.lifecycle import all_records
from tests.support import (
    BY_PART,
    FOLD_X,
    Worker,
    all_readable,
    by_id,
    claims,
    crashing,
    data_files,
    fill_to_15_fragments,
    ids,
    manifest_fragments,
    no_duplicates,
    other,
    published_files_exist,
    referenced_files,
    settle,
    state_of,
    tagged_rows,
    while_a_fold_is_parked,
)

SEED = tagged_rows("seed", [1, 2], 2, first_id=0)  # ids 0-3 in partitions 1 and 2


# -- helpers -------------------------------------------------------------------------------


def tag_counts(ns: PartitionedNamespace, version: int | None = None) -> Counter[str]:
    return Counter(ns.to_table(columns=["tag"], version=version).column("tag").to_pylist())


def manifest_versions(ns: PartitionedNamespace, since: int) -> list[int]:
    versions = lance.dataset(ns.uri + "/__manifest").versions()
    return [int(v["version"]) for v in versions if int(v["version"]) >= since]


def assert_all_or_nothing(ns: PartitionedNamespace, expected: dict[str, int], since: int) -> None:
    """At every ``__manifest`` version from ``since`` (the namespace complete, seeded) on,
    each write's tag is absent or complete."""
    for version in manifest_versions(ns, since):
        counts = tag_counts(ns, version)
        for tag, count in counts.items():
            if tag in expected:
                assert count == expected[tag], f"v{version}: {count} rows of {tag}"


@contextmanager
def failing_at(point: str, nth: int) -> Iterator[None]:
    """The ``nth`` thread that reaches ``point`` gets an ``OSError`` (a transient failure of
    that one step); every other passes. Built on ``failpoints.hold`` (its ``when`` runs
    under the point's lock, once per arrival), which has no counted ``=error`` of its own."""
    arrivals = 0

    def when() -> bool:
        nonlocal arrivals
        arrivals += 1
        if arrivals == nth:
            raise OSError(f"injected failure of arrival {nth} at {point}")
        return False

    with hold(point, times=None, when=when):
        yield


@contextmanager
def env_failpoint(monkeypatch: pytest.MonkeyPatch, spec: str) -> Iterator[None]:
    monkeypatch.setenv(ENV, spec)
    try:
        yield
    finally:
        monkeypatch.delenv(ENV, raising=False)


# -- a direct write racing abort / recover of a named transaction -----------------------
X_ROWS = tagged_rows("x", [1, 3], 2, first_id=100)  # an existing partition and a new one
W_ROWS = tagged_rows("w", [1, 3], 2, first_id=200)


def abort_x(ns: PartitionedNamespace, operator: str) -> None:
    """Abort X from another handle: explicitly, or as an operator's ``recover(0)`` does."""
    if operator == "abort":
        other(ns).abort("X")
    else:
        assert other(ns).recover(lease_seconds=0) == ["X"]


@pytest.mark.parametrize("operator", ["abort", "recover"])
@pytest.mark.parametrize(
    "x_point", ["commit.before_seal", "commit.after_claim", "commit.before_publish"]
)
@pytest.mark.parametrize(
    "w_point", ["direct.staged", "leaf.before_commit", "direct.before_publish"]
)
def test_a_direct_write_racing_the_abort_of_a_named_transaction(
    seeded, operator, x_point, w_point
) -> None:
    """W (direct, partitions 1 and new 3) reads manifest version S and parks at
    ``w_point``; X (named, same partitions) then parks at ``x_point`` (before its seal,
    right after it, or with its leaves committed before its publish); X is aborted
    (``abort``) or recovered (``recover(0)``) while both are parked; X, then W, go on.

    W must publish exactly once (its swap fails on X's seal/fence and retries, or its
    handed-off commit takes X's dead claims over), X nothing, and no claim may stay.
    Relies on: the swap conditional on rows unchanged since S (``Manifest.commit`` of the
    write's ``Swap``), the claim check of every attempt, ``commit_leaf``'s rollback of
    versions above the published one, and the fence before abort deletes X's files."""
    seeded.begin("append", "X").stage(X_ROWS)
    with hold(w_point) as w_parked:
        writer = Worker(other(seeded).write, W_ROWS)
        writer.start()
        w_parked.wait_reached()
        with hold(x_point) as x_parked:
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()
            abort_x(seeded, operator)
        with pytest.raises(TransactionAborted):
            committer.outcome()
    result = writer.outcome()
    assert result.rows == 4
    assert no_duplicates(seeded) == [0, 1, 2, 3, 200, 201, 202, 203]
    assert state_of(seeded, "X") == "aborted"
    assert [t.txn_id for t in seeded.transactions()] == ["X"]  # W left no record
    assert claims(seeded) == []
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1, 3], 1, first_id=500))  # both stay writable
    assert ids(seeded) == [0, 1, 2, 3, 200, 201, 202, 203, 500, 501]
    assert claims(seeded) == []
    published_files_exist(seeded)


@pytest.mark.parametrize("operator", ["abort", "recover"])
def test_a_leaf_commit_rebased_onto_an_aborted_transactions_version(seeded, operator) -> None:
    """W (direct, partition 1) reads leaf version P as its base and parks right before its
    Lance commit; X (named, partition 1) commits P+1 (P + X's files) and parks before its
    publish; X is aborted (its files deleted). W's Append at base P is silently rebased by
    Lance onto P+1: the version it lands at holds X's deleted files. W must not publish
    it. Two protections each suffice here: ``commit_leaf`` using a commit only if it
    landed at exactly base + 1, and W's swap against S failing (X's seal and fence changed
    the row), after which W commits again on the published version."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("leaf.before_commit") as w_parked:
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        w_parked.wait_reached()
        with hold("commit.before_publish") as x_parked:
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()
            abort_x(seeded, operator)
        with pytest.raises(TransactionAborted):
            committer.outcome()
    writer.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 200, 201]
    assert claims(seeded) == []
    published_files_exist(seeded)


# -- a direct overwrite racing a direct append and a named commit --------------------------
OVERWRITE = tagged_rows("o", [1], 3, first_id=300)
APPEND = tagged_rows("a", [1], 2, first_id=400)


@pytest.mark.parametrize("point", ["direct.staged", "direct.before_publish"])
def test_a_stale_direct_overwrite_never_replaces_a_direct_append(seeded, point) -> None:
    """The overwrite of partition 1 is staged against read_version P and parks (before its
    leaf commit, or with its Overwrite committed above P); a direct append publishes P'.
    The overwrite must fail (it would silently replace the appended rows) and delete its
    files. Relies on ``check_staged_against`` (read_version still the staged base) on every
    attempt after the swap against S lost."""
    before = data_files(seeded)
    with hold(point) as parked:
        overwriter = Worker(other(seeded).write, OVERWRITE, "overwrite")
        overwriter.start()
        parked.wait_reached()
        other(seeded).write(APPEND)
    with pytest.raises(CommitConflict, match="published after it was staged"):
        overwriter.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 400, 401]
    assert len(data_files(seeded) - before) == 1  # the append's file; the overwrite's are gone
    assert claims(seeded) == []
    published_files_exist(seeded)


@pytest.mark.parametrize("point", ["direct.staged", "direct.before_publish"])
def test_a_direct_append_staged_before_an_overwrite_lands_on_top_of_it(seeded, point) -> None:
    """The append parks (before or after its leaf commit); a direct overwrite of partition 1
    publishes; the append's swap fails and it commits again on the overwritten version.
    Serial order: overwrite, then append; so partition 1 holds exactly the overwrite's and
    the append's rows, the seed rows of partition 1 are gone, nothing is duplicated.
    Relies on the swap failing when the row changed, and ``commit_leaf`` building on the
    row's new read_version (the append's first leaf version is not reused: its content is
    not the new base plus its files)."""
    with hold(point) as parked:
        appender = Worker(other(seeded).write, APPEND)
        appender.start()
        parked.wait_reached()
        other(seeded).write(OVERWRITE, "overwrite")
    appender.outcome()
    assert no_duplicates(seeded) == [2, 3, 300, 301, 302, 400, 401]
    assert claims(seeded) == []
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1], 1, first_id=500))
    assert ids(seeded) == [2, 3, 300, 301, 302, 400, 401, 500]


@pytest.mark.parametrize("overwrite_point", ["direct.staged", "direct.before_publish"])
def test_a_stale_direct_overwrite_never_replaces_a_named_commit(seeded, overwrite_point) -> None:
    """The overwrite parks (staged against P, before the seal of X); X (named append to
    partition 1) seals, commits its leaf (rolling back the overwrite's version, if any) and
    publishes. The overwrite's swap fails, it sees P moved and must fail: X's rows stay.
    Relies on ``check_staged_against`` after the lost swap."""
    seeded.begin("append", "X").stage(APPEND)
    with hold(overwrite_point) as parked:
        overwriter = Worker(other(seeded).write, OVERWRITE, "overwrite")
        overwriter.start()
        parked.wait_reached()
        x = other(seeded).commit("X")
    with pytest.raises(CommitConflict, match="published after it was staged"):
        overwriter.outcome()
    assert x.rows == 2
    assert no_duplicates(seeded) == [0, 1, 2, 3, 400, 401]
    assert claims(seeded) == []
    published_files_exist(seeded)


@pytest.mark.parametrize("start", ["before_seal", "after_seal"])
def test_a_direct_overwrite_against_a_named_commit_holding_its_claim(seeded, start) -> None:
    """X (named append to partition 1) is parked before its publish, claim held. The
    overwrite reads its state before X's seal (and commits an Overwrite on top of X's leaf
    version) or after it (it sees the claim and hands over to the claim protocol, which
    waits). X publishes; the overwrite was staged against the version X replaced, so it
    must fail, whichever path it took, and delete its files. Relies on the claim check,
    ``check_staged_against`` and the claim protocol's base check at the seal."""
    seeded.begin("append", "X").stage(APPEND)
    overwriter_handle = other(seeded)
    with hold("direct.staged") as staged:
        overwriter = Worker(overwriter_handle.write, OVERWRITE, "overwrite")
        if start == "before_seal":
            overwriter.start()
            staged.wait_reached()
        with hold("commit.before_publish") as x_parked:
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()
            if start == "after_seal":
                overwriter.start()
                staged.wait_reached()
            staged.release()
            overwriter.join(1.0)  # its leaf commit, its lost swap, then it waits or fails
    committer.outcome()
    with pytest.raises(CommitConflict, match="published after it was staged"):
        overwriter.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 400, 401]
    assert state_of(seeded, "X") == "published"
    assert claims(seeded) == []
    assert [t.txn_id for t in seeded.transactions()] == ["X"]
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1], 1, first_id=500))
    assert ids(seeded) == [0, 1, 2, 3, 400, 401, 500]


# -- schema and spec changes between the stage and the swap --------------------------------
EVOLVING = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("tag", pa.utf8()),
        pa.field("v", pa.int32()),
    ]
)


def evolving_rows(tag: str, parts: list[int], per_part: int, first_id: int) -> pa.Table:
    base = tagged_rows(tag, parts, per_part, first_id)
    values = pa.array([i * 10 for i in base.column("id").to_pylist()], pa.int32())
    return base.append_column(EVOLVING.field("v"), values)


@pytest.fixture
def evolving(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, schema=EVOLVING, partition_fields=BY_PART)
    ns.write(evolving_rows("seed", [1, 2], 2, first_id=0))
    return ns


def expected_rows(tables: list[pa.Table], names: dict[str, str]) -> dict[int, dict[str, Any]]:
    """Rows by id, their columns renamed by ``names`` (old -> new, None: dropped)."""
    out = {}
    for table in tables:
        for row in table.to_pylist():
            out[row["id"]] = {names.get(k, k): v for k, v in row.items() if names.get(k, k)}
    return out


CHANGES: dict[str, tuple[Callable[[PartitionedNamespace], Any], dict[str, Any]]] = {
    "add_column": (lambda h: h.add_column(pa.field("note", pa.utf8())), {"note": None}),
    "drop_column": (lambda h: h.drop_column("tag"), {"tag": None}),
    "rename_column": (lambda h: h.rename_column("tag", "label"), {"tag": "label"}),
    "promote_column": (lambda h: h.promote_column("v", pa.int64()), {}),
    "evolve_partition_spec": (
        lambda h: h.evolve_partition_spec([PartitionField("tag", "tag")]),
        {},
    ),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_direct_write_swapped_after_a_schema_or_spec_change(evolving, change) -> None:
    """W (direct: existing partition 1 and new partition 3) commits its leaves under schema
    s1 and parks before its swap; another handle changes the schema (or the spec) to s2;
    W's swap then succeeds (a metadata commit changes no partition row). Every row must
    read with the right values in the right columns under s2, and a later append to the
    same partitions must work. Relies on leaf columns carrying their field ids
    (``partitioned-namespace:field_id``) and on reads mapping leaves by id, not name."""
    ns = evolving
    apply, names = CHANGES[change]
    w_rows = evolving_rows("w", [1, 3], 2, first_id=200)
    with hold("direct.before_publish") as parked:
        writer = Worker(other(ns).write, w_rows)
        writer.start()
        parked.wait_reached()
        apply(other(ns))
    result = writer.outcome()
    assert result.rows == 4
    seed = evolving_rows("seed", [1, 2], 2, first_id=0)
    rename = {k: v for k, v in names.items() if v is not None}
    dropped = {k: None for k, v in names.items() if v is None and k in EVOLVING.names}
    expected = expected_rows([seed, w_rows], {**rename, **dropped})
    for row in expected.values():
        row.update({k: None for k in names if k not in EVOLVING.names})  # added columns
    got = by_id(ns.to_table())
    assert got == expected
    assert claims(ns) == []
    published_files_exist(ns)

    # A later append to the same partitions (values by the current spec) works.
    later = {c: [] for c in ns.schema.names}
    for i, part in ((900, 1), (901, 3)):
        row = {"id": i, "part": part, "v": i * 10, "tag": "later", "label": "later", "note": "x"}
        for c in later:
            later[c].append(row.get(c))
    later_table = pa.Table.from_pydict(later, schema=ns.schema)
    ns.write(later_table)
    expected.update({r["id"]: r for r in later_table.to_pylist()})
    got = by_id(ns.to_table())
    assert got == expected
    published_files_exist(ns)


#: (dropped column, added column, the other writer's row): dropping ``v`` (the last column)
#: and adding ``w`` of the same type puts ``w`` at ``v``'s Lance field position, dropping
#: ``tag`` puts ``v`` at ``tag``'s (a utf8 column read as int32).
REWRITES = {
    "mislabelled": ("v", pa.field("w", pa.int32()), {"tag": "O", "w": 3000}),
    "unreadable": ("tag", pa.field("note", pa.utf8()), {"v": 3000, "note": "N"}),
}


@pytest.mark.parametrize("partition", ["existing", "created"])
@pytest.mark.parametrize("outcome", list(REWRITES))
def test_a_retried_direct_append_after_a_rewrite_under_a_new_schema(
    evolving, outcome, partition
) -> None:
    """W (direct append to partition 1, or to new partition 3) commits its leaf under s1 =
    [id, part, tag, v] and parks before its swap. Another handle drops a column, adds one
    (s2) and writes to the same partition: partition 1 lacks the new column, so it is
    rewritten whole (an Overwrite with s2's leaf schema); partition 3 is created by it (an
    Overwrite with s2 on top of W's unpublished version 1). W's swap fails and its retry
    would append its s1 data files onto that s2 version, whose field ids mean other
    columns: it must refuse (a retryable conflict, nothing of W visible), and W written
    again must read with its values and NULL in the column added after it staged.
    Relies on the schema digest stages keep (``leaf_commit.check_append_schema``)."""
    ns = evolving
    dropped, added, other_row = REWRITES[outcome]
    part = 1 if partition == "existing" else 3
    w_rows = evolving_rows("w", [part], 2, first_id=200)
    with hold("direct.before_publish") as parked:
        writer = Worker(other(ns).write, w_rows)
        writer.start()
        parked.wait_reached()
        changer = other(ns)
        changer.drop_column(dropped)
        changer.add_column(added)
        row = {"id": 300, "part": part, **other_row}
        changer.write(pa.Table.from_pylist([row], schema=changer.schema))
    with pytest.raises(CommitConflict, match="another schema") as refused:
        writer.outcome()
    assert refused.value.retryable
    got = by_id(ns.to_table())
    assert 200 not in got
    assert got[300] == row
    published_files_exist(ns)
    ns.write(w_rows.drop_columns([dropped]))  # the retry, with the schema as it is now
    got = by_id(ns.to_table())
    expected = {
        r["id"]: {**{k: v for k, v in r.items() if k != dropped}, added.name: None}
        for r in w_rows.to_pylist()
    }
    assert {i: got[i] for i in (200, 201)} == expected
    assert got[300] == row
    published_files_exist(ns)


def test_a_retried_direct_append_after_a_promoting_overwrite(evolving) -> None:
    """W (direct append to partition 1, v int32 in its files) parks before its swap;
    another handle promotes ``v`` to int64 and overwrites partition 1 (its leaf now holds
    v as int64). W's swap fails; its retry would append the int32 files onto the int64
    version: it must refuse, the partition stay readable, and W written again read with
    its values."""
    ns = evolving
    w_rows = evolving_rows("w", [1], 2, first_id=200)
    with hold("direct.before_publish") as parked:
        writer = Worker(other(ns).write, w_rows)
        writer.start()
        parked.wait_reached()
        changer = other(ns)
        changer.promote_column("v", pa.int64())
        changer.write(
            pa.table(
                {
                    "id": [300],
                    "part": pa.array([1], pa.int32()),
                    "tag": ["o"],
                    "v": pa.array([2**40], pa.int64()),
                }
            ),
            "overwrite",
        )
    with pytest.raises(CommitConflict, match="another schema"):
        writer.outcome()
    published_files_exist(ns)
    assert by_id(ns.to_table(), "v") == {2: 20, 3: 30, 300: 2**40}
    ns.write(w_rows)
    published_files_exist(ns)
    rows = by_id(ns.to_table(), "v")
    assert rows == {2: 20, 3: 30, 200: 2000, 201: 2010, 300: 2**40}


# -- a direct write handed to the claim protocol, then failed or aborted -------------------
def anonymous_txn(ns: PartitionedNamespace) -> str:
    [found] = [t.txn_id for t in ns.transactions() if t.txn_id != "X"]
    return found


@pytest.mark.parametrize("operator", ["abort", "recover"])
def test_a_handed_over_write_aborted_while_it_waits_for_a_claim(seeded, operator) -> None:
    """X (named, partition 1) is parked before its publish, claim held. W (direct,
    partitions 1 and new 3) sees the claim, hands its staged files to the claim protocol
    (an anonymous transaction) and waits at ``commit.claim_blocked``; an operator aborts
    W's transaction (``abort(id)``, or ``recover(0)``, which finds it idle). X then
    publishes and W goes on. W must either fail (retryably), nothing of it visible and its
    files deleted, or publish all its rows: never report success without its rows.
    Partitions 1 and 3 stay writable, no claim stays."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    before = data_files(seeded)
    with hold("commit.before_publish") as x_parked:
        committer = Worker(other(seeded).commit, "X")
        committer.start()
        x_parked.wait_reached()
        with hold("commit.claim_blocked") as blocked:
            writer = Worker(other(seeded).write, W_ROWS)
            writer.start()
            blocked.wait_reached()
            w_txn = anonymous_txn(seeded)
            if operator == "abort":
                other(seeded).abort(w_txn)
            else:  # X's committer is idle too: recovery aborts both
                assert other(seeded).recover(lease_seconds=0) == sorted([w_txn, "X"])
    x_rows = [100, 101]
    if operator == "abort":
        committer.outcome()
    else:
        with pytest.raises(TransactionAborted):
            committer.outcome()
        x_rows = []
    result, error = settle(writer)
    if error is not None:
        assert isinstance(error, CommitConflict), error
        assert error.retryable
        assert no_duplicates(seeded) == [0, 1, 2, 3, *x_rows]
        assert not (data_files(seeded) - before) - referenced_files(seeded)  # W's files are gone
    else:  # acknowledged: every row of it is published
        published = (result.rows, no_duplicates(seeded))
        assert published == (4, sorted([0, 1, 2, 3, *x_rows, 200, 201, 202, 203]))
    assert claims(seeded) == []
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1, 3], 1, first_id=500))
    assert {500, 501} <= set(no_duplicates(seeded))
    published_files_exist(seeded)


@pytest.mark.parametrize("fail_at", ["commit.leaf_committed", "commit.before_publish"])
def test_a_handed_over_write_that_fails_after_its_seal(seeded, monkeypatch, fail_at) -> None:
    """W (direct, partitions 1 and new 3) first commits its leaves and parks before its
    swap; X (named, partition 1) seals, commits and parks before its publish; W's swap
    fails, it sees X's claim and hands over (its direct leaf versions are tagged like the
    claim protocol's incarnation 1); X publishes; W seals and then fails transiently at
    ``fail_at``. W must be aborted whole: nothing visible, no claim, no file of a
    published version deleted, partitions writable. Relies on the claim check handing W
    over (racing X's claim instead fails this test) and on ``writes.commit_staged`` aborting W
    (fence, claims released, then its files and pending rows deleted)."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with hold("direct.before_publish") as w_parked:
        writer = Worker(other(seeded).write, W_ROWS)
        writer.start()
        w_parked.wait_reached()
        with hold("commit.before_publish") as x_parked:
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()
            with hold("commit.claim_blocked") as blocked:
                w_parked.release()
                blocked.wait_reached()  # W waits for X in the claim protocol
                x_parked.release()
                committer.outcome()
                monkeypatch.setenv(ENV, f"{fail_at}=error")
    with pytest.raises(OSError, match="injected"):
        writer.outcome()
    monkeypatch.delenv(ENV)
    assert no_duplicates(seeded) == [0, 1, 2, 3, 100, 101]
    assert sorted(p.values["part"] for p in seeded.partitions()) == [1, 2]
    assert claims(seeded) == []
    assert [t.txn_id for t in seeded.transactions()] == ["X"]
    published_files_exist(seeded)
    seeded.write(W_ROWS)
    assert ids(seeded) == [0, 1, 2, 3, 100, 101, 200, 201, 202, 203]
    published_files_exist(seeded)


# -- failures after the swap ---------------------------------------------------------------
def test_a_transient_failure_after_the_swap_never_deletes_published_files(
    seeded, monkeypatch
) -> None:
    """The swap publishes W (partitions 1 and new 3); right after it, a transient failure
    (``direct.after_publish=error``: what a storage error in the post-publish compaction
    is). Whatever W reports, every published partition must stay readable: no data file
    of a published version may be deleted."""
    with env_failpoint(monkeypatch, "direct.after_publish=error"):
        writer = Worker(seeded.write, W_ROWS)
        writer.start()
        writer.join()
    outcome = writer.error or writer.result
    assert ids_or_error(seeded) in ([0, 1, 2, 3, 200, 201, 202, 203], [0, 1, 2, 3]), outcome
    published_files_exist(seeded)


def ids_or_error(ns: PartitionedNamespace) -> list[int] | str:
    try:
        return ids(ns)
    except (OSError, ValueError, LanceNamespaceError) as exc:  # pa.ArrowInvalid: a ValueError
        return f"unreadable: {exc}"


def test_a_storage_error_in_the_compaction_after_the_swap_keeps_published_files(
    seeded, monkeypatch
) -> None:
    """The manifest holds 15 fragments and a finished anonymous transaction row (from
    ``create_partitions``); W's swap makes the 16th fragment, so W's publish compacts and
    first collects that row: a swap of its own, which fails transiently (the store refused
    the request). W was published: the write succeeds (reported failed, it would be
    retried and written twice), and its files survive."""
    seeded.create_partitions([{"part": 8}])  # leaves a PUBLISHED anonymous transaction row
    for i in range(40):
        if manifest_fragments(seeded) >= 15:
            break
        seeded.write(tagged_rows(f"f{i}", [100 + i], 1, first_id=1000 + i))  # an insert each
    assert manifest_fragments(seeded) == 15
    assert [r.anonymous for r in all_records(seeded.state())] == [True]
    before = ids(seeded)
    with hold("direct.after_publish") as parked:
        writer = Worker(other(seeded).write, W_ROWS)
        writer.start()
        parked.wait_reached()  # published; the compaction check comes next
        monkeypatch.setenv(ENV, "manifest.before_swap=error")
    result, error = settle(writer)
    monkeypatch.delenv(ENV)
    assert error is None, error
    assert result.rows == 4
    assert no_duplicates(seeded) == sorted([*before, 200, 201, 202, 203])
    published_files_exist(seeded)


# -- the fold of unindexed __manifest fragments against a publish -------------------------


FOLD_W = tagged_rows("w", [1], 2, first_id=300)  # an append to partition 1


def test_a_fold_between_a_direct_writes_read_and_its_swap(seeded: PartitionedNamespace) -> None:
    """W (an append to partition 1, whose row lies in an unindexed fragment) parks before
    its swap; X's publish makes the 16th fragment and folds the unindexed fragments,
    partition 1's among them. W's swap, against the version before the fold, must not
    publish over it blindly: it conflicts, retries on the folded table and publishes."""
    written = fill_to_15_fragments(seeded)
    indexed = indexed_fragments(lance.dataset(seeded.uri + "/__manifest"))
    with hold("direct.before_publish") as parked:
        writer = Worker(other(seeded).write, FOLD_W)
        writer.start()
        parked.wait_reached()
        other(seeded).write(FOLD_X)  # publishes, then folds
        folded = lance.dataset(seeded.uri + "/__manifest")
        assert len(folded.get_fragments()) == len(indexed) + 1
    writer.outcome()
    assert no_duplicates(seeded) == sorted([*written, 300, 301, 400])
    assert indexed_fragments(lance.dataset(seeded.uri + "/__manifest")) == indexed
    assert tag_counts(seeded)["w"] == 2
    published_files_exist(seeded)


def test_a_direct_write_between_a_folds_read_and_its_commit(seeded: PartitionedNamespace) -> None:
    """X's publish makes the 16th fragment; its fold parks before committing. W appends to
    partition 1 (its row is in a fragment the fold rewrites) and publishes. The fold then
    commits against the version before W's: Lance must refuse it (a conflict the publish
    ignores: the fold is best effort) or keep W's change; either way no row of W is lost
    and none is read twice."""
    written = fill_to_15_fragments(seeded)
    while_a_fold_is_parked(seeded, lambda: other(seeded).write(FOLD_W))
    assert no_duplicates(seeded) == sorted([*written, 300, 301, 400])
    assert tag_counts(seeded)["w"] == 2
    [one] = [p for p in seeded.partitions() if p.values == {"part": 1}]
    assert sorted(
        lance.dataset(one.location, version=one.read_version).to_table()["id"].to_pylist()
    ) == [0, 1, 300, 301]
    published_files_exist(seeded)


# -- maintain() while a direct write is parked before its swap ---------------------------
def test_maintain_while_a_direct_write_is_parked_before_its_swap(seeded) -> None:
    """W (partitions 1 and new 3) committed its leaves and parks before its swap;
    ``maintain(older_than=0)`` compacts ``__manifest`` and removes every older version,
    W's base S included. W must then publish (or fail retryably with nothing visible) and
    its partitions must be readable. Relies on maintain never touching leaf versions
    above the published one, and the swap conflicting with the compaction."""
    with hold("direct.before_publish") as parked:
        writer = Worker(other(seeded).write, W_ROWS)
        writer.start()
        parked.wait_reached()
        other(seeded).maintain(older_than=dt.timedelta(0))
    _, error = settle(writer)
    assert error is None or is_retryable(error), f"the write failed for good: {error}"
    published = error is None
    assert no_duplicates(seeded) == (
        [0, 1, 2, 3, 200, 201, 202, 203] if published else [0, 1, 2, 3]
    )
    assert claims(seeded) == []
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1, 3], 1, first_id=500))
    published_files_exist(seeded)


def test_maintain_between_a_lost_swap_and_the_retry_keeps_the_writes_files(seeded) -> None:
    """W (direct, partition 1) commits leaf version P+1 (seed + its files) and parks before
    its swap; a direct append to partition 1 rolls P+1 back and publishes P+3 (manifest
    S1). W's swap fails; its retry, reading S1, parks before committing its files again on
    P+3. ``maintain(compact=False, older_than=0)`` keeps only S1 (the latest) and removes
    the leaf versions below P+3: P+1, and with it W's data files. W goes on: its Append of
    those files lands at P+4 and its swap against S1 publishes it."""
    w_rows = tagged_rows("w", [1], 2, first_id=200)
    with ExitStack() as stack:
        parked = stack.enter_context(hold("direct.before_publish"))
        writer = Worker(other(seeded).write, w_rows)
        writer.name = "W"
        writer.start()
        parked.wait_reached()  # W's leaf version P+1 is committed
        other(seeded).write(APPEND)  # rolls P+1 back, publishes P+3
        again = stack.enter_context(
            hold("leaf.before_commit", when=lambda: threading.current_thread().name == "W")
        )
        parked.release()
        again.wait_reached()  # W's retry, about to commit its files again on P+3
        other(seeded).maintain(compact=False, older_than=dt.timedelta(0))
        again.release()
        outcome = settle(writer)
    assert ids_or_error(seeded) in (
        [0, 1, 2, 3, 200, 201, 400, 401],
        [0, 1, 2, 3, 400, 401],
    ), outcome
    published_files_exist(seeded)


# -- two direct writes on overlapping partitions, all-or-nothing at every version ---------
def test_overlapping_direct_writes_forced_order(seeded) -> None:
    """A ({1, 2}) commits both leaves and parks before its swap; B ({2, 3}) publishes; A's
    swap fails (row 2 changed), A reuses its leaf 1 version and commits leaf 2 again on
    B's. At every ``__manifest`` version each write is absent or whole."""
    since = seeded.version
    a_rows = tagged_rows("a", [1, 2], 2, first_id=100)
    b_rows = tagged_rows("b", [2, 3], 2, first_id=200)
    with hold("direct.before_publish") as parked:
        first = Worker(other(seeded).write, a_rows)
        first.start()
        parked.wait_reached()
        other(seeded).write(b_rows)
    first.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 100, 101, 102, 103, 200, 201, 202, 203]
    assert_all_or_nothing(seeded, {"a": 4, "b": 4, "seed": 4}, since)
    assert claims(seeded) == []
    published_files_exist(seeded)


def test_overlapping_direct_writes_free_race_with_a_live_reader(seeded) -> None:
    """Two writers loop direct appends, one on {1, 2}, one on {2, 3}, while a reader reads
    the latest version again and again; afterwards every retained ``__manifest`` version is
    read too. Each write (a distinct tag) is absent or whole everywhere, every
    acknowledged write is there exactly once."""
    since, rounds = seeded.version, 6
    done = threading.Event()
    seen: list[str] = []

    def writer(name: str, parts: list[int], first_id: int) -> list[str]:
        handle, tags = other(seeded), []
        for i in range(rounds):
            tag = f"{name}{i}"
            handle.write(tagged_rows(tag, parts, 2, first_id=first_id + 10 * i))
            tags.append(tag)
        return tags

    def reader() -> int:
        handle, reads = other(seeded), 0
        while not done.is_set():
            for tag, count in tag_counts(handle).items():
                if tag != "seed" and count != 4:
                    seen.append(f"{tag}: {count} rows")
            reads += 1
        return reads

    looking = Worker(reader)
    looking.start()
    a = Worker(writer, "a", [1, 2], 1000)
    b = Worker(writer, "b", [2, 3], 2000)
    a.start()
    b.start()
    acknowledged = a.outcome() + b.outcome()
    done.set()
    assert looking.outcome() > 0
    assert seen == []
    counts = tag_counts(seeded)
    assert {t: counts[t] for t in acknowledged} == dict.fromkeys(acknowledged, 4)
    no_duplicates(seeded)
    assert_all_or_nothing(seeded, dict.fromkeys(acknowledged, 4), since)
    assert claims(seeded) == []
    published_files_exist(seeded)


def test_a_leaf_commit_rebased_onto_another_direct_writes_version(seeded) -> None:
    """W2 (direct, partition 1) reads leaf version P as its base and parks right before
    its Lance commit; W1 (direct, partition 1) commits P+1 (P + W1's files) and parks
    before its swap. W2's Append at base P is rebased by Lance onto P+1 (P + W1 + W2) and
    W2's swap would succeed (W1 changed no manifest row): it must not publish W1's rows,
    which W1 publishes again later (a duplicate). Relies on ``commit_leaf`` using a commit
    only if it landed at exactly base + 1 (else rolling back to P and committing again)."""
    since = seeded.version
    with ExitStack() as stack:
        w2_parked = stack.enter_context(
            hold("leaf.before_commit", when=lambda: threading.current_thread().name == "W2")
        )
        second = Worker(other(seeded).write, tagged_rows("w2", [1], 2, first_id=300))
        second.name = "W2"
        second.start()
        w2_parked.wait_reached()
        w1_parked = stack.enter_context(hold("direct.before_publish"))
        first = Worker(other(seeded).write, tagged_rows("w1", [1], 2, first_id=200))
        first.start()
        w1_parked.wait_reached()  # W1's leaf version P+1 is committed, unpublished
        w2_parked.release()
        second.outcome()  # published
        w1_parked.release()
        first.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 200, 201, 300, 301]
    assert_all_or_nothing(seeded, {"w1": 2, "w2": 2, "seed": 4}, since)
    published_files_exist(seeded)


# -- one leaf commit of a multi-partition direct write fails ------------------------------
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_one_failed_leaf_commit_publishes_nothing_and_deletes_no_published_file(
    seeded, nth
) -> None:
    """W touches partitions 1, 2 and new 3; the ``nth`` leaf commit to start fails
    transiently while the others commit. Nothing of W may be published, no data file a
    published version references may be deleted, and every partition stays readable and
    writable. Relies on the swap never running after a failed leaf commit, and on the next
    write's ``commit_leaf`` rolling W's unpublished versions (whose files W deleted) back
    to the published version instead of building on them."""
    w_rows = tagged_rows("w", [1, 2, 3], 2, first_id=200)
    with failing_at("leaf.before_commit", nth), pytest.raises(OSError, match="injected"):
        other(seeded).write(w_rows)
    assert no_duplicates(seeded) == [0, 1, 2, 3]
    assert sorted(p.values["part"] for p in seeded.partitions()) == [1, 2]
    assert claims(seeded) == []
    assert seeded.transactions() == []
    published_files_exist(seeded)
    seeded.write(w_rows)
    assert ids(seeded) == [0, 1, 2, 3, *range(200, 206)]
    published_files_exist(seeded)


def test_a_leaf_commit_failing_on_the_retry_after_a_lost_swap(seeded) -> None:
    """W ({1, 2, new 3}) commits all three leaves and parks before its swap; a direct
    append to partition 2 publishes; W's swap fails and its retry (reusing its version of
    leaf 1, committing leaf 2 again on the append's version, finding its leaf 3 created)
    fails transiently at the first leaf commit it tries. Nothing of W published, its
    files deleted only now that nothing published references them, partitions
    writable."""
    w_rows = tagged_rows("w", [1, 2, 3], 2, first_id=200)
    with ExitStack() as stack:
        parked = stack.enter_context(hold("direct.before_publish"))
        writer = Worker(other(seeded).write, w_rows)
        writer.start()
        parked.wait_reached()
        other(seeded).write(tagged_rows("a", [2], 1, first_id=400))
        stack.enter_context(failing_at("leaf.before_commit", 1))
        parked.release()
        with pytest.raises(OSError, match="injected"):
            writer.outcome()
    assert no_duplicates(seeded) == [0, 1, 2, 3, 400]
    assert claims(seeded) == []
    published_files_exist(seeded)
    seeded.write(w_rows)
    assert ids(seeded) == [0, 1, 2, 3, *range(200, 206), 400]
    published_files_exist(seeded)


# -- a claim holder's roll back racing a writer without a claim ------------------------------
def test_a_roll_back_never_adopts_an_unclaimed_writers_version(seeded, monkeypatch) -> None:
    """Partition 1 is published as "read the latest" (a foreign writer appended F), and a
    crashed write left an unpublished version above F. X, holding its claim, rolls the leaf
    back and is parked right after the restore; W, a direct write that read the rows
    before X's seal, builds on the newest version no writer of ours made, which is X's
    restore, and commits its own leaf version on top of it (no roll-back: nothing to ask
    the guard). X must not append onto W's version (its published version would hold W's
    rows, and W, publishing after X, would add them again): it looks again, rolls back
    once more and commits on F. Found by the chaos test (then on a partition with a
    read_version: since the leaf guard, W no longer rolls back a claimed partition, and
    only a "read the latest" one gets here); relies on the content check after the restore
    in ``leaf_commit.commit_leaf``."""
    p1 = seeded.partition({"part": 1})
    foreign = pa.table(
        {"id": pa.array([300], pa.int64()), "part": pa.array([1], pa.int32()), "tag": ["foreign"]},
        schema=lance.dataset(p1.location).schema,
    )
    lance.write_dataset(foreign, p1.location, mode="append")
    publish_latest(seeded, p1.object_id)
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("crashed", [1], 2, first_id=50))
    seeded.begin("append", "X").stage(X_ROWS.filter(pc.equal(X_ROWS["part"], 1)))
    with hold("direct.staged") as w_staged:
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        w_staged.wait_reached()  # W has read the rows: unclaimed
        committer = Worker(other(seeded).commit, "X")
        with hold("leaf.rolled_back", when=lambda: threading.current_thread() is committer) as x:
            committer.start()
            x.wait_reached()
            with hold("direct.before_publish") as w_leaf_done:
                w_staged.release()
                w_leaf_done.wait_reached()  # W's leaf version is on top of X's restore
                x.release()
                committer.outcome()
    writer.outcome()
    assert tag_counts(seeded) == Counter({"seed": 4, "foreign": 1, "x": 2, "w": 2})
    no_duplicates(seeded)
    assert claims(seeded) == []
    published_files_exist(seeded)
    all_readable(seeded)


def leaf_restores(location: str) -> list[tuple[int, str | None]]:
    """Each roll-back (Restore commit) of the leaf at ``location``, with the tag of the
    version it rolled back (None: a version no transaction of ours made)."""
    leaf = lance.dataset(location)
    out = []
    for v in (int(r["version"]) for r in leaf.versions()):
        txn = leaf.read_transaction(v)
        if txn is not None and type(txn.operation).__name__ == "Restore":
            out.append((v, committed_by(leaf, v - 1)))
    return out


@pytest.mark.parametrize("other_writer", ["committing", "foreign"])
def test_a_direct_write_never_rolls_back_a_concurrent_publishers_or_a_foreign_version(
    seeded, monkeypatch, other_writer
) -> None:
    """A crashed write left an unpublished version above partition 1's published one P, so
    W (a direct append) stages files and parks before it reads the rows (at S: unclaimed,
    read_version P). Then another writer puts a version above P that is not W's to roll
    back: ``committing``: X seals partition 1, rolls the crashed version back, commits its
    own and parks before its publish; ``foreign``: a foreign tool rolls the crashed version
    back, appends, and publishes "read the latest" (read_version NULL). W's leaf commit must
    not restore P over that version (X is about to publish it; readers already read the
    foreign rows): it loses the attempt and goes again on what is published now. Relies on
    the leaf guard (``may_roll_back``) of the kernel's leaf fan-out."""
    with crashing(monkeypatch, "direct.before_publish"), pytest.raises(FailpointError):
        seeded.write(tagged_rows("crashed", [1], 2, first_id=50))
    p1 = seeded.partition({"part": 1})
    if other_writer == "committing":
        seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with ExitStack() as stack:
        w_staged = stack.enter_context(hold("direct.staged"))
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        w_staged.wait_reached()  # W staged files (a version lies above P) and read S
        if other_writer == "committing":
            x_parked = stack.enter_context(hold("commit.before_publish"))
            committer = Worker(other(seeded).commit, "X")
            committer.start()
            x_parked.wait_reached()  # X's leaf version is above P, X holds the claim
        else:
            lance.dataset(p1.location, version=p1.read_version).restore()
            foreign = pa.table(
                {
                    "id": pa.array([300], pa.int64()),
                    "part": pa.array([1], pa.int32()),
                    "tag": ["foreign"],
                },
                schema=lance.dataset(p1.location).schema,
            )
            lance.write_dataset(foreign, p1.location, mode="append")
            publish_latest(seeded, p1.object_id)
        w_staged.release()
        if other_writer == "committing":
            writer.join(1.0)
            assert writer.is_alive()  # handed over: waiting for X's claim
            x_parked.release()
            committer.outcome()
        writer.outcome()
    rolled_back = leaf_restores(p1.location)
    assert [tag for _, tag in rolled_back if tag is None or tag.startswith("X#")] == []
    expected = {"committing": {"x": 2}, "foreign": {"foreign": 1}}[other_writer]
    assert tag_counts(seeded) == Counter({"seed": 4, "w": 2, **expected})
    no_duplicates(seeded)
    assert claims(seeded) == []
    published_files_exist(seeded)


def publish_latest(ns: PartitionedNamespace, object_id: str) -> None:
    """What a foreign writer does: publish a partition as "read the latest" (NULL)."""
    manifest = lance.dataset(ns.uri + "/__manifest")
    rows = manifest.to_table(filter=f"object_id = '{object_id}'")
    at = rows.schema.get_field_index("read_version")
    rows = rows.set_column(at, "read_version", pa.nulls(1, rows.schema.field(at).type))
    manifest.merge_insert("object_id").when_matched_update_all().execute(rows)


def test_a_swap_reported_failed_and_published_over_is_still_found(seeded, monkeypatch) -> None:
    """W's swap commits, but the store reports an error (``manifest.after_swap=error``),
    and before W reads the manifest back another writer has published partition 1 on top
    of W's version. W must find its own swap in the versions since it read (not only in
    the latest), report success and keep its files: the other writer's version holds
    them too. Relies on ``kernel.published_after_all`` walking every version."""
    writer: Worker | None = None
    with hold("manifest.after_swap", when=lambda: threading.current_thread() is writer) as w:
        writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
        writer.start()
        w.wait_reached()  # committed
        seeded.write(tagged_rows("a", [1], 2, first_id=300))
        monkeypatch.setenv(ENV, "manifest.after_swap=error")
        w.release()
        result = writer.outcome()
    monkeypatch.delenv(ENV)
    assert result.rows == 2
    assert tag_counts(seeded) == Counter({"seed": 4, "w": 2, "a": 2})
    published_files_exist(seeded)
    all_readable(seeded)


@pytest.mark.parametrize("publisher", ["direct", "delete", "commit"])
def test_a_swap_whose_outcome_cannot_be_told_is_outcome_unknown_and_keeps_its_files(
    seeded, monkeypatch, publisher
) -> None:
    """The publishing swap commits, the store reports an error, and ``__manifest`` cannot
    be read back (the store is down). Every publish path says the same (the kernel's
    ``published_after_all``): the outcome is unknown (not retryable: a retry could publish
    the rows twice), and the files the swap may have published are kept. A table
    operation used to raise the retryable storage error itself."""
    before = data_files(seeded)
    broken = threading.Event()
    opened = Manifest.open

    def open_manifest(self: Manifest, version: int | None = None) -> Any:
        if broken.is_set():
            raise StorageError("injected: the store is unreachable")
        return opened(self, version)

    monkeypatch.setattr(Manifest, "open", open_manifest)
    if publisher == "commit":
        seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    call = {
        "direct": lambda: seeded.write(tagged_rows("w", [1], 2, first_id=100)),
        "delete": lambda: seeded.delete("id = 0"),
        "commit": lambda: seeded.commit("X"),
    }[publisher]

    def arm() -> bool:  # the publishing swap fails (a commit's seal swap before it passes)
        monkeypatch.setenv(ENV, "manifest.after_swap=error")
        return False

    def down() -> bool:  # once that swap committed, the store is unreachable
        if ENV in os.environ:
            broken.set()
        return False

    with ExitStack() as stack:
        stack.enter_context(hold("commit.before_publish", when=arm))
        stack.enter_context(hold("manifest.after_swap", when=down, times=None))
        if publisher != "commit":
            arm()
        with pytest.raises(OutcomeUnknown, match="cannot be told") as info:
            call()
    monkeypatch.delenv(ENV)
    assert not is_retryable(info.value)
    broken.clear()
    expected = {"direct": [0, 1, 2, 3, 100, 101], "delete": [1, 2, 3]}
    assert no_duplicates(seeded) == expected.get(publisher, [0, 1, 2, 3, 100, 101])
    assert set(before) <= set(data_files(seeded))
    published_files_exist(seeded)


def test_a_zombie_committer_never_rolls_back_the_next_claim_holders_version(seeded) -> None:
    """Committer A seals X (claiming partition 1) and parks before its leaf commits; B
    takes X over and publishes it; Y then claims partition 1, commits its leaf version and
    parks before its publish. A, resumed, finds a version above the one it sealed on: it
    must not restore over Y's version (Y holds the claim and is about to publish it). It
    returns X's published result instead. Relies on the claim protocol's leaf guard
    (``kernel.HeldClaim``)."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    with ExitStack() as stack:
        a_sealed = stack.enter_context(hold("commit.after_claim"))
        zombie = Worker(other(seeded).commit, "X")
        zombie.start()
        a_sealed.wait_reached()
        other(seeded).commit("X")  # B: takes over, publishes
        seeded.begin("append", "Y").stage(tagged_rows("y", [1], 2, first_id=200))
        y_parked = stack.enter_context(hold("commit.before_publish"))
        committer = Worker(other(seeded).commit, "Y")
        committer.start()
        y_parked.wait_reached()  # Y's leaf version lies above X's published one
        a_sealed.release()
        assert zombie.outcome().rows == 2
        y_parked.release()
        committer.outcome()
    p1 = seeded.partition({"part": 1})
    assert [tag for _, tag in leaf_restores(p1.location) if tag == "Y#1"] == []
    assert tag_counts(seeded) == Counter({"seed": 4, "x": 2, "y": 2})
    no_duplicates(seeded)
    assert claims(seeded) == []
    published_files_exist(seeded)


def test_a_committer_taken_over_before_its_publish_waits_for_the_new_committer(seeded) -> None:
    """Committer A commits X's leaf and parks before its publish; B takes X over (its token
    owns the row now), commits the leaf and parks before its own publish. A, resumed,
    reads a row another committer owns: it must send no publish of its own (it could only
    fail, or, were the token not checked, publish over B) and wait for B's outcome, which
    it returns. Relies on ``ClaimPublish.swap`` checking the owner before the swap (and,
    behind it, the owner check of ``Manifest.commit``)."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    before = seeded.partition({"part": 1}).read_version
    arrived: list[str] = []

    def b_only(b: list[threading.Thread]) -> Callable[[], bool]:
        def when() -> bool:
            arrived.append(threading.current_thread().name)
            return threading.current_thread() is b[0]

        return when

    a = Worker(other(seeded).commit, "X")
    b_thread: list[threading.Thread] = []
    with ExitStack() as stack:
        a_done = stack.enter_context(
            hold("commit.leaf_committed", when=lambda: threading.current_thread() is a)
        )
        a.start()
        a_done.wait_reached()  # A's leaf version is committed; its publish comes next
        b_parked = stack.enter_context(
            hold("commit.before_publish", times=None, when=b_only(b_thread))
        )
        b = Worker(other(seeded).commit, "X")
        b_thread.append(b)
        b.start()
        b_parked.wait_reached()  # B owns X's row and is about to publish
        a_done.release()
        a.join(timeout=2)  # A reads the row B owns: it waits, publishing nothing
        assert a.is_alive(), "A returned while B, which owns X, had not published"
        assert a.name not in arrived, "A sent a publish for a row B owns"
        assert seeded.partition({"part": 1}).read_version == before
        b_parked.release()
        b_result = b.outcome()
    assert a.outcome() == b_result
    assert a.name not in arrived
    assert tag_counts(seeded) == Counter({"seed": 4, "x": 2})
    no_duplicates(seeded)
    assert claims(seeded) == []
    published_files_exist(seeded)


def test_a_leaf_commit_rebased_onto_an_unpublished_version_is_made_again(seeded) -> None:
    """X has sealed partition 1 and is about to commit its leaf on the published version
    P; W, a direct write, commits version P+1 while staging (then finds X's claim and
    waits for it). X's Append, made against P, is rebased by Lance onto P+1 (P + W + X):
    X must not publish it (W's rows would be visible before W published, and twice once W
    appends them again): it rolls P+1 back and commits on P. Relies on ``commit_leaf``
    using a commit only if it became exactly base + 1 (G1)."""
    seeded.begin("append", "X").stage(tagged_rows("x", [1], 2, first_id=100))
    committer = Worker(other(seeded).commit, "X")
    writer = Worker(other(seeded).write, tagged_rows("w", [1], 2, first_id=200))
    with hold("leaf.before_commit", when=lambda: threading.current_thread() is committer) as x:
        committer.start()
        x.wait_reached()  # sealed: X holds partition 1's claim
        with hold("direct.staged") as w_staged:
            writer.start()
            w_staged.wait_reached()  # W's leaf version P+1 is committed, unpublished
        x.release()
        committer.outcome()
    writer.outcome()
    assert tag_counts(seeded) == Counter({"seed": 4, "x": 2, "w": 2})
    no_duplicates(seeded)
    assert claims(seeded) == []
    published_files_exist(seeded)
