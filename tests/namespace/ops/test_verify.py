"""``verify()``: every row in the partition its values give, on real namespaces.

Misplaced rows are made the way a foreign writer (or the routing bug fixed on 2026-11-24)
leaves them: appended straight to a leaf with raw pylance, rows whose source columns name
another partition, published as that leaf's latest version.
"""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.format.hashing import hash_array
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.testing import hold
from tests.support import Worker, no_duplicates

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.utf8()),
        pa.field("score", pa.float64()),
    ]
)


def people(n: int, first_id: int = 0) -> pa.Table:
    names = ["alice", "bob", "carol", "dave", None]
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "name": pa.array([names[i % 5] for i in range(n)], pa.utf8()),
            "score": pa.array([float(i % 7) for i in range(n)]),
        },
        schema=SCHEMA,
    )


@pytest.fixture
def bucketed(root: Path) -> PartitionedNamespace:
    """Partitioned by the first letter of ``name`` and a 4-way hash bucket of ``id``;
    20,000 rows in one write (more than DataFusion's 8,192-row batches)."""
    ns = PartitionedNamespace.create(
        root,
        schema=SCHEMA,
        partition_fields=[
            PartitionField("initial", "name", "left(col, 1)"),
            PartitionField("bucket", "id", "abs(hash(col)) % 4"),
        ],
    )
    ns.write(people(20_000))
    return ns


def misplace(ns: PartitionedNamespace, initial: str, rows: pa.Table) -> str:
    """Append ``rows`` straight to the leaf of the partition ``initial`` (bucket 0) with
    raw pylance and publish that leaf as "read the latest"; its object id."""
    state = ns.state()
    target = next(p for p in state.partitions() if p.values == {"initial": initial, "bucket": 0})
    row = state.full_rows([target.object_id]).to_pylist()[0]
    row["read_version"] = None
    ns._manifest.commit(Swap(state.view, [row]))
    leaf = lance.dataset(target.location)
    lance.write_dataset(rows.cast(leaf.schema), target.location, mode="append")
    return target.object_id


def test_a_namespace_written_through_the_api_verifies(bucketed: PartitionedNamespace) -> None:
    report = bucketed.verify()
    assert report.ok
    assert report.rows_checked == 20_000
    assert report.partitions_checked == len(bucketed.partitions()) == 5 * 4
    assert report.to_dict()["misplaced"] == []


def test_misplaced_rows_are_found_and_named_and_a_rewrite_puts_them_right(
    bucketed: PartitionedNamespace,
) -> None:
    wrong = people(3, first_id=100_000).set_column(
        1, "name", pa.array(["zed", "zoe", "zed"], pa.utf8())
    )
    victim = misplace(bucketed, "a", wrong)
    assert bucketed.to_table(filter="name = 'zed'").num_rows == 0  # pruned away: why it matters
    report = bucketed.verify()
    assert not report.ok
    (found,) = report.misplaced
    assert found.object_id == victim
    assert (found.misplaced, found.values["initial"]) == (3, "a")
    assert found.example["initial"] == "z"
    assert report.misplaced_rows == 3
    assert bucketed.verify("name = 'bob'").ok  # only the partitions the filter selects
    before = sorted(bucketed.to_table(columns=["id"]).column("id").to_pylist())
    version = bucketed.version
    assert bucketed.relocate("name = 'bob'").partitions == []  # nothing misplaced there
    assert bucketed.version == version
    result = bucketed.relocate()
    assert bucketed.version == result.manifest_version == version + 1  # one commit
    assert bucketed.verify().ok
    assert sorted(bucketed.to_table(columns=["id"]).column("id").to_pylist()) == before
    assert sorted(bucketed.to_table(filter="name = 'zed'").column("id").to_pylist()) == [
        100_000,
        100_002,
    ]
    assert bucketed.to_table(filter="name = 'zoe'").column("id").to_pylist() == [100_001]
    moved = {p.object_id: p for p in result.partitions}
    assert moved[victim].rows_removed == 3
    assert sum(p.rows_inserted for p in result.partitions) == 3
    assert {p.values["initial"] for p in result.partitions if p.created} == {"z"}
    for p in bucketed.partitions():  # raw pylance reads every leaf at its read_version
        lance.dataset(p.location, version=p.read_version).to_table()
    assert bucketed.relocate().partitions == []  # idempotent: nothing left to move
    assert bucketed.history(limit=1)[0].operation == "relocate"


def test_relocate_against_a_concurrent_append_loses_nothing(bucketed: PartitionedNamespace) -> None:
    """An append publishes to the partition being rewritten while the relocation is parked
    before its swap: the swap fails, the relocation selects again on the new version and
    keeps the appended rows."""
    strays = people(2, first_id=300_000).set_column(1, "name", pa.array(["al", "al"]))
    victim = misplace(bucketed, "c", strays)
    candidates = pa.array(range(400_000, 400_100), pa.int64())
    buckets = pc.remainder(pc.abs(hash_array(candidates)), 4)
    in_bucket_0 = candidates.filter(pc.equal(buckets, 0)).to_pylist()[:5]
    extra = pa.table({"id": in_bucket_0, "name": ["carol"] * 5, "score": [1.0] * 5}, schema=SCHEMA)
    with hold("relocate.before_publish") as parked:
        worker = Worker(PartitionedNamespace.open(bucketed.uri).relocate)
        worker.start()
        parked.wait_reached()
        appended = PartitionedNamespace.open(bucketed.uri).write(extra)
        assert [p.object_id for p in appended.partitions] == [victim]
    result = worker.outcome()
    assert result.manifest_version > appended.manifest_version
    assert bucketed.verify().ok
    ids = no_duplicates(bucketed)
    assert {300_000, 300_001} | set(in_bucket_0) <= set(ids)
    assert len(ids) == 20_000 + 2 + 5


def test_verify_of_a_past_version_and_the_cli(bucketed: PartitionedNamespace, capsys) -> None:
    clean = bucketed.version
    misplace(bucketed, "b", people(1, first_id=500_000).set_column(1, "name", pa.array(["amy"])))
    assert bucketed.verify(as_of=clean).ok
    assert cli.main(["verify", bucketed.uri]) == 4
    out, err = capsys.readouterr()
    payload = json.loads(out)
    assert (payload["ok"], payload["misplaced_rows"]) == (False, 1)
    assert "verify --fix" in err
    assert cli.main(["verify", bucketed.uri, "name = 'carol'"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli.main(["verify", bucketed.uri, "--fix"]) == 0
    assert bucketed.verify().ok
    assert bucketed.to_table(filter="name = 'amy'").column("id").to_pylist() == [500_000]


def test_null_and_nan_partitions_verify(root: Path) -> None:
    """Rows with a NULL partition value sit in the NULL partition, NaN ones in the NaN
    one: neither is misplaced (NULL equals only NULL, NaN only NaN)."""
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("score", "score")]
    )
    data = people(10).set_column(
        2, "score", pa.array([None, float("nan"), 1.0, None, float("nan")] * 2)
    )
    ns.write(data)
    report = ns.verify()
    assert report.ok
    assert (report.rows_checked, report.partitions_checked) == (10, 3)


def test_a_field_whose_source_column_was_dropped_is_reported_unchecked(root: Path) -> None:
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("initial", "name", "left(col, 1)")]
    )
    ns.write(people(50))
    ns.evolve_partition_spec([PartitionField("bucket", "id", "abs(hash(col)) % 4")])
    ns.drop_column("name")
    report = ns.verify()
    assert report.ok
    assert report.unchecked_fields == {1: ["initial"]}
    assert report.rows_checked == 50
