"""Routing rows to partitions: ``split`` / ``group_rows`` against two oracles.

The oracles are the grouping this module had before it was made faster (a hash grouping
listing every group's row numbers, then one ``take`` per group: it fixes today's groups,
their order and the Python type of every value) and a grouping in plain Python (which rows
belong together, in which order). Float keys are grouped by their bits, as Arrow's hash
grouping does: -0.0 is not 0.0, NaNs of different payloads are different partitions.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.write.splitting import (
    PartitionChunk,
    group_rows,
    partition_values,
    split,
)
from tests.support import examples

ROW = "row"


# -- oracles -------------------------------------------------------------------------------------
def grouped_by_take(table: pa.Table, keys: Sequence[pa.Array]) -> Iterator[PartitionChunk]:
    """The grouping before it was made faster: hash-group the row numbers, one take each."""
    if table.num_rows == 0:
        return
    names = [f"__p{i}" for i in range(len(keys))]
    key_table = pa.table(
        {
            **dict(zip(names, keys, strict=True)),
            "__row": pa.array(np.arange(table.num_rows, dtype=np.int64)),
        }
    )
    grouped = key_table.group_by(names, use_threads=False).aggregate([("__row", "list")])
    rows = grouped.column("__row_list")
    values = [grouped.column(n).to_pylist() for n in names]
    for i in range(grouped.num_rows):
        yield PartitionChunk(tuple(v[i] for v in values), table.take(rows[i].values))


def _bits(values: pa.Array) -> list[Any]:
    """Each element of ``values`` as something ``==`` compares the way the grouping does:
    floats as their raw bits (read from the data buffer), NULL as None."""
    if not pa.types.is_floating(values.type):
        return values.to_pylist()
    width = values.type.bit_width // 8
    dtype = {2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    data = np.frombuffer(values.buffers()[1], dtype=dtype)[values.offset :][: len(values)]
    valid = values.is_valid().to_pylist()
    return [int(b) if ok else None for b, ok in zip(data.tolist(), valid, strict=True)]


def grouped_in_python(keys: Sequence[pa.Array]) -> dict[tuple[Any, ...], list[int]]:
    """Row numbers of each distinct key, in input order (dict order: first appearance)."""
    columns = [_bits(k) for k in keys]
    out: dict[tuple[Any, ...], list[int]] = {}
    for i, key in enumerate(zip(*columns, strict=True)):
        out.setdefault(key, []).append(i)
    return out


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same type; floats equal only bit for bit (NaN, -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


def same_rows(a: pa.Table, b: pa.Table) -> bool:
    """The same rows in the same order (floats bit for bit: ``equals`` says NaN != NaN)."""
    return a.schema == b.schema and all(
        _bits(a.column(i).combine_chunks()) == _bits(b.column(i).combine_chunks())
        for i in range(a.num_columns)
    )


def rows_of(chunks: Sequence[PartitionChunk]) -> list[list[int]]:
    """The row numbers of each chunk (converted all at once)."""
    flat = [part for chunk in chunks for part in chunk.data.column(ROW).chunks if len(part)]
    numbers = pa.chunked_array(flat, flat[0].type).to_pylist() if flat else []
    out: list[list[int]] = []
    start = 0
    for chunk in chunks:
        out.append(numbers[start : start + chunk.data.num_rows])
        start += chunk.data.num_rows
    return out


def check_against_oracles(table: pa.Table, keys: Sequence[pa.Array]) -> list[PartitionChunk]:
    """``group_rows`` yields what the old grouping yielded (same partitions, same values
    of the same types, same rows in the same order) and what grouping in plain Python
    yields; returns its chunks. The partitions come in the old grouping's order, or in
    order of first appearance (clustered input, sliced without the grouping: Arrow's
    hash grouping does not promise that order)."""
    new = list(group_rows(table, keys))
    old = list(grouped_by_take(table, keys))
    assert len(new) == len(old)
    bits = [_bits(k) for k in keys]

    expected = grouped_in_python(keys)
    new_rows, old_rows = rows_of(new), rows_of(old)

    def key_of(rows: list[int]) -> tuple[Any, ...]:
        """A chunk's key (its first row's), as ``==`` compares keys the grouping's way."""
        return tuple(column[rows[0]] for column in bits)

    order = [key_of(rows) for rows in new_rows]
    assert order in ([key_of(rows) for rows in old_rows], list(expected))
    by_key = {key_of(rows): o for o, rows in zip(old, old_rows, strict=True)}
    paired = [by_key[key] for key in order]  # the old chunk of each new one
    for n, o in zip(new, paired, strict=True):
        assert len(n.values) == len(o.values) == len(keys)
        assert all(same_value(a, b) for a, b in zip(n.values, o.values, strict=True)), (
            n.values,
            o.values,
        )
        assert n.data.schema == table.schema
        assert n.data.num_rows == o.data.num_rows
    # each chunk holds the same rows, in the same order, as its old one: with the row counts
    # equal chunk by chunk, that is both sequences of chunks end to end holding the same rows
    # (compared in one go: chunk by chunk takes minutes for 20,000 partitions)
    if new:
        assert same_rows(
            pa.concat_tables([n.data for n in new]), pa.concat_tables([o.data for o in paired])
        )

    python_values = [k.to_pylist() for k in keys]
    got = {}
    for chunk, rows in zip(new, new_rows, strict=True):
        key = key_of(rows)
        assert key not in got, f"partition {key} yielded twice"
        got[key] = rows
        # the chunk's values are the values of its rows
        first = tuple(column[rows[0]] for column in python_values)
        assert all(same_value(a, b) for a, b in zip(chunk.values, first, strict=True))
    assert got == expected
    assert sum(c.data.num_rows for c in new) == table.num_rows
    return new


