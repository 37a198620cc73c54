"""Review attacks on the fold of unindexed ``__manifest`` fragments (compact_unindexed) and
on ``ManifestView._with_prefix`` (bookkeeping rows found through the partition indices)."""

from __future__ import annotations

import datetime as dt
import decimal
import threading
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.errors import is_retryable
from airflow_provider_lance.namespace.format import manifest_compaction
from airflow_provider_lance.namespace.format.manifest import (
    INTENT_PREFIX,
    TXN_PREFIX,
    ManifestView,
)
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.txn.test_direct_write_attacks import (
    fill_to_15_fragments,
    manifest_fragments,
    published_files_exist,
    settle,
    while_a_fold_is_parked,
)
from tests.namespace.txn.test_interleavings import BY_PART, Worker, claims, other
from tests.support import TAGGED, no_duplicates, tagged_rows


def mpath(ns: PartitionedNamespace) -> str:
    return ns.uri + "/__manifest"


def prefix_rows_agree(ns: PartitionedNamespace) -> int:
    """At every retained __manifest version: the rows _with_prefix finds are exactly those
    a starts_with scan finds (txn rows and intents). Returns the number of versions."""
    ds = lance.dataset(mpath(ns))
    checked = 0
    for v in ds.versions():
        at = lance.dataset(mpath(ns), version=v["version"])
        view = ManifestView(at)
        for prefix, got in ((TXN_PREFIX, view.txn_rows()), (INTENT_PREFIX, view.intent_rows())):
            want = (
                at.to_table(columns=["object_id"], filter=f"starts_with(object_id, '{prefix}')")
                .column("object_id")
                .to_pylist()
            )
            got_ids = [r["object_id"] for r in got]
            assert sorted(got_ids) == sorted(want), (v["version"], prefix)
        checked += 1
    return checked


def assert_object_ids_unique(ns: PartitionedNamespace) -> None:
    """Every ``__manifest`` row has an ``object_id`` of its own."""
    ids = lance.dataset(mpath(ns)).to_table(columns=["object_id"]).column("object_id").to_pylist()
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def txn_states(ns: PartitionedNamespace) -> dict[str, str]:
    return {t.txn_id: str(t.state) for t in ns.transactions()}


# -- 1. named transactions racing the fold ------------------------------------------------
@pytest.fixture
def ns(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))
    return ns


@pytest.mark.parametrize(
    "point", ["commit.after_claim", "commit.before_seal", "manifest.before_swap"]
)
def test_named_commit_parked_while_a_fold_rewrites_its_rows(ns, point) -> None:
    """T1 (partitions 1, 2 and new 5) parks at ``point``; an anonymous write makes the 16th
    fragment and folds every unindexed fragment (T1's txn row and claims among them). T1
    then goes on. Rows exactly once, T1 committed, no claim left, txn rows findable."""
    base = fill_to_15_fragments(ns)
    txn = ns.begin("append", "T1")
    txn.stage(tagged_rows("t1", [1, 2, 5], 1, first_id=500), stage_id="s")
    when = lambda: threading.current_thread().name == "T1"  # noqa: E731
    with hold(point, when=when) as parked:
        w = Worker(other(ns).commit, "T1")
        w.name = "T1"
        w.start()
        parked.wait_reached()
        before = manifest_fragments(ns)
        other(ns).write(tagged_rows("x", [77], 1, first_id=400))
        other(ns).write(tagged_rows("y", [78], 1, first_id=401))
        folded = manifest_fragments(ns)
    _, err = settle(w)
    assert err is None or is_retryable(err), err
    if err is not None:
        ns.commit("T1")
    assert folded < before + 2, (before, folded)  # a fold did happen meanwhile
    assert no_duplicates(ns) == sorted([*base, 400, 401, 500, 501, 502])
    assert claims(ns) == []
    assert txn_states(ns)["T1"] == "published", txn_states(ns)
    published_files_exist(ns)
    prefix_rows_agree(ns)


def test_fold_parked_while_named_commit_claims_and_publishes(ns) -> None:
    """The fold reads (parked at before_fold), then T1 claims, seals and publishes (its
    rows in the fragments the fold will rewrite), then the fold commits (or loses)."""
    base = fill_to_15_fragments(ns)
    txn = ns.begin("append", "T1")
    txn.stage(tagged_rows("t1", [1, 2, 5], 1, first_id=500), stage_id="s")
    while_a_fold_is_parked(ns, lambda: other(ns).commit("T1"))
    assert no_duplicates(ns) == sorted([*base, 400, 500, 501, 502])
    assert claims(ns) == []
    assert txn_states(ns)["T1"] == "published", txn_states(ns)
    published_files_exist(ns)
    prefix_rows_agree(ns)


