"""A vector index's segments are merged, not rebuilt (issue 41, upkeep): once a leaf holds
``MAX_SEGMENTS`` segments of an IVF_FLAT index with the shared model,
``optimize_indices`` merges them with the delta (pylance's
``merge_existing_index_segments``), and the merged segment goes through the same build
record, leaf commit and publish as a built one: held, crashed or raced, it publishes whole
or not at all, and it answers as a fresh build with the same model does."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.ops.indexing import MAX_SEGMENTS
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_races import index_files
from tests.support import Worker, no_duplicates, other

KINDS = {"IVF_FLAT": {"num_partitions": 4}, "IVF_PQ": {"num_partitions": 4, "num_sub_vectors": 2}}
#: What each type does with a leaf's segments over MAX_SEGMENTS: IVF_PQ's are rebuilt
#: (pylance merges no PQ segment stored transposed, as a build over a whole leaf is).
MERGES = {"IVF_FLAT": True, "IVF_PQ": False}
QUERIES = [q.values.to_numpy() for q in vector_rows([0], 5, first_id=10**6).column("vec")]


def leaf(ns: PartitionedNamespace, part: int) -> lance.LanceDataset:
    p = ns.partition({"part": part})
    return lance.dataset(p.location, version=p.read_version)


def segments(ns: PartitionedNamespace, part: int = 2) -> int:
    (index,) = leaf(ns, part).describe_indices()
    return len(index.segments)


def listed(ns: PartitionedNamespace, part: int = 2) -> int:
    """The rows the IVF lists of the leaf's segments hold (deleted ones included)."""
    stats = leaf(ns, part).stats.index_stats("vec_idx")
    return sum(p["size"] for s in stats["segments"] for p in s["partitions"])


def answers(ns: PartitionedNamespace) -> list[list[tuple[int, float]]]:
    """Partition 2's top 10 (id, _distance) for each query, searching one list."""
    out = []
    for q in QUERIES:
        near = {"column": "vec", "q": q, "k": 10, "nprobes": 1}
        t = ns.to_table(nearest=near, filter="part = 2", columns=["id"])
        out.append(list(zip(t["id"].to_pylist(), t["_distance"].to_pylist(), strict=True)))
    return out


def model(root: Path) -> dict[str, Any]:
    """The shared model of ``vec_idx`` as ``create_index`` arguments."""
    (path,) = (root / "_index_models").glob("vec_idx-*.json")
    doc = json.loads(path.read_text())

    def array(part: dict[str, Any]) -> np.ndarray:
        values = np.frombuffer(base64.b64decode(part["f32"]), dtype="<f4")
        return values.reshape(-1, int(part["dim"]))

    out = {"ivf_centroids": array(doc["centroids"])}
    if doc["codebook"] is not None:
        out["pq_codebook"] = array(doc["codebook"])
    return out


def fresh(ns: PartitionedNamespace, root: Path, kind: str) -> list[list[tuple[int, float]]]:
    """What one segment per leaf built anew with the same model answers."""
    params = {k: v for k, v in KINDS[kind].items() if k != "num_partitions"}
    ns.create_index("vec", kind, replace=True, **model(root), **params)
    assert segments(ns) == 1
    return answers(ns)


def daily(ns: PartitionedNamespace, days: range) -> list[int]:
    """A day's rows for partition 2, then ``optimize_indices``, per day: segments after each."""
    seen = []
    for day in days:
        ns.write(vector_rows([2], 10, first_id=2000 + 100 * day))
        ns.optimize_indices()
        seen.append(segments(ns))
    return seen


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_segments_stay_bounded_merged_and_answer_as_a_fresh_build(
    vectors: PartitionedNamespace, root: Path, kind: str
) -> None:
    """Before: the fourth delta rebuilt an IVF_FLAT index over every fragment too (the 10
    rows deleted from partition 2 left its lists: 370 rows listed, not 380)."""
    vectors.create_index("vec", kind, **KINDS[kind])
    vectors.delete("id >= 300 AND id < 310")
    seen = daily(vectors, range(2 * MAX_SEGMENTS))
    assert seen == [2, 3, 4, 1, 2, 3, 4, 1]  # merged twice: a merged segment merges again
    deleted = 10 if MERGES[kind] else 0  # merged: the deleted rows are listed (not read)
    assert listed(vectors) == 290 + 10 * 2 * MAX_SEGMENTS + deleted
    assert {i.name: (i.rows_indexed, i.rows_unindexed) for i in vectors.list_indices()} == {
        "vec_idx": (1270, 0)
    }
    merged = answers(vectors)
    assert all(len(a) == 10 and not {i for i, _ in a} & set(range(300, 310)) for a in merged)
    assert merged == fresh(vectors, root, kind)