# -- random keys ---------------------------------------------------------------------------------
NAN64 = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000000001, 0x7FF0000000000001]
FLOAT64_BITS = [
    *NAN64,
    0x0000000000000000,  # 0.0
    0x8000000000000000,  # -0.0
    0x3FF8000000000000,  # 1.5
    0x7FF0000000000000,  # inf
]
FLOAT32_BITS = [0x7FC00000, 0xFFC00000, 0x7FC00001, 0x7F800001, 0, 0x80000000, 0x3FC00000]
UTC = dt.timezone.utc

#: name -> (type, values a column of it draws from: duplicates come from a small pool)
POOLS: dict[str, tuple[pa.DataType, list[Any]]] = {
    "int64": (pa.int64(), [-(2**63), -1, 0, 1, 7, 2**63 - 1]),
    "int8": (pa.int8(), [-128, 0, 3, 127]),
    "uint32": (pa.uint32(), [0, 1, 2**32 - 1]),
    "string": (pa.utf8(), ["", "a", "b", "é", "a\x00", "ab"]),
    "large_string": (pa.large_utf8(), ["x", "", "y"]),
    "binary": (pa.binary(), [b"", b"\x00", b"\xff", b"a"]),
    "date": (pa.date32(), [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1, 1, 1)]),
    "bool": (pa.bool_(), [True, False]),
    "timestamp": (
        pa.timestamp("us", tz="UTC"),
        [dt.datetime(2025, 1, 1, tzinfo=UTC), dt.datetime(1969, 12, 31, 23, 59, tzinfo=UTC)],
    ),
    "timestamp_ns": (pa.timestamp("ns"), [dt.datetime(2025, 1, 1), dt.datetime(2025, 1, 2)]),
    "decimal": (pa.decimal128(9, 2), [decimal.Decimal("0.00"), decimal.Decimal("-1.50")]),
    "float64": (pa.float64(), FLOAT64_BITS),
    "float32": (pa.float32(), FLOAT32_BITS),
}


def key_array(kind: str, picks: list[int | None]) -> pa.Array:
    """The key column: ``picks`` index the pool of ``kind`` (None: a NULL)."""
    dtype, pool = POOLS[kind]
    mask = np.array([p is None for p in picks], dtype=bool)
    if pa.types.is_floating(dtype):  # built from bits: NaN payloads and -0.0 survive
        bits = np.array([pool[p] if p is not None else 0 for p in picks], dtype=np.uint64)
        if dtype == pa.float32():
            floats = bits.astype(np.uint32).view(np.float32)
        else:
            floats = bits.view(np.float64)
        return pa.array(floats, type=dtype, mask=mask)
    return pa.array([pool[p] if p is not None else None for p in picks], type=dtype)