def test_fold_parked_while_txn_begins_and_stages(ns) -> None:
    """A txn row inserted (begin) and updated (stage) between the fold's read and commit
    must survive the fold and be listed."""
    base = fill_to_15_fragments(ns)

    def begin_and_stage() -> None:
        t = other(ns).begin("append", "T2")
        t.stage(tagged_rows("t2", [1], 1, first_id=600), stage_id="s")

    while_a_fold_is_parked(ns, begin_and_stage)
    assert "T2" in txn_states(ns)
    ns.commit("T2")
    assert no_duplicates(ns) == sorted([*base, 400, 600])
    assert claims(ns) == []
    prefix_rows_agree(ns)


# -- 3. fold vs maintain / fold vs fold / fold vs evolve / REINDEX_ROWS ------------------
def test_fold_parked_while_maintain_compacts(ns) -> None:
    base = fill_to_15_fragments(ns)
    while_a_fold_is_parked(ns, lambda: other(ns).maintain(older_than=dt.timedelta(0)))
    assert no_duplicates(ns) == sorted([*base, 400])
    assert_object_ids_unique(ns)
    published_files_exist(ns)
    ns.write(tagged_rows("after", [1, 77], 1, first_id=900))
    assert no_duplicates(ns) == sorted([*base, 400, 900, 901])


def test_two_folds_from_two_handles(ns) -> None:
    base = fill_to_15_fragments(ns)
    with hold("manifest.before_fold", times=2) as parked:
        a = Worker(other(ns).write, tagged_rows("x", [77], 1, first_id=400))
        b = Worker(other(ns).write, tagged_rows("y", [78], 1, first_id=401))
        a.start()
        parked.wait_reached()
        b.start()
        for _ in range(200):
            if parked.hits >= 2:
                break
            threading.Event().wait(0.05)
    a.outcome()
    b.outcome()
    assert no_duplicates(ns) == sorted([*base, 400, 401])
    assert_object_ids_unique(ns)
    prefix_rows_agree(ns)


def test_fold_parked_while_spec_evolves(ns) -> None:
    base = fill_to_15_fragments(ns)
    while_a_fold_is_parked(
        ns,
        lambda: other(ns).evolve_partition_spec(
            [PartitionField("part", "part"), PartitionField("tag", "tag")]
        ),
    )
    assert no_duplicates(ns) == sorted([*base, 400])
    t = ns.begin("append", "T3")
    t.stage(tagged_rows("t3", [1, 9], 1, first_id=700), stage_id="s")
    ns.commit("T3")
    for i in range(20):
        ns.write(tagged_rows(f"g{i}", [200 + i], 1, first_id=2000 + i))
    assert "T3" in txn_states(ns)
    assert no_duplicates(ns) == sorted([*base, 400, 700, 701, *range(2000, 2020)])
    assert sorted(ns.to_table(filter="tag = 't3'").column("id").to_pylist()) == [700, 701]
    assert {p.values.get("tag") for p in ns.prune("tag = 't3'")} <= {"t3", None}
    assert claims(ns) == []
    prefix_rows_agree(ns)


@pytest.mark.parametrize("reindex_rows", [6, 1 << 20])
def test_concurrent_writers_with_small_reindex_rows(ns, monkeypatch, reindex_rows) -> None:
    monkeypatch.setattr(manifest_compaction, "REINDEX_ROWS", reindex_rows)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        h = other(ns)
        for i in range(30):
            try:
                if i % 5 == 0:
                    t = h.begin("append", f"W{k}-{i}")
                    t.stage(
                        tagged_rows(
                            f"n{k}",
                            [1 + k, 300 + 100 * k + i],
                            1,
                            first_id=10000 * (k + 1) + i * 10,
                        ),
                        stage_id="s",
                    )
                    h.commit(f"W{k}-{i}")
                else:
                    h.write(
                        tagged_rows(
                            f"w{k}", [300 + 100 * k + i], 1, first_id=10000 * (k + 1) + i * 10
                        )
                    )
            except BaseException as exc:
                errors.append(exc)

    ws = [threading.Thread(target=writer, args=(k,)) for k in range(2)]
    for w in ws:
        w.start()
    for w in ws:
        w.join(300)
    assert errors == [], errors
    got = no_duplicates(ns)
    assert len(got) == 4 + 2 * (24 + 6 * 2)
    assert claims(ns) == []
    states = txn_states(ns)
    assert sorted(t for t, s in states.items() if t.startswith("W") and s == "published") == sorted(
        f"W{k}-{i}" for k in range(2) for i in range(0, 30, 5)
    ), states
    ns.maintain(older_than=dt.timedelta(0))
    assert no_duplicates(ns) == got
    prefix_rows_agree(ns)
    for part in (1, 2, 305, 410):
        want = sorted(ns.to_table().filter(pc.equal(ns.to_table()["part"], part))["id"].to_pylist())
        assert sorted(ns.to_table(filter=f"part = {part}")["id"].to_pylist()) == want


