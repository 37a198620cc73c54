"""Partition pruning: unit cases, and soundness proven with hypothesis."""

from __future__ import annotations

import datetime as dt
import decimal
import tempfile
from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance.namespace import FilterError, PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.format import manifest as manifest_module
from airflow_provider_lance.namespace.format.expressions import bind
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.read.coverage import pruned_rows
from airflow_provider_lance.namespace.read.pruning import (
    holds_for_kept_partitions,
    is_parsed,
    parse_filter,
)
from airflow_provider_lance.namespace.write.splitting import partition_values
from tests.support import examples

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("n", pa.int32()),
        pa.field("s", pa.utf8()),
        pa.field("d", pa.date32()),
    ]
)
BASE_DAY = dt.date(2024, 12, 20)  # the generated dates straddle a year boundary
WORDS = ["apple", "avocado", "banana", "blueberry", "cherry", "", "Zed", "é-accent"]

SPECS: dict[str, list[PartitionField]] = {
    "identity-n": [PartitionField("p_n", "n")],
    "identity-s": [PartitionField("p_s", "s")],
    "identity-d": [PartitionField("p_d", "d")],
    "year": [PartitionField("p_year", "d", "date_part('year', col)")],
    "month": [PartitionField("p_month", "d", "date_part('month', col)")],
    "day": [PartitionField("p_day", "d", "date_part('day', col)")],
    "week": [PartitionField("p_week", "d", "date_trunc('week', col)")],
    "bucket-n": [PartitionField("p_bn", "n", "abs(hash(col)) % 4")],
    "bucket-s": [PartitionField("p_bs", "s", "abs(hash(col)) % 3")],
    "truncate-n": [PartitionField("p_tn", "n", "col - (col % 5)", pa.int32())],
    "truncate-s": [PartitionField("p_ts", "s", "left(col, 1)")],
    "year-first-letter": [
        PartitionField("p_year", "d", "date_part('year', col)"),
        PartitionField("p_ts", "s", "left(col, 1)"),
    ],
    "bucket-then-identity": [
        PartitionField("p_bn", "n", "abs(hash(col)) % 4"),
        PartitionField("p_s", "s"),
    ],
}


