"""Reading a staged transaction before it is published (``Transaction.to_reader``), and
writes consuming their input incrementally."""

from __future__ import annotations

import datetime as dt
import glob
from collections.abc import Iterator
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    FilterError,
    PartitionedNamespace,
    SchemaError,
    TransactionAborted,
)
from tests.support import events, sort_rows, tree

DAY = dt.date(2025, 12, 1)


def leaf_versions(ns: PartitionedNamespace) -> dict[str, int]:
    """The latest version of every leaf table on disk (published or not)."""
    return {p.object_id: lance.dataset(p.location).version for p in ns.partitions()}


def test_staged_rows_are_read_without_publishing_or_writing_anything(
    daily: PartitionedNamespace, root: Path
) -> None:
    daily.write(events(20, start=DAY, days=2))
    txn = daily.begin("append", txn_id="load")
    staged = events(30, start=DAY + dt.timedelta(days=1), days=3, first_id=100)
    txn.stage(staged.slice(0, 12), stage_id="a")
    txn.stage(staged.slice(12), stage_id="b")  # two stages: both are read
    files, version, leaves = tree(root), daily.version, leaf_versions(daily)

    assert sort_rows(txn.to_table()) == sort_rows(staged)  # the staged rows, not the published
    some = txn.to_table(columns=["id", "amount"], filter="amount >= 30 AND country = 'DE'")
    assert some.schema.names == ["id", "amount"]
    want = [r for r in staged.to_pylist() if r["amount"] >= 30 and r["country"] == "DE"]
    assert sorted(some["id"].to_pylist()) == sorted(r["id"] for r in want)
    assert sum(b.num_rows for b in txn.to_reader(batch_size=4)) == 30
    assert max(b.num_rows for b in txn.to_reader(batch_size=4)) <= 4

    assert tree(root) == files  # nothing written: no leaf version, no record
    assert (daily.version, leaf_versions(daily)) == (version, leaves)
    assert daily.count_rows() == 20  # readers still see only the published rows
    daily.commit("load")
    assert daily.count_rows() == 50


def test_an_overwrite_reads_as_the_partitions_new_content(daily: PartitionedNamespace) -> None:
    daily.write(events(20, start=DAY, days=2))
    txn = daily.begin("overwrite", txn_id="fix")
    replacement = events(3, start=DAY, days=1, first_id=500)
    txn.stage(replacement, stage_id="w")
    assert sort_rows(txn.to_table()) == sort_rows(replacement)


def test_a_rewrite_after_add_column_reads_only_the_new_rows_under_current_names(
    daily: PartitionedNamespace,
) -> None:
    """A partition staged after add_column is rewritten whole (its published rows copied
    into the stage): the copy is not part of what the transaction writes. Columns renamed
    after staging are read under their new names (the files name field ids)."""
    daily.write(events(10, start=DAY, days=1))
    daily.add_column(pa.field("channel", pa.utf8()))
    txn = daily.begin("append", txn_id="t")
    new = events(4, start=DAY, days=1, first_id=100).append_column(
        "channel", pa.array(["web", None, "app", "web"])
    )
    stage = txn.stage(new, stage_id="w")
    assert next(iter(stage.partitions.values())).base_fragments  # a copy was made
    daily.rename_column("channel", "source")
    got = txn.to_table(columns=["id", "source", "country"])
    assert sort_rows(got) == sort_rows(
        new.select(["id", "channel", "country"]).rename_columns(["id", "source", "country"])
    )
    assert txn.to_table(filter="source IS NULL")["id"].to_pylist() == [101]


def test_bad_requests_and_aborted_transactions_fail_clearly(daily: PartitionedNamespace) -> None:
    txn = daily.begin("append", txn_id="t")
    txn.stage(events(5, start=DAY, days=1), stage_id="w")
    with pytest.raises(FilterError):
        txn.to_table(filter="nope > 1")
    with pytest.raises(SchemaError):
        txn.to_table(columns=["nope"])
    daily.abort("t")
    with pytest.raises(TransactionAborted, match="was aborted"):
        txn.to_table()
    assert sort_rows(daily.begin("append", txn_id="empty").to_table()) == []


def _checked_batches(root: Path, batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Yield ``batches``; before each next one, the previous must be on disk already."""
    written = len(glob.glob(str(root / "*$dataset" / "data" / "*.lance")))
    for number, batch in enumerate(batches):
        yield batch
        now = len(glob.glob(str(root / "*$dataset" / "data" / "*.lance")))
        assert now > written, f"batch {number} was not written before the next was asked for"
        written = now


@pytest.mark.parametrize("via", ["stage", "write"])
def test_writes_consume_an_iterator_batch_by_batch(
    daily: PartitionedNamespace, root: Path, via: str
) -> None:
    """With ``flush_bytes`` below a batch, each batch is on disk before the next is asked
    for: the core never collects the iterator (a large ``flush_bytes`` only bounds how much
    it buffers)."""
    data = events(40, start=DAY, days=1)
    batches = _checked_batches(root, data.to_batches(max_chunksize=10))
    if via == "stage":
        txn = daily.begin("append", txn_id="s")
        stage = txn.stage(batches, stage_id="w", flush_bytes=1)
        assert sum(len(p.fragments) for p in stage.partitions.values()) == 4
        daily.commit("s")
    else:
        daily.write(batches, txn_id="w", flush_bytes=1)
    assert sort_rows(daily.to_table()) == sort_rows(data)


def test_a_large_flush_size_buffers_instead(daily: PartitionedNamespace, root: Path) -> None:
    """The check above can fail: with the default flush size the batches are buffered."""
    batches = _checked_batches(root, events(40, start=DAY, days=1).to_batches(max_chunksize=10))
    with pytest.raises(AssertionError, match="batch 0 was not written"):
        daily.write(batches, txn_id="w")
    assert daily.count_rows() == 0