# -- 2 / 4. _with_prefix invariant across partition types, two fields, evolution ---------
def sql(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"'{v}'"
    if isinstance(v, dt.datetime):
        return f"TIMESTAMP '{v.isoformat(sep=' ')}'"
    if isinstance(v, dt.date):
        return f"DATE '{v.isoformat()}'"
    return str(v)


TYPES = {
    "int": (pa.int64(), lambda i: i),
    "string": (pa.utf8(), lambda i: f"p{i}"),
    "date": (pa.date32(), lambda i: dt.date(2024, 1, 1) + dt.timedelta(days=i)),
    "bool": (pa.bool_(), lambda i: bool(i % 2)),
    "decimal": (pa.decimal128(10, 2), lambda i: decimal.Decimal(i) / 4),
    "float": (pa.float64(), lambda i: i / 2),
    "timestamp": (pa.timestamp("us"), lambda i: dt.datetime(2024, 1, 1) + dt.timedelta(hours=i)),
}


@pytest.mark.parametrize("kind", list(TYPES))
def test_transactions_stay_visible_through_folds(root: Path, kind: str, monkeypatch) -> None:
    dtype, val = TYPES[kind]
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", dtype)])
    ns = PartitionedNamespace.create(
        root, schema=schema, partition_fields=[PartitionField("p", "p")]
    )

    def rows(i: int, n: int = 1) -> pa.Table:
        return pa.table({"id": [i * 10 + k for k in range(n)], "p": pa.array([val(i)] * n, dtype)})

    expected = []
    open_txns = []
    for i in range(45):
        if i % 7 == 3:
            t = ns.begin("append", f"T{i}")
            t.stage(rows(i), stage_id="s")
            if i % 2:
                ns.commit(f"T{i}")
                expected.append(i * 10)
            else:
                open_txns.append(f"T{i}")
        else:
            ns.write(rows(i))
            expected.append(i * 10)
        if i == 30:
            monkeypatch.setattr(manifest_compaction, "REINDEX_ROWS", 1 << 30)
    states = txn_states(ns)
    for t in open_txns:
        assert t in states, (t, states)
    assert len([t for t in states if t.startswith("T")]) == len(
        [i for i in range(45) if i % 7 == 3]
    )
    assert no_duplicates(ns) == sorted(expected)
    assert prefix_rows_agree(ns) > 0
    for i in (0, 1, 17, 44):
        want = sorted(r["id"] for r in ns.to_table().to_pylist() if r["p"] == val(i))
        got = sorted(ns.to_table(filter=f"p = {sql(val(i))}")["id"].to_pylist())
        assert got == want, (kind, i)
    ns.recover(lease_seconds=0)
    assert claims(ns) == []


def test_two_fields_and_evolution_keep_bookkeeping_rows_null(root: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("year", pa.int32()),
            pa.field("month", pa.int32()),
            pa.field("city", pa.utf8()),
        ]
    )
    ns = PartitionedNamespace.create(
        root,
        schema=schema,
        partition_fields=[PartitionField("year", "year"), PartitionField("month", "month")],
    )

    def rows(i: int) -> pa.Table:
        return pa.table(
            {"id": [i], "year": [2000 + i % 3], "month": [1 + i % 12], "city": [f"c{i % 4}"]},
            schema=schema,
        )

    for i in range(20):
        ns.write(rows(i))
    t = ns.begin("append", "A")
    t.stage(rows(100), stage_id="s")
    ns.evolve_partition_spec([PartitionField("city", "city")])
    t2 = ns.begin("append", "B")
    t2.stage(rows(101), stage_id="s")
    for i in range(20, 45):
        ns.write(rows(i))
    ns.commit("B")
    states = txn_states(ns)
    assert {"A", "B"} <= set(states), states
    ds = lance.dataset(mpath(ns))
    bk = ds.to_table(filter="starts_with(object_id, '__')").to_pylist()
    for r in bk:
        if r["object_id"].startswith((TXN_PREFIX, INTENT_PREFIX)):
            assert (r["year"], r["month"], r["city"]) == (None, None, None), r
    prefix_rows_agree(ns)
    ns.commit("A")
    assert no_duplicates(ns) == sorted([*range(45), 100, 101])
    assert claims(ns) == []


def test_fold_parked_while_two_handles_create_the_same_partition(ns) -> None:
    """Two inserts of one new partition row (insert-if-absent, one winner) around a fold's
    read and commit: the __manifest must hold that object_id once."""
    base = fill_to_15_fragments(ns)

    def create_partition_88_twice() -> None:
        b = Worker(other(ns).write, tagged_rows("b", [88], 1, first_id=410))
        c = Worker(other(ns).write, tagged_rows("c", [88], 1, first_id=420))
        b.start()
        c.start()
        for w in (b, c):
            _, err = settle(w)
            assert err is None, err

    while_a_fold_is_parked(ns, create_partition_88_twice)
    assert_object_ids_unique(ns)
    assert no_duplicates(ns) == sorted([*base, 400, 410, 420])
    assert claims(ns) == []
    published_files_exist(ns)
