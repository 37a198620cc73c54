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
from airflow_provider_lance.namespace.format import manifest as manifest_module
from airflow_provider_lance.namespace.format import manifest_compaction
from airflow_provider_lance.namespace.format.manifest import (
    INTENT_PREFIX,
    TXN_PREFIX,
    ManifestView,
)
from airflow_provider_lance.namespace.testing import hold
from tests.support import (
    Worker,
    claims,
    fill_to_15_fragments,
    manifest_fragments,
    no_duplicates,
    other,
    published_files_exist,
    settle,
    tagged_rows,
    while_a_fold_is_parked,
)


def mpath(ns: PartitionedNamespace) -> str:
    return ns.uri + "/__manifest"


def prefix_rows_agree(ns: PartitionedNamespace) -> int:
    """At every retained __manifest version: the rows _with_prefix finds are exactly those
    a starts_with scan finds (txn rows and intents), both in the rows of a version read
    whole and through the partition indices (as in a version too big to read whole).
    Returns the number of versions."""
    ds = lance.dataset(mpath(ns))
    checked = 0
    for v in ds.versions():
        at = lance.dataset(mpath(ns), version=v["version"])
        for threshold in (manifest_module.CHEAP_WHOLE_ROWS, 0):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", threshold)
                view = ManifestView(at)
                found = {TXN_PREFIX: view.txn_rows(), INTENT_PREFIX: view.intent_rows()}
            for prefix, got in found.items():
                want = (
                    at.to_table(columns=["object_id"], filter=f"starts_with(object_id, '{prefix}')")
                    .column("object_id")
                    .to_pylist()
                )
                got_ids = [r["object_id"] for r in got]
                assert sorted(got_ids) == sorted(want), (v["version"], prefix, threshold)
        checked += 1
    return checked


def assert_object_ids_unique(ns: PartitionedNamespace) -> None:
    """Every ``__manifest`` row has an ``object_id`` of its own."""
    ids = lance.dataset(mpath(ns)).to_table(columns=["object_id"]).column("object_id").to_pylist()
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def txn_states(ns: PartitionedNamespace) -> dict[str, str]:
    return {t.txn_id: str(t.state) for t in ns.transactions()}


# -- 1. named transactions racing the fold ------------------------------------------------


@pytest.mark.parametrize(
    "point", ["commit.after_claim", "commit.before_seal", "manifest.before_swap"]
)
def test_named_commit_parked_while_a_fold_rewrites_its_rows(seeded, point) -> None:
    """T1 (partitions 1, 2 and new 5) parks at ``point``; an anonymous write makes the 16th
    fragment and folds every unindexed fragment (T1's txn row and claims among them). T1
    then goes on. Rows exactly once, T1 committed, no claim left, txn rows findable."""
    base = fill_to_15_fragments(seeded)
    txn = seeded.begin("append", "T1")
    txn.stage(tagged_rows("t1", [1, 2, 5], 1, first_id=500), stage_id="s")
    when = lambda: threading.current_thread().name == "T1"  # noqa: E731
    with hold(point, when=when) as parked:
        w = Worker(other(seeded).commit, "T1")
        w.name = "T1"
        w.start()
        parked.wait_reached()
        before = manifest_fragments(seeded)
        other(seeded).write(tagged_rows("x", [77], 1, first_id=400))
        other(seeded).write(tagged_rows("y", [78], 1, first_id=401))
        folded = manifest_fragments(seeded)
    _, err = settle(w)
    assert err is None or is_retryable(err), err
    if err is not None:
        seeded.commit("T1")
    assert folded < before + 2, (before, folded)  # a fold did happen meanwhile
    assert no_duplicates(seeded) == sorted([*base, 400, 401, 500, 501, 502])
    assert claims(seeded) == []
    assert txn_states(seeded)["T1"] == "published", txn_states(seeded)
    published_files_exist(seeded)
    prefix_rows_agree(seeded)


def test_fold_parked_while_named_commit_claims_and_publishes(seeded) -> None:
    """The fold reads (parked at before_fold), then T1 claims, seals and publishes (its
    rows in the fragments the fold will rewrite), then the fold commits (or loses)."""
    base = fill_to_15_fragments(seeded)
    txn = seeded.begin("append", "T1")
    txn.stage(tagged_rows("t1", [1, 2, 5], 1, first_id=500), stage_id="s")
    while_a_fold_is_parked(seeded, lambda: other(seeded).commit("T1"))
    assert no_duplicates(seeded) == sorted([*base, 400, 500, 501, 502])
    assert claims(seeded) == []
    assert txn_states(seeded)["T1"] == "published", txn_states(seeded)
    published_files_exist(seeded)
    prefix_rows_agree(seeded)


