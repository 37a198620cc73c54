"""The orphan sweep against an index build in flight (issue 41): the segments a build wrote
and its shared model, named by no leaf version nor declaration until its publish, are kept
while the build lives, however old; once it is gone, what it left is swept."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import lance
import numpy as np
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from airflow_provider_lance.namespace.txn import builds
from tests.namespace.ops.index_data import DIM, VECTORS, vector_rows
from tests.namespace.ops.test_index_races import index_files
from tests.support import Worker, no_duplicates, other

NOW = dt.timedelta(0)


@pytest.fixture
def vectors(root: Path) -> PartitionedNamespace:
    """Partitions 1-4 by ``part``, 300 rows each (ids 0-1199)."""
    ns = PartitionedNamespace.create(root, VECTORS, [PartitionField("part", "part")])
    ns.write(vector_rows([1, 2, 3, 4], 300, first_id=0))
    return ns


def sweep(ns: PartitionedNamespace) -> dict[str, object]:
    report = ns.maintain(
        sweep_orphans=True, orphan_min_age=NOW, enforce_min_age=False, indices=False
    )
    assert report.orphans is not None
    return report.orphans


def searchable(ns: PartitionedNamespace, name: str) -> None:
    """Every published leaf reads its index ``name`` (its files are all there)."""
    q = np.zeros(DIM, dtype="float32")
    for p in ns.state().partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        assert leaf.stats.index_stats(name)["num_indexed_rows"] == leaf.count_rows()
        if name == "vec_idx":
            assert leaf.to_table(nearest={"column": "vec", "q": q, "k": 3}).num_rows == 3
        else:
            assert leaf.to_table(filter="id >= 0", prefilter=True).num_rows > 0


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda ns: ns.create_scalar_index("id", "BTREE"), "id_idx"),
        (lambda ns: ns.create_index("vec", "IVF_PQ", num_sub_vectors=2), "vec_idx"),
        (lambda ns: ns.create_scalar_index("txt", "INVERTED"), "txt_idx"),
    ],
    ids=["BTREE", "IVF_PQ", "INVERTED"],
)
def test_a_sweep_while_an_index_builds_keeps_its_segments_and_model(
    vectors: PartitionedNamespace, build: object, name: str
) -> None:
    """The build parks once every leaf's segment is written (none committed); a sweep with
    no safety age runs meanwhile. It keeps what the build names; the build then publishes
    an index every leaf reads, and the shared model indexes a partition created later."""
    with hold("create_index.computed") as parked:
        worker = Worker(build, other(vectors))  # type: ignore[arg-type]
        worker.start()
        parked.wait_reached()
        orphans = sweep(other(vectors))
        assert orphans["kept_staged"]
    worker.outcome()
    searchable(vectors, name)
    vectors.write(vector_rows([5], 300, first_id=5000))
    vectors.optimize_indices()
    searchable(vectors, name)
    assert no_duplicates(vectors) == [*range(1200), *range(5000, 5300)]
    assert builds.live_paths(vectors._storage) == set()  # the record went with the build


def test_a_sweep_after_the_leaf_commits_leaves_them_to_the_build_s_publish(
    vectors: PartitionedNamespace,
) -> None:
    """The build parks after its leaf commits, before its swap: the sweep's roll-back of
    unpublished versions spares the leaves it built in (their Lance cleanup would remove
    the segments its swap publishes)."""
    with hold("create_index.leaf_committed") as parked:
        worker = Worker(other(vectors).create_index, "vec", "IVF_PQ", num_sub_vectors=2)
        worker.start()
        parked.wait_reached()
        orphans = sweep(other(vectors))
    worker.outcome()
    assert orphans["kept_staged"]
    searchable(vectors, "vec_idx")
    assert no_duplicates(vectors) == list(range(1200))


def test_what_a_crashed_build_left_is_swept_once_its_record_expired(
    vectors: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    files_before = index_files(vectors)
    monkeypatch.setenv(ENV, "create_index.computed=raise")
    with pytest.raises(FailpointError):
        other(vectors).create_scalar_index("id", "BTREE")
    monkeypatch.delenv(ENV)
    assert index_files(vectors) - files_before
    assert builds.live_paths(vectors._storage) == set()  # a failed build removes its record
    sweep(vectors)
    assert index_files(vectors) == files_before


def test_a_record_left_by_a_killed_build_protects_until_the_lease_then_goes(
    vectors: PartitionedNamespace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = builds.BuildRecord(vectors._storage, "killed")
    record.add("leaf$dataset/_indices/abc/")
    assert builds.live_paths(vectors._storage) == {"leaf$dataset/_indices/abc/"}
    monkeypatch.setattr(builds, "LEASE_SECONDS", 0.0)
    assert builds.live_paths(vectors._storage, remove_expired=True) == set()
    assert not list((root / builds.BUILDS_DIR).glob("*.json"))


def test_a_sweep_while_optimize_indices_builds_keeps_its_segments(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2)
    vectors.write(vector_rows([2, 5], 50, first_id=5000))
    with hold("optimize_indices.computed") as parked:
        worker = Worker(other(vectors).optimize_indices)
        worker.start()
        parked.wait_reached()
        orphans = sweep(other(vectors))
    assert worker.outcome().rows_indexed == 100
    searchable(vectors, "vec_idx")
    assert orphans["kept_staged"]
