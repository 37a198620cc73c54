"""Table operations (delete, drop partitions, merge, optimize), tags, time travel and the
orphan sweep as tasks, in real ``dag.test()`` runs on real namespaces.

Each operation's transaction id derives from the task instance: a retry after the first
try published (``crash_after``) returns the first result and changes nothing more. Bad
input fails the task at once, its retries unused.
"""

from __future__ import annotations

import datetime as dt
import glob
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from airflow.providers.common.compat.version_compat import AIRFLOW_V_3_3_PLUS

from airflow_provider_lance.assets import asset_uri
from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField, TxnState
from airflow_provider_lance.namespace.admin.sweep import MIN_SAFE_ORPHAN_AGE
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events, tree

pytestmark = pytest.mark.integration

RunDag = Callable[..., RunResult]
SUCCESS, FAILED = "success", "failed"
DAY = dt.date(2025, 12, 10)
KEY = ["id", "event_date"]

requires_3_3 = pytest.mark.skipif(
    not AIRFLOW_V_3_3_PLUS, reason="keyed asset events (add_partitions) are Airflow 3.3+"
)


def make_namespace(root: Path, name: str = "events", rows: int = 30) -> PartitionedNamespace:
    """``rows`` events over three days from :data:`DAY`, four countries (one NULL)."""
    ns = PartitionedNamespace.create(
        root / name,
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )
    if rows:
        ns.write(events(rows, start=DAY, days=3))
    return ns