def test_fold_parked_while_txn_begins_and_stages(seeded) -> None:
    """A txn row inserted (begin) and updated (stage) between the fold's read and commit
    must survive the fold and be listed."""
    base = fill_to_15_fragments(seeded)

    def begin_and_stage() -> None:
        t = other(seeded).begin("append", "T2")
        t.stage(tagged_rows("t2", [1], 1, first_id=600), stage_id="s")

    while_a_fold_is_parked(seeded, begin_and_stage)
    assert "T2" in txn_states(seeded)
    seeded.commit("T2")
    assert no_duplicates(seeded) == sorted([*base, 400, 600])
    assert claims(seeded) == []
    prefix_rows_agree(seeded)


# -- 3. fold vs maintain / fold vs fold / fold vs evolve / REINDEX_ROWS ------------------
def test_fold_parked_while_maintain_compacts(seeded) -> None:
    base = fill_to_15_fragments(seeded)
    while_a_fold_is_parked(seeded, lambda: other(seeded).maintain(older_than=dt.timedelta(0)))
    assert no_duplicates(seeded) == sorted([*base, 400])
    assert_object_ids_unique(seeded)
    published_files_exist(seeded)
    seeded.write(tagged_rows("after", [1, 77], 1, first_id=900))
    assert no_duplicates(seeded) == sorted([*base, 400, 900, 901])


def test_two_folds_from_two_handles(seeded) -> None:
    base = fill_to_15_fragments(seeded)
    with hold("manifest.before_fold", times=2) as parked:
        a = Worker(other(seeded).write, tagged_rows("x", [77], 1, first_id=400))
        b = Worker(other(seeded).write, tagged_rows("y", [78], 1, first_id=401))
        a.start()
        parked.wait_reached()
        b.start()
        for _ in range(200):
            if parked.hits >= 2:
                break
            threading.Event().wait(0.05)
    a.outcome()
    b.outcome()
    assert no_duplicates(seeded) == sorted([*base, 400, 401])
    assert_object_ids_unique(seeded)
    prefix_rows_agree(seeded)


def test_fold_parked_while_spec_evolves(seeded) -> None:
    base = fill_to_15_fragments(seeded)
    while_a_fold_is_parked(
        seeded,
        lambda: other(seeded).evolve_partition_spec(
            [PartitionField("part", "part"), PartitionField("tag", "tag")]
        ),
    )
    assert no_duplicates(seeded) == sorted([*base, 400])
    t = seeded.begin("append", "T3")
    t.stage(tagged_rows("t3", [1, 9], 1, first_id=700), stage_id="s")
    seeded.commit("T3")
    for i in range(20):
        seeded.write(tagged_rows(f"g{i}", [200 + i], 1, first_id=2000 + i))
    assert "T3" in txn_states(seeded)
    assert no_duplicates(seeded) == sorted([*base, 400, 700, 701, *range(2000, 2020)])
    assert sorted(seeded.to_table(filter="tag = 't3'").column("id").to_pylist()) == [700, 701]
    assert {p.values.get("tag") for p in seeded.prune("tag = 't3'")} <= {"t3", None}
    assert claims(seeded) == []
    prefix_rows_agree(seeded)


@pytest.mark.parametrize("reindex_rows", [6, 1 << 20])
def test_concurrent_writers_with_small_reindex_rows(seeded, monkeypatch, reindex_rows) -> None:
    monkeypatch.setattr(manifest_compaction, "REINDEX_ROWS", reindex_rows)
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        h = other(seeded)
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
    got = no_duplicates(seeded)
    assert len(got) == 4 + 2 * (24 + 6 * 2)
    assert claims(seeded) == []
    states = txn_states(seeded)
    assert sorted(t for t, s in states.items() if t.startswith("W") and s == "published") == sorted(
        f"W{k}-{i}" for k in range(2) for i in range(0, 30, 5)
    ), states
    seeded.maintain(older_than=dt.timedelta(0))
    assert no_duplicates(seeded) == got
    prefix_rows_agree(seeded)
    for part in (1, 2, 305, 410):
        want = sorted(
            seeded.to_table().filter(pc.equal(seeded.to_table()["part"], part))["id"].to_pylist()
        )
        assert sorted(seeded.to_table(filter=f"part = {part}")["id"].to_pylist()) == want


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


def test_fold_parked_while_two_handles_create_the_same_partition(seeded) -> None:
    """Two inserts of one new partition row (insert-if-absent, one winner) around a fold's
    read and commit: the __manifest must hold that object_id once."""
    base = fill_to_15_fragments(seeded)

    def create_partition_88_twice() -> None:
        b = Worker(other(seeded).write, tagged_rows("b", [88], 1, first_id=410))
        c = Worker(other(seeded).write, tagged_rows("c", [88], 1, first_id=420))
        b.start()
        c.start()
        for w in (b, c):
            _, err = settle(w)
            assert err is None, err

    while_a_fold_is_parked(seeded, create_partition_88_twice)
    assert_object_ids_unique(seeded)
    assert no_duplicates(seeded) == sorted([*base, 400, 410, 420])
    assert claims(seeded) == []
    published_files_exist(seeded)
