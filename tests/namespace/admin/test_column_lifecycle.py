"""The column lifecycle as a user meets it (issue 25): what ``schema`` shows is what
writes take and reads return, after every schema change; a name dropped and added again is
a new column (a new field id: the dropped column's values never reappear under it); reads
at an older version use that version's schema; what is refused says what to do.

Tests marked "already held" pin behaviour that was right before this file; the others
failed on the code before it (see each docstring).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import (
    DataValidationError,
    FilterError,
    PartitionedNamespace,
    PartitionField,
    PartitionSpecError,
    SchemaError,
)
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from tests.support import EVENTS_SCHEMA, by_id, events, no_duplicates, tree

D10, D11 = dt.date(2025, 12, 10), dt.date(2025, 12, 11)


def ids_of(ns: PartitionedNamespace, name: str) -> list[int]:
    """The field ids of every stored column called ``name`` (dropped ones too), in order."""
    return [int(f.metadata[b"lance:field_id"]) for f in ns.stored_schema if f.name == name]


def rows(table: pa.Table) -> Counter[tuple]:
    """The rows of ``table`` as a multiset (a repeated row counts twice)."""
    return Counter(tuple(sorted(r.items())) for r in table.to_pylist())


@pytest.fixture
def by_country(root: Path) -> PartitionedNamespace:
    """Partitioned by ``country`` (identity), 4 rows over 4 countries, then evolved to
    ``event_date``: the country partitions stay, under spec v1."""
    ns = PartitionedNamespace.create(
        root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("country", "country")]
    )
    ns.write(events(4, days=2))
    ns.evolve_partition_spec([PartitionField("event_date", "event_date")])
    return ns


# -- a name dropped and added again ----------------------------------------------------------
@pytest.mark.parametrize("dtype", [pa.float64(), pa.utf8()], ids=["same-type", "other-type"])
def test_a_column_added_again_is_new_and_empty_in_old_partitions_and_after_writes(
    daily: PartitionedNamespace, dtype: pa.DataType
) -> None:
    """Already held: drop_column("amount") then add_column("amount", same or other type)
    gives a new field id; rows written before read NULL (never the dropped values), also
    after a write rewrites their partition, and filters see the new column only."""
    daily.write(events(4, days=2))
    daily.drop_column("amount")
    daily.add_column(pa.field("amount", dtype))
    assert ids_of(daily, "amount") == [3, 4]
    assert daily.schema.names == ["id", "event_date", "country", "amount"]
    assert daily.schema.field("amount").type == dtype
    assert by_id(daily.to_table(), "amount") == {0: None, 1: None, 2: None, 3: None}
    new = events(2, days=2, first_id=10).drop_columns(["amount"])
    values = pa.array([7, 8], pa.float64()).cast(dtype)
    daily.write(new.append_column(pa.field("amount", dtype), values))  # old partitions
    want = {0: None, 1: None, 2: None, 3: None, 10: values[0].as_py(), 11: values[1].as_py()}
    assert by_id(daily.to_table(), "amount") == want
    assert no_duplicates(daily) == [0, 1, 2, 3, 10, 11]
    assert sorted(daily.to_table(filter="amount IS NULL").column("id").to_pylist()) == [0, 1, 2, 3]
    assert daily.count_rows(filter="amount IS NOT NULL") == 2


def test_a_filter_on_a_column_added_again_never_trusts_the_dropped_columns_partitions(
    by_country: PartitionedNamespace,
) -> None:
    """Failed before: spec v1 partitions by ``country`` (identity); after evolving away from
    it, dropping it and adding ``country`` again, ``country = 'US'`` returned all 4 old rows
    (with country NULL) and count_rows said 4: the reader took the old partitions' values,
    which are the dropped column's, as proof every row matched and skipped the filter."""
    ns = by_country
    ns.drop_column("country")
    ns.add_column(pa.field("country", pa.utf8()))
    assert ns.to_table(filter="country = 'US'").num_rows == 0
    assert ns.count_rows(filter="country = 'US'") == 0
    assert no_duplicates(ns) == [0, 1, 2, 3]
    assert sorted(ns.to_table(filter="country IS NULL").column("id").to_pylist()) == [0, 1, 2, 3]
    ns.write(
        events(1, first_id=9).drop_columns(["country"]).append_column("country", pa.array(["US"]))
    )
    got = ns.to_table(filter="country = 'US'")
    assert got.column("id").to_pylist() == [9]


