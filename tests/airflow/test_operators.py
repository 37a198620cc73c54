"""The operators through ``dag.test()`` on real namespaces: templating, retries, bad input."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_lance.assets import asset_uri
from airflow_provider_lance.common import derive_txn_id
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.airflow.conftest import RunResult
from tests.support import EVENTS_SCHEMA, events, tree

pytestmark = pytest.mark.integration

SCHEMA = [
    {"name": "id", "type": "int64", "nullable": False},
    {"name": "event_date", "type": "date32"},
    {"name": "country", "type": "string"},
    {"name": "amount", "type": "double"},
]
BY_DAY = [{"name": "event_date", "source": "event_date"}]
SUCCESS, FAILED = "success", "failed"
RunDag = Callable[..., RunResult]


def make_namespace(root: Path) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        root / "events",
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
    )


# -- transaction ids ---------------------------------------------------------------------------
def test_txn_ids_are_deterministic_and_fit_the_alphabet() -> None:
    a = derive_txn_id("daily", "scheduled__2025-12-01T00:00:00+00:00", "write", 3)
    assert a == "daily=scheduled__2025-12-01T00:00:00+00:00=write=3"
    assert derive_txn_id("daily", "scheduled__2025-12-01T00:00:00+00:00", "write", 3) == a
    assert derive_txn_id("daily", "r", "write") == "daily=r=write"
    odd = derive_txn_id("d", "manual run / with spaces", "t")
    assert odd.startswith("d=manual-run---with-spaces=t+")
    assert odd != derive_txn_id("d", "manual run - with spaces", "t")  # no collisions
    long = derive_txn_id("d" * 150, "r" * 150, "t")
    assert len(long) <= 200
    assert long != derive_txn_id("d" * 150, "r" * 149, "t")
    import re

    for txn in (a, odd, long, derive_txn_id("_x", "=", "t")):
        assert re.match(r"^[A-Za-z0-9][A-Za-z0-9_.=:+-]{0,199}$", txn)


# -- LanceCreatePartitionOperator ---------------------------------------------------------------
def test_create_operator_templating_prune_mapping_and_sensor(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    run = run_dag("lance_test_templated", logical_date=dt.datetime(2025, 12, 5, tzinfo=dt.UTC))
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.xcom("create_day")[0]["values"] == {"event_date": "2025-12-05"}
    assert run.xcom("create_next")[0]["values"] == {"event_date": "2025-12-06"}
    assert [p["values"] for p in run.xcom("prune")] == [
        {"event_date": "2025-12-05"},
        {"event_date": "2025-12-06"},
    ]
    # prune output feeds .expand(): one mapped task per partition
    assert run.xcom("partition_values", 0) == {"event_date": "2025-12-05"}
    assert run.xcom("partition_values", 1) == {"event_date": "2025-12-06"}
    assert run.xcom("wait_day")[0]["values"] == {"event_date": "2025-12-05"}
    ns = PartitionedNamespace.open(lance_test_root / "events")
    assert len(ns.partitions()) == 2


def test_create_operator_is_idempotent(run_dag: RunDag, lance_test_root: Path) -> None:
    conf = {
        "schema": SCHEMA,
        "fields": BY_DAY,
        "partition_values": [{"event_date": "2025-12-01"}, {"event_date": "2025-12-02"}],
    }
    first = run_dag("lance_test_create", conf=conf)
    assert first.state == SUCCESS, first.output[-3000:]
    ns = PartitionedNamespace.open(lance_test_root / "events")
    version, files = ns.version, tree(lance_test_root)
    second = run_dag("lance_test_create", conf=conf)
    assert second.state == SUCCESS
    assert second.xcom("create") == first.xcom("create")
    assert ns.version == version
    assert tree(lance_test_root) == files


@pytest.mark.parametrize(
    ("conf", "message"),
    [
        (
            {"partition_values": [{"event_date": "2025-12-01"}]},
            "NamespaceNotFoundError: file://{root}/events is not a partitioned namespace",
        ),
        (
            {
                "schema": SCHEMA,
                "fields": [{"name": "day", "source": "no_such_column"}],
                "partition_values": [],
            },
            "no_such_column",
        ),
        (
            {"schema": SCHEMA, "fields": BY_DAY, "partition_values": [{"country": "DE"}]},
            "PartitionSpecError: partition values must name exactly the fields ['event_date']",
        ),
        (
            {"schema": SCHEMA, "fields": BY_DAY, "partition_values": [{"event_date": "yesterday"}]},
            "is not a date32[day]",
        ),
    ],
    ids=["missing-namespace", "unknown-source-column", "unknown-field", "bad-value"],
)
def test_create_operator_bad_input_fails_clearly_and_publishes_nothing(
    run_dag: RunDag, lance_test_root: Path, conf: dict[str, Any], message: str
) -> None:
    run = run_dag("lance_test_create", conf=conf)
    assert run.state == FAILED
    assert run.states["create"] == FAILED
    assert run.tries["create"] == 1  # bad input: no retries burnt
    assert message.format(root=lance_test_root) in run.output
    if (lance_test_root / "events" / "__manifest").exists():
        assert PartitionedNamespace.open(lance_test_root / "events").partitions() == []


# -- LancePruneOperator ----------------------------------------------------------------------
def test_prune_operator(run_dag: RunDag, lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(40, start=dt.date(2025, 12, 1), days=4))
    run = run_dag("lance_test_prune", conf={"filter": "event_date >= DATE '2025-12-03'"})
    assert run.state == SUCCESS, run.output[-3000:]
    partitions = run.xcom("prune")
    assert [p["values"]["event_date"] for p in partitions] == ["2025-12-03", "2025-12-04"]
    assert set(partitions[0]) == {"object_id", "values", "read_version", "location", "spec_version"}
    assert all(isinstance(p["read_version"], int) for p in partitions)
    everything = run_dag("lance_test_prune", conf={"filter": None})
    assert len(everything.xcom("prune")) == 4


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("nope = 1", "FilterError: filter 'nope = 1' is not a valid expression"),
        ("event_date = ", "FilterError: filter 'event_date =' is not a valid expression"),
    ],
)
def test_prune_operator_malformed_filter(
    run_dag: RunDag, lance_test_root: Path, where: str, message: str
) -> None:
    make_namespace(lance_test_root)
    run = run_dag("lance_test_prune", conf={"filter": where})
    assert run.state == FAILED
    assert message in run.output


# -- LanceCommitOperator ---------------------------------------------------------------------
def _stage(ns: PartitionedNamespace, txn_id: str, start: dt.date, first_id: int) -> str:
    txn = ns.begin("append", txn_id=txn_id)
    txn.stage(events(20, start=start, days=2, first_id=first_id), stage_id="w")
    return txn.txn_id


def _asset_events(uri: str) -> list[dict[str, Any]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri)
            .all()
        )
        return [dict(r.extra) for r in rows]


def test_commit_operator_publishes_atomically_retries_and_emits_asset_event(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    write_results = [
        {"txn_id": _stage(ns, "w-0", dt.date(2025, 12, 1), 0), "uri": ns.uri, "state": "staged"},
        {"txn_id": _stage(ns, "w-1", dt.date(2025, 12, 3), 100), "uri": ns.uri, "state": "staged"},
    ]
    assert ns.count_rows() == 0
    run = run_dag("lance_test_commit", conf={"transactions": write_results, "crash_after": True})
    assert run.state == SUCCESS, run.output[-3000:]
    assert run.tries["commit"] == 2  # the first try died after publishing
    assert "simulated worker crash after the commit" in run.output
    summary = run.xcom("commit")
    assert summary["partition_count"] == 4
    assert summary["rows"] == 40
    assert summary["sources"] == ["w-0", "w-1"]
    assert summary["txn_id"] == derive_txn_id("lance_test_commit", run.run_id, "commit")
    assert ns.count_rows() == 40  # the retry published nothing twice
    published = ns.partitions()
    assert {p.read_version for p in published} == {p["read_version"] for p in summary["partitions"]}

    extras = _asset_events(asset_uri(ns.uri))
    assert len(extras) == 1
    extra = extras[0]
    assert extra["txn_id"] == summary["txn_id"]
    assert extra["manifest_version"] == summary["manifest_version"]
    assert [p["values"]["event_date"] for p in extra["partitions"]] == [
        "2025-12-01",
        "2025-12-02",
        "2025-12-03",
        "2025-12-04",
    ]
    assert all(isinstance(p["read_version"], int) for p in extra["partitions"])
    assert not extra["truncated"]

    # OpenLineage: the namespace as an output dataset, named by its store, with schema and rows
    (output,) = run.xcom("commit", key="openlineage_outputs")
    assert (output["namespace"], output["name"]) == ("file", f"{lance_test_root}/events")
    fields = output["facets"]["schema"]["fields"]
    assert [(f["name"], f["type"]) for f in fields] == [
        ("id", "int64"),
        ("event_date", "date32[day]"),
        ("country", "string"),
        ("amount", "double"),
    ]
    assert output["outputFacets"]["outputStatistics"]["rowCount"] == 40
    assert output["facets"]["version"]["datasetVersion"] == str(summary["manifest_version"])
    assert "lifecycleStateChange" not in output["facets"]  # appends


def test_commit_of_an_overwrite_reports_the_overwrite_to_openlineage(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ns.write(events(20, start=dt.date(2025, 12, 1), days=2))
    txn = ns.begin("overwrite", txn_id="fix-day-1")
    txn.stage(events(3, start=dt.date(2025, 12, 1), days=1, first_id=900), stage_id="w")
    run = run_dag("lance_test_commit", conf={"transactions": ["fix-day-1"]})
    assert run.state == SUCCESS, run.output[-3000:]
    summary = run.xcom("commit")
    assert (summary["mode"], summary["rows"]) == ("overwrite", 3)
    (output,) = run.xcom("commit", key="openlineage_outputs")
    assert output["facets"]["lifecycleStateChange"]["lifecycleStateChange"] == "OVERWRITE"
    assert output["facets"]["version"]["datasetVersion"] == str(ns.version)
    assert ns.count_rows() == 13


def test_commit_operator_with_explicit_txn_id_is_idempotent_across_runs(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    ids = [_stage(ns, "a", dt.date(2025, 12, 1), 0), _stage(ns, "b", dt.date(2025, 12, 1), 50)]
    conf = {"transactions": ids, "txn_id": "nightly.2025-12-01"}
    first = run_dag("lance_test_commit", conf=conf)
    assert first.state == SUCCESS, first.output[-3000:]
    version, files = ns.version, tree(lance_test_root)
    second = run_dag("lance_test_commit", conf=conf)
    assert second.state == SUCCESS
    assert second.xcom("commit")["manifest_version"] == first.xcom("commit")["manifest_version"]
    assert ns.version == version
    assert ns.count_rows() == 40
    assert tree(lance_test_root) == files


@pytest.mark.parametrize(
    ("transactions", "message"),
    [
        (["never-staged"], "no transaction 'never-staged'"),
        ([{"rows": 3}], "(a write result needs its 'txn_id')"),
        (
            [{"txn_id": "x", "uri": "s3://elsewhere/ns", "state": "staged"}],
            "the transactions were staged into ['s3://elsewhere/ns']",
        ),
    ],
    ids=["unknown-transaction", "not-a-write-result", "other-namespace"],
)
def test_commit_operator_bad_input(
    run_dag: RunDag, lance_test_root: Path, transactions: list[Any], message: str
) -> None:
    ns = make_namespace(lance_test_root)
    _stage(ns, "staged-but-not-named", dt.date(2025, 12, 1), 0)
    version = ns.version
    run = run_dag("lance_test_commit", conf={"transactions": transactions})
    assert run.state == FAILED
    assert run.tries["commit"] == 1
    assert message in run.output
    assert ns.version == version
    assert ns.count_rows() == 0


@pytest.mark.usefixtures("unreachable_lance_test")
def test_commit_operator_retries_when_the_store_is_unreachable(run_dag: RunDag) -> None:
    """A StorageError is retryable: the task burns its retry (and fails only after it)."""
    run = run_dag("lance_test_commit", conf={"transactions": ["w-0"]})
    assert run.state == FAILED
    assert run.tries["commit"] == 2  # retried once (retries=1), then failed
    assert "failed: StorageError: cannot read the __manifest of s3://bucket/wh/events" in (
        run.output
    )


def test_commit_operator_on_a_plain_file_fails_without_retry(
    run_dag: RunDag, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: a connection root that is a plain file is no outage a retry outlasts."""
    plain = tmp_path / "lance"
    plain.write_text("not a directory")
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_TEST",
        json.dumps({"conn_type": "lance", "extra": {"root": str(plain)}}),
    )
    run = run_dag("lance_test_commit", conf={"transactions": ["w-0"]})
    assert run.state == FAILED
    assert run.tries["commit"] == 1  # StorageAccessError is not retryable
    assert "failed: StorageAccessError: cannot read the __manifest of" in run.output
    assert "plain file, not a directory" in run.output
    assert plain.read_text() == "not a directory"


