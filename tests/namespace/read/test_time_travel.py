"""Time travel, history and tags: every past state stays readable exactly as it was, the
history says what each version did, and tags keep a state through ``maintain``."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import (
    HistoryEntry,
    InvalidArgumentError,
    PartitionedNamespace,
    PartitionField,
    TagExistsError,
    TagInfo,
    VersionNotFoundError,
)
from airflow_provider_lance.namespace.format.manifest_compaction import AUTO_COMPACT_FRAGMENTS
from tests.support import TAGGED, examples, tagged_rows, tree


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def noted(table: pa.Table, note: str) -> pa.Table:
    return table.append_column("note", pa.array([note] * table.num_rows, pa.utf8()))


def changes(entry: HistoryEntry) -> set[tuple[Any, ...]]:
    """(values, rows, created, read_version) of each partition an entry published."""
    return {
        (tuple(sorted(p.values.items())), p.rows, p.created, p.read_version)
        for p in entry.partitions
    }


def leaf_versions(location: str) -> list[int]:
    return [int(v["version"]) for v in lance.dataset(location).versions()]


def location_of(ns: PartitionedNamespace, part: int) -> str:
    return next(p.location for p in ns.partitions() if p.values["part"] == part)


#: Zones a host's local time may be in: pylance gives commit times as naive local times.
ZONES = ["UTC", "America/New_York", "Asia/Kolkata"]


@pytest.fixture(params=ZONES)
def local_zone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The process's local time zone (``TZ``) set to each of :data:`ZONES` in turn."""
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    offset = time.localtime(0).tm_gmtoff  # 1970-01-01: New York -5 h, Kolkata +5:30
    assert (offset == 0) == (request.param == "UTC"), f"no zone data for {request.param}"
    yield request.param
    monkeypatch.undo()
    time.tzset()


# -- history -------------------------------------------------------------------------------
def test_history_says_what_each_version_did(tagged: PartitionedNamespace, root: Path) -> None:
    first = tagged.write(tagged_rows("a", [1, 2], 2, first_id=0))
    replaced = tagged.write(tagged_rows("b", [2, 3], 1, first_id=10), mode="overwrite")
    tagged.create_partitions([{"part": 7}, {"part": 8}])
    tagged.add_column(pa.field("note", pa.utf8()))
    named = tagged.write(noted(tagged_rows("n", [3], 3, first_id=20), "x"), txn_id="load-1")
    tagged.evolve_partition_spec([PartitionField("part", "part"), PartitionField("tag", "tag")])
    last = tagged.write(noted(tagged_rows("c", [1], 1, first_id=30), "y"))

    entries = tagged.history()

    assert [(e.operation, e.mode) for e in entries] == [
        ("write", "append"),
        ("evolve_partition_spec", None),
        ("write", "append"),
        ("add_column", None),
        ("create_partitions", None),
        ("write", "overwrite"),
        ("write", "append"),
        ("create", None),
    ]
    by_version = {e.version: e for e in entries}
    assert [e.version for e in entries] == sorted(by_version, reverse=True)
    assert all(not e.internal for e in entries)
    times = [e.timestamp for e in entries]
    assert times == sorted(times, reverse=True)
    assert all(t.tzinfo is not None for t in times)

    appended = by_version[first.manifest_version]
    assert (appended.rows, appended.txn_id) == (4, first.txn_id)
    assert changes(appended) == {((("part", 1),), 2, True, 1), ((("part", 2),), 2, True, 1)}
    overwritten = by_version[replaced.manifest_version]
    assert overwritten.rows == 2
    assert changes(overwritten) == {((("part", 2),), 1, False, 2), ((("part", 3),), 1, True, 1)}
    (created,) = [e for e in entries if e.operation == "create_partitions"]
    assert created.rows == 0
    assert {p.values["part"] for p in created.partitions} == {7, 8}
    assert all(p.created for p in created.partitions)
    (added,) = [e for e in entries if e.operation == "add_column"]
    assert added.details == {"column": "note", "type": "string"}
    loaded = by_version[named.manifest_version]
    assert (loaded.txn_id, loaded.mode, loaded.rows) == ("load-1", "append", 3)
    # partition 3 predates add_column: the append rewrote it, its old row came along
    assert changes(loaded) == {((("part", 3),), 3, False, 2)}
    (evolved,) = [e for e in entries if e.operation == "evolve_partition_spec"]
    assert evolved.details == {"spec_version": 2, "partition_fields": ["part", "tag"]}
    newest = by_version[last.manifest_version]
    assert changes(newest) == {((("part", 1), ("tag", "c")), 1, True, 1)}
    assert entries[-1].details == {"spec_version": 1, "partition_fields": ["part"]}

    everything = tagged.history(include_internal=True)
    assert [e.version for e in everything] == list(range(tagged.version, 0, -1))
    assert {e.version for e in everything if not e.internal} == set(by_version)
    assert {e.operation for e in everything if e.internal} >= {"create_table", "seal", "index"}
    assert [e.version for e in tagged.history(limit=3)] == [e.version for e in entries[:3]]
    as_json = [e.to_dict() for e in entries]
    assert json.loads(json.dumps(as_json)) == as_json
    # a new handle (nothing cached) describes the same history
    fresh = PartitionedNamespace.open(root).history()
    assert [e.to_dict() for e in fresh] == as_json