def asset_events(*, name: str | None = None, uri: str | None = None) -> list[tuple[Any, dict]]:
    """``(partition_key, extra)`` of every event of the asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
        query = query.filter(AssetModel.name == name) if name else query
        query = query.filter(AssetModel.uri == uri) if uri else query
        return [(e.partition_key, dict(e.extra)) for e in query.order_by(AssetEvent.id).all()]


def day(offset: int) -> str:
    return (DAY + dt.timedelta(days=offset)).isoformat()


# -- delete ------------------------------------------------------------------------------------
def test_delete_retried_after_its_commit_returns_the_first_result_and_keys_its_events(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    german = ns.count_rows(filter="country = 'DE'")
    assert german > 0
    before = len(asset_events(name="lance_test_deleted"))
    run = run_dag("lance_test_delete", conf={"crash_after": True})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["delete"] == 2  # the first try died after the delete was published
    summary = run.xcom("delete")
    assert summary["txn_id"] == derive_txn_id("lance_test_delete", run.run_id, "delete")
    assert summary["operation"] == "delete"
    assert summary["rows_removed"] == german  # the first try's result, not a second delete's 0
    assert summary["changed"] is True
    assert summary["manifest_version"] == ns.version  # the retry published nothing more
    assert summary["partition_count"] == summary["partitions_rewritten"] == 3
    listed = [p["key"] for p in summary["partitions"]]
    assert sorted(listed) == [day(0), day(1), day(2)]
    assert ns.count_rows() == 30 - german
    assert ns.count_rows(filter="country = 'DE'") == 0

    new = asset_events(name="lance_test_deleted")[before:]
    if AIRFLOW_V_3_3_PLUS:  # one event per key, the first two (max_partition_keys=2)
        assert sorted(k for k, _ in new) == sorted(listed[:2])
    else:  # Airflow before 3.3 cannot key asset events: one unkeyed event
        assert [k for k, _ in new] == [None]
    extra = new[0][1]
    assert (extra["operation"], extra["rows_removed"]) == ("delete", german)
    assert extra["manifest_version"] == summary["manifest_version"]
    assert extra["keys_truncated"] is True
    assert "3 partitions changed: their asset events carry the first 2 keys" in run.output
    lineage = run.xcom("delete", key="openlineage_outputs")
    assert lineage[0]["facets"]["version"]["datasetVersion"] == str(summary["manifest_version"])


@pytest.mark.parametrize(
    ("dag_id", "conf", "message"),
    [
        ("lance_test_delete", {"filter": "nope = 1"}, "FilterError"),
        ("lance_test_delete", {"filter": "  "}, "filter must be a SQL boolean expression"),
        ("lance_test_drop_filter", {"filter": None}, "filter must be a SQL boolean expression"),
    ],
    ids=["unknown-column", "blank-delete", "no-drop-filter"],
)
def test_operations_with_bad_filters_fail_at_once(
    run_dag: RunDag, lance_test_root: Path, dag_id: str, conf: dict[str, Any], message: str
) -> None:
    ns = make_namespace(lance_test_root)
    version = ns.version
    run = run_dag(dag_id, conf=conf)
    assert run.state == FAILED
    task = "delete" if dag_id == "lance_test_delete" else "drop"
    assert run.tries[task] == 1  # not retryable: no retry burnt
    assert message in run.output
    assert ns.version == version


# -- drop partitions ---------------------------------------------------------------------------
def test_drop_partitions_drops_the_days_a_templated_retention_filter_names(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    before = len(asset_events(name="lance_test_dropped"))
    logical = dt.datetime(2025, 12, 13, tzinfo=dt.timezone.utc)
    run = run_dag("lance_test_drop", logical_date=logical, conf={"crash_after": True})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["drop"] == 2
    summary = run.xcom("drop")
    # keep_days=2 on 2025-12-13: every day before 2025-12-11 goes
    assert summary["partitions_dropped"] == 1
    assert summary["partitions"][0]["values"] == {"event_date": day(0)}
    assert summary["partitions"][0]["read_version"] is None
    assert summary["rows_removed"] == 10
    assert sorted(p.values["event_date"] for p in ns.partitions()) == [
        DAY + dt.timedelta(days=1),
        DAY + dt.timedelta(days=2),
    ]
    assert ns.count_rows() == 20
    # outside a partitioned run the event is not keyed (it schedules every consumer)
    new = asset_events(name="lance_test_dropped")[before:]
    assert [k for k, _ in new] == [None]
    assert new[0][1]["partitions"][0]["key"] == day(0)
    assert "keys_truncated" not in new[0][1]


# -- merge -------------------------------------------------------------------------------------
def test_merge_from_parquet_retried_after_its_commit_does_not_merge_twice(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path
) -> None:
    ns = make_namespace(lance_test_root)
    source = tmp_path / "corrections"
    source.mkdir()
    updates = pa.table(
        {
            "event_date": pa.array([DAY, DAY], pa.date32()),  # columns in another order
            "id": pa.array([0, 3], pa.int64()),
            "amount": [500.0, 503.0],
            "country": ["DE", "DE"],
        }
    )
    new_day = dt.date(2025, 12, 20)
    inserts = pa.table(
        {
            "event_date": pa.array([new_day], pa.date32()),
            "id": pa.array([999], pa.int64()),
            "amount": [9.0],
            "country": ["FR"],
        }
    )
    pq.write_table(updates, source / "part-0.parquet")
    pq.write_table(inserts, source / "part-1.parquet")
    run = run_dag("lance_test_merge", conf={"source": str(source), "crash_after": True})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["merge"] == 2
    summary = run.xcom("merge")
    assert (summary["rows_updated"], summary["rows_inserted"]) == (2, 1)  # not (0, 0)+(3, 0)
    assert summary["manifest_version"] == ns.version
    created = [p for p in summary["partitions"] if p["created"]]
    assert [p["values"] for p in created] == [{"event_date": "2025-12-20"}]
    assert ns.count_rows() == 31
    rows = ns.to_table(filter="id IN (0, 3, 999)").sort_by("id").to_pylist()
    assert [(r["id"], r["amount"], r["country"]) for r in rows] == [
        (0, 500.0, "DE"),
        (3, 503.0, "DE"),
        (999, 9.0, "FR"),
    ]
    assert "was published already: its first result" in run.output
    inputs = run.xcom("merge", key="openlineage_inputs")
    assert [(d["namespace"], d["name"]) for d in inputs] == [("file", str(source))]
    outputs = run.xcom("merge", key="openlineage_outputs")
    assert outputs[0]["outputFacets"]["outputStatistics"]["rowCount"] == 3
    alias_events = asset_events(uri=asset_uri(ns.uri))
    assert alias_events[-1][1]["operation"] == "merge"


def test_merge_from_a_callable_calls_it_once_across_retries(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path
) -> None:
    ns = make_namespace(lance_test_root)
    calls = tmp_path / "calls"
    run = run_dag("lance_test_merge_callable", conf={"crash_after": True, "calls_file": str(calls)})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["merge"] == 2
    assert calls.read_text().splitlines() == ["called"]  # the retry did not call it again
    summary = run.xcom("merge")
    assert (summary["rows_updated"], summary["rows_inserted"]) == (3, 2)
    updated = ns.to_table(filter="id IN (0, 3, 6)").sort_by("id")
    assert updated["amount"].to_pylist() == [1000.0, 1003.0, 1006.0]
    assert ns.count_rows() == 32
    assert ns.transaction(summary["txn_id"]).state is TxnState.PUBLISHED


def test_merge_when_not_matched_by_source_delete_keeps_exactly_the_source_keys(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    run = run_dag("lance_test_merge_sync")
    assert run.state == SUCCESS, run.output[-3000:]
    summary = run.xcom("merge")
    assert summary["partitions_dropped"] == 2  # the days the source has no row of
    assert summary["rows_removed"] == 30 - 3
    table = ns.to_table().sort_by("id")
    assert table["id"].to_pylist() == [0, 3, 6, 10_000, 10_001]


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        ({"on": ["id"]}, "must include every partition source column"),
        ({"source": "/nowhere/corrections.parquet"}, "does not exist"),
        ({"on": []}, "on must be a non-empty list of key columns"),
    ],
    ids=["key-without-partition-source", "missing-source", "no-key"],
)
def test_merge_with_bad_input_fails_at_once(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path, conf: dict[str, Any], message: str
) -> None:
    ns = make_namespace(lance_test_root)
    version = ns.version
    source = tmp_path / "rows.parquet"
    pq.write_table(events(4, start=DAY), source)
    run = run_dag("lance_test_merge", conf={"source": str(source), **conf})
    assert run.state == FAILED
    assert run.tries["merge"] == 1
    assert message in run.output
    assert ns.version == version


# -- optimize ----------------------------------------------------------------------------------
def test_optimize_compacts_small_fragments_and_drops_deleted_rows(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root, rows=0)
    for i in range(4):
        ns.write(events(12, start=DAY, days=2, first_id=100 * i))
    ns.delete("country = 'US'")
    rows = ns.to_table().sort_by("id")
    run = run_dag(
        "lance_test_optimize",
        conf={"filter": f"event_date = DATE '{DAY}'", "crash_after": True},
    )
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["optimize"] == 2
    summary = run.xcom("optimize")
    assert summary["operation"] == "optimize"
    assert summary["partitions_rewritten"] == 1  # the filter's day only
    assert summary["partitions"][0]["values"] == {"event_date": day(0)}
    assert (summary["fragments_before"], summary["fragments_after"]) == (4, 1)
    assert summary["manifest_version"] == ns.version
    assert ns.to_table().sort_by("id") == rows  # the rows never change, only their files


# -- time travel: tags and as_of ---------------------------------------------------------------
def test_tag_pins_a_state_that_prune_reads_as_of_and_tagging_again_is_a_no_op(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root, rows=0)
    ns.write(events(10, start=DAY, days=1))
    first = ns.version
    first_read = ns.partitions()[0].read_version
    logical = dt.datetime(2025, 12, 10, tzinfo=dt.timezone.utc)
    tagged = run_dag("lance_test_tag", logical_date=logical)
    assert tagged.state == SUCCESS, tagged.output[-3000:]
    assert tagged.xcom("tag") == {
        "uri": ns.uri,
        "tag": "eod-2025-12-10",
        "action": "create",
        "version": first,
        "changed": True,
        "manifest_version": first,
    }
    time.sleep(0.05)
    moment = dt.datetime.now(dt.timezone.utc)
    time.sleep(0.05)
    ns.write(events(10, start=DAY, days=2, first_id=100))  # the day again, and a new one
    assert ns.version > first

    by_tag = run_dag("lance_test_prune_as_of", conf={"as_of": "eod-2025-12-10"})
    assert by_tag.state == SUCCESS, by_tag.output[-3000:]
    assert [(p["values"], p["read_version"]) for p in by_tag.xcom("prune")] == [
        ({"event_date": "2025-12-10"}, first_read)
    ]
    assert by_tag.xcom("prune_keyed") == by_tag.xcom("prune")
    latest = run_dag("lance_test_prune_as_of")
    assert len(latest.xcom("prune")) == 2
    assert latest.xcom("prune_keyed")[0]["read_version"] > first_read
    for as_of in (first, str(first), moment.isoformat()):
        at = run_dag("lance_test_prune_as_of", conf={"as_of": as_of})
        assert at.state == SUCCESS, at.output[-3000:]
        assert [p["read_version"] for p in at.xcom("prune")] == [first_read], as_of

    again = run_dag("lance_test_tag", logical_date=logical)  # the DAG run again: kept as is
    assert (again.xcom("tag")["changed"], again.xcom("tag")["version"]) == (False, first)
    clash = run_dag("lance_test_tag", logical_date=logical, conf={"as_of": ns.version})
    assert clash.state == FAILED
    assert clash.tries["tag"] == 1
    assert "TagExistsError" in clash.output
    assert [(t.name, t.version) for t in ns.tags()] == [("eod-2025-12-10", first)]

    dropped = run_dag("lance_test_tag", logical_date=logical, conf={"action": "delete"})
    assert (dropped.xcom("tag")["changed"], dropped.xcom("tag")["version"]) == (True, None)
    assert ns.tags() == []
    gone = run_dag("lance_test_tag", logical_date=logical, conf={"action": "delete"})
    assert gone.state == SUCCESS
    assert gone.xcom("tag")["changed"] is False


def test_prune_by_key_as_of_looks_each_key_up_instead_of_listing_every_partition(
    lance_test_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by review: with ``as_of``, a prune by partition key built a ``Partition``
    for every partition of that state and compared keys (seconds at a million); it looks
    each key up by its leaf id, as a prune of the latest state does. A key of no
    partition names nothing."""
    from airflow_provider_lance.namespace import NamespaceState
    from airflow_provider_lance.operators import LancePruneOperator

    ns = make_namespace(lance_test_root, rows=0)
    ns.write(events(10, start=DAY, days=3))
    version = ns.version
    ns.write(events(10, start=DAY, days=1, first_id=100))  # the first day again, later
    listed: list[int] = []
    every = NamespaceState.partitions

    def counted(state: NamespaceState) -> list[Any]:
        listed.append(state.version)
        return every(state)

    monkeypatch.setattr(NamespaceState, "partitions", counted)
    found = LancePruneOperator(
        task_id="keyed",
        lance_conn_id="lance_test",
        namespace="events",
        partition_key=["2025-12-10", "2025-12-12", "2031-01-01"],
        as_of=version,
    ).execute({})
    assert listed == []
    assert [p["values"] for p in found] == [
        {"event_date": "2025-12-10"},
        {"event_date": "2025-12-12"},
    ]
    monkeypatch.setattr(NamespaceState, "partitions", every)
    at = {p.object_id: p.read_version for p in ns.partitions(as_of=version)}
    assert {p["object_id"]: p["read_version"] for p in found} == {
        p["object_id"]: at[p["object_id"]] for p in found
    }
    assert found[0]["read_version"] < ns.partition({"event_date": DAY}).read_version


