"""A stateful model of the transaction lifecycle, checked against a real namespace on disk.

Hypothesis drives begin / stage / commit / crash-at-a-failpoint / retry / abort / recover /
two concurrent committers / add_column over a namespace partitioned by ``part``, with
transaction ids from a small pool (so ids are begun again after aborts). The model predicts
the outcome of every call (which error, which state, which rows become visible) and the
invariants compare it with what the namespace shows after every step: every acknowledged row
visible exactly once and nothing else, no tag half visible, every published partition
readable, claims held only by committing transactions, and the arbiter rows' states.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

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
    PartitionedNamespace,
    PartitionField,
    TransactionAborted,
    TransactionClosed,
)
from airflow_provider_lance.namespace.failpoints import ENV, FailpointError

from .workers import TAGGED, tagged_rows

#: The pool of transaction ids. Aborted ids are begun again (a new incarnation); a published
#: id is final, so a ``begin`` may move its slot on to a new id (``t0.2``, ...).
IDS = ("t0", "t1", "t2")
PARTS = (0, 1, 2, 3)
MODES = ("append", "overwrite")
#: Commits blocked by a partition another (crashed) transaction keeps claimed fail fast.
CLAIM_TIMEOUT = 0.2
CLAIM = "__txn_id"
#: Examples and steps per example: ~10 s on 2 cores. Explore deeper with, e.g.,
#: PNS_MODEL_EXAMPLES=500 PNS_MODEL_STEPS=25 (about 6 minutes).
MAX_EXAMPLES = int(os.environ.get("PNS_MODEL_EXAMPLES", "25"))
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
    "empty": ("commit.before_seal",),
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


@dataclass
class StageModel:
    stage_id: str
    tag: str
    #: part -> the ids of this stage's rows in it
    rows: dict[int, list[int]]
    #: part -> (rewrite, the model's version of the partition when staged; None: absent)
    seen: dict[int, tuple[bool, int | None]]

    @property
    def count(self) -> int:
        return sum(len(ids) for ids in self.rows.values())


@dataclass
class TxnModel:
    txn_id: str
    mode: str
    incarnation: int = 1
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
        #: tags an overwrite removed from some partitions (may stay partly visible elsewhere)
        self.clipped: set[str] = set()
        #: slot of the pool -> the id it names now
        self.slot = {i: i for i in IDS}
        self.next_id = 0
        self.stage_no = 0
        self.columns = 0

    def teardown(self) -> None:
        os.environ.pop(ENV, None)
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- the model's predictions ---------------------------------------------------------
    def conflicts(self, t: TxnModel) -> list[str]:
        """Why committing the staged ``t`` must raise CommitConflict (empty: it must not)."""
        seen: dict[int, set[tuple[bool, int | None]]] = {}
        for s in t.stages:
            for p, key in s.seen.items():
                seen.setdefault(p, set()).add(key)
        why = []
        for p, keys in sorted(seen.items()):
            if len(keys) > 1:
                why.append(f"its stages saw partition {p} differently: {sorted(map(repr, keys))}")
                continue
            [(rewrite, version)] = keys
            if (t.mode == "overwrite" or rewrite) and self.version.get(p) != version:
                why.append(f"partition {p} moved from {version} to {self.version.get(p)}")
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
        """Ids a commit would seal or finish."""
        return sorted(i for i in self.txns if self.commit_outcome(i) in ("seal", "finish"))

    def publish(self, t: TxnModel) -> None:
        """The model's side of a publish: the transaction's rows are acknowledged."""
        merged: dict[int, dict[int, str]] = {}
        for s in t.stages:
            for p, ids in s.rows.items():
                merged.setdefault(p, {}).update(dict.fromkeys(ids, s.tag))
        for p, rows in merged.items():
            t.published[p] = (p not in self.version, -1)
            if t.mode == "overwrite":
                self.clipped |= set(self.visible.get(p, {}).values())
                self.visible[p] = dict(rows)
            else:
                self.visible.setdefault(p, {}).update(rows)
            self.version[p] = self.version.get(p, 0) + 1
        t.state = "published"
        read_versions = {p.values["part"]: p.read_version for p in self.ns.partitions()}
        for p, (created, _) in t.published.items():
            t.published[p] = (created, read_versions[p])

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
        if point is not None and point in REACHED.get(expected, ()):
            assert isinstance(error, crash_type(kind)), repr(error)
            state = CRASHED_STATE[point]
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
            seen[p] = (sp.rewrite, before[p])
            if sp.rewrite:
                note(f"stage {stage_id} rewrites partition {p}")
        t.stages.append(StageModel(stage_id, tag, rows, seen))

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

    # -- rules -------------------------------------------------------------------------------
    def pick(self, data: st.DataObject, *states: str) -> str:
        """An id in one of ``states`` (mostly), or any id of the pool (sometimes)."""
        preferred = sorted(i for i, t in self.txns.items() if t.state in states)
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
        self.ns.write(data)
        for i, p in zip(data.column("id").to_pylist(), data["part"].to_pylist(), strict=True):
            self.visible.setdefault(p, {})[i] = tag
            self.version[p] = 1

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
            self.do_abort(self.pick(data, "staged", "committing"), point, kind)

    @precondition(
        lambda self: any(t.state in ("committing", "published") for t in self.txns.values())
    )
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        ids = sorted(i for i, t in self.txns.items() if t.state in ("committing", "published"))
        self.do_commit(data.draw(st.sampled_from(ids), label="retry"))

    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        self.do_abort(self.pick(data, "staged", "committing"))

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
    def arbiter_rows_agree(self) -> None:
        infos = {i.txn_id: i for i in self.ns.transactions()}
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


@pytest.mark.slow
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
@pytest.fixture
def tagged(tmp_path: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        tmp_path / "ns", schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )


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
    from airflow_provider_lance.namespace import commit as commit_module

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
    assert first.to_dict() == second.to_dict()


def test_committing_an_aborted_transaction_says_it_was_aborted(
    tagged: PartitionedNamespace,
) -> None:
    """Committing an aborted transaction raises TransactionAborted (not retryable). In the
    process that began it, a commit first merges the incarnation's stage records and only
    then reads its row: if an abort died after its fence (before removing the records)
    and the stages saw different versions of a partition, the commit raises a retryable
    CommitConflict ("... a concurrent commit happened while staging; stage again").

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
