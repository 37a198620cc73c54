"""ns.plan_scan: the tasks of one ``__manifest`` version, serialisable, run anywhere.

Every expectation is computed from the rows written (a Python predicate beside each SQL
filter), not from another read of the namespace: reads run on plans themselves.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import (
    FilterError,
    PartitionedNamespace,
    PartitionField,
    ScanPlan,
    ScanTask,
    SchemaError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.format.hashing import hash_array

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("qty", pa.int32()),
    ]
)
DAYS = [dt.date(2025, 1, 30), dt.date(2025, 1, 31), dt.date(2025, 2, 1), dt.date(2025, 3, 2)]
COUNTRIES = ["DE", "FR", None, "US", "DE"]
Row = dict[str, Any]


def rows(n: int, first_id: int = 0) -> list[Row]:
    return [
        {
            "id": i,
            "event_date": DAYS[i % len(DAYS)],
            "country": COUNTRIES[i % len(COUNTRIES)],
            "qty": i % 7,
        }
        for i in range(first_id, first_id + n)
    ]


def table(data: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(data, schema=SCHEMA)


def by_id(data: list[Row] | pa.Table) -> list[Row]:
    listed = data.to_pylist() if isinstance(data, pa.Table) else data
    return sorted(listed, key=lambda r: r["id"])


def project(data: list[Row], columns: list[str] | None) -> list[Row]:
    return data if columns is None else [{c: r[c] for c in columns} for r in data]


@pytest.fixture
def by_day_and_country(tmp_path: Path) -> tuple[PartitionedNamespace, list[Row]]:
    fields = [PartitionField("event_date", "event_date"), PartitionField("country", "country")]
    ns = PartitionedNamespace.create(tmp_path / "days", schema=SCHEMA, partition_fields=fields)
    data = rows(60)
    ns.write(table(data[:30]))
    ns.write(table(data[30:]))  # two fragments in most partitions
    return ns, data


@pytest.fixture
def by_month_and_bucket(tmp_path: Path) -> tuple[PartitionedNamespace, list[Row]]:
    fields = [
        PartitionField("month", "event_date", "date_trunc('month', col)"),
        PartitionField("bucket", "id", "abs(hash(col)) % 4"),
    ]
    ns = PartitionedNamespace.create(tmp_path / "months", schema=SCHEMA, partition_fields=fields)
    data = rows(80)
    ns.write(table(data))
    return ns, data


FILTERS: list[tuple[str | None, Callable[[Row], bool]]] = [
    (None, lambda r: True),
    ("event_date = DATE '2025-01-31'", lambda r: r["event_date"] == DAYS[1]),
    (
        "event_date >= DATE '2025-01-31' AND event_date < DATE '2025-03-01'",
        lambda r: DAYS[1] <= r["event_date"] < dt.date(2025, 3, 1),
    ),
    ("country IN ('FR', 'US')", lambda r: r["country"] in ("FR", "US")),
    ("country IS NULL", lambda r: r["country"] is None),
    ("country <> 'DE'", lambda r: r["country"] is not None and r["country"] != "DE"),
    ("qty > 3 OR country IS NULL", lambda r: r["qty"] > 3 or r["country"] is None),
    ("abs(hash(id)) % 4 = 1 AND id < 50", lambda r: bucket(r["id"]) == 1 and r["id"] < 50),
]


def bucket(value: int) -> int:
    """``abs(hash(col)) % 4`` of an int64 value (the format's xxhash64)."""
    return abs(hash_array(pa.array([value], pa.int64()))[0].as_py()) % 4


@pytest.mark.parametrize(("sql", "pred"), FILTERS, ids=[str(f[0]) for f in FILTERS])
@pytest.mark.parametrize("layout", ["by_day_and_country", "by_month_and_bucket"])
def test_a_plan_reads_the_rows_its_filter_selects(
    layout: str, sql: str | None, pred: Callable[[Row], bool], request: Any
) -> None:
    ns, data = request.getfixturevalue(layout)
    expected = by_id([r for r in data if pred(r)])
    assert expected  # every filter selects rows: the comparison below is not vacuous
    plan = ns.plan_scan(sql, ["id", "country", "qty", "event_date"])
    assert by_id(plan.to_table()) == expected
    assert plan.count_rows() == len(expected)
    tasks = [t.to_table() for t in plan.tasks]  # each task alone, in any order
    assert by_id(pa.concat_tables(tasks) if tasks else []) == expected
    assert by_id(ns.to_table(filter=sql)) == expected
    assert ns.count_rows(filter=sql) == len(expected)


def test_pruned_tasks_are_the_partitions_prune_keeps(by_day_and_country: Any) -> None:
    ns, _ = by_day_and_country
    sql = "event_date = DATE '2025-01-31' AND country IN ('FR', 'US')"
    plan = ns.plan_scan(sql)
    assert sorted(t.object_id for t in plan) == sorted(p.object_id for p in ns.prune(sql))
    assert {t.values["country"] for t in plan} == {"FR", "US"}
    assert all(t.exact for t in plan)  # identity partitions: no residual to apply
    assert {t.read_version for t in plan} == {p.read_version for p in ns.prune(sql)}


def _read_elsewhere(tmp_path: Path, code: str, *payloads: bytes) -> list[Row]:
    """Run ``code`` in a new interpreter with the payload files' paths as arguments; it
    prints the rows it read as JSON."""
    paths = []
    for i, payload in enumerate(payloads):
        path = tmp_path / f"payload-{i}"
        path.write_bytes(payload)
        paths.append(str(path))
    out = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


READ_ELSEWHERE = """
import json, pickle, sys
from airflow_provider_lance.namespace import ScanPlan, ScanTask
plan = ScanPlan.from_json(open(sys.argv[1]).read())
pickled = pickle.loads(open(sys.argv[2], "rb").read())
alone = [ScanTask.from_json(line) for line in open(sys.argv[3]).read().splitlines()]
read = [[r for t in ts for r in t.to_table().to_pylist()] for ts in (plan.tasks, pickled, alone)]
print(json.dumps(read, default=str))
"""


def test_tasks_round_trip_through_json_and_pickle_and_read_in_another_process(
    by_day_and_country: Any, tmp_path: Path
) -> None:
    ns, data = by_day_and_country
    sql = "country <> 'DE' AND qty >= 2"  # a residual applied on the other side
    plan = ns.plan_scan(sql, ["qty", "id", "event_date"], target_tasks=100)
    assert len({t.object_id for t in plan}) < len(plan)  # split per data file
    text = json.dumps(plan.to_json())
    again = ScanPlan.from_json(text)
    assert again == plan
    assert again.tasks == plan.tasks
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert [ScanTask.from_json(json.dumps(t.to_json())) for t in plan] == list(plan.tasks)
    alone = "\n".join(json.dumps(t.to_json()) for t in plan)  # each task with its scan
    read = _read_elsewhere(
        tmp_path, READ_ELSEWHERE, text.encode(), pickle.dumps(list(plan.tasks)), alone.encode()
    )
    expected = [
        {"qty": r["qty"], "id": r["id"], "event_date": str(r["event_date"])}
        for r in by_id(data)
        if r["country"] not in ("DE", None) and r["qty"] >= 2
    ]
    for got in read:
        assert sorted(got, key=lambda r: r["id"]) == expected


def test_partition_values_keep_their_types_through_json(by_month_and_bucket: Any) -> None:
    ns, _ = by_month_and_bucket
    plan = ns.plan_scan()
    again = ScanPlan.from_json(json.dumps(plan.to_json()))
    assert [t.values for t in again] == [t.values for t in plan]
    assert {type(t.values["bucket"]) for t in again} == {int}


def test_a_plan_made_before_a_write_reads_none_of_it(by_day_and_country: Any) -> None:
    ns, data = by_day_and_country
    plan = ns.plan_scan()
    shipped = ScanPlan.from_json(json.dumps(plan.to_json()))
    more = rows(40, first_id=1000)  # into existing partitions and new ones, in one commit
    more += [{"id": 2000, "event_date": dt.date(2026, 1, 1), "country": "PL", "qty": 1}]
    ns.write(table(more))
    ns.write(table(rows(5, first_id=3000)), mode="overwrite")
    for p in (plan, shipped):
        assert by_id(p.to_table()) == by_id(data)
    assert ns.count_rows() > len(data)


def test_as_of_plans_a_past_state(by_day_and_country: Any) -> None:
    ns, data = by_day_and_country
    before = ns.version
    ns.tag("first")
    ns.write(table(rows(10, first_id=500)))
    for as_of in (before, "first"):
        plan = ns.plan_scan("qty = 1", as_of=as_of)
        assert plan.manifest_version == before
        assert by_id(plan.to_table()) == by_id([r for r in data if r["qty"] == 1])
    assert ns.plan_scan("qty = 1").count_rows() > len([r for r in data if r["qty"] == 1])


def test_renamed_promoted_and_added_columns_are_conformed(by_day_and_country: Any) -> None:
    ns, data = by_day_and_country
    ns.rename_column("country", "cc")
    ns.promote_column("qty", pa.int64())
    ns.add_column(pa.field("note", pa.utf8()))
    plan = ns.plan_scan("cc = 'FR' AND qty > 2", ["id", "cc", "qty", "note"])
    assert plan.schema == pa.schema([ns.schema.field(n) for n in ("id", "cc", "qty", "note")])
    shipped = ScanPlan.from_json(json.dumps(plan.to_json()))
    expected = [
        {"id": r["id"], "cc": "FR", "qty": r["qty"], "note": None}
        for r in by_id(data)
        if r["country"] == "FR" and r["qty"] > 2
    ]
    for p in (plan, shipped):
        read = p.to_table()
        assert read.schema == plan.schema
        assert by_id(read) == expected


def test_fragments_are_listed_on_request_only(by_day_and_country: Any) -> None:
    ns, data = by_day_and_country
    sql = "event_date = DATE '2025-01-31'"
    assert all(t.fragments is None for t in ns.plan_scan(sql))
    listed = ns.plan_scan(sql, fragments=True)
    assert sum(f.rows for t in listed for f in t.fragments or ()) == len(
        [r for r in data if r["event_date"] == DAYS[1]]
    )
    assert all(f.bytes for t in listed for f in t.fragments or ())
    split = listed.split()
    assert all(len(t.fragments or ()) == 1 for t in split)
    assert by_id(split.to_table()) == by_id(listed.to_table())


def test_the_default_plan_opens_no_leaf(by_day_and_country: Any) -> None:
    """Planning reads ``__manifest`` only: a plan of a partition whose table is gone is
    made (and fails when read), as ``prune`` does (planning one date among a million
    partitions costs what the prune costs)."""
    ns, _ = by_day_and_country
    sql = "event_date = DATE '2025-01-31' AND country = 'FR'"
    (task,) = ns.plan_scan(sql).tasks
    shutil.rmtree(Path(task.location.removeprefix("file://")))
    (planned,) = ns.plan_scan(sql).tasks
    assert planned == task
    with pytest.raises((TableNotFoundError, StorageError)):
        planned.to_table()
    with pytest.raises((TableNotFoundError, StorageError)):
        ns.plan_scan(sql, fragments=True)


def test_bad_filters_and_columns_fail_when_planning(by_day_and_country: Any) -> None:
    ns, _ = by_day_and_country
    with pytest.raises(FilterError):
        ns.plan_scan("nope = 1")
    with pytest.raises(SchemaError, match="nope"):
        ns.plan_scan(columns=["id", "nope"])


SECRET = "s3cr3t-Value-0f-the-key"


def test_storage_options_never_show_in_a_repr_or_json(tmp_path: Path) -> None:
    options = {"aws_secret_access_key": SECRET, "aws_access_key_id": "AKIDEXAMPLE"}
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        schema=SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
        storage_options=options,
    )
    ns.write(table(rows(8)))
    plan = ns.plan_scan("qty > 1", ["id"])
    task = plan.tasks[0]
    shown = [repr(plan), str(plan), repr(task), str(task), repr(plan.scan), repr(task.to_json())]
    shown += [json.dumps(plan.to_json()), json.dumps(task.to_json())]
    for text in shown:
        assert SECRET not in text
        assert "AKIDEXAMPLE" not in text
    # the pickle carries them (a Spark executor needs them), JSON is given them back
    assert pickle.loads(pickle.dumps(task)).scan.storage.options == options
    again = ScanTask.from_json(task.to_json(), storage_options=options)
    assert again.scan.storage.options == options
    assert again.to_table() == task.to_table()