def test_a_filter_on_a_name_renamed_onto_a_dropped_partition_source_reads_the_rows(
    by_country: PartitionedNamespace,
) -> None:
    """Failed before: the same with a rename: a new column ``label`` renamed to the dropped
    partition source's name ``country``: the old partitions' country values were trusted
    for it, and ``country = 'US'`` returned the old rows, whose ``country`` is NULL."""
    ns = by_country
    ns.drop_column("country")
    ns.add_column(pa.field("label", pa.utf8()))
    ns.rename_column("label", "country")
    assert ns.to_table(filter="country = 'US'").num_rows == 0
    assert ns.count_rows(filter="country = 'US'") == 0


# -- rename, then the old name ---------------------------------------------------------------
def test_rename_then_add_the_old_name_keeps_the_data_with_the_renamed_column(
    daily: PartitionedNamespace,
) -> None:
    """Already held: after rename amount -> amt, ``amount`` can be added (a new id); the
    old values stay under ``amt``, the new ``amount`` is NULL for old rows, writes take both,
    and a read before the rename sees ``amount`` with its values."""
    daily.write(events(2, days=2))
    before = daily.version
    daily.rename_column("amount", "amt")
    daily.add_column(pa.field("amount", pa.float64()))
    assert ids_of(daily, "amt") == [3]
    assert ids_of(daily, "amount") == [4]
    data = events(1, first_id=5).rename_columns(["id", "event_date", "country", "amt"])
    daily.write(data.append_column("amount", pa.array([9.0])))
    got = daily.to_table(columns=["id", "amt", "amount"])
    assert rows(got) == rows(
        pa.table({"id": [0, 1, 5], "amt": [0.0, 1.5, 0.0], "amount": [None, None, 9.0]})
    )
    old = daily.to_table(columns=["id", "amount"], as_of=before)
    assert rows(old) == rows(pa.table({"id": [0, 1], "amount": [0.0, 1.5]}))


# -- promote ---------------------------------------------------------------------------------
def test_a_promoted_column_takes_wide_values_in_partitions_written_before(
    daily: PartitionedNamespace,
) -> None:
    """Failed before: after add_column(int32) and promote_column(int64), ``schema``
    said int64 but a write of 2**40 to a partition written before the promotion was refused
    ("cannot be written as int32"). Now that partition is rewritten in int64 at its first
    write (as after add_column); a read before the promotion still has int32."""
    daily.add_column(pa.field("n", pa.int32()))
    daily.write(events(2, days=1).append_column("n", pa.array([1, 2], pa.int32())))
    before = daily.version
    daily.promote_column("n", pa.int64())
    assert daily.schema.field("n").type == pa.int64()
    daily.write(events(1, days=1, first_id=7).append_column("n", pa.array([2**40])))
    assert by_id(daily.to_table(), "n") == {0: 1, 1: 2, 7: 2**40}
    [p] = daily.partitions()
    leaf = lance.dataset(p.location, version=p.read_version)
    assert leaf.schema.field("n").type == pa.int64()
    old = daily.to_table(as_of=before)
    assert old.schema.field("n").type == pa.int32()
    assert by_id(old, "n") == {0: 1, 1: 2}


def test_a_promoted_column_takes_wide_values_in_a_merge_into_an_old_partition(
    daily: PartitionedNamespace,
) -> None:
    """Failed before: the same through ``merge`` (an update and an insert), refused with
    "cannot be written as int32"."""
    daily.add_column(pa.field("n", pa.int32()))
    daily.write(events(2, days=1).append_column("n", pa.array([1, 2], pa.int32())))
    daily.promote_column("n", pa.int64())
    upsert = events(2, days=1, first_id=1).append_column("n", pa.array([2**40, 2**41]))
    daily.merge(upsert, on=["id", "event_date"])
    assert by_id(daily.to_table(), "n") == {0: 1, 1: 2**40, 2: 2**41}