def test_history_tells_appends_that_rewrote_old_partitions_from_overwrites(
    tagged: PartitionedNamespace,
) -> None:
    """After add_column an append rewrites a partition whole (old rows and new); the
    history counts only the new rows, and tells it from an overwrite of such a partition."""
    tagged.write(tagged_rows("old", [1, 2, 3], 4, first_id=0))
    tagged.add_column(pa.field("note", pa.utf8()))
    appended = tagged.write(noted(tagged_rows("a", [1], 2, first_id=100), "a"))
    replaced = tagged.write(noted(tagged_rows("o", [2], 3, first_id=200), "o"), mode="overwrite")
    mixed = tagged.write(noted(tagged_rows("m", [1, 3], 1, first_id=300), "m"))

    by_version = {e.version: e for e in tagged.history()}
    rewrite, overwrite = (
        by_version[appended.manifest_version],
        by_version[replaced.manifest_version],
    )
    assert (rewrite.mode, rewrite.rows) == ("append", 2)
    assert (overwrite.mode, overwrite.rows) == ("overwrite", 3)
    assert by_version[mixed.manifest_version].mode == "append"
    assert changes(by_version[mixed.manifest_version]) == {
        ((("part", 1),), 1, False, 3),
        ((("part", 3),), 1, False, 2),
    }
    assert tagged.count_rows() == 12 + 2 - 4 + 3 + 2


def test_history_after_maintain_lists_the_retained_versions(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("a", [1], 1, first_id=0))
    kept = tagged.write(tagged_rows("b", [1, 2], 1, first_id=10))
    tagged.tag("kept")
    tagged.write(tagged_rows("c", [2], 1, first_id=20))
    tagged.maintain(older_than=dt.timedelta(0))

    everything = tagged.history(include_internal=True)
    retained = sorted(
        int(v["version"]) for v in lance.dataset(tagged.uri + "/__manifest").versions()
    )
    assert sorted(e.version for e in everything) == retained
    (entry,) = [e for e in everything if e.version == kept.manifest_version]
    # the version before it is gone: created is judged from the leaves (2's was new)
    assert (entry.operation, entry.mode, entry.rows, entry.tags) == (
        "write",
        "append",
        2,
        ("kept",),
    )
    assert {(p.values["part"], p.created) for p in entry.partitions} == {(1, False), (2, True)}


def test_history_of_transactions_committed_together_and_aborted(
    tagged: PartitionedNamespace,
) -> None:
    tagged.write(tagged_rows("a", [1], 1, first_id=0))
    for txn_id, part in (("load.0", 1), ("load.1", 2)):
        tagged.begin("append", txn_id).stage(tagged_rows(txn_id, [part], 2, first_id=10 * part))
    both = tagged.commit(["load.0", "load.1"], txn_id="publish")
    doomed = tagged.begin("overwrite", "doomed")
    doomed.stage(tagged_rows("doomed", [1], 5, first_id=100))
    tagged.abort("doomed")

    (latest, *_) = tagged.history()
    assert (latest.version, latest.operation, latest.txn_id) == (
        both.manifest_version,
        "write",
        "publish",
    )
    assert (latest.mode, latest.rows) == ("append", 4)
    assert {(p.values["part"], p.rows, p.created) for p in latest.partitions} == {
        (1, 2, False),
        (2, 2, True),
    }
    everything = tagged.history(include_internal=True)
    assert [(e.operation, e.txn_id) for e in everything if e.version > both.manifest_version] == [
        ("abort", "doomed"),
        ("stage", "doomed"),
    ]
    assert tagged.count_rows() == 5


