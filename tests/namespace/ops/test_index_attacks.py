"""Index operations against every operation that can run at once (issue 41, the attack
matrix; docs/design.md "Indexes"). Each test parks one side at its last point before its
leaf commits and swap (``<kind>.computed``), runs the other to completion, releases, and
checks that no row is lost or read twice, that every published leaf's index reads and
covers only fragments the leaf has, that no leaf carries an index no declaration names,
and that a refusal is a project error that says what to do.

Covered elsewhere: create_index vs a direct write, vs a transaction's commit (the build
waits), vs another create_index (same name, different names), crashes
(tests/namespace/ops/test_index_races.py); optimize vs a write on an indexed leaf
(test_optimize_indexed.py); maintain's sweep vs a build
(tests/namespace/admin/test_sweep_index_builds.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lance
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.namespace.testing import hold
from tests.namespace.ops.index_data import vector_rows
from tests.support import Worker, claims, no_duplicates, other, settle


def race(
    ns: PartitionedNamespace,
    point: str,
    parked: Callable[[PartitionedNamespace], Any],
    meanwhile: Callable[[PartitionedNamespace], Any],
) -> tuple[Any, LanceNamespaceError | None, Any]:
    """``parked`` runs to ``point`` and waits there while ``meanwhile`` runs to its end;
    then ``parked`` finishes: (its result, its project error, ``meanwhile``'s result)."""
    with hold(point) as gate:
        worker = Worker(parked, other(ns))
        worker.start()
        gate.wait_reached()
        done = meanwhile(other(ns))
    result, error = settle(worker)
    return result, error, done


def whole(ns: PartitionedNamespace) -> dict[str, tuple[int, int, int]]:
    """Every published leaf's indexes are declared, read, and cover only its fragments:
    name -> (partitions indexed, rows indexed, rows unindexed)."""
    declared = {i.name for i in ns.list_indices() if i.declared}
    for p in ns.state().partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        fragments = {f.fragment_id for f in leaf.get_fragments()}
        for index in leaf.describe_indices():
            assert index.name in declared, f"{p.values}: undeclared index {index.name}"
            for segment in index.segments:
                assert set(segment.fragment_ids) <= fragments, f"{p.values}: {index.name}"
            assert leaf.stats.index_stats(index.name)["num_indexed_rows"] >= 0
    assert claims(ns) == []
    return {
        i.name: (i.partitions_indexed, i.rows_indexed, i.rows_unindexed) for i in ns.list_indices()
    }


def btree(ns: PartitionedNamespace, **kwargs: Any) -> Any:
    return ns.create_scalar_index("id", "BTREE", **kwargs)


# -- drop_index ----------------------------------------------------------------------------
def test_drop_index_while_optimize_indices_builds_a_new_partition(
    vectors: PartitionedNamespace,
) -> None:
    """optimize_indices builds id_idx on partition 5 (no segment yet); drop_index publishes
    meanwhile without touching partition 5. The build must not publish an index nobody
    declares any more."""
    btree(vectors)
    vectors.write(vector_rows([5], 100, first_id=5000))
    _, error, _ = race(
        vectors,
        "optimize_indices.computed",
        lambda ns: ns.optimize_indices(),
        lambda ns: ns.drop_index("id_idx"),
    )
    assert error is None
    assert whole(vectors) == {}
    assert no_duplicates(vectors) == [*range(1200), *range(5000, 5100)]


def test_replacing_an_index_while_optimize_indices_builds_the_old_one(
    vectors: PartitionedNamespace,
) -> None:
    """optimize_indices builds the BTREE on partition 5; create_index(replace=True) narrows
    the index to partitions 1-4 as a BITMAP meanwhile. Partition 5 must not publish the
    old BTREE under the new declaration."""
    btree(vectors)
    vectors.write(vector_rows([5], 100, first_id=5000))
    _, error, _ = race(
        vectors,
        "optimize_indices.computed",
        lambda ns: ns.optimize_indices(),
        lambda ns: ns.create_scalar_index(
            "id", "BITMAP", "id_idx", filter="part <= 4", replace=True
        ),
    )
    assert error is None
    assert whole(vectors) == {"id_idx": (4, 1200, 0)}
    p = vectors.partition({"part": 5})
    assert lance.dataset(p.location, version=p.read_version).describe_indices() == []


def test_drop_index_while_create_index_replaces_it(vectors: PartitionedNamespace) -> None:
    """The replacement parks; drop_index publishes. The replacement then finds no index to
    replace and builds it anew (replace=True allows that): drop, then create."""
    btree(vectors)
    result, error, _ = race(
        vectors,
        "create_index.computed",
        lambda ns: ns.create_scalar_index("id", "BITMAP", "id_idx", replace=True),
        lambda ns: ns.drop_index("id_idx"),
    )
    assert error is None
    assert result.rows_indexed == 1200
    assert whole(vectors) == {"id_idx": (4, 1200, 0)}
    assert vectors.list_indices()[0].index_type == "BITMAP"


def test_create_index_replacing_while_drop_index_runs(vectors: PartitionedNamespace) -> None:
    """drop_index parks; the replacement publishes; drop_index then drops the replacement."""
    btree(vectors)
    _, error, _ = race(
        vectors,
        "drop_index.computed",
        lambda ns: ns.drop_index("id_idx"),
        lambda ns: ns.create_scalar_index("id", "BITMAP", "id_idx", replace=True),
    )
    assert error is None
    assert whole(vectors) == {}


def test_two_drop_index_of_one_name_one_drops_the_other_is_told(
    vectors: PartitionedNamespace,
) -> None:
    btree(vectors)
    _, error, _ = race(
        vectors,
        "drop_index.computed",
        lambda ns: ns.drop_index("id_idx"),
        lambda ns: ns.drop_index("id_idx"),
    )
    assert error is not None
    assert "no index named 'id_idx'" in str(error)
    assert whole(vectors) == {}


def test_create_index_while_drop_index_of_another_runs(vectors: PartitionedNamespace) -> None:
    btree(vectors)
    _, error, _ = race(
        vectors,
        "drop_index.computed",
        lambda ns: ns.drop_index("id_idx"),
        lambda ns: ns.create_scalar_index("txt", "INVERTED"),
    )
    assert error is None
    assert whole(vectors) == {"txt_idx": (4, 1200, 0)}


# -- schema evolution ----------------------------------------------------------------------
def test_dropping_the_indexed_column_while_the_index_builds(
    vectors: PartitionedNamespace,
) -> None:
    """The column goes while its index builds: the build must not publish an index of a
    column readers no longer see as live (refused, or published as a declaration of a
    dropped column that builds nothing more)."""
    _, error, _ = race(
        vectors,
        "create_index.computed",
        lambda ns: ns.create_scalar_index("txt", "INVERTED"),
        lambda ns: ns.drop_column("txt"),
    )
    if error is not None:
        assert "txt" in str(error)
        assert whole(vectors) == {}
    else:
        (info,) = vectors.list_indices()
        assert info.column is None
    assert no_duplicates(vectors) == list(range(1200))
    vectors.write(vector_rows([5], 10, first_id=5000).drop_columns(["txt"]))
    vectors.optimize_indices()  # a dropped column's index builds nothing new
    p = vectors.partition({"part": 5})
    assert lance.dataset(p.location, version=p.read_version).describe_indices() == []


def test_renaming_the_indexed_column_while_the_index_builds(
    vectors: PartitionedNamespace,
) -> None:
    result, error, _ = race(
        vectors,
        "create_index.computed",
        lambda ns: ns.create_scalar_index("txt", "INVERTED"),
        lambda ns: ns.rename_column("txt", "text"),
    )
    assert error is None
    assert result.rows_indexed == 1200
    assert whole(vectors) == {"txt_idx": (4, 1200, 0)}
    assert vectors.list_indices()[0].column == "text"


def test_adding_a_column_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    import pyarrow as pa

    _, error, _ = race(
        vectors,
        "create_index.computed",
        btree,
        lambda ns: ns.add_column(pa.field("extra", pa.int64())),
    )
    assert error is None
    assert whole(vectors) == {"id_idx": (4, 1200, 0)}
    assert "extra" in vectors.schema.names


# -- row changes ---------------------------------------------------------------------------
def test_delete_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    """The delete adds deletion files; the build's segments cover the same data files and
    are reused: the deleted rows are gone, the rest indexed."""
    _, error, _ = race(vectors, "create_index.computed", btree, lambda ns: ns.delete("id < 100"))
    assert error is None
    assert no_duplicates(vectors) == list(range(100, 1200))
    assert whole(vectors) == {"id_idx": (4, 1100, 0)}
    assert vectors.to_table(filter="id = 50").num_rows == 0


def test_a_build_while_delete_runs(vectors: PartitionedNamespace) -> None:
    _, error, _ = race(vectors, "delete.computed", lambda ns: ns.delete("id < 100"), btree)
    assert error is None
    assert no_duplicates(vectors) == list(range(100, 1200))
    assert whole(vectors) == {"id_idx": (4, 1100, 0)}


def test_merge_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    """The merge rewrites some rows of partition 1 and inserts partition 5: the build
    publishes on what it built still standing, the rest is left for optimize_indices."""
    changes = vector_rows([1], 10, first_id=0, seed=7)
    inserts = vector_rows([5], 10, first_id=5000)
    import pyarrow as pa

    data = pa.concat_tables([changes, inserts])
    _, error, _ = race(
        vectors, "create_index.computed", btree, lambda ns: ns.merge(data, on=["id", "part"])
    )
    assert error is None
    assert no_duplicates(vectors) == [*range(1200), *range(5000, 5010)]
    _indexed, rows, unindexed = whole(vectors)["id_idx"]
    assert rows + unindexed == 1210
    vectors.optimize_indices()
    assert whole(vectors) == {"id_idx": (5, 1210, 0)}
    assert vectors.to_table(filter="id = 3").column("txt").to_pylist() == [
        changes.column("txt")[3].as_py()
    ]


def test_a_build_while_merge_runs(vectors: PartitionedNamespace) -> None:
    data = vector_rows([1], 10, first_id=0, seed=7)
    _, error, _ = race(
        vectors, "merge.computed", lambda ns: ns.merge(data, on=["id", "part"]), btree
    )
    assert error is None
    assert no_duplicates(vectors) == list(range(1200))
    _indexed, rows, unindexed = whole(vectors)["id_idx"]
    assert rows + unindexed == 1200


def test_drop_partitions_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    _, error, _ = race(
        vectors, "create_index.computed", btree, lambda ns: ns.drop_partitions("part = 2")
    )
    assert error is None
    assert no_duplicates(vectors) == [*range(300), *range(600, 1200)]
    assert whole(vectors) == {"id_idx": (3, 900, 0)}


def test_optimize_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    """The compaction rewrites partition 1's fragments: the build's segment there covers
    fragments that are gone and is built again on the new ones."""
    for day in range(3):
        vectors.write(vector_rows([1], 10, first_id=2000 + 100 * day))
    _, error, _ = race(vectors, "create_index.computed", btree, lambda ns: ns.optimize())
    assert error is None
    assert no_duplicates(vectors) == sorted(
        [*range(1200), *(2000 + 100 * d + i for d in range(3) for i in range(10))]
    )
    assert whole(vectors) == {"id_idx": (4, 1230, 0)}


def test_optimize_indices_while_optimize_runs(vectors: PartitionedNamespace) -> None:
    btree(vectors)
    for day in range(3):
        vectors.write(vector_rows([1], 10, first_id=2000 + 100 * day))
    _, error, _ = race(
        vectors,
        "optimize_indices.computed",
        lambda ns: ns.optimize_indices(),
        lambda ns: ns.optimize(),
    )
    assert error is None
    rows = whole(vectors)["id_idx"]
    assert rows[1] + rows[2] == 1230
    vectors.optimize_indices()
    assert whole(vectors) == {"id_idx": (4, 1230, 0)}


def test_a_transaction_commits_while_the_index_builds(vectors: PartitionedNamespace) -> None:
    txn = vectors.begin("append", "t1")
    txn.stage(vector_rows([2, 5], 10, first_id=6000))
    _, error, _ = race(vectors, "create_index.computed", btree, lambda ns: ns.commit("t1"))
    assert error is None
    assert no_duplicates(vectors) == [*range(1200), *range(6000, 6020)]
    # the build's retry indexed partition 5, created by the commit; partition 2's new
    # fragment waits for optimize_indices
    assert whole(vectors) == {"id_idx": (5, 1210, 10)}


# -- abort and recover ---------------------------------------------------------------------
def test_aborting_a_build_s_transaction_publishes_nothing(vectors: PartitionedNamespace) -> None:
    _, error, _ = race(
        vectors,
        "create_index.computed",
        lambda ns: btree(ns, txn_id="b1"),
        lambda ns: ns.abort("b1"),
    )
    assert error is not None
    assert "b1" in str(error)
    assert whole(vectors) == {}
    assert no_duplicates(vectors) == list(range(1200))
    btree(vectors, txn_id="b1")  # the id starts again
    assert whole(vectors) == {"id_idx": (4, 1200, 0)}


@pytest.mark.parametrize("point", ["create_index.computed", "create_index.leaf_committed"])
def test_recover_while_a_build_runs(vectors: PartitionedNamespace, point: str) -> None:
    """recover with no lease aborts every transaction it finds idle: the build's, named by
    txn_id, loses (an error naming it) or wins; either way all or nothing."""
    _, error, aborted = race(
        vectors, point, lambda ns: btree(ns, txn_id="b2"), lambda ns: ns.recover(0)
    )
    if error is not None:
        assert "b2" in str(error)
        assert whole(vectors) == {}
    else:
        assert "b2" not in aborted
        assert whole(vectors) == {"id_idx": (4, 1200, 0)}
    assert no_duplicates(vectors) == list(range(1200))


# -- optimize_indices against itself ---------------------------------------------------------
@pytest.mark.parametrize(("first", "second"), [("part = 5", "part = 6"), (None, None)])
def test_two_optimize_indices_at_once_both_finish_and_index_once(
    vectors: PartitionedNamespace, first: str | None, second: str | None
) -> None:
    """Disjoint filters (two daily upkeep tasks): both rewrite the declaration row, so the
    parked one loses its swap once and publishes on its retry. The same partitions: the
    parked one finds nothing left to index."""
    btree(vectors)
    vectors.write(vector_rows([5, 6], 50, first_id=5000))
    result, error, _ = race(
        vectors,
        "optimize_indices.computed",
        lambda ns: ns.optimize_indices(first),
        lambda ns: ns.optimize_indices(second),
    )
    assert error is None
    assert whole(vectors) == {"id_idx": (6, 1300, 0)}
    for p in vectors.state().partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        assert [len(i.segments) for i in leaf.describe_indices()] == [1]
    if first is None:
        assert result.manifest_version is None  # nothing left


def test_a_direct_write_after_the_build_s_leaf_commits(vectors: PartitionedNamespace) -> None:
    """The write rolls back the build's committed, unpublished version of partition 2 and
    publishes; the build's swap loses, and its retry commits what it built again."""
    _, error, _ = race(
        vectors,
        "create_index.leaf_committed",
        btree,
        lambda ns: ns.write(vector_rows([2], 10, first_id=8000)),
    )
    assert error is None
    assert no_duplicates(vectors) == [*range(1200), *range(8000, 8010)]
    assert whole(vectors) == {"id_idx": (4, 1200, 10)}
