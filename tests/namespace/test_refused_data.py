"""Nothing silent (issue 25): data a write cannot place, values a conversion would change and
literals a filter cannot evaluate are refused with errors naming them, and nothing is written.

The rules (README, "Writes: what the data must hold"): a partition source column missing
from the data is refused (as NULL it would put every row in the NULL partition); another
missing column is NULL if nullable (as pyiceberg fills optional fields), refused if not;
values are converted only when none changes (a datetime with a time of day is no date), the
same for a write's columns and ``create_partition``'s values; a filter literal that is no
value of its type is an error in ``prune`` and in reads alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import (
    DataValidationError,
    FilterError,
    InvalidArgumentError,
    InvalidLiteralError,
    MissingPartitionSourceError,
    PartitionedNamespace,
    PartitionField,
    PartitionSpecError,
    is_retryable,
)
from airflow_provider_lance.spark.writer import WriteJob
from tests.support import events, leaf_files, sort_rows, tree


@pytest.fixture
def populated(daily: PartitionedNamespace) -> PartitionedNamespace:
    daily.write(events(9))
    return daily


def _refused(ns: PartitionedNamespace, root: Path, action: Callable[[], object]) -> Exception:
    """Run ``action``, which must raise a non-retryable project error and write nothing (a
    transaction's begin and abort may leave their records, no data)."""

    def seen() -> tuple[object, ...]:
        values = sorted(str(p.values) for p in ns.partitions())
        return leaf_files(root), values, sort_rows(ns.to_table())

    before = seen()
    with pytest.raises(DataValidationError) as info:
        action()
    assert not is_retryable(info.value)
    assert seen() == before
    return info.value


# -- missing columns ----------------------------------------------------------------------
def test_a_write_without_a_partition_source_column_is_refused_on_every_path(
    make_ns: Callable[..., PartitionedNamespace], root: Path
) -> None:
    """Before: every row went to the NULL partition and the write succeeded."""
    ns = make_ns(
        [
            PartitionField("event_date", "event_date"),
            PartitionField("year", "event_date", "date_part('year', col)"),
            PartitionField("country", "country"),
        ]
    )
    ns.write(events(6))
    data = events(3).drop_columns(["event_date"])
    direct = _refused(ns, root, lambda: ns.write(data))
    assert isinstance(direct, MissingPartitionSourceError)
    assert direct.columns == ["event_date"]
    assert direct.fields == ["event_date", "year"]
    assert "'event_date' (for partition fields 'event_date', 'year')" in str(direct)
    assert "NULL partition" in str(direct)
    # two missing sources are named together
    both = _refused(ns, root, lambda: ns.write(events(3).select(["id", "amount"])))
    assert isinstance(both, MissingPartitionSourceError)
    assert both.columns == ["event_date", "country"]
    # a write with a txn_id, and staging into a transaction
    keyed = _refused(ns, root, lambda: ns.write(data, txn_id="load-1"))
    assert isinstance(keyed, MissingPartitionSourceError)
    txn = ns.begin("append", txn_id="load-2")
    staged = _refused(ns, root, lambda: txn.stage(data, stage_id="task-1"))
    assert isinstance(staged, MissingPartitionSourceError)
    # the Spark writer's routing on an executor (the same check, before any key is computed)
    task = WriteJob(str(root), None, "spark-1", ns.version, 1 << 20)
    with pytest.raises(MissingPartitionSourceError, match="'event_date'"):
        list(task.route(iter(data.to_batches())))
    # merge routes its inserts by the same spec
    with pytest.raises(MissingPartitionSourceError, match="'country'"):
        ns.merge(events(3).drop_columns(["country"]), on=["id", "event_date"])
    # explicit NULLs are a choice, and are written to the NULL partition
    nulls = data.append_column("event_date", pa.nulls(3, pa.date32()))
    ns.write(nulls.select(events(3).column_names))
    assert ns.to_table(filter="event_date IS NULL").num_rows == 3


def test_other_missing_columns_are_null_if_nullable_and_refused_if_not(
    populated: PartitionedNamespace, root: Path
) -> None:
    """A missing nullable column reads as NULL (as pyiceberg fills optional fields); a
    missing non-nullable one is refused, on the direct path and in staging alike.

    Before: ``amount``/``country`` were filled the same way, but staging a table without
    ``event_date`` succeeded, so this test also failed then (the partition source rule)."""
    populated.write(events(2, first_id=100).select(["id", "event_date"]))
    rows = populated.to_table(filter="id >= 100")
    assert rows.column("country").to_pylist() == [None, None]
    assert rows.column("amount").to_pylist() == [None, None]
    txn = populated.begin("append", txn_id="partial")
    txn.stage(events(1, first_id=200).select(["id", "event_date"]), stage_id="a")
    error = _refused(
        populated,
        root,
        lambda: txn.stage(events(1).select(["amount", "country"]), stage_id="b"),
    )
    assert isinstance(error, MissingPartitionSourceError)  # reported before 'id'
    error = _refused(
        populated, root, lambda: populated.write(events(1).select(["event_date", "amount"]))
    )
    assert "'id' is not nullable and is missing" in str(error)


# -- lossy conversions ---------------------------------------------------------------------
def test_a_datetime_with_a_time_of_day_is_no_date_in_write_and_create_partition(
    populated: PartitionedNamespace, root: Path
) -> None:
    """Before: 13:05 was dropped silently by both (the row landed in that day's partition)."""
    afternoon = dt.datetime(2026, 1, 2, 13, 5)
    data = pa.table(
        {"id": pa.array([500], pa.int64()), "event_date": pa.array([afternoon], pa.timestamp("us"))}
    )
    error = _refused(populated, root, lambda: populated.write(data))
    assert "column 'event_date'" in str(error)
    assert "2026-01-02 13:05:00 has a time of day" in str(error)
    before = tree(root), populated.version
    with pytest.raises(PartitionSpecError, match="13:05:00 has a time of day"):
        populated.create_partition({"event_date": afternoon})
    assert (tree(root), populated.version) == before
    # a zoned timestamp is judged in its zone: 23:00 in New York is a time of day
    zoned = pa.array(
        [dt.datetime(2026, 1, 3, 4, tzinfo=dt.UTC)], pa.timestamp("us", "America/New_York")
    )
    _refused(populated, root, lambda: populated.write(data.set_column(1, "event_date", zoned)))
    # midnight loses nothing: both accept it, and agree on the partition
    midnight = dt.datetime(2026, 1, 2)
    created = populated.create_partition({"event_date": midnight})
    populated.write(data.set_column(1, "event_date", pa.array([midnight], pa.timestamp("us"))))
    assert populated.partition({"event_date": dt.date(2026, 1, 2)}) == populated.partition(
        {"event_date": created.values["event_date"]}
    )
    assert populated.to_table(filter="id = 500").column("event_date").to_pylist() == [
        dt.date(2026, 1, 2)
    ]
    # strings become dates only as YYYY-MM-DD, in both
    populated.create_partition({"event_date": "2026-01-04"})
    populated.write(data.set_column(1, "event_date", pa.array(["2026-01-04"])))
    for text in ("2026-01-04 13:00:00", "2026-1-4", "2026-13-45"):
        _refused(
            populated,
            root,
            lambda t=text: populated.write(data.set_column(1, "event_date", pa.array([t]))),
        )  # type: ignore[misc]
        with pytest.raises(PartitionSpecError, match="Failed to parse"):
            populated.create_partition({"event_date": text})


def test_numbers_are_not_read_as_points_in_time(
    make_ns: Callable[..., PartitionedNamespace], root: Path
) -> None:
    """Before: an int64 column went into a timestamp column as microseconds since 1970."""
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("us"))]
    )
    ns = make_ns([PartitionField("day", "ts", "date_trunc('day', col)")], schema=schema)
    ns.write(
        pa.table({"id": [1], "ts": pa.array([dt.datetime(2026, 1, 1, 8)], pa.timestamp("us"))})
    )
    error = _refused(ns, root, lambda: ns.write(pa.table({"id": [2], "ts": [20260101]})))
    assert "column 'ts'" in str(error)
    assert "reinterpret numbers as points in time" in str(error)