def test_history_lists_compactions_as_bookkeeping(tagged: PartitionedNamespace) -> None:
    """Publishes compact __manifest now and then (pylance cannot describe a compaction that
    rewrote the index: it is still named one)."""
    for i in range(AUTO_COMPACT_FRAGMENTS + 2):
        tagged.write(tagged_rows(f"t{i}", [i], 1, first_id=i))  # new rows: new fragments
    everything = tagged.history(include_internal=True)
    assert [e.version for e in everything] == list(range(tagged.version, 0, -1))
    bookkeeping = {e.operation for e in everything if e.internal}
    assert "compact" in bookkeeping
    assert "other" not in bookkeeping
    writes = [e for e in tagged.history() if e.operation == "write"]
    assert len(writes) == AUTO_COMPACT_FRAGMENTS + 2
    assert all(e.rows == 1 and e.mode == "append" for e in writes)


def test_history_names_table_operations_with_and_without_a_txn_id(
    tagged: PartitionedNamespace,
) -> None:
    """A table operation is listed under its own name (not as a write), whether a
    transaction row names it (``txn_id``) or only its leaf commits do; the partitions a
    publish dropped are in ``details``; a merge's intent and a spec's fence are
    bookkeeping."""
    tagged.write(tagged_rows("seed", [1, 2, 3, 4], 3, first_id=0))
    tagged.write(tagged_rows("more", [1], 1, first_id=100))  # a second fragment to compact
    dropped = {p.values["part"]: p.object_id for p in tagged.partitions()}
    tagged.merge(tagged_rows("m", [1, 5], 1, first_id=0), on=["id", "part"])
    tagged.delete("id = 1")
    tagged.drop_partitions("part = 2")
    tagged.optimize()
    tagged.delete("part = 3 OR id = 0")  # drops partition 3, deletes a row of partition 1
    tagged.merge(tagged_rows("m2", [1], 1, first_id=100), on=["id", "part"], txn_id="m-1")
    tagged.drop_partitions("part = 4", txn_id="d-1")
    tagged.evolve_partition_spec([PartitionField("tag", "tag")])
    entries = tagged.history()
    named = [
        (e.operation, e.mode, e.txn_id if e.txn_id in ("m-1", "d-1") else None) for e in entries[:8]
    ]
    assert named == [
        ("evolve_partition_spec", None, None),
        ("drop_partitions", None, "d-1"),
        ("merge", None, "m-1"),
        ("delete", None, None),
        ("optimize", None, None),
        ("drop_partitions", None, None),
        ("delete", None, None),
        ("merge", None, None),
    ]
    by_name = {(e.operation, e.txn_id): e for e in entries}
    assert entries[1].details == {"dropped": [dropped[4]]}
    assert entries[3].details == {"dropped": [dropped[3]]}
    assert entries[5].details == {"dropped": [dropped[2]]}
    assert {p.values["part"] for p in entries[3].partitions} == {1}
    assert {(p.values["part"], p.created) for p in entries[7].partitions} == {(1, False), (5, True)}
    assert by_name[("merge", "m-1")].partitions[0].values == {"part": 1}
    bookkeeping = {e.operation for e in tagged.history(include_internal=True) if e.internal}
    assert {"merge_intent", "fence_spec"} <= bookkeeping