def test_retag_moves_a_tag_to_the_latest_version(run_dag: RunDag, lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    ns.tag("latest-good")
    old = ns.version
    ns.write(events(3, start=DAY, first_id=500))
    run = run_dag("lance_test_retag")
    assert run.state == SUCCESS, run.output[-3000:]
    assert (run.xcom("tag")["changed"], run.xcom("tag")["version"]) == (True, ns.version)
    assert ns.version > old
    assert [(t.name, t.version) for t in ns.tags()] == [("latest-good", ns.version)]


@pytest.mark.parametrize(
    ("dag_id", "conf", "task", "message"),
    [
        ("lance_test_prune_as_of", {"as_of": "no-such-tag"}, "prune", "has no tag 'no-such-tag'"),
        ("lance_test_prune_as_of", {"as_of": 999}, "prune", "has no __manifest version 999"),
        ("lance_test_tag", {"tag": "bad name!"}, "tag", "tag must be a tag name: 1-100 letters"),
        ("lance_test_tag", {"action": "move"}, "tag", "action must be one of"),
    ],
    ids=["unknown-tag", "future-version", "bad-tag-name", "bad-action"],
)
def test_time_travel_with_bad_input_fails_at_once(
    run_dag: RunDag,
    lance_test_root: Path,
    dag_id: str,
    conf: dict[str, Any],
    task: str,
    message: str,
) -> None:
    make_namespace(lance_test_root)
    logical = dt.datetime(2025, 12, 10, tzinfo=dt.timezone.utc)  # the tag is eod-{{ ds }}
    run = run_dag(dag_id, logical_date=logical, conf=conf)
    assert run.state == FAILED
    assert run.tries[task] == 1
    assert message in run.output


# -- maintenance with the orphan sweep ----------------------------------------------------------
def test_maintain_sweeps_orphans_after_a_dry_run_that_removes_nothing(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.drop_partitions(f"event_date = DATE '{DAY}'")
    kept = ns.partitions()[0]
    data = sorted(glob.glob(str(lance_test_root / "events" / kept.directory / "data" / "*")))
    stray = Path(data[0]).with_name("left-by-a-killed-writer.lance")
    shutil.copy(data[0], stray)
    rows = ns.count_rows()

    run = run_dag("lance_test_sweep", conf={"older_than": 0})
    assert run.state == SUCCESS, run.output[-3000:]
    dry = run.xcom("sweep_dry_run")
    assert dry["dry_run"] is True
    assert dry["orphans"]["dry_run"] is True
    assert dry["manifest_versions_removed"] == 0  # a dry run cleans up nothing
    assert dry["orphans"]["files_removed"] == 1  # the dropped day is still read by old versions
    assert dry["orphans"]["sample"] == [str(stray.relative_to(lance_test_root / "events"))]
    swept = run.xcom("sweep")
    assert swept["dry_run"] is False
    assert swept["manifest_versions_removed"] > 0
    # old versions removed first: the dropped day's leaf table is read by none any more
    assert swept["orphans"]["leaf_tables_removed"] == 1
    assert swept["orphans"]["files_removed"] > 1
    assert not stray.exists()
    assert ns.count_rows() == rows


def test_maintain_refuses_a_short_orphan_age_unless_told(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """``lance_test_sweep_guarded`` is ``lance_test_sweep`` without ``enforce_min_age=False``:
    its sweep with age 0 fails at once, removing nothing; its dry run with age 0 runs (it
    deletes nothing); the safe minimum itself is accepted. (``lance_test_sweep``, above,
    is the override.)"""
    ns = make_namespace(lance_test_root)
    kept = ns.partitions()[0]
    data = sorted(glob.glob(str(lance_test_root / "events" / kept.directory / "data" / "*")))
    stray = Path(data[0]).with_name("left-by-a-killed-writer.lance")
    shutil.copy(data[0], stray)
    before = tree(lance_test_root / "events")

    run = run_dag("lance_test_sweep_guarded", conf={"orphan_min_age": 0})
    assert run.state == FAILED
    assert run.states["sweep_dry_run"] == SUCCESS
    assert run.xcom("sweep_dry_run")["orphans"]["files_removed"] == 1
    assert run.tries["sweep"] == 1  # bad input: the retry is not used
    assert "orphan_min_age 0 is under 6 hours" in run.output
    assert "enforce_min_age=False" in run.output
    assert tree(lance_test_root / "events") == before

    minimum = MIN_SAFE_ORPHAN_AGE.total_seconds()
    run = run_dag("lance_test_sweep_guarded", conf={"orphan_min_age": minimum})
    assert run.state == SUCCESS, run.output[-3000:]
    orphans = run.xcom("sweep")["orphans"]
    assert (orphans["files_removed"], orphans["kept_young"]) == (0, 1)  # the stray is young
    assert stray.exists()


def test_maintain_enforce_min_age_must_be_a_bool() -> None:
    from airflow_provider_lance.operators import LanceMaintainOperator

    with pytest.raises(ValueError, match="enforce_min_age must be True or False"):
        LanceMaintainOperator(task_id="m", sweep_orphans=True, enforce_min_age="False")  # type: ignore[arg-type]


def test_maintain_dry_run_without_a_sweep_is_a_wiring_mistake() -> None:
    from airflow_provider_lance.operators import LanceMaintainOperator

    with pytest.raises(ValueError, match="set sweep_orphans=True"):
        LanceMaintainOperator(task_id="m", dry_run=True)


def test_merge_needs_exactly_one_source() -> None:
    from airflow_provider_lance.operators import LanceMergeOperator

    with pytest.raises(ValueError, match="a source"):
        LanceMergeOperator(task_id="m", on=KEY)
    with pytest.raises(ValueError, match="a source"):
        LanceMergeOperator(task_id="m", on=KEY, source="x.parquet", python_callable=list)


# -- the Spark write, published by its job -----------------------------------------------------
@requires_3_3
@pytest.mark.slow
def test_spark_write_with_commit_keys_its_asset_events(
    run_dag: RunDag, lance_test_root: Path, tmp_path: Path
) -> None:
    ns = make_namespace(lance_test_root, rows=0)
    source = tmp_path / "events.parquet"
    pq.write_table(events(12, start=DAY, days=3), source)
    before = len(asset_events(name="lance_test_spark_published"))
    run = run_dag("lance_test_spark_commit_keyed", conf={"source": str(source)})
    assert run.state == SUCCESS, run.output[-4000:]
    assert run.xcom("write")["state"] == "published"
    new = asset_events(name="lance_test_spark_published")[before:]
    assert sorted(k for k, _ in new) == [day(0), day(1), day(2)]
    assert new[0][1]["keys_truncated"] is False
    assert ns.count_rows() == 12


# -- the example DAG ----------------------------------------------------------------------------
def test_retention_and_upkeep_example_runs_end_to_end(run_dag: RunDag) -> None:
    from tests.airflow.conftest import LANCE_ROOT

    root = LANCE_ROOT / "examples" / "retained_events"
    shutil.rmtree(root, ignore_errors=True)
    dag_id = "lance_retention_and_upkeep"
    first = run_dag(dag_id, logical_date=dt.datetime(2025, 12, 9, tzinfo=dt.timezone.utc))
    assert first.state == SUCCESS, first.output[-4000:]
    ns = PartitionedNamespace.open(root)
    day_before = dt.date(2025, 12, 9)
    corrected = ns.to_table(filter=f"event_date = DATE '{day_before}'").num_rows

    run = run_dag(
        dag_id,
        logical_date=dt.datetime(2025, 12, 10, tzinfo=dt.timezone.utc),
        conf={"retention_days": 1},
    )
    assert run.state == SUCCESS, run.output[-4000:]
    assert {k: v for k, v in run.states.items() if v != SUCCESS} == {}
    dropped = run.xcom("drop_expired_days")
    assert dropped["partitions_dropped"] == 1  # the late events of 2025-12-08, from run one
    assert dropped["partitions"][0]["values"] == {"event_date": "2025-12-08"}
    landed = pq.read_table(run.xcom("land_late_events"))
    merged = run.xcom("merge_late_events")
    # 50 re-stated rows of yesterday's publish; the rest are late arrivals, new
    assert merged["rows_updated"] == 50
    assert merged["rows_inserted"] == landed.num_rows - 50 > 0
    days = sorted(p.values["event_date"].isoformat() for p in ns.partitions())
    assert days == ["2025-12-09", "2025-12-10"]
    assert ns.to_table(filter=f"event_date = DATE '{day_before}'").num_rows > corrected
    stored = ns.to_table(filter=f"event_date = DATE '{day_before}'")
    amounts = dict(zip(stored["event_id"].to_pylist(), stored["amount"].to_pylist(), strict=True))
    assert {i: amounts[i] for i in landed["event_id"].to_pylist()} == dict(
        zip(landed["event_id"].to_pylist(), landed["amount"].to_pylist(), strict=True)
    )
    assert run.xcom("optimize_recent_days")["operation"] == "optimize"
    tag = run.xcom("tag_end_of_day")
    assert (tag["tag"], tag["changed"]) == ("eod-2025-12-10", True)
    assert [t.name for t in ns.tags()] == ["eod-2025-12-09", "eod-2025-12-10"]
    tagged = run.xcom("read_tagged_state")
    assert {tuple(p["values"].values()) for p in tagged} == {("2025-12-09",), ("2025-12-10",)}
    assert run.xcom("maintain")["orphans"] is None
    swept = run.xcom("sweep_orphans_dry_run")
    assert (swept["dry_run"], swept["orphans"]["dry_run"]) == (True, True)
    assert swept["orphans"]["files_removed"] == 0  # nothing is a day old yet: all kept
    assert "datetime.date(" not in run.output  # values are logged as people write them

    # A second run of the same day moves the day's tag to its own final state.
    again = run_dag(dag_id, logical_date=dt.datetime(2025, 12, 10, tzinfo=dt.timezone.utc))
    assert again.state == SUCCESS, again.output[-4000:]
    moved = again.xcom("tag_end_of_day")
    assert moved["changed"] is True
    assert moved["version"] > tag["version"]
    assert {t.name: t.version for t in ns.tags()}["eod-2025-12-10"] == moved["version"]