# -- drop: reads, filters, time travel ------------------------------------------------------
def test_time_travel_before_a_drop_reads_that_versions_schema(daily: PartitionedNamespace) -> None:
    """Already held: ``as_of`` a version before drop_column reads the dropped column with
    its values, filters and projects on it; the latest version refuses it."""
    daily.write(events(4, days=2))
    before = daily.version
    daily.drop_column("amount")
    daily.add_column(pa.field("amount", pa.utf8()))
    old = daily.to_table(as_of=before)
    assert old.column_names == EVENTS_SCHEMA.names
    assert by_id(old, "amount") == {0: 0.0, 1: 1.5, 2: 3.0, 3: 4.5}
    assert rows(daily.to_table(columns=["id", "amount"], filter="amount > 2", as_of=before)) == (
        rows(pa.table({"id": [2, 3], "amount": [3.0, 4.5]}))
    )
    assert daily.state(before).schema.active.field("amount").type == pa.float64()
    assert daily.to_table(filter="amount IS NULL").num_rows == 4  # the new column


def test_reads_and_filters_on_a_dropped_column_say_it_was_dropped(
    daily: PartitionedNamespace,
) -> None:
    """Failed before for filters: ``amount > 1`` after drop_column("amount") failed with
    DataFusion's "No field named amount." alone. Now it says the column was dropped and how
    to read it (as_of); a projection said "(it was dropped)" already."""
    daily.write(events(2))
    daily.drop_column("amount")
    for read in (daily.to_table, daily.count_rows, daily.prune):
        with pytest.raises(FilterError, match=r"'amount' was dropped.*as_of") as info:
            read(filter="amount > 1")  # type: ignore[operator]
        assert not info.value.retryable
    with pytest.raises(SchemaError, match=r"unknown column 'amount' \(it was dropped.*as_of"):
        daily.to_table(columns=["id", "amount"])
    with pytest.raises(FilterError) as other:  # an unknown name is not called dropped
        daily.to_table(filter="amount2 > 1")
    assert "dropped" not in str(other.value)


def test_a_filter_read_before_a_drop_is_refused_after_it_as_a_new_one_is(
    daily: PartitionedNamespace,
) -> None:
    """Failed before: a filter parsed before drop_column("amount") was served from the
    parse cache after it (``pa.Schema`` equality ignores the field metadata a drop
    changes), bound to the dropped column; the read then failed deep in the pruner with
    a ``SchemaError`` instead of the ``FilterError`` a new handle gives. A read that
    reached the leaves could have read the dropped column."""
    daily.write(events(2))
    for read in (daily.to_table, daily.count_rows, daily.prune):
        read(filter="amount > 1")  # type: ignore[operator]
    version = daily.version
    daily.drop_column("amount")
    for read in (daily.to_table, daily.count_rows, daily.prune):
        with pytest.raises(FilterError, match=r"'amount' was dropped.*as_of"):
            read(filter="amount > 1")  # type: ignore[operator]
    before, after = daily.state(version).schema, daily.state().schema
    assert before != after
    assert hash(before) != hash(after)
    assert before == NamespaceSchema(pa.schema(list(before.arrow)))


def test_writing_a_dropped_column_says_what_to_do(daily: PartitionedNamespace, root: Path) -> None:
    """Failed before (message only: "column 'amount' was dropped from the namespace"): the
    refusal now says to leave it out, or add it again as a new column; nothing is written.
    Leaving it out was accepted already."""
    daily.write(events(2))
    daily.drop_column("amount")
    files = tree(root)
    with pytest.raises(DataValidationError, match=r"leave it out.*add_column") as info:
        daily.write(events(1, first_id=5))
    assert not info.value.retryable
    assert tree(root) == files
    daily.write(events(1, first_id=5).drop_columns(["amount"]))
    assert no_duplicates(daily) == [0, 1, 5]