# -- reading the past ------------------------------------------------------------------------
def test_reads_as_of_an_old_version_return_exactly_its_rows(tagged: PartitionedNamespace) -> None:
    snapshots: dict[int, list[dict[str, Any]]] = {tagged.version: []}

    def snap() -> None:
        snapshots[tagged.version] = rows(tagged.to_table())

    tagged.write(tagged_rows("a", [1, 2], 2, first_id=0))
    snap()
    tagged.write(tagged_rows("b", [2], 1, first_id=10))
    snap()
    tagged.write(tagged_rows("c", [1], 3, first_id=20), mode="overwrite")
    snap()
    before_column = tagged.version
    tagged.add_column(pa.field("note", pa.utf8()))
    snap()
    tagged.write(noted(tagged_rows("d", [2, 3], 1, first_id=30), "d"))
    snap()
    tagged.rename_column("note", "remark")
    snap()
    tagged.write(tagged_rows("e", [1], 1, first_id=40), mode="overwrite")
    snap()

    for version, expected in snapshots.items():
        assert rows(tagged.to_table(as_of=version)) == expected
        assert rows(tagged.to_table(version=version)) == expected  # the older name
        assert rows(tagged.to_reader(as_of=version).read_all()) == expected
        batches = list(tagged.to_batches(as_of=version, batch_size=2))
        assert sorted(r["id"] for b in batches for r in b.to_pylist()) == [
            r["id"] for r in expected
        ]
        assert tagged.count_rows(as_of=version) == len(expected)
        in_one = [r for r in expected if r["part"] == 1]
        assert tagged.count_rows(filter="part = 1", as_of=version) == len(in_one)
        assert rows(tagged.to_table(filter="part = 1", as_of=version)) == in_one
        state = tagged.state(version)
        assert state.version == version
        assert tagged.partitions(as_of=version) == state.partitions()
        assert {p.values["part"] for p in tagged.prune("part >= 2", as_of=version)} == {
            r["part"] for r in expected if r["part"] >= 2
        }
    old = tagged.to_table(as_of=before_column)
    assert old.column_names == ["id", "part", "tag"]  # read without the column added later
    assert tagged.to_table(as_of=before_column + 1).column_names == ["id", "part", "tag", "note"]
    assert tagged.to_table().column_names == ["id", "part", "tag", "remark"]
    assert rows(tagged.to_table(columns=["id"], as_of=before_column)) == [
        {"id": r["id"]} for r in snapshots[before_column]
    ]


@pytest.mark.usefixtures("local_zone")
def test_as_of_a_moment_reads_the_version_current_then(tagged: PartitionedNamespace) -> None:
    moments = []
    for i in range(3):
        tagged.write(tagged_rows(f"t{i}", [i], 1, first_id=i))
        time.sleep(0.02)
        moments.append((dt.datetime.now(dt.timezone.utc), tagged.version, ids(tagged.to_table())))
        time.sleep(0.02)
    tagged.write(tagged_rows("later", [9], 1, first_id=99))

    east = dt.timezone(dt.timedelta(hours=5, minutes=30))
    for moment, version, expected in moments:
        for form in (moment, moment.replace(tzinfo=None), moment.astimezone(east)):
            assert tagged.state(form).version == version
            assert ids(tagged.to_table(as_of=form)) == expected
            assert tagged.count_rows(as_of=form) == len(expected)
    assert (
        tagged.state(dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=1)).version
        == tagged.version
    )
    with pytest.raises(VersionNotFoundError, match=r"before .* was created"):
        tagged.to_table(as_of=dt.datetime(2000, 1, 1))
    with pytest.raises(VersionNotFoundError, match="predates the namespace"):
        tagged.to_table(as_of=1)  # the table existed, its partition spec came a version later


@pytest.mark.usefixtures("local_zone")
def test_as_of_a_versions_exact_commit_time_reads_that_version(
    tagged: PartitionedNamespace,
) -> None:
    """A moment equal to a version's commit time (as pylance reports it) names that
    version ("at or before"); a microsecond earlier names the one before."""
    for i in range(3):
        time.sleep(0.01)
        tagged.write(tagged_rows(f"t{i}", [i], 1, first_id=i))
    manifest = lance.dataset(tagged.uri + "/__manifest")
    committed = [
        (int(v["version"]), v["timestamp"].astimezone(dt.timezone.utc))  # naive local
        for v in manifest.versions()
    ]
    assert [v for v, _ in committed] == list(range(1, tagged.version + 1))
    for version, at in committed[-3:]:  # the three writes
        assert tagged.state(at).version == version
        assert ids(tagged.to_table(as_of=at)) == ids(tagged.to_table(as_of=version))
        assert tagged.state(at.replace(tzinfo=None)).version == version  # naive = UTC
        assert tagged.state(at - dt.timedelta(microseconds=1)).version == version - 1