# -- filter literals ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "literal"),
    [
        ("event_date = DATE '2025-13-45'", "DATE '2025-13-45'"),
        ("event_date = '2025-13-45'", "'2025-13-45'"),
        ("event_date IN (DATE '2025-12-10', DATE '2025-02-30')", "DATE '2025-02-30'"),
        ("country = 'DE' OR event_date >= DATE '2025-12-32'", "DATE '2025-12-32'"),
        ("id = 'abc'", "'abc'"),
        ("id = 1/0", "1 / 0"),
    ],
    ids=["date-literal", "string-for-date", "in-list", "under-or", "string-for-int", "div-zero"],
)
def test_an_invalid_literal_is_an_error_naming_it_in_planning_and_reading(
    populated: PartitionedNamespace, root: Path, where: str, literal: str
) -> None:
    """Before: ``prune`` kept every partition (exit 0), and a read returned every row (the
    identity partition made the filter look exact) or failed with an optimizer-rule
    message that never named the literal."""
    before = tree(root), populated.version
    reads: list[Callable[[], object]] = [
        lambda: populated.prune(where),
        lambda: populated.to_table(filter=where),
        lambda: populated.to_reader(filter=where),
        lambda: list(populated.to_batches(filter=where)),
        lambda: populated.count_rows(filter=where),
    ]
    for read in reads:
        with pytest.raises(InvalidLiteralError) as info:
            read()
        error = info.value
        assert isinstance(error, FilterError)
        assert isinstance(error, InvalidArgumentError)
        assert not is_retryable(error)
        assert error.literal is not None
        assert literal in error.literal
        assert literal in str(error)
        assert "correct the literal" in str(error)
        assert "Optimizer rule" not in str(error)
    assert (tree(root), populated.version) == before