def make_ns(root: Path, specs: list[str], data: pa.Table) -> PartitionedNamespace:
    """A namespace whose data is written in equal slices under each spec version in turn."""
    ns = PartitionedNamespace.create(root, schema=SCHEMA, partition_fields=SPECS[specs[0]])
    step = max(1, -(-data.num_rows // len(specs)))
    for i, name in enumerate(specs):
        if i:
            ns.evolve_partition_spec(SPECS[name])
        part = data.slice(i * step, step)
        if part.num_rows:
            ns.write(part)
    return ns


def rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist())


def check_filter(ns: PartitionedNamespace, data: pa.Table, where: str) -> None:
    """Every partition that can hold a matching row is pruned in; reads equal filtering all rows.

    A matching row's partition values are computed under every spec version: a sound pruner
    must keep a partition of any version whose values some matching row would have there.
    """
    expected = bind(where, SCHEMA, "filter").filter(data)
    pruned = {p.object_id for p in ns.prune(where)}
    state = ns.state()
    # The predicate pushed into the __manifest scan (a fresh state: nothing loaded) keeps
    # exactly what filtering every loaded row keeps: it selects a superset.
    fresh = NamespaceState.load(state.root, state.view)
    pushed = pruned_rows(fresh, where).column("object_id").to_pylist()
    assert state.tables.num_rows >= 0  # loaded: pruned_rows filters it in memory
    assert sorted(pushed) == sorted(pruned_rows(state, where).column("object_id").to_pylist())
    reachable = set()
    for version, spec in state.specs.items():
        values = partition_values(expected, spec, state.schema)
        reachable |= {
            (version, tuple(v[i].as_py() for v in values)) for i in range(expected.num_rows)
        }
    for partition in ns.partitions():
        if (partition.spec_version, tuple(partition.values.values())) in reachable:
            assert partition.object_id in pruned, (where, partition.values)
    assert rows(ns.to_table(filter=where)) == rows(expected), where


# -- unit cases ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sample() -> pa.Table:
    n = 60
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "n": pa.array([None if i % 13 == 0 else (i % 21) - 10 for i in range(n)], pa.int32()),
            "s": pa.array([None if i % 11 == 0 else WORDS[i % len(WORDS)] for i in range(n)]),
            "d": pa.array(
                [None if i % 17 == 0 else BASE_DAY + dt.timedelta(days=i % 30) for i in range(n)]
            ),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def spaces(
    sample: pa.Table, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, PartitionedNamespace]:
    root = tmp_path_factory.mktemp("pruning")
    return {name: make_ns(root / name, [name], sample) for name in SPECS}


def count(ns: PartitionedNamespace, where: str) -> int:
    return len(ns.prune(where))


def fresh_state(ns: PartitionedNamespace) -> NamespaceState:
    """The state of ``ns`` on a ``__manifest`` view of its own: a view's first question
    decides whether it reads the version whole (and keeps it) or scans per question."""
    return PartitionedNamespace.open(ns.uri).state()


def test_equality_prunes_to_one_partition(spaces: dict[str, PartitionedNamespace]) -> None:
    assert count(spaces["identity-n"], "n = 3") == 1
    assert count(spaces["identity-s"], "s = 'apple'") == 1
    assert count(spaces["bucket-n"], "n = 3") == 1  # exact through hash
    assert count(spaces["truncate-n"], "n = 3") == 1
    assert count(spaces["year"], "d = DATE '2025-01-02'") == 1
    assert count(spaces["month"], "d = '2025-01-02'") == 1
    assert count(spaces["identity-n"], "n = 1000") == 0


def test_in_lists_and_literal_on_the_left(spaces: dict[str, PartitionedNamespace]) -> None:
    assert count(spaces["identity-n"], "n IN (1, 2, 3)") == 3
    assert count(spaces["identity-n"], "3 = n") == 1
    assert count(spaces["identity-n"], "-5 > n") == len(
        [
            p
            for p in spaces["identity-n"].partitions()
            if p.values["p_n"] is not None and p.values["p_n"] < -5
        ]
    )


def test_ranges_only_through_order_preserving_expressions(
    spaces: dict[str, PartitionedNamespace],
) -> None:
    total = {k: len(ns.partitions()) for k, ns in spaces.items()}
    assert count(spaces["identity-n"], "n > 5") == 5  # 6..10
    assert count(spaces["truncate-n"], "n >= 6") == 2  # buckets 5 and 10
    assert count(spaces["truncate-s"], "s >= 'b'") == 3  # b, c, é (Z < b)
    # 2024 and 2025, not the NULL partition: the boundary value's partition is always kept
    assert count(spaces["year"], "d < DATE '2025-01-01'") == 2
    assert count(spaces["year"], "d < DATE '2024-12-31'") == 1
    assert count(spaces["week"], "d >= DATE '2025-01-10'") < total["week"]
    # cyclic / unordered expressions keep everything
    assert count(spaces["month"], "d < DATE '2025-01-01'") == total["month"]
    assert count(spaces["day"], "d > DATE '2025-01-10'") == total["day"]
    assert count(spaces["bucket-n"], "n > 5") == total["bucket-n"]


@pytest.mark.parametrize(
    ("where", "matches"),
    [
        ("n = 0.5", lambda v: False),
        ("NOT (n = 0.5)", lambda v: True),  # found by test_pruning_is_sound
        ("n != 2.5", lambda v: True),
        ("n < 2.5", lambda v: v <= 2),
        ("n <= 2.5", lambda v: v <= 2),
        ("n > 2.5", lambda v: v >= 3),
        ("NOT (n > 2.5)", lambda v: v <= 2),
        ("n >= -2.5", lambda v: v >= -2),
        ("2.5 > n", lambda v: v <= 2),
        ("n BETWEEN 0.5 AND 2.5", lambda v: 1 <= v <= 2),
        ("n NOT BETWEEN 0.5 AND 2.5", lambda v: v < 1 or v > 2),
        ("n IN (0.5, 2)", lambda v: v == 2),
        # like ``n NOT IN (2)``: the pruner keeps the NULL partition (sound, not exact)
        ("n NOT IN (0.5, 2)", lambda v: v is None or v != 2),  # type: ignore[operator]
        ("n IN (0.5, 1.5)", lambda v: False),
        ("n NOT IN (0.5)", lambda v: True),
    ],
)
def test_non_integral_constants_against_an_integer_column(
    spaces: dict[str, PartitionedNamespace], where: str, matches: Callable[[int | None], bool]
) -> None:
    """Pruning is exact for identity partitions: no integer equals 2.5, ``n < 2.5`` keeps
    the partitions up to 2, and its negation keeps every non-NULL one (truncating the
    constant to 2 pruned the partition of 2 from ``NOT (n = 2.5)``-like filters)."""
    ns = spaces["identity-n"]
    values = {p.object_id: p.values["p_n"] for p in ns.partitions()}
    keeps_null = where == "n NOT IN (0.5, 2)"
    expected = {oid for oid, v in values.items() if (v is not None or keeps_null) and matches(v)}
    assert {p.object_id for p in ns.prune(where)} == expected
    read = set(ns.to_table(filter=where, columns=["n"]).column("n").to_pylist())
    assert read == {v for oid, v in values.items() if oid in expected and v is not None}


def test_null_handling(spaces: dict[str, PartitionedNamespace]) -> None:
    assert count(spaces["identity-n"], "n IS NULL") == 1
    assert count(spaces["bucket-n"], "n IS NULL") == 1
    total = len(spaces["identity-n"].partitions())
    assert count(spaces["identity-n"], "n IS NOT NULL") == total - 1
    assert count(spaces["identity-n"], "n = NULL") == 0
    assert count(spaces["identity-n"], "n NOT IN (1, NULL)") == 0


def test_boolean_structure(spaces: dict[str, PartitionedNamespace]) -> None:
    ns = spaces["identity-n"]
    total = len(ns.partitions())
    assert count(ns, "n = 1 OR n = 2") == 2
    assert count(ns, "n = 1 AND n = 2") == 0
    assert count(ns, "NOT (n <> 4)") == 1
    assert count(ns, "NOT (n > -8)") == 3  # -10, -9, -8
    assert count(ns, "n = 1 OR s = 'apple'") == total  # s is not a partition source here
    assert count(ns, "n = 1 AND s LIKE 'a%'") == 1
    assert count(ns, "n + 1 = 3") == total  # not understood: keep everything
    assert count(ns, "false") == 0
    assert count(ns, "n BETWEEN 2 AND 4") == 3
    assert count(ns, "n NOT BETWEEN -9 AND 10") == 1


def test_multi_level_specs(spaces: dict[str, PartitionedNamespace]) -> None:
    ns = spaces["year-first-letter"]
    assert all(
        p.values["p_year"] == 2025 for p in ns.prune("d > DATE '2025-01-01' AND s = 'banana'")
    )
    assert {p.values["p_ts"] for p in ns.prune("s = 'banana'")} == {"b"}


def test_bad_filters(spaces: dict[str, PartitionedNamespace]) -> None:
    ns = spaces["identity-n"]
    with pytest.raises(FilterError, match="no_such_column"):
        ns.prune("no_such_column = 1")
    with pytest.raises(FilterError, match="not a valid expression"):
        ns.prune("n = = 1")
    with pytest.raises(FilterError, match="not a boolean"):
        ns.prune("n + 1")
    with pytest.raises(FilterError, match="not deterministic"):
        ns.prune("n > random()")


@pytest.mark.parametrize(
    "where",
    [
        "n > 2.5",
        "n < -2.5",
        "n >= 2.5",
        "n = 2.5",
        "d >= '2025-01-01'",
        "d BETWEEN '2024-12-25' AND '2025-01-05'",
        "s > 'b' AND s < 'c'",
        "NOT (s IN ('apple', 'banana')) OR n IS NULL",
        "abs(hash(n)) % 4 = 1",
    ],
)
def test_every_spec_is_sound_for(
    spaces: dict[str, PartitionedNamespace], sample: pa.Table, where: str
) -> None:
    for ns in spaces.values():
        check_filter(ns, sample, where)


@pytest.mark.parametrize(
    ("spec", "where", "holds"),
    [
        ("identity-d", "d BETWEEN DATE '2024-12-25' AND DATE '2025-01-05'", True),
        ("identity-d", "d = DATE '2024-12-25' OR d IS NULL", True),
        ("identity-n", "n IN (1, 2) AND NOT (n < 0)", True),
        ("identity-n", "n > 2.5", True),
        ("identity-s", "s >= 'b' AND s IS NOT NULL", True),
        ("identity-n", "n <> 3", False),  # a NULL partition passes the pruner, not SQL
        ("identity-s", "s NOT IN ('apple')", False),
        ("identity-s", "NOT (s = 'apple')", False),
        ("identity-s", "s LIKE 'b%'", False),
        ("identity-n", "n + 1 > 2", False),
        ("identity-n", "n > 2 AND s = 'apple'", False),  # s is not a partition column
        ("year", "d >= DATE '2025-01-01'", False),  # not identity
        ("bucket-then-identity", "s = 'apple'", True),
        ("bucket-then-identity", "n = 1", False),
        ("identity-n", "abs(hash(n)) % 4 = 1", False),
    ],
)
def test_which_filters_hold_for_every_kept_partition(
    spaces: dict[str, PartitionedNamespace], spec: str, where: str, holds: bool
) -> None:
    """Partitions of such a spec are read without the residual filter (the property test
    below checks the reads stay exact)."""
    state = spaces[spec].state()
    bound, pred = parse_filter(where, state.schema)
    [fields] = state.specs.values()
    assert holds_for_kept_partitions(bound, pred, fields, state.schema) is holds


# -- property-based soundness ------------------------------------------------------------
ints = st.integers(min_value=-12, max_value=12)
days = st.integers(min_value=0, max_value=40).map(lambda k: BASE_DAY + dt.timedelta(days=k))
words = st.sampled_from(WORDS)


def _date(day: dt.date) -> str:
    return f"DATE '{day.isoformat()}'"


def _quote(word: str) -> str:
    return "'" + word.replace("'", "''") + "'"


OPS = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
atoms = st.one_of(
    st.builds(lambda op, v: f"n {op} {v}", OPS, ints),
    st.builds(lambda op, v: f"{v} {op} n", OPS, ints),
    st.builds(lambda op, v: f"n {op} {v + 0.5}", OPS, ints),
    st.builds(lambda op, v: f"s {op} {_quote(v)}", OPS, words),
    st.builds(lambda op, v: f"d {op} {_date(v)}", OPS, days),
    st.builds(
        lambda vs: f"n IN ({', '.join(map(str, vs))})", st.lists(ints, min_size=1, max_size=4)
    ),
    st.builds(
        lambda vs: f"s NOT IN ({', '.join(map(_quote, vs))})",
        st.lists(words, min_size=1, max_size=3),
    ),
    st.builds(lambda a, b: f"n BETWEEN {a} AND {b}", ints, ints),
    st.builds(lambda a, b: f"d NOT BETWEEN {_date(a)} AND {_date(b)}", days, days),
    st.sampled_from(
        ["n IS NULL", "s IS NOT NULL", "d IS NULL", "s LIKE 'b%'", "n + 1 > 2", "true"]
    ),
)
filters = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner),
        st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner),
        st.builds(lambda a: f"NOT ({a})", inner),
    ),
    max_leaves=5,
)