@pytest.mark.usefixtures("local_zone")
def test_tags_pin_a_version_by_name(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("a", [1, 2], 1, first_id=0))
    info = tagged.tag("first")
    first_version, first_rows = tagged.version, rows(tagged.to_table())
    assert (info.name, info.version) == ("first", first_version)
    assert info.created_at is not None
    assert info.created_at.tzinfo is not None
    time.sleep(0.02)
    moment = dt.datetime.now(dt.timezone.utc)
    tagged.write(tagged_rows("b", [1], 5, first_id=10), mode="overwrite")
    tagged.add_column(pa.field("note", pa.utf8()))

    assert rows(tagged.to_table(as_of="first")) == first_rows
    assert tagged.state("first").version == first_version
    assert tagged.tag("at-moment", moment).version == first_version
    assert tagged.tag("empty", version=2).version == 2
    assert tagged.to_table(as_of="empty").num_rows == 0
    assert tagged.tags() == [
        TagInfo("empty", 2, tagged.tags()[0].created_at),
        TagInfo("at-moment", first_version, tagged.tags()[1].created_at),
        TagInfo("first", first_version, tagged.tags()[2].created_at),
    ]
    tags_of = {e.version: e.tags for e in tagged.history()}
    assert tags_of[first_version] == ("at-moment", "first")

    tagged.untag("first")
    assert [t.name for t in tagged.tags()] == ["empty", "at-moment"]
    with pytest.raises(VersionNotFoundError, match="no tag 'first'"):
        tagged.to_table(as_of="first")
    assert rows(tagged.to_table(as_of=first_version)) == first_rows  # the version itself stays


# -- maintain and tags -------------------------------------------------------------------------
def test_maintain_keeps_tagged_versions_and_the_leaf_versions_they_read(
    tagged: PartitionedNamespace,
) -> None:
    tagged.write(tagged_rows("a", [1, 2], 1, first_id=0))  # part 1 and 2: leaf v1
    tagged.write(tagged_rows("b", [1], 1, first_id=10))  # part 1: leaf v2
    kept, tagged_rows_ = tagged.version, rows(tagged.to_table())
    tagged.tag("keep")
    tagged.write(tagged_rows("c", [1], 2, first_id=20), mode="overwrite")  # part 1: leaf v3
    untagged = tagged.version
    tagged.write(tagged_rows("d", [2], 1, first_id=30))  # part 2: leaf v2
    latest_rows = rows(tagged.to_table())
    one, two = location_of(tagged, 1), location_of(tagged, 2)
    object_ids = {p.values["part"]: p.object_id for p in tagged.partitions()}

    report = tagged.maintain(older_than=dt.timedelta(0))

    assert report.tagged_manifest_versions == {"keep": kept}
    assert report.leaves_kept_for_tags == {object_ids[1]: [2], object_ids[2]: [1]}
    assert leaf_versions(one) == [2, 3]  # v1 went: nothing retained reads it
    assert leaf_versions(two) == [1, 2]
    assert rows(tagged.to_table(as_of="keep")) == tagged_rows_
    assert rows(tagged.to_table(as_of=kept)) == tagged_rows_
    assert rows(tagged.to_table()) == latest_rows
    with pytest.raises(VersionNotFoundError, match="cleaned up"):
        tagged.to_table(as_of=untagged)
    assert report.to_dict() == json.loads(json.dumps(report.to_dict()))

    tagged.untag("keep")
    report = tagged.maintain(older_than=dt.timedelta(0))
    assert report.tagged_manifest_versions == {}
    assert report.leaves_kept_for_tags == {}
    assert leaf_versions(one) == [3]
    assert leaf_versions(two) == [2]
    with pytest.raises(VersionNotFoundError, match="cleaned up"):
        tagged.to_table(as_of=kept)
    assert rows(tagged.to_table()) == latest_rows


@pytest.mark.usefixtures("local_zone")
def test_a_moment_whose_version_was_cleaned_up_is_refused(tagged: PartitionedNamespace) -> None:
    tagged.write(tagged_rows("a", [1], 1, first_id=0))
    tagged.tag("early")
    time.sleep(0.02)
    tagged.write(tagged_rows("b", [1], 1, first_id=10))
    time.sleep(0.02)
    in_the_gap = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.02)
    tagged.write(tagged_rows("c", [1], 1, first_id=20))
    tagged.maintain(older_than=dt.timedelta(0))

    with pytest.raises(VersionNotFoundError, match="which were cleaned up"):
        tagged.to_table(as_of=in_the_gap)
    with pytest.raises(VersionNotFoundError, match="was cleaned up: the oldest retained"):
        tagged.to_table(as_of=dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc))
    assert ids(tagged.to_table(as_of="early")) == [0]
    assert ids(tagged.to_table(as_of=dt.datetime.now(dt.timezone.utc))) == [0, 10, 20]