@st.composite
def tables_and_keys(draw: st.DrawFn) -> tuple[pa.Table, list[pa.Array]]:
    n = draw(st.integers(0, 60))
    kinds = draw(st.lists(st.sampled_from(sorted(POOLS)), min_size=1, max_size=3))
    keys = []
    for kind in kinds:
        size = len(POOLS[kind][1])  # the pool values this column uses:
        used = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=size, unique=True))
        nulls = draw(st.booleans())
        pick = st.sampled_from(used)
        picks = draw(
            st.lists(st.one_of(pick, st.none()) if nulls else pick, min_size=n, max_size=n)
        )
        keys.append(key_array(kind, picks))
    # the rows: a row number and a payload, spread over several chunks
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=3)))
    table = pa.table(
        {ROW: pa.array(range(n), pa.int64()), "payload": pa.array([f"r{i}" for i in range(n)])}
    )
    batches = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
    return pa.concat_tables(batches), keys


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables_and_keys())
def test_group_rows_matches_the_oracles(case: tuple[pa.Table, list[pa.Array]]) -> None:
    table, keys = case
    check_against_oracles(table, keys)


@st.composite
def clustered_tables_and_keys(draw: st.DrawFn) -> tuple[pa.Table, list[pa.Array]]:
    """Rows in runs of one partition each (the shortcut for clustered input), or in runs
    where a partition comes back later (the shortcut must see it and not take it)."""
    table, keys = draw(tables_and_keys())
    groups = list(grouped_in_python(keys).values())
    order = [i for rows in groups for i in rows]
    if draw(st.booleans()) and len(order) > 2:  # a partition's first row moved to the end
        order = [*order[1:], order[0]]
    repeat = draw(st.integers(1, 8))  # every row repeated: long runs
    order = [i for i in order for _ in range(repeat)]
    positions = pa.array(order, pa.int64())
    rows = table.take(positions)  # numbered again: the oracles know rows by their number
    rows = rows.set_column(0, ROW, pa.array(range(len(order)), pa.int64()))
    return rows, [k.take(positions) for k in keys]


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clustered_tables_and_keys())
def test_clustered_input_matches_the_oracles(case: tuple[pa.Table, list[pa.Array]]) -> None:
    table, keys = case
    check_against_oracles(table, keys)


def test_clustered_input_is_sliced_not_copied() -> None:
    """Sorted input: every partition is a zero-copy slice of the input (shares its buffer)."""
    n = 1_000
    table = pa.table({ROW: pa.array(np.arange(n)), "v": pa.array(np.arange(n) * 2)})
    keys = [pa.array(np.arange(n) // 100), pa.array(["a"] * 500 + [None] * 500)]
    chunks = check_against_oracles(table, keys)
    assert len(chunks) == 10
    base = table.column("v").chunk(0).buffers()[1].address
    for i, chunk in enumerate(chunks):
        data = chunk.data.column("v").chunk(0)
        assert data.buffers()[1].address == base
        assert data.offset == 100 * i
    # the same runs, but the first partition comes back at the end: grouped, not sliced
    back = pa.concat_arrays([keys[0], pa.array([0])])
    again = pa.table({ROW: pa.array(np.arange(n + 1)), "v": pa.array(np.arange(n + 1))})
    chunks = check_against_oracles(again, [back])
    assert chunks[0].data.column(ROW).to_pylist() == [*range(100), n]


def test_dictionary_keys_are_grouped_as_the_hash_grouping_groups_them() -> None:
    """A dictionary key is grouped by index (a repeated or NULL dictionary entry is a group
    of its own), while ``not_equal`` compares values: clustered or not, it is grouped."""
    n = 16
    table = pa.table({ROW: pa.array(range(n), pa.int64())})
    cases = [
        ([0] * 8 + [1] * 8, ["a", "a"]),
        ([0] * 8 + [1] * 8, ["a", None]),
        ([0] * 4 + [1] * 4 + [2] * 4 + [1] * 4, ["a", None, "b"]),
    ]
    for indices, dictionary in cases:
        key = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(dictionary))
        new = [(c.values, c.data.column(ROW).to_pylist()) for c in group_rows(table, [key])]
        old = [(c.values, c.data.column(ROW).to_pylist()) for c in grouped_by_take(table, [key])]
        assert new == old
        assert len(new) == len(set(indices))


#: Pairs of floats (as bits) that ``==`` cannot tell apart or that are the same value:
#: keys made of them hit the one-partition shortcut, or just miss it.
LOOKALIKES = {
    "float64": [(4, 5), (0, 1), (0, 2), (0, 3), (6, 6), (0, 0)],  # indexes into the pools
    "float32": [(4, 5), (0, 1), (0, 2), (0, 3), (6, 6), (0, 0)],
}


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_lookalike_float_keys(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 20))
    keys = []
    for kind in data.draw(st.lists(st.sampled_from(sorted(LOOKALIKES)), min_size=1, max_size=2)):
        pair = data.draw(st.sampled_from(LOOKALIKES[kind]))
        keys.append(
            key_array(kind, data.draw(st.lists(st.sampled_from(pair), min_size=n, max_size=n)))
        )
    table = pa.table({ROW: pa.array(range(n), pa.int64())})
    chunks = check_against_oracles(table, keys)
    if len(chunks) == 1:
        assert chunks[0].data is table