@pytest.mark.parametrize("write", [False, True], ids=["sweep", "sweep-and-write"])
def test_a_merge_held_before_its_publish_survives_a_sweep_and_a_write(
    vectors: PartitionedNamespace, root: Path, write: bool
) -> None:
    """The merging run parks after its merge (nothing committed); the orphan sweep, and a
    write to the same partition, run meanwhile. The merge's files are kept (its build
    record names them), and its retry on the written leaf merges again: every row indexed
    once, one segment, the answers of a fresh build."""
    vectors.create_index("vec", "IVF_FLAT", **KINDS["IVF_FLAT"])
    assert daily(vectors, range(3)) == [2, 3, 4]
    vectors.write(vector_rows([2], 10, first_id=2300))
    with hold("optimize_indices.computed") as gate:
        worker = Worker(lambda: other(vectors).optimize_indices())
        worker.start()
        gate.wait_reached()
        report = other(vectors).maintain(
            sweep_orphans=True, orphan_min_age=dt.timedelta(0), enforce_min_age=False, indices=False
        )
        assert report.orphans is not None
        if write:
            other(vectors).write(vector_rows([2], 10, first_id=2400))
    worker.outcome()
    assert segments(vectors) == 1
    n = 1240 + 10 * write
    assert {i.name: (i.rows_indexed, i.rows_unindexed) for i in vectors.list_indices()} == {
        "vec_idx": (n, 0)
    }
    days = [2000 + 100 * d + i for d in range(4 + write) for i in range(10)]
    assert no_duplicates(vectors) == [*range(1200), *days]
    assert listed(vectors) == n - 900  # each of partition 2's rows listed once
    assert answers(vectors) == fresh(vectors, root, "IVF_FLAT")


def test_a_merge_that_crashes_before_its_publish_publishes_nothing_and_is_redone(
    vectors: PartitionedNamespace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crashed after partition 2's leaf committed the merged segment, before the swap: the
    namespace still reads the four segments, maintain removes what the run left, and the
    next optimize_indices merges them."""
    vectors.create_index("vec", "IVF_FLAT", **KINDS["IVF_FLAT"])
    assert daily(vectors, range(3)) == [2, 3, 4]
    before, files = vectors.version, index_files(vectors)
    vectors.write(vector_rows([2], 10, first_id=2300))
    written = other(vectors).version
    monkeypatch.setenv(ENV, "optimize_indices.leaf_committed=raise")
    with pytest.raises(FailpointError):
        other(vectors).optimize_indices()
    monkeypatch.delenv(ENV)
    assert other(vectors).version == written > before
    assert segments(other(vectors)) == MAX_SEGMENTS
    assert index_files(vectors) - files  # the delta and the merge, unpublished
    other(vectors).maintain(
        sweep_orphans=True, orphan_min_age=dt.timedelta(0), enforce_min_age=False, indices=False
    )
    assert index_files(vectors) == files
    other(vectors).optimize_indices()
    assert segments(other(vectors)) == 1
    assert {i.name: i.rows_unindexed for i in other(vectors).list_indices()} == {"vec_idx": 0}
    assert answers(other(vectors)) == fresh(other(vectors), root, "IVF_FLAT")


def test_a_segment_pylance_will_not_merge_is_rebuilt_with_the_shared_model(
    vectors: PartitionedNamespace, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user rebuilt ``vec_idx`` on partition 2's leaf with pylance (a model of its own,
    kept by the next write); pylance refuses to merge it with the shared model's deltas
    ("IVF partition count mismatch"). The upkeep rebuilds the leaf's index instead, with a
    warning; before, pylance's RuntimeError escaped optimize_indices."""
    vectors.create_index("vec", "IVF_FLAT", **KINDS["IVF_FLAT"])
    p = vectors.partition({"part": 2})
    lance.dataset(p.location).create_index(
        "vec", "IVF_FLAT", name="vec_idx", num_partitions=2, replace=True
    )
    assert daily(vectors, range(3)) == [2, 3, 4]
    with caplog.at_level("WARNING", logger="airflow_provider_lance.namespace.ops.indexing"):
        assert daily(vectors, range(3, 4)) == [1]
    assert "refused to merge the 5 segments of index 'vec_idx'" in caplog.text
    assert leaf(vectors, 2).stats.index_stats("vec_idx")["segments"][0]["num_partitions"] == 4
    assert answers(vectors) == fresh(vectors, root, "IVF_FLAT")