# -- bad input -------------------------------------------------------------------------------
@pytest.fixture
def populated(tagged: PartitionedNamespace) -> PartitionedNamespace:
    tagged.write(tagged_rows("a", [1, 2], 2, first_id=0))
    tagged.tag("there")
    return tagged


BAD_AS_OF = [
    ("nope", VersionNotFoundError, "no tag 'nope'"),
    (999, VersionNotFoundError, "no __manifest version 999: the latest is"),
    (0, InvalidArgumentError, "start at 1"),
    (True, InvalidArgumentError, "not True"),
    (1.5, InvalidArgumentError, "not float"),
    (dt.date(2025, 1, 1), InvalidArgumentError, "not date"),
    (dt.datetime(2000, 1, 1), VersionNotFoundError, "before"),
]


@pytest.mark.parametrize(("as_of", "error", "match"), BAD_AS_OF)
@pytest.mark.parametrize(
    "read",
    [
        lambda ns, a: ns.to_table(as_of=a),
        lambda ns, a: ns.to_batches(as_of=a),
        lambda ns, a: ns.to_reader(as_of=a),
        lambda ns, a: ns.count_rows(as_of=a),
        lambda ns, a: ns.count_rows(filter="part = 1", as_of=a),
        lambda ns, a: ns.prune("part = 1", as_of=a),
        lambda ns, a: ns.partitions(as_of=a),
        lambda ns, a: ns.state(a),
        lambda ns, a: ns.tag("new", a),
    ],
    ids=[
        "to_table",
        "to_batches",
        "to_reader",
        "count",
        "count_filtered",
        "prune",
        "partitions",
        "state",
        "tag",
    ],
)
def test_a_state_that_does_not_exist_is_a_project_error(
    populated: PartitionedNamespace, root: Path, read: Any, as_of: Any, error: type, match: str
) -> None:
    before = tree(root), populated.version, populated.tags()
    with pytest.raises(error, match=match):
        read(populated, as_of)
    assert (tree(root), populated.version, populated.tags()) == before


def test_as_of_and_version_together_are_refused(populated: PartitionedNamespace) -> None:
    with pytest.raises(InvalidArgumentError, match="not both"):
        populated.to_table(as_of=3, version=3)


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("bad name", "must be 1-100 characters"),
        ("", "must be 1-100 characters"),
        ("-x", "must be 1-100 characters"),
        ("x" * 101, "must be 1-100 characters"),
        (5, "must be 1-100 characters"),
        ("123", "only digits"),
        ("a..b", "'..'"),
        ("x.lock", ".lock"),
    ],
)
def test_bad_tag_names_are_refused(
    populated: PartitionedNamespace, root: Path, name: Any, match: str
) -> None:
    before = tree(root)
    with pytest.raises(InvalidArgumentError, match=match):
        populated.tag(name)
    assert tree(root) == before


def test_tag_errors_change_nothing(populated: PartitionedNamespace, root: Path) -> None:
    old = populated.version
    populated.write(tagged_rows("b", [1], 1, first_id=10))
    before = tree(root), populated.tags()
    with pytest.raises(TagExistsError, match=rf"already exists .* version {old}\)"):
        populated.tag("there")
    with pytest.raises(VersionNotFoundError, match="no tag 'missing'"):
        populated.untag("missing")
    with pytest.raises(VersionNotFoundError, match="predates the namespace"):
        populated.tag("too-early", 1)
    assert (tree(root), populated.tags()) == before

    populated.untag("there")
    populated.maintain(older_than=dt.timedelta(0))
    before = tree(root), populated.tags()
    with pytest.raises(VersionNotFoundError, match=rf"version {old} .* was cleaned up"):
        populated.tag("late", old)
    assert (tree(root), populated.tags()) == before
    with pytest.raises(InvalidArgumentError, match="limit"):
        populated.history(0)


