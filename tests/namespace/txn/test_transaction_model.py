"""A stateful model of the transaction lifecycle, checked against a real namespace on disk.

Hypothesis drives begin / stage / commit / crash-at-a-failpoint / retry / abort / recover /
two concurrent committers / add_column over a namespace partitioned by ``part``, with
transaction ids from a small pool (so ids are begun again after aborts), and writes without
a ``txn_id`` (direct writes: one ``__manifest`` swap, or handed to the claim protocol when a
partition is claimed), alone, crashing at a failpoint, or beside a named commit. The model
predicts the outcome of every call (which error, which state, which rows become visible) and
the invariants compare it with what the namespace shows after every step: every acknowledged
row visible exactly once and nothing else, no tag half visible, every published partition
readable and its data files present, claims held only by committing transactions, the
arbiter rows' states, and no record left by a direct write (unless it was handed over and
failed: then the model adopts it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import note as hypothesis_note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from airflow_provider_lance.namespace import (
    CommitConflict,
    CommitResult,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    PartitionField,
    StorageError,
    TransactionAborted,
    TransactionClosed,
)
from airflow_provider_lance.namespace.testing import ENV, FailpointError, Hold, hold
from airflow_provider_lance.namespace.write.leaf_commit import schema_digest
from tests.support import TAGGED, examples, tagged_rows

#: The pool of transaction ids. Aborted ids are begun again (a new incarnation); a published
#: id is final, so a ``begin`` may move its slot on to a new id (``t0.2``, ...).
IDS = ("t0", "t1", "t2")
PARTS = (0, 1, 2, 3)
MODES = ("append", "overwrite")
#: Commits blocked by a partition another (crashed) transaction keeps claimed fail fast.
CLAIM_TIMEOUT = 0.2
CLAIM = "__txn_id"
#: Examples (25 under scripts/test.sh, a quarter in the everyday tier) and steps per
#: example: ~10 s on 2 cores at 25. Explore deeper with, e.g.,
#: PNS_MODEL_EXAMPLES=500 PNS_MODEL_STEPS=25 (about 6 minutes).
MAX_EXAMPLES = int(os.environ.get("PNS_MODEL_EXAMPLES", examples(25)))
STEPS = int(os.environ.get("PNS_MODEL_STEPS", "12"))

COMMIT_POINTS = (
    "commit.before_seal",
    "commit.after_claim",
    "commit.leaf_committed",
    "commit.before_publish",
    "commit.after_publish",
)
STAGE_POINTS = ("stage.written", "stage.recorded")
ABORT_POINTS = ("abort.before_fence", "abort.after_fence")
#: The commit failpoints a commit must reach, by what the model expects it to do (any
#: commit of a known id may also die at ``commit.before_seal``, changing nothing).
REACHED = {
    "seal": COMMIT_POINTS,
    "finish": ("commit.leaf_committed", "commit.before_publish", "commit.after_publish"),
    # nothing staged: published at once (STAGED -> PUBLISHED) through the publish kernel
    "empty": ("commit.before_seal", "commit.before_publish", "commit.after_publish"),
    "conflict": ("commit.before_seal",),
}
#: The state a commit crashed at a point leaves behind.
CRASHED_STATE = {
    "commit.before_seal": "staged",
    "commit.after_claim": "committing",
    "commit.leaf_committed": "committing",
    "commit.before_publish": "committing",
    "commit.after_publish": "published",
}
PARTS_OF_WRITE = st.lists(st.sampled_from(PARTS), min_size=1, max_size=3, unique=True)
PARTS_OF_STAGE = st.lists(st.sampled_from(PARTS), min_size=1, max_size=2, unique=True)
#: The failpoints a write without ``txn_id`` passes: its own, and those it shares with the
#: claim protocol (the leaf commits and ``__manifest`` swaps).
DIRECT_POINTS = (
    "direct.staged",
    "leaf.before_commit",
    "direct.before_publish",
    "manifest.before_swap",
    "manifest.after_swap",
    "direct.after_publish",
)
#: How a direct write meets a named commit of overlapping partitions (``direct_beside_commit``),
#: interleaved by parking threads at failpoints (a free race would make the model's next
#: steps depend on timing, which hypothesis cannot replay): ``claims_held``: the commit parked
#: before its publish, its claims held, until the write (handed to the claim protocol) waits
#: for them, then both run; ``direct_parked``: the write parked just before its swap, its
#: leaves committed, while the commit runs to the end; ``named_parked``: the commit parked
#: before its seal (its state read) while the write runs to the end.
SCHEDULES = ("claims_held", "direct_parked", "named_parked")
#: The failpoints a direct write handed to the claim protocol passes there: those it shares
#: with the claim protocol and the commit's own.
HANDOVER_POINTS = (
    "leaf.before_commit",
    "manifest.before_swap",
    "manifest.after_swap",
    *COMMIT_POINTS,
)
#: Of those, the ones a direct write reaches past ``direct.staged``, by how it publishes
#: (see TransactionModel.direct_path): ``blocked`` waits for a claim before its first swap.
HANDED_OVER_REACHES = {
    "direct": (),
    "blocked": ("commit.before_seal",),
    "handover": HANDOVER_POINTS,
}
#: A direct write handed to the claim protocol waits this long for a live committer beside
#: it (one that crashed fails it after CLAIM_TIMEOUT).
LIVE_CLAIM_TIMEOUT = 60.0


def note(message: str) -> None:
    """Record a step's outcome for hypothesis' report (a no-op outside a hypothesis run)."""
    with suppress(InvalidArgument):
        hypothesis_note(message)


@contextmanager
def failing(point: str | None, kind: str) -> Iterator[None]:
    """``LANCE_PNS_FAILPOINTS=<point>=<kind>`` for the duration of one call."""
    if point is None:
        yield
        return
    os.environ[ENV] = f"{point}={kind}"
    try:
        yield
    finally:
        os.environ.pop(ENV, None)


def crash_type(kind: str) -> type[BaseException]:
    return FailpointError if kind == "raise" else OSError


def direct_crash_types(kind: str) -> tuple[type[BaseException], ...]:
    """What a write without ``txn_id`` raises when a failpoint fires (``=error`` inside a
    storage call comes out as a StorageError)."""
    return (FailpointError,) if kind == "raise" else (OSError, StorageError)


def direct_outcome(point: str | None, kind: str) -> tuple[bool, bool]:
    """(published, raises) of a write published in one swap that reaches ``point``.

    Before the swap nothing is published. ``manifest.after_swap`` runs after the swap
    committed: ``=raise`` is a crash there (published, the caller never hears back);
    ``=error`` makes the swap's outcome unknown, and the write reads the manifest again,
    finds its versions published and returns success. ``direct.after_publish`` is after
    the swap: a crash there leaves it published, and an error there is logged (the write
    returns its result: reported failed, it would be written again).
    """
    if point is None:
        return True, False
    if point in ("manifest.after_swap", "direct.after_publish"):
        return True, kind == "raise"
    return False, True


def wait_reached(point: Hold, thread: threading.Thread) -> None:
    """Wait until ``thread`` is parked at ``point``; an error if it ends without getting
    there (the model expected it to)."""
    while True:
        with suppress(FailpointError):
            point.wait_reached(timeout=0.05)
            return
        if not thread.is_alive():
            raise AssertionError(f"{thread.name} ended without reaching {point.name}")


def rows_by_part(data: pa.Table) -> dict[int, list[int]]:
    rows: dict[int, list[int]] = {}
    for i, p in zip(data.column("id").to_pylist(), data["part"].to_pylist(), strict=True):
        rows.setdefault(p, []).append(i)
    return rows


@dataclass
class StageModel:
    stage_id: str
    tag: str
    #: part -> the ids of this stage's rows in it
    rows: dict[int, list[int]]
    #: part -> (rewrite, the model's version of the partition when staged (None: absent),
    #: the schema digest of the stage's files for it)
    seen: dict[int, tuple[bool, int | None, str]]
    #: the namespace schema it was staged under (add_column calls before it)
    columns: int = 0

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.rows.values())


@dataclass
class TxnModel:
    txn_id: str
    mode: str
    incarnation: int = 1
    #: a direct write handed to the claim protocol that failed, adopted by the model
    anonymous: bool = False
    #: (anonymous ones) whether it had a __manifest row when adopted: aborting one that
    #: had none writes its row as a named transaction's, which is never collected (the
    #: known leak: test_an_aborted_direct_write_that_never_sealed_is_collected)
    sealed: bool = True
    state: str = "staged"  # staged | committing | published | aborted
    stages: list[StageModel] = field(default_factory=list)
    #: ``to_dict()`` of the first result returned for this incarnation
    result: dict | None = None
    #: part -> (created by this publish, its read_version right after it)
    published: dict[int, tuple[bool, int]] = field(default_factory=dict)

    @property
    def tag(self) -> str:
        return f"{self.txn_id}#{self.incarnation}"

    def parts(self) -> set[int]:
        return {p for s in self.stages for p in s.rows}

    def rows_per_part(self) -> dict[int, int]:
        out: Counter[int] = Counter()
        for s in self.stages:
            for p, ids in s.rows.items():
                out[p] += len(ids)
        return dict(out)


class TransactionModel(RuleBasedStateMachine):
    """A fresh namespace per example and the model of what it must show.

    Each rule makes one real call (begin, stage, commit, a call dying at a failpoint, a
    retried commit, abort, recover(0), two concurrent committers, add_column), asserts the
    outcome the model predicts for it and updates the model.
    """

    def __init__(self) -> None:
        super().__init__()
        os.environ.pop(ENV, None)
        self.tmp = tempfile.mkdtemp(prefix="pns-model-")
        self.ns = PartitionedNamespace.create(
            os.path.join(self.tmp, "ns"),
            schema=TAGGED,
            partition_fields=[PartitionField("part", "part")],
        )
        self.txns: dict[str, TxnModel] = {}
        #: part -> {id: tag}: exactly the rows that must be visible
        self.visible: dict[int, dict[int, str]] = {}
        #: part -> number of publishes that touched it (absent: the partition does not exist)
        self.version: dict[int, int] = {}
        #: part -> the schema digest of its published leaf version
        self.digest: dict[int, str] = {}
        #: tags an overwrite removed from some partitions (may stay partly visible elsewhere)
        self.clipped: set[str] = set()
        #: slot of the pool -> the id it names now
        self.slot = {i: i for i in IDS}
        self.next_id = 0
        self.stage_no = 0
        self.direct_no = 0
        self.columns = 0

    def teardown(self) -> None:
        os.environ.pop(ENV, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model's predictions ---------------------------------------------------------
    def conflicts(self, t: TxnModel) -> list[str]:
        """Why committing the staged ``t`` must raise CommitConflict (empty: it must not)."""
        seen: dict[int, set[tuple[bool, int | None, str]]] = {}
        for s in t.stages:
            for p, key in s.seen.items():
                seen.setdefault(p, set()).add(key)
        why = []
        if len({s.columns for s in t.stages}) > 1:
            why.append("its stages were written under different namespace schemas")
        for p, keys in sorted(seen.items()):
            if len(keys) > 1:
                why.append(f"its stages saw partition {p} differently: {sorted(map(repr, keys))}")
                continue
            [(rewrite, version, digest)] = keys
            moved = self.version.get(p) != version
            if (t.mode == "overwrite" or rewrite) and moved:
                why.append(f"partition {p} moved from {version} to {self.version.get(p)}")
            elif moved and p in self.version and self.digest[p] != digest:
                # appended files only go onto a leaf whose schema they were written with
                why.append(f"partition {p} was published anew under another schema")
        for other in self.txns.values():
            if other is not t and other.state == "committing" and other.parts() & seen.keys():
                why.append(f"{other.tag} holds partitions {sorted(other.parts() & seen.keys())}")
        return why

    def commit_outcome(self, txn_id: str) -> str:
        t = self.txns.get(txn_id)
        if t is None:
            return "invalid"
        if t.state in ("aborted", "published"):
            return t.state
        if t.state == "committing":
            return "finish"
        if not t.stages:
            return "empty"
        return "conflict" if self.conflicts(t) else "seal"

    def committable(self) -> list[str]:
        """Ids a commit would seal or finish (adopted anonymous transactions aside)."""
        return sorted(
            i
            for i, t in self.txns.items()
            if not t.anonymous and self.commit_outcome(i) in ("seal", "finish")
        )

    def publish(self, t: TxnModel, at: int | None = None) -> None:
        """The model's side of a publish: the transaction's rows are acknowledged (``at``:
        the manifest version it made, when others may have published since)."""
        merged: dict[int, dict[int, str]] = {}
        for s in t.stages:
            for p, ids in s.rows.items():
                merged.setdefault(p, {}).update(dict.fromkeys(ids, s.tag))
        t.published = {
            p: (created, read_version)
            for p, (created, read_version) in self.apply(merged, t.mode, at).items()
        }
        t.state = "published"

    def apply(
        self, merged: dict[int, dict[int, str]], mode: str, at: int | None = None
    ) -> dict[int, tuple[bool, int]]:
        """Rows ({part: {id: tag}}) published by an append or overwrite; returns, by part,
        (created by this publish, its read_version at manifest version ``at``)."""
        created = {p: p not in self.version for p in merged}
        for p, rows in merged.items():
            if mode == "overwrite":
                self.clipped |= set(self.visible.get(p, {}).values())
                self.visible[p] = dict(rows)
            else:
                self.visible.setdefault(p, {}).update(rows)
            self.version[p] = self.version.get(p, 0) + 1
        leaves = {p.values["part"]: p for p in self.ns.state(at).partitions()}
        for p in merged:
            leaf = lance.dataset(leaves[p].location, version=leaves[p].read_version)
            self.digest[p] = schema_digest(leaf.lance_schema)
        return {p: (created[p], leaves[p].read_version) for p in merged}

    def check_result(self, t: TxnModel, result: CommitResult) -> None:
        got = result.to_dict()
        assert got["txn_id"] == t.txn_id, got
        assert got["mode"] == t.mode, got
        per_part = {int(p["values"]["part"]): p["rows"] for p in got["partitions"]}
        assert per_part == t.rows_per_part(), (per_part, t.rows_per_part())
        published = {
            int(p["values"]["part"]): (p["created"], p["read_version"]) for p in got["partitions"]
        }
        assert published == t.published, (published, t.published)
        if t.result is None:
            t.result = got
        else:
            assert got == t.result, f"a repeated commit of {t.tag} returned another result"

    # -- operations ------------------------------------------------------------------------
    def do_commit(self, txn_id: str, point: str | None = None, kind: str = "raise") -> None:
        expected = self.commit_outcome(txn_id)
        t = self.txns.get(txn_id)
        if expected == "conflict":
            assert t is not None
            note(f"commit {txn_id} must conflict: {self.conflicts(t)}")
        result: CommitResult | None = None
        error: BaseException | None = None
        try:
            with failing(point, kind):
                result = self.ns.commit(txn_id, claim_timeout=CLAIM_TIMEOUT)
        except (FailpointError, OSError, CommitConflict, TransactionAborted) as exc:
            error = exc
        except InvalidArgumentError as exc:  # (a separate clause: it is also a ValueError)
            error = exc
        note(f"commit({txn_id}) at {point}={kind}, expected {expected}: {error or 'ok'}")
        # An error after the publish is logged: the commit returns its result.
        after_publish_error = point == "commit.after_publish" and kind == "error"
        if expected == "invalid":
            assert type(error) is InvalidArgumentError, repr(error)
            return
        assert t is not None
        if point == "commit.before_seal" and isinstance(error, crash_type(kind)):
            # Reached before anything is written; a commit may pass it before it reads the
            # row (of any state), so dying there must simply change nothing.
            return
        if expected == "aborted":
            assert isinstance(error, TransactionAborted), repr(error)
            return
        if point is not None and point in REACHED.get(expected, ()) and not after_publish_error:
            assert isinstance(error, crash_type(kind)), repr(error)
            state = CRASHED_STATE[point]
            if expected == "empty" and state == "committing":  # an empty publish seals nothing
                state = "staged"
            if state == "published":
                self.publish(t)  # the publish happened: only the result was not returned
            else:
                t.state = state
            return
        if expected == "conflict":
            assert isinstance(error, CommitConflict), repr(error)
            return
        assert error is None, repr(error)
        assert result is not None
        if expected in ("seal", "finish", "empty"):
            self.publish(t)
        self.check_result(t, result)

    def do_stage(
        self,
        txn_id: str,
        parts: list[int],
        per_part: int,
        point: str | None = None,
        kind: str = "raise",
    ) -> None:
        t = self.txns.get(txn_id)
        self.stage_no += 1
        stage_id = f"s{self.stage_no}"
        count = len(parts) * per_part
        tag = f"{txn_id}.{t.incarnation if t else 0}.{stage_id}-n{count}"
        data = tagged_rows(tag, parts, per_part, first_id=self.next_id)
        self.next_id += count
        rows: dict[int, list[int]] = {}
        for i, p in zip(data.column("id").to_pylist(), data["part"].to_pylist(), strict=True):
            rows.setdefault(p, []).append(i)
        before = {p: self.version.get(p) for p in parts}
        stage = None
        error: BaseException | None = None
        try:
            with failing(point, kind):
                stage = self.ns.transaction(txn_id).stage(data, stage_id=stage_id)
        except (FailpointError, OSError, InvalidArgumentError, TransactionAborted) as exc:
            error = exc
        note(f"stage({txn_id}, {stage_id}, {rows}) at {point}={kind}: {error or 'ok'}")
        if t is None:
            assert type(error) is InvalidArgumentError, repr(error)
            return
        if t.state == "aborted":
            assert isinstance(error, TransactionAborted), repr(error)
            return
        if t.state in ("committing", "published"):
            assert isinstance(error, TransactionClosed), repr(error)
            return
        if point is not None:
            assert isinstance(error, crash_type(kind)), repr(error)
            recorded = self.ns.transaction(txn_id).stages()
            if point == "stage.written":  # its files are orphans: never part of anything
                assert stage_id not in recorded
                return
            stage = recorded[stage_id]  # recorded before the crash: the next seal takes it
        assert error is None or point is not None, repr(error)
        assert stage is not None
        by_part = {int(sp.values["part"]): sp for sp in stage.partitions.values()}
        assert sorted(by_part) == sorted(parts)
        seen = {}
        for p, sp in by_part.items():
            assert sp.existed == (before[p] is not None), (p, sp)
            assert sp.rows == per_part
            if t.mode == "overwrite" or before[p] is None or self.columns == 0:
                assert not sp.rewrite, (p, sp)
            seen[p] = (sp.rewrite, before[p], sp.schema)
            if sp.rewrite:
                note(f"stage {stage_id} rewrites partition {p}")
        t.stages.append(StageModel(stage_id, tag, rows, seen, self.columns))

    def do_abort(self, txn_id: str, point: str | None = None, kind: str = "raise") -> None:
        t = self.txns.get(txn_id)
        error: BaseException | None = None
        try:
            with failing(point, kind):
                self.ns.abort(txn_id)
        except (FailpointError, OSError, InvalidArgumentError) as exc:
            error = exc
        note(f"abort({txn_id}) at {point}={kind}: {error or 'ok'}")
        if t is None or t.state == "published":
            assert type(error) is InvalidArgumentError, repr(error)
            return
        if point == "abort.before_fence" and t.state != "aborted":
            assert isinstance(error, crash_type(kind)), repr(error)
            return  # nothing changed
        if point == "abort.after_fence":
            assert isinstance(error, crash_type(kind)), repr(error)
        else:
            assert error is None, repr(error)
        t.state = "aborted"
        t.stages = []

    # -- direct writes (no txn_id) -----------------------------------------------------------
    def listed(self) -> set[str]:
        return {i.txn_id for i in self.ns.transactions()}

    def held(self, but: TxnModel | None = None) -> set[int]:
        """Partitions claimed by the model's committing transactions (but ``but``)."""
        return {
            p
            for t in self.txns.values()
            if t is not but and t.state == "committing"
            for p in t.parts()
        }

    def claimed(self) -> set[int]:
        """Partitions whose __manifest row carries a claim (live or dead)."""
        manifest = lance.dataset(self.ns.uri + "/__manifest").to_table(columns=["part", CLAIM])
        return set(manifest.filter(pc.is_valid(manifest[CLAIM]))["part"].to_pylist())

    def direct_path(self, parts: list[int]) -> str:
        """How a direct write of ``parts`` publishes: ``blocked`` (a committing transaction
        holds one of them: handed to the claim protocol, which waits for it), ``handover``
        (a dead claim was left on one, by an aborted transaction creating it: the claim
        protocol takes it over), else ``direct`` (one swap)."""
        if self.held() & set(parts):
            return "blocked"
        return "handover" if self.claimed() & set(parts) else "direct"

    def leaf(self, p: int, at: int | None = None) -> lance.LanceDataset | None:
        """Partition p's leaf at its read_version (as of manifest version ``at``)."""
        for part in self.ns.state(at).partitions():
            if part.values["part"] == p:
                return lance.dataset(part.location, version=part.read_version)
        return None

    def staged_with(self, p: int, mode: str) -> tuple[bool, str]:
        """(replaces the partition, the schema digest of the files) of rows staged now for p:
        an append to a leaf older than add_column rewrites it (see Stager._open_leaf)."""
        state = self.ns.state()
        leaf = self.leaf(p)
        if mode == "append" and leaf is not None and not state.schema.missing_in_leaf(leaf.schema):
            return False, schema_digest(leaf.lance_schema)
        return mode == "overwrite" or leaf is not None, schema_digest(state.schema.leaf_schema())

    def appends_onto_another_schema(self, staged: dict[int, tuple[bool, str]], at: int) -> bool:
        """Whether appended files (``staged``: part -> (replaces, digest)) meet a leaf
        published under another schema at manifest version ``at`` (a CommitConflict)."""
        for p, (replaces, digest) in staged.items():
            leaf = self.leaf(p, at)
            if not replaces and leaf is not None and schema_digest(leaf.lance_schema) != digest:
                return True
        return False

    def direct_rows(
        self, parts: list[int], per_part: int, mode: str
    ) -> tuple[str, pa.Table, dict[int, list[int]]]:
        self.direct_no += 1
        count = len(parts) * per_part
        tag = f"d{self.direct_no}.{mode}-n{count}"
        data = tagged_rows(tag, parts, per_part, first_id=self.next_id)
        self.next_id += count
        return tag, data, rows_by_part(data)

    def visible_count(self, tag: str) -> int:
        table = self.ns.to_table(columns=["tag"])
        return int(pc.sum(pc.equal(table["tag"], tag)).as_py() or 0)

    def direct_published(
        self, result: CommitResult | None, mode: str, tag: str, rows: dict[int, list[int]]
    ) -> None:
        """The model's side of a direct write that was published; its result (if it
        returned one) must report what it did, and its id must be nobody's record."""
        at = None if result is None else result.manifest_version
        merged = {p: dict.fromkeys(ids, tag) for p, ids in rows.items()}
        published = self.apply(merged, mode, at)
        if result is None:
            return
        got = result.to_dict()
        assert got["mode"] == mode, got
        assert got["txn_id"] not in self.txns, got
        per_part = {int(p["values"]["part"]): p["rows"] for p in got["partitions"]}
        assert per_part == {p: len(ids) for p, ids in rows.items()}, (per_part, rows)
        reported = {
            int(p["values"]["part"]): (p["created"], p["read_version"]) for p in got["partitions"]
        }
        assert reported == published, (reported, published)

    def adopt(
        self,
        txn_id: str,
        mode: str,
        tag: str,
        rows: dict[int, list[int]],
        before: dict[int, int | None],
    ) -> str:
        """A direct write handed to the claim protocol failed and left its (anonymous)
        transaction behind: the model takes it over in the state it was left in."""
        [info] = [i for i in self.ns.transactions() if i.txn_id == txn_id]
        t = self.txns[txn_id] = TxnModel(
            txn_id, mode, info.incarnation, anonymous=True, sealed=info.state != "staged"
        )
        assert info.mode == mode, info
        if info.state == "aborted":
            t.state = "aborted"
            return t.state
        stages = self.ns.transaction(txn_id).stages()
        assert sorted(stages) == ["write"], stages
        seen = {
            int(sp.values["part"]): (sp.rewrite, before[int(sp.values["part"])], sp.schema)
            for sp in stages["write"].partitions.values()
        }
        assert sorted(seen) == sorted(rows), (seen, rows)
        t.stages = [StageModel("write", tag, rows, seen, self.columns)]
        if info.state == "published":
            self.publish(t)
        else:
            t.state = info.state
        return t.state

    def do_direct(
        self,
        parts: list[int],
        per_part: int,
        mode: str,
        point: str | None = None,
        kind: str = "raise",
    ) -> None:
        """``ns.write(data, mode)`` without ``txn_id``, dying at ``point`` if given."""
        tag, data, rows = self.direct_rows(parts, per_part, mode)
        path = self.direct_path(parts)
        before = {p: self.version.get(p) for p in parts}
        listed = self.listed()
        result: CommitResult | None = None
        error: BaseException | None = None
        try:
            with failing(point, kind):
                result = self.ns.write(data, mode, claim_timeout=CLAIM_TIMEOUT)
        except (Exception, FailpointError) as exc:
            error = exc
        left = sorted(self.listed() - listed)
        note(f"write({mode}, {rows}) [{path}] at {point}={kind}: {error or 'ok'}; left {left}")
        if point == "direct.staged" or (path == "direct" and point in DIRECT_POINTS):
            published, raises = direct_outcome(point, kind)
            if raises:
                assert isinstance(error, direct_crash_types(kind)), repr(error)
            else:
                assert error is None, repr(error)
            assert not left, f"a direct write left transaction records: {left}"
            if published:
                self.direct_published(result, mode, tag, rows)
            return
        if point not in HANDED_OVER_REACHES[path]:
            assert not left, f"a direct write left transaction records: {left}"
            if path == "blocked":  # the crashed committer's claim outlives the claim timeout
                assert isinstance(error, CommitConflict), repr(error)
                return
            # published in one swap, or handed over and taking a dead claim over
            assert error is None, repr(error)
            self.direct_published(result, mode, tag, rows)
            return
        self.handed_over_at_point(result, error, kind, mode, tag, rows, before, left)

    def handed_over_at_point(
        self,
        result: CommitResult | None,
        error: BaseException | None,
        kind: str,
        mode: str,
        tag: str,
        rows: dict[int, list[int]],
        before: dict[int, int | None],
        left: list[str],
    ) -> None:
        """A direct write handed to the claim protocol, which died at a point it shares
        (a leaf commit, a __manifest swap: the seal's, the publish's or the abort's after
        a failure): either outcome is possible, but all of the write or nothing of it, and
        a record left behind (in any state) says which; the model adopts it."""
        if error is None:
            assert not left, f"a direct write left transaction records: {left}"
            self.direct_published(result, mode, tag, rows)
            return
        assert isinstance(error, (*direct_crash_types(kind), LanceNamespaceError)), repr(error)
        visible = self.visible_count(tag)
        count = sum(len(ids) for ids in rows.values())
        assert visible in (0, count), f"{tag} half visible: {visible} rows"
        assert len(left) <= 1, left
        if isinstance(error, FailpointError):  # a crash cleans nothing up
            assert left, "a handed-over write that crashed left no record"
        if not left:
            assert visible == 0, "a failed write is published but left no record"
            return
        state = self.adopt(left[0], mode, tag, rows, before)
        note(f"adopted {left[0]}: {state}")
        assert (state == "published") == (visible > 0), (state, visible)

    # -- rules -------------------------------------------------------------------------------
    def pick(self, data: st.DataObject, *states: str, anonymous: bool = False) -> str:
        """An id in one of ``states`` (mostly), or any id of the pool (sometimes).

        Adopted anonymous transactions only with ``anonymous`` (abort): nobody but the
        writer that crashed may stage into or commit one (no plan is recorded for others
        to take its commit over); an operator aborts it, or recover() does."""
        preferred = sorted(
            i for i, t in self.txns.items() if t.state in states and (anonymous or not t.anonymous)
        )
        if preferred and data.draw(st.integers(0, 5), label="any id") < 5:
            return data.draw(st.sampled_from(preferred), label="txn_id")
        return data.draw(st.sampled_from(sorted(self.slot.values())), label="txn_id")

    @initialize(
        txn_id=st.sampled_from(IDS),
        mode=st.sampled_from(MODES),
        parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=2, unique=True),
    )
    def first_transaction(self, txn_id: str, mode: str, parts: list[int]) -> None:
        """Every example starts with one staged transaction (rules may be switched off)."""
        self.do_begin(txn_id, mode)
        self.do_stage(txn_id, parts, 1)

    @initialize(seeded=st.lists(st.sampled_from(PARTS), max_size=3, unique=True))
    def seed(self, seeded: list[int]) -> None:
        """Some partitions exist before the first transaction (a plain write)."""
        if not seeded:
            return
        tag = f"seed-n{len(seeded)}"
        data = tagged_rows(tag, seeded, 1, first_id=self.next_id)
        self.next_id += len(seeded)
        result = self.ns.write(data)
        merged = {p: dict.fromkeys(ids, tag) for p, ids in rows_by_part(data).items()}
        self.apply(merged, "append", result.manifest_version)

    @rule(slot=st.sampled_from(IDS), mode=st.sampled_from(MODES), fresh=st.booleans())
    def begin(self, slot: str, mode: str, fresh: bool) -> None:
        t = self.txns.get(self.slot[slot])
        if fresh and t is not None and t.state == "published":
            self.slot[slot] = f"{slot}.{len([i for i in self.txns if i.startswith(slot)]) + 1}"
        self.do_begin(self.slot[slot], mode)

    def do_begin(self, txn_id: str, mode: str) -> None:
        t = self.txns.get(txn_id)
        try:
            txn = self.ns.begin(mode, txn_id)
        except InvalidArgumentError as exc:
            error: InvalidArgumentError | None = exc
        else:
            error = None
        note(f"begin({txn_id}, {mode}): {error or f'incarnation {txn.incarnation}'}")
        if error is not None:  # only a live id begun in its other mode is refused
            assert t is not None, repr(error)
            assert t.state != "aborted", repr(error)
            assert t.mode != mode, repr(error)
            return
        if t is None:
            t = self.txns[txn_id] = TxnModel(txn_id, mode)
        elif t.state == "aborted":
            t = self.txns[txn_id] = TxnModel(txn_id, mode, t.incarnation + 1)
        assert (txn.mode, txn.incarnation) == (t.mode, t.incarnation) == (mode, t.incarnation)

    @rule(
        data=st.data(),
        parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=2, unique=True),
        per_part=st.integers(1, 2),
        begin_first=st.sampled_from((*MODES, None)),
    )
    def stage(
        self, data: st.DataObject, parts: list[int], per_part: int, begin_first: str | None
    ) -> None:
        """Stage into ``ns.transaction(id)``, or (like a worker) into ``ns.begin(mode, id)``."""
        txn_id = self.pick(data, "staged")
        if begin_first is not None:
            t = self.txns.get(txn_id)
            self.do_begin(txn_id, t.mode if t and t.state != "aborted" else begin_first)
        self.do_stage(txn_id, parts, per_part)

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        self.do_commit(self.pick(data, "staged", "committing"))

    @rule(
        point=st.sampled_from(COMMIT_POINTS),
        kind=st.sampled_from(("raise", "raise", "error")),
        data=st.data(),
    )
    def crash_commit(self, point: str, kind: str, data: st.DataObject) -> None:
        """commit(id) dies at a step (``=raise``: a crash, ``=error``: an OSError)."""
        self.do_commit(self.pick(data, "staged", "committing"), point, kind)

    @rule(
        point=st.sampled_from(STAGE_POINTS + ABORT_POINTS),
        kind=st.sampled_from(("raise", "raise", "error")),
        data=st.data(),
        parts=st.lists(st.sampled_from(PARTS), min_size=1, max_size=2, unique=True),
    )
    def crash_stage_or_abort(
        self, point: str, kind: str, data: st.DataObject, parts: list[int]
    ) -> None:
        """stage(...) or abort(id) dies at a step."""
        if point.startswith("stage."):
            self.do_stage(self.pick(data, "staged"), parts, 1, point, kind)
        else:
            self.do_abort(self.pick(data, "staged", "committing", anonymous=True), point, kind)

    def retriable(self) -> list[str]:
        return sorted(
            i
            for i, t in self.txns.items()
            if t.state in ("committing", "published") and not t.anonymous
        )

    @precondition(lambda self: bool(self.retriable()))
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        ids = self.retriable()
        self.do_commit(data.draw(st.sampled_from(ids), label="retry"))

    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self.do_abort(self.pick(data, "staged", "committing", anonymous=True))

    @precondition(lambda self: any(t.state == "committing" for t in self.txns.values()))
    @rule()
    def recover(self) -> None:
        expected = {i for i, t in self.txns.items() if t.state in ("staged", "committing")}
        aborted = self.ns.recover(lease_seconds=0)
        note(f"recover(0) aborted {aborted}")
        assert sorted(aborted) == sorted(expected)
        for i in expected:
            self.txns[i].state = "aborted"
            self.txns[i].stages = []
        manifest = lance.dataset(self.ns.uri + "/__manifest").to_table()
        if CLAIM in manifest.column_names:
            left = manifest.filter(pc.is_valid(manifest[CLAIM])).to_pylist()
            assert left == [], f"claims left after recover(0): {left}"

    @precondition(lambda self: bool(self.committable()))
    @rule(data=st.data())
    def concurrent_commit(self, data: st.DataObject) -> None:
        txn_id = data.draw(st.sampled_from(self.committable()), label="concurrent")
        t = self.txns[txn_id]
        if t.state == "staged":
            self.do_commit(txn_id, "commit.before_publish")  # sealed, leaves committed
        assert t.state == "committing"
        outcomes: list[CommitResult | BaseException | None] = [None, None]

        def run(slot: int) -> None:
            ns = PartitionedNamespace.open(self.ns.uri)
            try:
                outcomes[slot] = ns.commit(txn_id, claim_timeout=CLAIM_TIMEOUT)
            except BaseException as exc:
                outcomes[slot] = exc

        threads = [threading.Thread(target=run, args=(slot,)) for slot in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(thread.is_alive() for thread in threads)
        note(f"two committers of {t.tag}: {outcomes}")
        results = [o for o in outcomes if isinstance(o, CommitResult)]
        for o in outcomes:
            assert isinstance(o, (CommitResult, CommitConflict, TransactionAborted)), repr(o)
        assert results, f"neither committer of {t.tag} finished it: {outcomes}"
        states = {i.txn_id: i.state for i in self.ns.transactions()}
        assert states[txn_id] == "published", states
        self.publish(t)
        for result in results:
            self.check_result(t, result)

    @rule(parts=PARTS_OF_WRITE, per_part=st.integers(1, 2), mode=st.sampled_from(MODES))
    def direct_write(self, parts: list[int], per_part: int, mode: str) -> None:
        """``ns.write(data, mode)`` without ``txn_id``: an append or a dynamic partition
        overwrite, published in one swap (or handed to the claim protocol)."""
        self.do_direct(sorted(parts), per_part, mode)

    @rule(
        parts=PARTS_OF_WRITE,
        mode=st.sampled_from(MODES),
        point=st.sampled_from(DIRECT_POINTS),
        kind=st.sampled_from(("raise", "raise", "error")),
    )
    def crash_direct_write(self, parts: list[int], mode: str, point: str, kind: str) -> None:
        """A direct write dies at a step (``=raise``: a crash, ``=error``: an OSError)."""
        self.do_direct(sorted(parts), 1, mode, point, kind)

    @precondition(lambda self: bool(self.claimed()))
    @rule(
        data=st.data(),
        mode=st.sampled_from(MODES),
        point=st.sampled_from((None, *DIRECT_POINTS, *COMMIT_POINTS)),
        kind=st.sampled_from(("raise", "raise", "error")),
    )
    def direct_write_onto_claim(
        self, data: st.DataObject, mode: str, point: str | None, kind: str
    ) -> None:
        """A direct write (dying at a step, or not) into a claimed partition, among others:
        handed to the claim protocol, which waits for a live claim (a crashed committer's
        outlives the claim timeout) and takes a dead one over."""
        parts = {data.draw(st.sampled_from(sorted(self.claimed())), label="claimed")}
        parts |= set(data.draw(st.lists(st.sampled_from(PARTS), max_size=2), label="more"))
        self.do_direct(sorted(parts), 1, mode, point, kind)

    def named_to_commit(self, data: st.DataObject) -> str | None:
        """A named transaction a commit would seal or finish: one there is, or else one
        begun and staged here (None: no id of the pool is free)."""
        ids = self.committable()
        if ids:
            return data.draw(st.sampled_from(ids), label="named")

        def state(slot: str) -> str | None:
            t = self.txns.get(self.slot[slot])
            return None if t is None else t.state

        free = [s for s in IDS if state(s) in (None, "aborted", "published")]
        if not free:
            return None
        slot = data.draw(st.sampled_from(free), label="slot")
        if state(slot) == "published":  # a published id is final: the slot moves on
            self.slot[slot] = f"{slot}.{len([i for i in self.txns if i.startswith(slot)]) + 1}"
        txn_id = self.slot[slot]
        self.do_begin(txn_id, data.draw(st.sampled_from(MODES), label="named mode"))
        self.do_stage(txn_id, data.draw(PARTS_OF_STAGE, label="named parts"), 1)
        return txn_id if txn_id in self.committable() else None

    @rule(
        data=st.data(),
        mode=st.sampled_from(MODES),
        per_part=st.integers(1, 2),
        schedule=st.sampled_from(SCHEDULES),
        point=st.sampled_from((None, None, *HANDOVER_POINTS)),
        kind=st.sampled_from(("raise", "raise", "error")),
    )
    def direct_beside_commit(
        self,
        data: st.DataObject,
        mode: str,
        per_part: int,
        schedule: str,
        point: str | None,
        kind: str,
    ) -> None:
        """A direct write and a named commit of overlapping partitions, in two threads
        (see SCHEDULES). Each may lose to the other only by a conflict the model predicts
        for the order they published in; no row is lost or published twice. With ``point``
        (``claims_held`` only), the write, handed to the claim protocol and waiting
        for the commit's claims, dies at a point it shares with it once the commit is done."""
        txn_id = self.named_to_commit(data)
        if txn_id is None:
            return
        t = self.txns[txn_id]
        shared = data.draw(st.sampled_from(sorted(t.parts())), label="shared")
        others = [p for p in PARTS if p != shared and p not in self.held(but=t)]
        # (none when the model's other transactions hold every other partition)
        more = (
            data.draw(st.lists(st.sampled_from(others), max_size=1), label="more") if others else []
        )
        parts = sorted({shared, *more})
        path = self.direct_path(parts)
        if t.state != "staged" or (schedule == "direct_parked" and path != "direct"):
            schedule = "claims_held"  # (no seal to park before / the write hands over)
        if schedule != "claims_held":
            point = None
        tag, rows_table, rows = self.direct_rows(parts, per_part, mode)
        before = {p: self.version.get(p) for p in parts}
        overlap = sorted(set(parts) & t.parts())
        staged = {p: self.staged_with(p, mode) for p in overlap}
        listed = self.listed()
        was = t.state
        outcomes: dict[str, CommitResult | BaseException] = {}
        named_ns = PartitionedNamespace.open(self.ns.uri)
        direct_ns = PartitionedNamespace.open(self.ns.uri)

        def named() -> None:
            try:
                outcomes["named"] = named_ns.commit(txn_id, claim_timeout=LIVE_CLAIM_TIMEOUT)
            except BaseException as exc:
                outcomes["named"] = exc

        def direct() -> None:
            try:
                outcomes["direct"] = direct_ns.write(
                    rows_table, mode, claim_timeout=LIVE_CLAIM_TIMEOUT
                )
            except BaseException as exc:
                outcomes["direct"] = exc

        threads = {
            name: threading.Thread(target=fn, name=f"model-{name}")
            for name, fn in (("named", named), ("direct", direct))
        }

        def running(name: str) -> Callable[[], bool]:
            return lambda: threading.current_thread() is threads[name]

        try:
            if schedule == "claims_held":
                with hold("commit.claim_blocked", when=running("direct")) as waiting:
                    with hold("commit.before_publish", when=running("named")) as claimed:
                        threads["named"].start()
                        wait_reached(claimed, threads["named"])
                        threads["direct"].start()
                        wait_reached(waiting, threads["direct"])
                    if point is not None:  # the commit ends, then the write dies at point
                        threads["named"].join(timeout=300)
                        os.environ[ENV] = f"{point}={kind}"
            elif schedule == "named_parked":  # its state read, its claims not taken yet
                with hold("commit.before_seal", when=running("named")) as parked:
                    threads["named"].start()
                    wait_reached(parked, threads["named"])
                    threads["direct"].start()
                    threads["direct"].join(timeout=300)
            else:  # direct_parked: its leaves committed, its swap not made yet
                with hold("direct.before_publish", when=running("direct")) as parked:
                    threads["direct"].start()
                    wait_reached(parked, threads["direct"])
                    threads["named"].start()
                    threads["named"].join(timeout=300)
        finally:
            for thread in threads.values():
                if thread.ident is not None:  # started
                    thread.join(timeout=300)
            os.environ.pop(ENV, None)
        assert not any(thread.is_alive() for thread in threads.values())
        n_out, d_out = outcomes["named"], outcomes["direct"]
        left = sorted(self.listed() - listed)
        note(
            f"{schedule}: commit({txn_id}) [{was}]: {n_out!r}; write({mode}, {rows}) at "
            f"{point}={kind}: {d_out!r}; left {left}"
        )
        assert isinstance(n_out, (CommitResult, CommitConflict)), repr(n_out)
        if point is None:
            assert isinstance(d_out, (CommitResult, CommitConflict)), repr(d_out)
        else:
            assert isinstance(n_out, CommitResult), repr(n_out)
        if isinstance(n_out, CommitResult) and isinstance(d_out, CommitResult):
            versions = {"named": n_out.manifest_version, "direct": d_out.manifest_version}
            assert len(set(versions.values())) == 2, versions
            order = sorted(versions, key=lambda who: versions[who])
        elif isinstance(n_out, CommitResult):
            order = ["named"]
        else:
            assert isinstance(d_out, CommitResult), f"both failed: {n_out!r}, {d_out!r}"
            order = ["direct"]
        if schedule == "claims_held":
            assert order[0] == "named", f"the write published past {t.tag}'s claims"
        if schedule == "named_parked":  # nothing of the commit was published before it
            assert order[0] == "direct", f"the write lost to {t.tag}, which had not sealed"
        for who in order:
            if who == "named":
                assert isinstance(n_out, CommitResult)
                if was == "staged":
                    assert not self.conflicts(t), self.conflicts(t)
                self.publish(t, at=n_out.manifest_version)
                self.check_result(t, n_out)
            else:
                assert isinstance(d_out, CommitResult)
                if order[0] == "named":  # then the write must not replace what it published
                    replaces = [p for p in overlap if staged[p][0]]
                    assert not replaces, f"the write replaced {replaces} {t.tag} published"
                    assert isinstance(n_out, CommitResult)
                    assert not self.appends_onto_another_schema(staged, n_out.manifest_version)
                if point is None:
                    self.direct_published(d_out, mode, tag, rows)
                else:
                    self.handed_over_at_point(d_out, None, kind, mode, tag, rows, before, left)
        if point is not None and not isinstance(d_out, (CommitResult, CommitConflict)):
            self.handed_over_at_point(None, d_out, kind, mode, tag, rows, before, left)
        if isinstance(n_out, CommitConflict):  # the write published first: why must it fail?
            assert was == "staged"
            assert self.conflicts(t), f"{t.tag} conflicted with nothing: {n_out}"
        if isinstance(d_out, CommitConflict):  # the commit published first: why must it fail?
            assert isinstance(n_out, CommitResult)
            assert any(replaces for replaces, _ in staged.values()) or (
                self.appends_onto_another_schema(staged, n_out.manifest_version)
            ), f"the write conflicted with nothing: {d_out}"
        if isinstance(d_out, (CommitResult, CommitConflict)):
            assert not left, f"a direct write left transaction records: {left}"

    @precondition(lambda self: bool(self.finished_anonymous()))
    @rule()
    def maintain(self) -> None:
        """``maintain()`` (no ``older_than``): compacts ``__manifest`` and collects finished
        anonymous transactions (rows and records), as the compaction after a publish does."""
        report = self.ns.maintain()
        note(f"maintain: {report}")
        listed = self.listed()
        for i in self.finished_anonymous():
            if self.txns[i].sealed:
                assert i not in listed, f"maintain kept the finished anonymous transaction {i}"
            if i not in listed:
                del self.txns[i]

    def finished_anonymous(self) -> list[str]:
        """Adopted anonymous transactions that finished: collected by the next compaction
        (but those aborted before they were sealed: the known leak, still listed)."""
        return sorted(
            i for i, t in self.txns.items() if t.anonymous and t.state in ("aborted", "published")
        )

    @precondition(lambda self: self.columns < 1)
    @rule()
    def evolve(self) -> None:
        self.ns.add_column(pa.field(f"c{self.columns}", pa.utf8()))
        self.columns += 1
        note(f"add_column: c{self.columns - 1}")

    # -- invariants ------------------------------------------------------------------------
    @invariant()
    def acknowledged_rows_visible_exactly_once(self) -> None:
        table = self.ns.to_table(columns=["id", "tag"])
        ids = table.column("id").to_pylist()
        tags = table.column("tag").to_pylist()
        # (1) every acknowledged row exactly once, and nothing else
        duplicated = sorted(i for i, n in Counter(ids).items() if n > 1)
        assert not duplicated, f"rows visible more than once: {duplicated}"
        expected = {i: tag for rows in self.visible.values() for i, tag in rows.items()}
        actual = dict(zip(ids, tags, strict=True))
        lost = sorted(set(expected) - set(actual))
        extra = sorted(set(actual) - set(expected))
        assert not lost, f"acknowledged rows lost: {[(i, expected[i]) for i in lost]}"
        assert not extra, f"rows never acknowledged are visible: {[(i, actual[i]) for i in extra]}"
        assert actual == expected
        # (2) nothing half visible: a tag shows all its rows (unless an overwrite clipped it)
        for tag, n in Counter(tags).items():
            if tag not in self.clipped:
                assert n == int(tag.rsplit("-n", 1)[1]), f"{tag} half visible: {n} rows"
        # (3) every published partition readable at its read_version
        partitions = self.ns.partitions()
        assert sorted(p.values["part"] for p in partitions) == sorted(self.version)
        counted = sum(
            lance.dataset(p.location, version=p.read_version).count_rows() for p in partitions
        )
        assert counted == len(ids)

    @invariant()
    def published_files_present(self) -> None:
        """No data file of a published leaf version is missing (a cleanup after a failed
        write or an abort deletes only files no published version references)."""
        for p in self.ns.partitions():
            ds = lance.dataset(p.location, version=p.read_version)
            data = os.path.join(ds.uri.removeprefix("file://"), "data")
            missing = [
                f["path"]
                for fragment in ds.get_fragments()
                for f in fragment.metadata.to_json()["files"]
                if not os.path.exists(os.path.join(data, f["path"]))
            ]
            assert not missing, f"partition {p.values} v{p.read_version} lost files {missing}"

    @invariant()
    def no_records_of_direct_writes(self) -> None:
        """``transactions()`` lists only the model's transactions: a direct write keeps no
        record unless it was handed to the claim protocol and failed (then it was adopted)."""
        unknown = sorted(self.listed() - set(self.txns))
        assert not unknown, f"records of direct writes left behind: {unknown}"

    @invariant()
    def arbiter_rows_agree(self) -> None:
        infos = {i.txn_id: i for i in self.ns.transactions()}
        # a finished anonymous transaction is collected (row and records) by whichever
        # compaction comes next, after any publish: from then on it is gone for good
        for i in self.finished_anonymous():
            if i not in infos:
                note(f"{i} was collected")
                del self.txns[i]
        # the states (from the arbiter rows) are the model's
        actual = {i: (info.state, info.incarnation, info.mode) for i, info in infos.items()}
        expected = {i: (t.state, t.incarnation, t.mode) for i, t in self.txns.items()}
        assert actual == expected
        for i, t in self.txns.items():
            if t.state != "aborted":
                assert (infos[i].stages, infos[i].rows) == (
                    len(t.stages),
                    sum(s.count for s in t.stages),
                ), (i, infos[i])
        # (4) claims: held only by committing transactions, on exactly their partitions;
        # a dead claim may stay only on a row of a partition that was never published
        manifest = lance.dataset(self.ns.uri + "/__manifest").to_table()
        if CLAIM not in manifest.column_names:
            return
        held: dict[str, set[int]] = {}
        for r in manifest.filter(pc.is_valid(manifest[CLAIM])).to_pylist():
            txn_id, _, k = r[CLAIM].rpartition("#")
            info = infos.get(txn_id)
            if info is not None and info.state == "committing" and info.incarnation == int(k):
                held.setdefault(txn_id, set()).add(r["part"])
            else:
                assert r["read_version"] is None, f"a finished transaction holds a claim: {r}"
        for i, t in self.txns.items():
            assert held.get(i, set()) == (t.parts() if t.state == "committing" else set()), (
                i,
                held,
            )


def test_transaction_model() -> None:
    run_state_machine_as_test(
        TransactionModel,
        settings=settings(
            max_examples=MAX_EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# -- failures the model found, as plain tests ----------------------------------------------
def test_two_stages_rewriting_one_partition_publish_its_rows_once(
    tagged: PartitionedNamespace,
) -> None:
    """After ``add_column``, an append stage into an older partition copies the partition's
    published rows into its own files (``rewrite``). Two such stages of one transaction
    each copy them, the plan merges both, and the commit publishes the old rows twice.

    Minimal sequence found by the model: seed(part 0); add_column; begin append; stage
    part 0; stage part 0; commit -> the seed row is visible twice.
    """
    tagged.write(tagged_rows("seed-n1", [0], 1, first_id=0))
    tagged.add_column(pa.field("c0", pa.utf8()))
    txn = tagged.begin("append", "t0")
    txn.stage(tagged_rows("a-n1", [0], 1, first_id=10), stage_id="a")
    txn.stage(tagged_rows("b-n1", [0], 1, first_id=20), stage_id="b")
    tagged.commit("t0")
    assert sorted(tagged.to_table(columns=["id"]).column("id").to_pylist()) == [0, 10, 20]


def test_a_committer_whose_commit_another_finished_returns_the_result(
    tagged: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry that stole a sealed transaction and is then itself taken over, with the
    other committer publishing before it reads its claims, must return the published
    result ("the committer it replaced ... returns the published result instead"); it
    raises ManifestError("... does not hold its claims (was __manifest rewritten by another
    tool?)"), which is not retryable, although the transaction was published.

    Sequence: stage t0; commit crashed at commit.before_publish; thread A commit(t0)
    steals and is paused before it reads its claims; commit(t0) steals from A and
    publishes; A resumes.
    """
    from airflow_provider_lance.namespace.txn import commit as commit_module

    tagged.begin("append", "t0").stage(tagged_rows("a-n1", [0], 1, first_id=0))
    with failing("commit.before_publish", "raise"), pytest.raises(FailpointError):
        tagged.commit("t0")
    parked, resume = threading.Event(), threading.Event()
    load_plan = commit_module.Committer.load_plan

    def paused_load_plan(self, record):  # runs right after the steal, before the leaves
        if threading.current_thread().name == "first-retry":
            parked.set()
            resume.wait(60)
        return load_plan(self, record)

    monkeypatch.setattr(commit_module.Committer, "load_plan", paused_load_plan)
    outcome: list[object] = []

    def first_retry() -> None:
        try:
            outcome.append(PartitionedNamespace.open(tagged.uri).commit("t0"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=first_retry, name="first-retry")
    thread.start()
    assert parked.wait(60)
    second = tagged.commit("t0")  # takes over and publishes
    resume.set()
    thread.join(60)
    assert tagged.to_table(columns=["id"]).column("id").to_pylist() == [0]
    [first] = outcome
    assert isinstance(first, CommitResult), repr(first)
    assert first == second


def test_committing_an_aborted_transaction_says_it_was_aborted(
    tagged: PartitionedNamespace,
) -> None:
    """Committing an aborted transaction raises TransactionAborted (not retryable). In the
    process that began it, a commit first merges the incarnation's stage records and only
    then reads its row: if an abort died after its fence (before removing the records)
    and the stages saw different versions of a partition, the commit raises StaleStage
    ("stages ... saw partition ... differently").

    Minimal sequence found by the model: begin t; stage part 0 (absent); a write creates
    part 0; stage part 0 again; abort(t) dies at abort.after_fence; commit(t).
    """
    txn = tagged.begin("append", "t0")
    txn.stage(tagged_rows("a-n1", [0], 1, first_id=0), stage_id="a")
    tagged.write(tagged_rows("seed-n1", [0], 1, first_id=10))
    txn.stage(tagged_rows("b-n1", [0], 1, first_id=20), stage_id="b")
    with failing("abort.after_fence", "raise"), pytest.raises(FailpointError):
        tagged.abort("t0")
    assert {t.txn_id: t.state for t in tagged.transactions()} == {"t0": "aborted"}
    with pytest.raises(TransactionAborted):
        tagged.commit("t0")


def leave_a_dead_claim(ns: PartitionedNamespace, part: int) -> None:
    """A transaction creating ``part`` crashes after its seal and its abort dies after the
    fence: the never-published partition row keeps a dead claim, so a direct write into
    ``part`` is handed to the claim protocol (which takes the claim over)."""
    ns.begin("append", "t0").stage(tagged_rows("t0-n1", [part], 1, first_id=100))
    with failing("commit.after_claim", "raise"), pytest.raises(FailpointError):
        ns.commit("t0")
    with failing("abort.after_fence", "raise"), pytest.raises(FailpointError):
        ns.abort("t0")


def test_an_abandoned_direct_write_stays_aborted_after_maintain(
    tagged: PartitionedNamespace,
) -> None:
    """A direct write handed to the claim protocol that crashed after its seal leaves its
    anonymous transaction committing (listed, as it should be); recover() aborts it.
    maintain() (or the compaction after any publish) collects the finished anonymous
    transaction: it must not come back.

    Found by the model (before b370d33 made collecting delete the records first): a
    direct write waiting for a named commit's claims dies at leaf.before_commit (adopted:
    committing); abort(its id); maintain -> transactions() listed it as STAGED again, and
    every recover() aborted it again.
    """
    leave_a_dead_claim(tagged, 1)
    with failing("manifest.after_swap", "raise"), pytest.raises(FailpointError):
        tagged.write(tagged_rows("d-n1", [1], 1, first_id=10))
    [anon] = [i.txn_id for i in tagged.transactions() if i.txn_id != "t0"]
    assert {i.txn_id: i.state for i in tagged.transactions()}[anon] == "committing"
    assert tagged.recover(lease_seconds=0) == [anon]
    tagged.maintain()
    assert {i.txn_id: i.state for i in tagged.transactions()}.get(anon, "aborted") == "aborted"
    assert tagged.recover(lease_seconds=0) == []


def test_a_direct_write_that_crashed_after_its_publish_keeps_its_rows(
    tagged: PartitionedNamespace,
) -> None:
    """A direct write handed to the claim protocol that crashes right after its publish
    (commit.after_publish) is published: its rows are visible, and its anonymous record
    stays (PUBLISHED, header and stage records) until a compaction collects it.

    Before b370d33, maintain() dropped the PUBLISHED row and kept the header, so the
    transaction was listed as STAGED; recover() fenced it as abandoned and its clean-up
    deleted the files of its stage records, which the published leaf version reads: the
    namespace could no longer be read. (Reproduced while the model was being extended;
    fixed concurrently, found by the chaos test.)
    """
    tagged.write(tagged_rows("seed-n1", [0], 1, first_id=0))
    leave_a_dead_claim(tagged, 1)
    with failing("commit.after_publish", "raise"), pytest.raises(FailpointError):
        tagged.write(tagged_rows("d-n1", [1], 1, first_id=10))
    assert sorted(tagged.to_table(columns=["id"]).column("id").to_pylist()) == [0, 10]
    tagged.maintain()
    tagged.recover(lease_seconds=0)
    assert sorted(tagged.to_table(columns=["id"]).column("id").to_pylist()) == [0, 10]


def test_an_aborted_direct_write_that_never_sealed_is_collected(
    tagged: PartitionedNamespace,
) -> None:
    """A direct write handed to the claim protocol that crashes before its seal's swap
    (manifest.before_swap) leaves an anonymous transaction with records but no row:
    listed as staged, as it should be. recover() (or abort) fences it; maintain() should
    then collect it like any finished anonymous transaction, but its ABORTED row says
    ``"anonymous": false`` made it stay listed for good.

    Found by the model: a direct write waiting for a named commit's claims dies at
    manifest.before_swap once the commit is done (adopted: staged); abort(its id);
    maintain -> still listed (aborted). Fixed: ``TxnRecord.implicit`` keeps the header's
    anonymous flag, so the fence writes an anonymous row.
    """
    leave_a_dead_claim(tagged, 1)
    with failing("manifest.before_swap", "raise"), pytest.raises(FailpointError):
        tagged.write(tagged_rows("d-n1", [1], 1, first_id=10))
    [anon] = [i.txn_id for i in tagged.transactions() if i.txn_id != "t0"]
    assert {i.txn_id: i.state for i in tagged.transactions()}[anon] == "staged"
    assert tagged.recover(lease_seconds=0) == [anon]
    tagged.maintain()
    assert anon not in {i.txn_id for i in tagged.transactions()}