@pytest.mark.parametrize("partitions", [1, 3, 1_000, 20_000])
def test_many_rows_many_partitions(partitions: int) -> None:
    """Inputs large enough for the hash grouping to work in several batches."""
    rng = np.random.default_rng(partitions)
    n = 120_000
    first = pa.array(rng.integers(0, partitions, n), mask=rng.random(n) < 0.01)
    second = pa.array(rng.choice(["a", "b", None], n) if partitions > 1 else ["a"] * n)
    bits = rng.choice(np.array(FLOAT64_BITS[:6], dtype=np.uint64), n)
    floats = pa.array(bits.view(np.float64) if partitions > 1 else np.zeros(n))
    table = pa.table({ROW: pa.array(np.arange(n)), "v": pa.array(rng.random(n))})
    for keys in ([first], [first, second], [floats, second], [second, floats, first]):
        check_against_oracles(table, keys)


# -- pinned behaviour ------------------------------------------------------------------------
def floats(bits: list[int]) -> pa.Array:
    return pa.array(np.array(bits, dtype=np.uint64).view(np.float64))


def test_float_keys_group_by_their_bits() -> None:
    """-0.0 and 0.0 are two partitions, so are NaNs of different payloads; one NaN's rows
    stay together; NULL is a partition of its own."""
    nan, neg_nan, payload_nan = NAN64[0], NAN64[1], NAN64[2]
    keys = [
        pa.array(
            np.array([0, 0x8000000000000000, nan, 0, neg_nan, nan, payload_nan, 0], np.uint64).view(
                np.float64
            ),
            mask=np.array([0, 0, 0, 0, 0, 0, 0, 1], dtype=bool),
        )
    ]
    table = pa.table({ROW: pa.array(range(8), pa.int64())})
    chunks = check_against_oracles(table, keys)
    rows = sorted(c.data.column(ROW).to_pylist() for c in chunks)
    assert rows == [[0, 3], [1], [2, 5], [4], [6], [7]]
    by_first_row = {c.data.column(ROW)[0].as_py(): c.values[0] for c in chunks}
    assert struct.pack("<d", by_first_row[1]) == struct.pack("<d", -0.0)
    assert math.isnan(by_first_row[2])
    assert by_first_row[7] is None


def test_one_partition_passes_the_table_through() -> None:
    """All rows of one partition: no grouping, no copy, the very table comes back."""
    table = pa.concat_tables([pa.table({ROW: pa.array([0, 1])}), pa.table({ROW: pa.array([2])})])
    for keys, values in [
        ([pa.array(["x"] * 3)], ("x",)),
        ([pa.nulls(3, pa.int32())], (None,)),
        ([pa.array([dt.date(2025, 1, 1)] * 3), pa.nulls(3)], (dt.date(2025, 1, 1), None)),
    ]:
        (chunk,) = check_against_oracles(table, keys)
        assert chunk.data is table
        assert chunk.values == values
    nan = floats([NAN64[0]] * 3)  # one NaN: one partition
    (chunk,) = check_against_oracles(table, [nan])
    assert chunk.data is table
    assert math.isnan(chunk.values[0])
    for differ in ([0, 0x8000000000000000, 0], [NAN64[0], NAN64[2], NAN64[0]]):
        assert len(check_against_oracles(table, [floats(differ)])) == 2
    # one value, but a NULL among them: two partitions
    assert len(check_against_oracles(table, [pa.array([1, None, 1])])) == 2


def test_key_types_without_equality_are_grouped() -> None:
    """An interval key (no ``equal`` kernel): the hash grouping still groups it."""
    table = pa.table({ROW: pa.array(range(4), pa.int64())})
    interval = pa.array(
        [pa.MonthDayNano([1, 2, 3]), None, pa.MonthDayNano([1, 2, 4]), pa.MonthDayNano([1, 2, 3])],
        pa.month_day_nano_interval(),
    )
    chunks = check_against_oracles(table, [interval])
    assert [c.data.column(ROW).to_pylist() for c in chunks] == [[0, 3], [1], [2]]
    same = pa.array([pa.MonthDayNano([1, 2, 3])] * 4, pa.month_day_nano_interval())
    assert len(check_against_oracles(table, [same])) == 1