# -- the command line --------------------------------------------------------------------------
@pytest.mark.usefixtures("local_zone")
def test_cli_history_and_tags(
    populated: PartitionedNamespace, root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = str(root)
    populated.write(tagged_rows("b", [1], 1, first_id=10), mode="overwrite")
    capsys.readouterr()

    assert cli.main(["history", uri, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["operation"], e["mode"]) for e in lines] == [
        ("write", "overwrite"),
        ("write", "append"),
        ("create", None),
    ]
    assert (lines[1]["tags"], lines[1]["rows"]) == (["there"], 4)
    assert cli.main(["history", uri, "--limit", "1", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert cli.main(["history", uri, "--all", "--json"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == populated.version

    assert cli.main(["tag", "create", uri, "v2", "--version", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 2
    assert cli.main(["tag", "create", uri, "now"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == populated.version
    moment = dt.datetime.now(dt.timezone.utc).isoformat()
    assert cli.main(["tag", "create", uri, "moment", "--at", moment]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == populated.version
    assert cli.main(["tag", "list", uri, "--json"]) == 0
    listed = [json.loads(line)["name"] for line in capsys.readouterr().out.splitlines()]
    assert sorted(listed) == ["moment", "now", "there", "v2"]

    assert cli.main(["tag", "create", uri, "v2"]) == 2  # exists
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["tag", "delete", uri, "v2"]) == 0
    assert cli.main(["tag", "delete", uri, "v2"]) == 2
    assert "no tag 'v2'" in capsys.readouterr().err
    assert cli.main(["tag", "create", uri, "bad name"]) == 2
    assert cli.main(["history", uri, "--limit", "0"]) == 2
    with pytest.raises(SystemExit) as exited:
        cli.main(["tag", "create", uri, "x", "--at", "yesterday"])
    assert exited.value.code == 2
    assert sorted(t.name for t in populated.tags()) == ["moment", "now", "there"]


# -- a model ----------------------------------------------------------------------------------
STEP = st.one_of(
    st.tuples(
        st.sampled_from(["append", "overwrite"]),
        st.sets(st.integers(0, 3), min_size=1, max_size=3),
        st.integers(1, 3),
    ),
    st.just(("add_column", frozenset(), 0)),
)


@settings(
    max_examples=examples(12),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(STEP, min_size=1, max_size=6))
def test_every_past_version_reads_as_it_was(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, frozenset[int], int]]
) -> None:
    root = tmp_path_factory.mktemp("model") / "ns"
    ns = PartitionedNamespace.create(
        root, schema=TAGGED, partition_fields=[PartitionField("part", "part")]
    )
    stored: dict[int, list[dict[str, Any]]] = {}  # part -> its rows
    columns = ["id", "part", "tag"]
    snapshots: dict[int, tuple[list[str], list[dict[str, Any]]]] = {ns.version: (columns, [])}
    writes: dict[int, tuple[str, frozenset[int], int, frozenset[int]]] = {}
    next_id = 0
    for mode, parts, per_part in steps:
        if mode == "add_column":
            columns = [*columns, f"c{len(columns)}"]
            ns.add_column(pa.field(columns[-1], pa.int64()))
        else:
            data = tagged_rows(f"w{ns.version}", sorted(parts), per_part, first_id=next_id)
            next_id += data.num_rows
            existed = frozenset(p for p in parts if p in stored)
            if mode == "overwrite":
                for p in parts:
                    stored[p] = []
            for r in data.to_pylist():
                stored.setdefault(r["part"], []).append(r)
            ns.write(data, mode="overwrite" if mode == "overwrite" else "append")
            writes[ns.version] = (mode, frozenset(parts), per_part, existed)
        expected = [{c: r.get(c) for c in columns} for p in stored.values() for r in p]
        snapshots[ns.version] = (columns, sorted(expected, key=lambda r: r["id"]))

    for version, (names, expected) in snapshots.items():
        table = ns.to_table(as_of=version)
        assert table.column_names == names
        assert rows(table) == expected
        assert ns.count_rows(as_of=version) == len(expected)
    history = {e.version: e for e in ns.history()}
    for version, (mode, parts, per_part, existed) in writes.items():
        entry = history[version]
        assert entry.operation == "write"
        assert entry.mode == (mode if existed else "append")  # new partitions: the same
        assert entry.rows == per_part * len(parts)
        assert {(p.values["part"], p.rows, p.created) for p in entry.partitions} == {
            (p, per_part, p not in existed) for p in parts
        }