def test_commit_operator_of_an_aborted_transaction_fails_without_retry(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    ns = make_namespace(lance_test_root)
    _stage(ns, "doomed", dt.date(2025, 12, 1), 0)
    ns.abort("doomed")
    version = ns.version
    run = run_dag("lance_test_commit", conf={"transactions": ["doomed"]})
    assert run.state == FAILED
    assert run.tries["commit"] == 1  # TransactionAborted is not retryable
    assert "failed: TransactionAborted: transaction doomed" in run.output  # (doomed#N)
    assert ns.version == version
    assert ns.count_rows() == 0


def test_commit_operator_reports_writes_their_writers_already_published(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """commit=True writers published themselves: the commit reports them (downstream tasks
    and asset events still happen) instead of skipping, and publishes nothing again."""
    ns = make_namespace(lance_test_root)
    for txn_id, start, first in [
        ("p-0", dt.date(2025, 12, 1), 0),
        ("p-1", dt.date(2025, 12, 3), 50),
    ]:
        ns.commit(_stage(ns, txn_id, start, first))
    version, rows = ns.version, ns.count_rows()
    write_results = [
        {"txn_id": "p-0", "uri": ns.uri, "state": "published"},
        {"txn_id": "p-1", "uri": ns.uri, "state": "published"},
    ]
    run = run_dag("lance_test_commit", conf={"transactions": write_results})
    assert run.state == SUCCESS, run.output[-3000:]
    summary = run.xcom("commit")
    assert summary["sources"] == ["p-0", "p-1"]
    assert (summary["partition_count"], summary["rows"]) == (4, 40)
    assert summary["manifest_version"] == version
    assert (ns.version, ns.count_rows()) == (version, rows)  # nothing published again
    [extra] = _asset_events(asset_uri(ns.uri))
    assert extra["manifest_version"] == version
    assert len(extra["partitions"]) == 4


def _declare_asset(name: str, uri: str) -> None:
    """What the DAG processor records for a user's ``Asset(name=..., uri=...)``."""
    from airflow.models.asset import AssetActive, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        asset = AssetModel(name=name, uri=uri, group="asset")
        session.add(asset)
        session.add(AssetActive.for_asset(asset))


def test_commit_through_an_alias_feeds_the_asset_a_user_declared(
    run_dag: RunDag, lance_test_root: Path
) -> None:
    """A user's ``Asset("daily_events", uri="lance://...")`` keeps receiving the events:
    the alias resolves to it, no second asset with the same URI appears."""
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session

    ns = make_namespace(lance_test_root)
    uri = asset_uri(ns.uri)
    _declare_asset("daily_events", uri)
    staged = _stage(ns, "declared-0", dt.date(2025, 12, 1), 0)
    run = run_dag("lance_test_commit", conf={"transactions": [staged]})
    assert run.state == SUCCESS, run.output[-3000:]
    with create_session() as session:
        assets = session.query(AssetModel).filter(AssetModel.uri == uri).all()
        assert [a.name for a in assets] == ["daily_events"]
    assert len(_asset_events(uri)) == 1


def test_commit_operator_with_nothing_staged_skips(run_dag: RunDag, lance_test_root: Path) -> None:
    ns = make_namespace(lance_test_root)
    run = run_dag("lance_test_commit", conf={"transactions": []})
    assert run.states["commit"] == "skipped"
    assert "nothing staged to commit" in run.output
    assert ns.partitions() == []