def test_adding_an_existing_column_says_what_to_do(daily: PartitionedNamespace, root: Path) -> None:
    """Failed before (message only: "duplicate column name 'amount'"): add_column of a name
    in use now names its type and id and the three ways out; nothing changes."""
    files = tree(root)
    with pytest.raises(SchemaError, match=r"promote_column.*rename_column.*drop_column") as info:
        daily.add_column(pa.field("amount", pa.float64()))
    assert "duplicate" in str(info.value)
    assert "field id 3" in str(info.value)
    assert not info.value.retryable
    with pytest.raises(SchemaError, match=r"rename or drop_column 'country' first"):
        daily.rename_column("amount", "country")
    assert tree(root) == files


# -- partition source columns ---------------------------------------------------------------
def test_a_partition_source_is_dropped_only_once_no_current_spec_uses_it(
    daily: PartitionedNamespace,
) -> None:
    """Already held: dropping ``event_date`` while the current spec partitions by it is
    refused, saying to evolve the spec first; after that the drop works, old partitions
    stay readable (without the column) and prunable by their spec, writes leave it out, and
    the column cannot come back into a spec."""
    daily.write(events(4, days=2))
    with pytest.raises(PartitionSpecError, match="evolve the partition spec without it") as info:
        daily.drop_column("event_date")
    assert not info.value.retryable
    daily.evolve_partition_spec([PartitionField("country", "country")])
    daily.drop_column("event_date")
    assert daily.schema.names == ["id", "country", "amount"]
    daily.write(events(2, first_id=10).drop_columns(["event_date"]))
    assert no_duplicates(daily) == [0, 1, 2, 3, 10, 11]
    v1 = [p for p in daily.partitions() if p.spec_version == 1]
    assert sorted(p.values["event_date"] for p in v1) == [D10, D11]
    assert sorted(daily.to_table(filter="country = 'US'").column("id").to_pylist()) == [0, 10]
    with pytest.raises(PartitionSpecError, match="dropped"):
        daily.evolve_partition_spec([PartitionField("event_date", "event_date")])


def test_after_a_spec_evolution_writes_need_the_new_source_and_reads_are_unchanged(
    daily: PartitionedNamespace,
) -> None:
    """Already held: evolve_partition_spec changes no column: the schema stays, every row
    reads as before, and a write must carry the new spec's source column."""
    daily.write(events(4, days=2))
    schema = daily.schema
    daily.evolve_partition_spec([PartitionField("country", "country")])
    assert daily.schema == schema
    assert no_duplicates(daily) == [0, 1, 2, 3]
    with pytest.raises(DataValidationError, match="country"):
        daily.write(events(1, first_id=9).drop_columns(["country"]))


# -- what describe shows ---------------------------------------------------------------------
def test_describe_shows_the_columns_and_the_dropped_ones_apart(
    daily: PartitionedNamespace, capsys: pytest.CaptureFixture[str]
) -> None:
    """Failed before: ``describe`` printed every stored field under "schema:", so a name
    dropped and added again was listed twice (one of them marked only in a metadata dict).
    Now "columns:" lists what reads return and writes take, dropped ones apart."""
    daily.drop_column("amount")
    daily.add_column(pa.field("amount", pa.utf8()))
    assert cli.main(["describe", daily.uri]) == 0
    out = capsys.readouterr().out

    def rows(section: str) -> list[list[str]]:
        """The table rows (column, type, nullable, field_id, ...) under a section title."""
        body = out.split(f"\n{section}", 1)[1].split("\n\n", 1)[0]
        return [line.split() for line in body.splitlines()[2:]]  # title, header

    columns = rows("columns:")
    assert [r[0] for r in columns] == ["id", "event_date", "country", "amount"]
    assert columns[-1][:2] == ["amount", "string"]
    assert columns[-1][3] == "4"
    dropped = rows("dropped columns")
    assert [r[:2] for r in dropped] == [["amount", "double"]]
    assert dropped[0][3] == "3"