def test_empty_input_yields_nothing() -> None:
    table = pa.table({ROW: pa.array([], pa.int64())})
    assert list(group_rows(table, [pa.array([], pa.int64())])) == []


# -- split(): through a namespace's schema and partition spec ------------------------------------
SCHEMA = pa.schema(
    [
        pa.field(ROW, pa.int64(), False),
        pa.field("n", pa.int32()),
        pa.field("s", pa.utf8()),
        pa.field("d", pa.date32()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("b", pa.bool_()),
        pa.field("f", pa.float64()),
    ]
)
SPECS = {
    "identity-int": [PartitionField("p_n", "n")],
    "day": [PartitionField("p_d", "d")],
    "bucket-then-letter": [
        PartitionField("p_bn", "n", "abs(hash(col)) % 16"),
        PartitionField("p_ts", "s", "left(col, 1)"),
    ],
    "year-hour-bool": [
        PartitionField("p_year", "d", "date_part('year', col)"),
        PartitionField("p_hour", "ts", "date_trunc('hour', col)"),
        PartitionField("p_b", "b"),
    ],
    "float": [PartitionField("p_f", "f"), PartitionField("p_s", "s")],
}


def rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    days = rng.integers(0, 800, n)
    base = dt.datetime(2024, 12, 30, tzinfo=UTC)
    return pa.table(
        {
            ROW: pa.array(np.arange(n)),
            "n": pa.array(rng.integers(-50, 50, n).astype(np.int32), mask=rng.random(n) < 0.05),
            "s": pa.array(rng.choice(["apple", "avocado", "banana", "", None], n).tolist()),
            "d": pa.array([dt.date(2023, 1, 1) + dt.timedelta(days=int(d)) for d in days]),
            "ts": pa.array(
                [base + dt.timedelta(minutes=int(m)) for m in rng.integers(0, 600, n)],
                pa.timestamp("us", tz="UTC"),
            ),
            "b": pa.array(rng.choice([True, False, None], n).tolist(), pa.bool_()),
            "f": pa.array(
                rng.choice(np.array(FLOAT64_BITS, np.uint64), n).view(np.float64),
                mask=rng.random(n) < 0.05,
            ),
        },
        schema=SCHEMA,
    )


@pytest.mark.parametrize("spec", sorted(SPECS))
def test_split_matches_the_oracles(tmp_path: Path, spec: str) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=SPECS[spec])
    state = ns.state()
    for n, seed in [(0, 0), (1, 1), (5_000, 2), (50_000, 3)]:
        table = state.schema.conform_input(rows(n, seed), spec=state.current_spec)
        keys = partition_values(table, state.current_spec, state.schema)
        chunks = list(split(table, state.current_spec, state.schema))
        expected = list(grouped_by_take(table, keys))
        assert len(chunks) == len(expected)
        for got, want in zip(chunks, expected, strict=True):
            assert all(same_value(a, b) for a, b in zip(got.values, want.values, strict=True))
            assert got.data.column(ROW).to_pylist() == want.data.column(ROW).to_pylist()
        if n:
            check_against_oracles(table, keys)


def test_written_rows_sit_in_the_partition_of_their_values(tmp_path: Path) -> None:
    """A write of many DataFusion batches, through transforms: every leaf holds exactly
    the rows whose partition values are the leaf's, in input order."""
    spec = SPECS["bucket-then-letter"] + [PartitionField("p_year", "d", "date_part('year', col)")]
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=spec)
    data = rows(40_000, 4)
    ns.write(data)
    state = ns.state()
    table = state.schema.conform_input(data, spec=state.current_spec)
    keys = partition_values(table, state.current_spec, state.schema)
    expected = {
        tuple(c.values): c.data.column(ROW).to_pylist()
        for c in grouped_by_take(data.select([ROW]), keys)
    }
    stored = {}
    for partition in ns.partitions():
        leaf = lance.dataset(partition.location, version=partition.read_version)
        stored[tuple(partition.values.values())] = leaf.to_table(columns=[ROW]).column(ROW)
    assert {k: v.to_pylist() for k, v in stored.items()} == expected
