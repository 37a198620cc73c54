"""Index builds against concurrent writers and crashes (issue 41, item 1): rows written
while an index builds are never lost (the next ``optimize_indices`` indexes them), an index
survives the next write, a build killed part way publishes nothing and ``maintain`` removes
what it left, and ``optimize_indices`` indexes partitions created later."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import IndexExistsError
from airflow_provider_lance.namespace.testing import ENV, FailpointError, hold
from tests.namespace.ops.index_data import leaf_indices, vector_rows
from tests.support import Worker, claims, no_duplicates, other

REPO = Path(__file__).resolve().parents[3]


def index_files(ns: PartitionedNamespace) -> set[str]:
    """Every file under a leaf's ``_indices/``."""
    root = Path(ns.uri.removeprefix("file://"))
    found = root.glob("*$dataset/_indices/**/*")
    return {str(p.relative_to(root)) for p in found if p.is_file()}


def coverage(ns: PartitionedNamespace) -> dict[str, tuple[int, int, int]]:
    return {
        i.name: (i.partitions_indexed, i.rows_indexed, i.rows_unindexed) for i in ns.list_indices()
    }


def test_an_index_survives_the_next_write_and_optimize_indices_covers_the_new_rows(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2)
    vectors.write(vector_rows([2], 50, first_id=5000))
    assert leaf_indices(vectors)[2] == ["id_idx", "vec_idx"]
    assert coverage(vectors) == {"id_idx": (4, 1200, 50), "vec_idx": (4, 1200, 50)}
    result = vectors.optimize_indices()
    assert result.rows_indexed == 50  # 50 new rows, each counted once for both indexes
    assert [p.values["part"] for p in result.partitions] == [2]
    assert coverage(vectors) == {"id_idx": (4, 1250, 0), "vec_idx": (4, 1250, 0)}
    assert vectors.to_table(filter="id = 5010").num_rows == 1
    assert vectors.optimize_indices().manifest_version is None  # nothing left to index


def test_optimize_indices_indexes_a_partition_created_later_with_the_shared_model(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2)
    vectors.create_scalar_index("txt", "INVERTED", filter="part <= 5")
    vectors.write(vector_rows([5, 6], 100, first_id=9000))
    assert coverage(vectors) == {"txt_idx": (4, 1200, 100), "vec_idx": (4, 1200, 200)}
    result = vectors.optimize_indices()
    assert sorted(p.values["part"] for p in result.partitions) == [5, 6]
    assert leaf_indices(vectors)[5] == ["txt_idx", "vec_idx"]
    assert leaf_indices(vectors)[6] == ["vec_idx"]  # outside txt_idx's filter
    assert coverage(vectors) == {"txt_idx": (5, 1300, 0), "vec_idx": (6, 1400, 0)}
    stats = {}
    for part in (1, 6):
        p = vectors.partition({"part": part})
        leaf = lance.dataset(p.location, version=p.read_version)
        stats[part] = str(leaf.stats.index_stats("vec_idx")["segments"][0]["centroids"])
    assert stats[1] == stats[6]  # the new partition's index uses the namespace's model


def test_maintain_indexes_what_the_declarations_do_not_cover_yet(
    vectors: PartitionedNamespace,
) -> None:
    vectors.create_scalar_index("id", "BTREE")
    vectors.write(vector_rows([7], 20, first_id=7000))
    report = vectors.maintain()
    assert report.indices is not None
    assert report.indices["rows_indexed"] == 20
    assert coverage(vectors) == {"id_idx": (5, 1220, 0)}


def test_a_write_while_the_index_builds_keeps_its_rows(vectors: PartitionedNamespace) -> None:
    """The build computed every leaf's index on its published version and parks; a write
    publishes rows into partition 2 meanwhile. The build's commit finds partition 2 moved,
    reuses what it built on the fragments that stand and publishes: the new rows are all
    there, unindexed until optimize_indices."""
    before = no_duplicates(vectors)
    with hold("create_index.computed") as parked:
        build = Worker(other(vectors).create_scalar_index, "id", "BTREE")
        build.start()
        parked.wait_reached()
        other(vectors).write(vector_rows([2], 10, first_id=8000))
    result = build.outcome()
    assert result.rows_indexed == 1200
    assert no_duplicates(vectors) == sorted(before + list(range(8000, 8010)))
    assert coverage(vectors) == {"id_idx": (4, 1200, 10)}
    assert claims(vectors) == []
    vectors.optimize_indices()
    assert coverage(vectors) == {"id_idx": (4, 1210, 0)}