@st.composite
def datasets(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(min_value=1, max_value=40))
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "n": pa.array(draw(st.lists(st.none() | ints, min_size=n, max_size=n)), pa.int32()),
            "s": pa.array(draw(st.lists(st.none() | words, min_size=n, max_size=n)), pa.utf8()),
            "d": pa.array(draw(st.lists(st.none() | days, min_size=n, max_size=n)), pa.date32()),
        },
        schema=SCHEMA,
    )


@settings(
    max_examples=examples(100),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=datasets(),
    specs=st.lists(st.sampled_from(sorted(SPECS)), min_size=1, max_size=3, unique=True),
    wheres=st.lists(filters, min_size=1, max_size=6),
)
def test_pruning_is_sound(data: pa.Table, specs: list[str], wheres: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ns = make_ns(Path(tmp) / "ns", specs, data)
        for where in wheres:
            check_filter(ns, data, where)


# -- the predicate pushed into the __manifest scan ---------------------------------------------
@pytest.fixture
def pushed_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prunes as on a namespace too big to read whole: the filter is pushed into the scan
    (the test namespaces are small enough that a filter not parsed yet would otherwise be
    parsed while every row loads)."""
    monkeypatch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", 0)


@pytest.mark.usefixtures("pushed_down")
def test_a_prune_reads_only_the_rows_its_index_finds(
    spaces: dict[str, PartitionedNamespace],
) -> None:
    """Planning one value reads the ``__manifest`` rows the partition column's index finds,
    not every partition row (a million-partition namespace plans one date in milliseconds);
    a predicate with nothing to push (a negation) reads every row, as before."""
    ns = spaces["identity-n"]
    state = fresh_state(ns)
    assert [p.values for p in state.partitions_from_rows(pruned_rows(state, "n = 3"))] == [
        {"p_n": 3}
    ]
    assert state._tables is None  # no full load
    indexed = {tuple(i.field_names): i.index_type for i in state.view._ds.describe_indices()}
    assert indexed[("p_n",)] == "BTree"
    kept = pruned_rows(state, "n <> 3").column("p_n").to_pylist()
    assert 3 not in kept
    assert None in kept  # the NULL partition is kept: the pruner's (sound) answer
    assert state._tables is not None


@pytest.mark.usefixtures("pushed_down")
def test_a_predicate_lance_cannot_plan_falls_back_to_every_row(
    spaces: dict[str, PartitionedNamespace],
) -> None:
    """Lance's filter planner is stricter than Arrow's (an int32 column against 2.5): a
    pushed-down predicate it refuses reads every row instead, never fails the prune."""
    ns = spaces["identity-n"]
    rows = fresh_state(ns).candidates(pc.field("p_n") > pc.scalar(2.5))
    assert rows.num_rows == len(ns.partitions())


def test_an_evolved_spec_and_maintain_index_the_partition_columns(tmp_path: Path) -> None:
    """A partition column added by evolution is indexed, and ``maintain`` indexes one a
    namespace made without (an earlier release) lacks; prunes are right either way."""
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema=SCHEMA, partition_fields=SPECS["identity-n"]
    )
    ns.write(pa.table({"id": [1, 2], "n": [1, 2], "s": ["a", "b"], "d": [None, None]}, SCHEMA))
    ns.evolve_partition_spec(SPECS["identity-s"])
    ns.write(pa.table({"id": [3], "n": [3], "s": ["c"], "d": [None]}, SCHEMA))

    def indexed() -> set[str]:
        return {i.field_names[0] for i in ns.state().view._ds.describe_indices()}

    def pruned(where: str) -> list[dict[str, object]]:
        return sorted((p.values for p in ns.prune(where)), key=str)

    # v1's partitions (by n) are kept for s: v1 does not partition by it
    by_s = [{"p_n": 1}, {"p_n": 2}, {"p_s": "c"}]

    assert indexed() == {"object_id", "object_type", "p_n", "p_s"}
    manifest = lance.dataset(str(tmp_path / "ns" / "__manifest"))
    manifest.drop_index("p_n_idx")
    manifest.drop_index("p_s_idx")
    assert pruned("s = 'c'") == by_s  # unindexed: the scan filters the column
    assert pruned("n >= 2") == [{"p_n": 2}, {"p_s": "c"}]
    ns.maintain()
    assert indexed() == {"object_id", "object_type", "p_n", "p_s"}
    assert pruned("s = 'c'") == by_s


@pytest.mark.usefixtures("pushed_down")
def test_a_filter_no_partition_can_match_reads_no_row(
    spaces: dict[str, PartitionedNamespace],
) -> None:
    """A contradiction prunes everything without a scan, and its empty result has the
    columns of a loaded state's."""
    ns = spaces["identity-n"]
    state = fresh_state(ns)
    for where in ("n = 1 AND n = 2", "n = NULL", "FALSE"):
        empty = pruned_rows(state, where)
        assert empty.num_rows == 0, where
    assert state._tables is None
    assert empty.schema == state.tables.schema


def test_a_filter_of_the_wrong_type_is_refused_before_anything_is_read(
    spaces: dict[str, PartitionedNamespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filter that is no string is refused without starting the read of every row a
    filter not parsed yet starts beside its parse."""

    def started(self: NamespaceState) -> None:
        raise AssertionError("a read of every row started for a filter that is refused")

    state = fresh_state(spaces["identity-n"])
    monkeypatch.setattr(NamespaceState, "load_tables_beside", started)
    for bad in (["n = 3"], 3, b"n = 3"):
        with pytest.raises(FilterError, match="string"):
            pruned_rows(state, bad)  # type: ignore[arg-type]


def test_a_filter_not_parsed_yet_is_parsed_while_a_small_manifest_loads_whole(
    spaces: dict[str, PartitionedNamespace], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first query of a process: DataFusion parses a filter it has not seen while a
    storage thread reads a small ``__manifest`` whole, and the prune keeps what the scan
    the filter is pushed into keeps. A big ``__manifest`` is never read whole for it: a
    filter parsed already is pushed into its scan, and so is one not parsed yet; a bad
    filter is the error, not the load."""
    ns = spaces["identity-n"]
    where = "n = 3 OR n = 987654321"  # no other test parses it
    state = fresh_state(ns)
    assert not is_parsed(where, state.schema)
    overlapped = state.partitions_from_rows(pruned_rows(state, where))
    assert state._tables is not None  # read whole, beside the parse

    monkeypatch.setattr(manifest_module, "CHEAP_WHOLE_ROWS", 0)
    again = fresh_state(ns)
    pushed = again.partitions_from_rows(pruned_rows(again, where))
    assert again._tables is None  # parsed already: pushed into the scan
    assert [p.values for p in overlapped] == [p.values for p in pushed] == [{"p_n": 3}]
    big = fresh_state(ns)
    assert [p.values for p in big.partitions_from_rows(pruned_rows(big, "n = 3 OR n = 98765"))] == [
        {"p_n": 3}
    ]
    assert big._tables is None
    monkeypatch.undo()
    with pytest.raises(FilterError, match="no_such_column"):
        pruned_rows(fresh_state(ns), "no_such_column = 1")


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", None])
def test_pushed_down_prunes_of_timestamps_decimals_and_booleans(tmp_path: Path, zone) -> None:
    """The types the hypothesis test does not generate: a prune pushed into the
    ``__manifest`` scan keeps exactly what filtering the loaded rows keeps, for zoned and
    zone-less timestamps (identity and ``date_trunc``), decimals and booleans, and a read
    returns the rows DataFusion's filter selects. (A zone-less literal against a column
    zoned in New York is read in New York time: the pruner once cast it as UTC and, the
    identity partition seeming exact, read a row of 02:00 UTC for ``>= 00:00``.)"""
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), False),
            pa.field("ts", pa.timestamp("us", tz=zone)),
            pa.field("dec", pa.decimal128(10, 2)),
            pa.field("b", pa.bool_()),
        ]
    )
    base = dt.datetime(2025, 1, 1, tzinfo=dt.UTC if zone else None)
    data = pa.table(
        {
            "id": list(range(6)),
            "ts": [base + dt.timedelta(hours=13 * i) for i in range(5)] + [None],
            "dec": [decimal.Decimal(i) / 4 for i in range(5)] + [None],
            "b": [True, False, None, True, False, True],
        },
        schema,
    )
    wheres = [
        "ts >= TIMESTAMP '2025-01-02 00:00:00'",
        "ts = TIMESTAMP '2025-01-01 13:00:00'",
        "ts IS NULL",
        "ts < '2025-01-02 02:00:00'",
        "ts < TIMESTAMP '2025-01-02 02:00:00+00:00'",
        "dec = 0.5",
        "dec > 0.3",
        "b = true",
        "b IS NULL",
    ]
    specs = [
        [PartitionField("p", "ts")],
        [PartitionField("p", "ts", "date_trunc('day', col)")],
        [PartitionField("p", "dec")],
        [PartitionField("p", "b")],
    ]
    for i, fields in enumerate(specs):
        ns = PartitionedNamespace.create(
            tmp_path / f"ns{i}", schema=schema, partition_fields=fields
        )
        ns.write(data)
        loaded = ns.state()
        assert loaded.tables.num_rows == len(ns.partitions())  # loaded: filtered in memory
        for where in wheres:
            fresh = NamespaceState.load(loaded.root, loaded.view)
            pushed = sorted(pruned_rows(fresh, where).column("object_id").to_pylist())
            assert pushed == sorted(pruned_rows(loaded, where).column("object_id").to_pylist())
            expected = bind(where, schema, "filter").filter(data)
            got = ns.to_table(filter=where).column("id").to_pylist()
            assert sorted(got) == sorted(expected.column("id").to_pylist()), (fields, where)
