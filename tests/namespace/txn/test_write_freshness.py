"""A direct write stages on the state its handle holds while it asks whether that state is
still the latest, instead of asking first: on an object store that question is a listing of
``__manifest``'s versions, one round trip, which now overlaps the write's first partition
lookup. The answer is taken before anything is written, and a newer state is then staged on
from the start.

What must hold: a write through a handle whose state is older than the latest (another
handle committed since) routes its rows as a write that asked first would: on the newest
schema, spec and partitions, even when its data is a stream that cannot be read twice. And
a handle holds the state its own write made, so that its next write needs no reload.
"""

from __future__ import annotations

import datetime as dt
import threading

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace.format.manifest import Manifest, ManifestView
from airflow_provider_lance.namespace.format.state import NamespaceState
from tests.support import other, tagged_rows, tags_by_part


def stream(table: pa.Table) -> pa.RecordBatchReader:
    """``table`` as a stream: consumed by one read."""
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())


def test_the_latest_check_runs_while_the_write_looks_its_partitions_up(seeded, monkeypatch) -> None:
    """The check is held until the write has started looking its partitions up in the held
    state: done one after the other (check first), the hold would never be released."""
    looking_up = threading.Event()
    released_in_time: list[bool] = []
    real_find, real_is_latest = NamespaceState.find, ManifestView.is_latest

    def find(self: NamespaceState, *args: object, **kwargs: object) -> object:
        looking_up.set()
        return real_find(self, *args, **kwargs)  # type: ignore[arg-type]

    def is_latest(self: ManifestView) -> bool:
        released_in_time.append(looking_up.wait(timeout=10))
        return real_is_latest(self)

    monkeypatch.setattr(NamespaceState, "find", find)
    monkeypatch.setattr(ManifestView, "is_latest", is_latest)
    seeded.write(tagged_rows("w", [2, 3], 1, first_id=100))
    assert released_in_time == [True]  # asked once, while the lookup ran
    monkeypatch.undo()
    assert tags_by_part(seeded) == {1: ["seed"] * 2, 2: ["seed", "seed", "w"], 3: ["w"]}


def test_an_overwrite_through_an_older_handle_replaces_what_the_newer_state_holds(seeded) -> None:
    """Another handle overwrites partition 1 after this handle loaded its state. This
    handle's overwrite of partition 1, a stream, replaces the newer rows: staged on the
    held state it would name a version of partition 1 no longer published, and fail."""
    other(seeded).write(tagged_rows("b", [1], 3, first_id=50), "overwrite")
    result = seeded.write(stream(tagged_rows("a", [1], 1, first_id=90)), "overwrite")
    assert tags_by_part(seeded) == {1: ["a"], 2: ["seed"] * 2}
    assert result.manifest_version == other(seeded).version


def test_an_append_through_an_older_handle_to_a_partition_dropped_since_recreates_it(
    seeded,
) -> None:
    """Another handle drops partition 2 after this handle loaded its state. This
    handle's append to partition 2 creates it anew, as a write that asked first would: staged
    on the held state, its files would go to the dropped leaf, and the write be refused."""
    other(seeded).drop_partitions("part = 2")
    seeded.write(stream(tagged_rows("a", [2], 1, first_id=90)))
    assert tags_by_part(seeded) == {1: ["seed"] * 2, 2: ["a"]}


def test_rows_only_the_newer_schema_takes_are_written_through_an_older_handle(seeded) -> None:
    """Another handle adds a column after this handle loaded its state. Rows with that
    column are written whole: the held state's schema would refuse the column."""
    other(seeded).add_column(pa.field("score", pa.int64()))
    rows = tagged_rows("a", [1], 1, first_id=90).append_column(
        "score", pa.array([2**40], pa.int64())
    )
    seeded.write(stream(rows))
    table = other(seeded).to_table(filter="id = 90")
    assert table.column("score").to_pylist() == [2**40]


def test_a_handle_holds_the_state_its_own_write_made(seeded, monkeypatch) -> None:
    """After its write, a handle holds the state that write made: its next write opens
    ``__manifest`` not once (it would load the latest again, the state it held being the
    one before its own write)."""
    opened: list[int | None] = []
    real_open = Manifest.open

    def open_(self: Manifest, version: int | None = None) -> object:
        opened.append(version)
        return real_open(self, version)

    first = seeded.write(tagged_rows("a", [3], 1, first_id=90))
    monkeypatch.setattr(Manifest, "open", open_)
    second = seeded.write(tagged_rows("b", [3], 1, first_id=91), "overwrite")
    assert opened == []
    assert second.manifest_version == first.manifest_version + 1
    assert tags_by_part(seeded) == {1: ["seed"] * 2, 2: ["seed"] * 2, 3: ["b"]}


@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_write_through_a_handle_whose_state_was_cleaned_up_stages_on_the_latest(
    seeded, mode
) -> None:
    """Another handle writes, compacts ``__manifest`` and removes every older version and
    file (``maintain``): the held state can no longer be read. The write's partition
    lookup fails on it, and the write stages on the latest state instead, as a write
    that asked first would have."""
    handle = other(seeded)
    for i in range(3):
        seeded.write(tagged_rows(f"w{i}", [2, 3], 1, first_id=200 + 10 * i))
    seeded.maintain(older_than=dt.timedelta(0))
    handle.write(stream(tagged_rows("h", [3, 4], 1, first_id=300)), mode)
    expected_3 = ["h"] if mode == "overwrite" else ["h", "w0", "w1", "w2"]
    assert tags_by_part(seeded) == {
        1: ["seed"] * 2,
        2: ["seed", "seed", "w0", "w1", "w2"],
        3: expected_3,
        4: ["h"],
    }