def test_an_index_build_waits_for_a_partition_a_transaction_is_committing(
    vectors: PartitionedNamespace,
) -> None:
    txn = vectors.begin("append", "t1")
    txn.stage(vector_rows([3], 5, first_id=6000))
    with hold("commit.before_publish") as parked:
        commit = Worker(other(vectors).commit, "t1")
        commit.start()
        parked.wait_reached()
        build = Worker(other(vectors).create_scalar_index, "id", "BTREE")
        build.start()
    commit.outcome()
    build.outcome()
    assert 6004 in no_duplicates(vectors)
    assert leaf_indices(vectors)[3] == ["id_idx"]


@pytest.mark.parametrize("point", ["create_index.computed", "create_index.leaf_committed"])
def test_a_build_that_crashes_publishes_nothing_and_maintain_removes_what_it_left(
    vectors: PartitionedNamespace, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    """Crashed once every leaf's index is written (none committed), or after the leaf
    commits: the orphan sweep removes the segments no version references, the roll-back
    of unpublished versions the committed ones."""
    before, files_before = vectors.version, index_files(vectors)
    monkeypatch.setenv(ENV, f"{point}=raise")
    with pytest.raises(FailpointError):
        other(vectors).create_scalar_index("id", "BTREE")
    monkeypatch.delenv(ENV)
    assert vectors.version == before
    assert vectors.list_indices() == []
    assert leaf_indices(vectors) == {p: [] for p in (1, 2, 3, 4)}
    assert index_files(vectors) - files_before  # what it built is on disk, unpublished
    vectors.maintain(sweep_orphans=True, orphan_min_age=dt.timedelta(0), enforce_min_age=False)
    assert index_files(vectors) == files_before
    vectors.create_scalar_index("id", "BTREE")  # the namespace is whole: build it again
    assert leaf_indices(vectors) == {p: ["id_idx"] for p in (1, 2, 3, 4)}


CHILD = textwrap.dedent(
    """
    import sys
    from airflow_provider_lance.namespace import PartitionedNamespace
    ns = PartitionedNamespace.open(sys.argv[1])
    ns.create_index("vec", "IVF_PQ", num_sub_vectors=2, num_partitions=2, txn_id="crash")
    """
)


@pytest.mark.parametrize("point", ["create_index.leaf_committed", "create_index.before_publish"])
def test_a_build_killed_part_way_publishes_nothing_and_its_retry_publishes_once(
    vectors: PartitionedNamespace, root: Path, point: str
) -> None:
    before = vectors.version
    env = {k: v for k, v in os.environ.items() if k != ENV} | {ENV: f"{point}=kill"}
    killed = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], cwd=REPO, env=env, capture_output=True
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert other(vectors).version == before
    assert other(vectors).list_indices() == []
    assert leaf_indices(other(vectors)) == {p: [] for p in (1, 2, 3, 4)}
    env.pop(ENV)
    retried = subprocess.run(
        [sys.executable, "-c", CHILD, str(root)], cwd=REPO, env=env, capture_output=True
    )
    assert retried.returncode == 0, retried.stderr
    assert leaf_indices(other(vectors)) == {p: ["vec_idx"] for p in (1, 2, 3, 4)}
    assert coverage(other(vectors)) == {"vec_idx": (4, 1200, 0)}
    assert no_duplicates(other(vectors)) == list(range(1200))


def test_two_builds_of_one_name_at_once_publish_one_index(
    vectors: PartitionedNamespace,
) -> None:
    """The first build parks once computed; the second builds the same name and publishes.
    The first's swap conflicts on the declaration row, and its next attempt is told the
    name exists: one declaration, one segment per leaf."""
    with hold("create_index.computed") as parked:
        first = Worker(other(vectors).create_scalar_index, "id", "BTREE")
        first.start()
        parked.wait_reached()
        other(vectors).create_scalar_index("id", "BITMAP", "id_idx")
    with pytest.raises(IndexExistsError, match="declared already"):
        first.outcome()
    (info,) = vectors.list_indices()
    assert (info.index_type, info.partitions_indexed) == ("BITMAP", 4)
    for p in vectors.state().partitions():
        (index,) = lance.dataset(p.location, version=p.read_version).describe_indices()
        assert len(index.segments) == 1
    assert claims(vectors) == []


def test_two_builds_of_different_indexes_at_once_both_publish(
    vectors: PartitionedNamespace,
) -> None:
    """Both compute on the same published versions; the one parked loses its race to the
    other's publish, reuses what it built on the new versions and publishes too."""
    with hold("create_index.computed") as parked:
        first = Worker(other(vectors).create_scalar_index, "id", "BTREE")
        first.start()
        parked.wait_reached()
        other(vectors).create_scalar_index("txt", "INVERTED")
    assert first.outcome().rows_indexed == 1200
    assert leaf_indices(vectors) == {p: ["id_idx", "txt_idx"] for p in (1, 2, 3, 4)}
    assert coverage(vectors) == {"id_idx": (4, 1200, 0), "txt_idx": (4, 1200, 0)}