def test_the_cli_prune_exits_2_naming_the_literal(
    populated: PartitionedNamespace, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: it printed every partition and exited 0."""
    assert cli.main(["prune", str(root), "event_date = DATE '2025-13-45'"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "DATE '2025-13-45'" in captured.err


def test_a_timestamp_against_a_date_column_prunes_and_reads_what_sql_says(
    make_ns: Callable[..., PartitionedNamespace],
) -> None:
    """A date compares as its midnight. Before: the timestamp was truncated to its day, so
    through the identity partition (read without a residual filter) ``<`` lost that day's
    rows and ``>=``, ``=`` and ``IN`` returned rows that do not match."""
    ns = make_ns()
    ns.write(events(3, start=dt.date(2024, 12, 31)))  # ids 0, 1, 2 on Dec 31, Jan 1, Jan 2
    noon = "TIMESTAMP '2025-01-01 12:00:00'"
    expected = {
        f"event_date < {noon}": [0, 1],
        f"event_date <= {noon}": [0, 1],
        f"event_date > {noon}": [2],
        f"event_date >= {noon}": [2],
        f"event_date = {noon}": [],
        f"event_date <> {noon}": [0, 1, 2],
        f"event_date IN ({noon})": [],
        f"event_date NOT IN ({noon})": [0, 1, 2],
        f"event_date BETWEEN {noon} AND TIMESTAMP '2025-01-02 00:00:00'": [2],
        "event_date = TIMESTAMP '2025-01-01 00:00:00'": [1],
        # a zoned timestamp is not projected (every partition kept): the rows are filtered
        "event_date > arrow_cast('2025-01-01T12:00:00', 'Timestamp(Second, Some(\"+05:00\"))')": [
            2
        ],
    }
    for where, ids in expected.items():
        assert sorted(ns.to_table(filter=where).column("id").to_pylist()) == ids, where
        kept = {p.values["event_date"] for p in ns.prune(where)}
        days = {dt.date(2024, 12, 31) + dt.timedelta(days=i) for i in ids}
        assert days <= kept, where


def test_a_double_quoted_column_reads_the_rows_sql_says(
    make_ns: Callable[..., PartitionedNamespace],
) -> None:
    """In SQL, ``"country"`` names a column. Before: the filter went to pylance as it was,
    and pylance reads a double-quoted name as a string, so ``"country" = 'DE'`` compared two
    strings and every read returned no rows (and ``"amount" > 1`` failed to cast)."""
    ns = make_ns()
    ns.write(events(40))
    for bare, quoted in [
        ("country = 'DE'", "\"country\" = 'DE'"),
        ("amount > 10", '"amount" > 10'),
        ("country = 'it''s \"x\"' OR id < 3", '"country" = \'it\'\'s "x"\' OR "id" < 3'),
        (
            "event_date = DATE '2025-12-11' AND country = 'FR'",
            "\"event_date\" = DATE '2025-12-11' AND \"country\" = 'FR'",
        ),
    ]:
        expected = sorted(ns.to_table(filter=bare).column("id").to_pylist())
        assert expected, bare
        assert sorted(ns.to_table(filter=quoted).column("id").to_pylist()) == expected, quoted
        assert ns.count_rows(filter=quoted) == len(expected), quoted


def test_a_delete_with_a_double_quoted_column_removes_only_matching_rows(
    make_ns: Callable[..., PartitionedNamespace],
) -> None:
    """Before: the filter reached pylance as it was, ``"country" <> 'DE'`` compared the
    string 'country' with 'DE' (always true), and the delete removed every row."""
    ns = make_ns()
    ns.write(events(40))
    kept = sorted(ns.to_table(filter="country = 'DE'").column("id").to_pylist())
    ns.delete('"country" <> \'DE\' OR "country" IS NULL')
    assert sorted(ns.to_table().column("id").to_pylist()) == kept
