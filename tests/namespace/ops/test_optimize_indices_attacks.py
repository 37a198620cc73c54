"""``optimize_indices`` parked against the table operations and schema changes that can
publish meanwhile (issue 41, the attack matrix; docs/design.md "Indexes"). The upkeep is
parked once its segments are built (``optimize_indices.computed``) or once its leaf
versions are committed (``optimize_indices.before_publish``); the other side runs to its
end; then the upkeep finishes. Each test checks the rows kept, every leaf's index whole
and declared (``whole``), the coverage, and what each caller got back."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import btree, race, whole
from tests.support import no_duplicates

#: Where the upkeep parks: segments built, nothing committed; leaf versions committed,
#: the ``__manifest`` swap not yet made.
POINTS = ["optimize_indices.computed", "optimize_indices.before_publish"]

NEW = [*range(5000, 5100), *range(8000, 8010)]


def pending(ns: PartitionedNamespace, *names: str) -> None:
    """The BTREE on ``id`` (and the BTREEs on ``names``) over partitions 1-4, then rows it
    does not cover: partition 5 (ids 5000-5099, new) and a fragment of partition 2 (ids
    8000-8009)."""
    btree(ns)
    for name in names:
        ns.create_scalar_index(name, "BTREE")
    ns.write(vector_rows([5], 100, first_id=5000))
    ns.write(vector_rows([2], 10, first_id=8000))


def upkeep(ns: PartitionedNamespace) -> object:
    return ns.optimize_indices()


def segment_count(ns: PartitionedNamespace, part: int, name: str = "id_idx") -> int:
    p = ns.partition({"part": part})
    leaf = lance.dataset(p.location, version=p.read_version)
    return sum(len(i.segments) for i in leaf.describe_indices() if i.name == name)


@pytest.mark.parametrize("point", POINTS)
def test_a_delete_while_optimize_indices_indexes_keeps_the_index_whole(
    vectors: PartitionedNamespace, point: str
) -> None:
    """The delete adds deletion files to partitions 1, 2 and 5; the upkeep's segments
    cover the same data files and are reused: the deleted rows are gone, the rest indexed."""
    pending(vectors)
    gone = "id < 10 OR id = 8001 OR (id >= 5050 AND id < 5100)"
    result, error, deleted = race(vectors, point, upkeep, lambda ns: ns.delete(gone))
    assert error is None
    assert deleted.rows_removed == 10 + 1 + 50
    assert result.rows_indexed == 50 + 9  # what the upkeep indexed, as published
    left = [i for i in [*range(1200), *NEW] if i >= 10 and i != 8001 and not 5050 <= i < 5100]
    assert no_duplicates(vectors) == left
    assert whole(vectors) == {"id_idx": (5, len(left), 0)}
    assert vectors.to_table(filter="id = 5060").num_rows == 0
    assert vectors.to_table(filter="id = 5010").num_rows == 1


@pytest.mark.parametrize("point", POINTS)
def test_a_merge_while_optimize_indices_indexes_keeps_every_row_once(
    vectors: PartitionedNamespace, point: str
) -> None:
    """The merge updates rows of partitions 2 and 5 (the ones being indexed) and inserts a
    partition 6: the upkeep's retry indexes what stands, the updated values read through
    the index."""
    pending(vectors)
    updates = vector_rows([5], 5, first_id=5000, seed=7)
    updates = updates.set_column(2, "txt", pa.array([f"new{i}" for i in range(5)]))
    fresh = vector_rows([6], 10, first_id=6000)
    data = pa.concat_tables([updates, fresh])
    result, error, merged = race(
        vectors, point, upkeep, lambda ns: ns.merge(data, on=["id", "part"])
    )
    assert error is None
    assert (merged.rows_updated, merged.rows_inserted) == (5, 10)
    assert no_duplicates(vectors) == sorted([*range(1200), *NEW, *range(6000, 6010)])
    assert whole(vectors) == {"id_idx": (6, 1320, 0)}
    assert result.rows_indexed == 100 + 10 + 10  # partitions 5, 2 and the merge's 6
    assert vectors.to_table(filter="id = 5003").column("txt").to_pylist() == ["new3"]


@pytest.mark.parametrize("point", POINTS)
def test_adding_a_column_while_optimize_indices_indexes(
    vectors: PartitionedNamespace, point: str
) -> None:
    pending(vectors)
    result, error, _ = race(
        vectors, point, upkeep, lambda ns: ns.add_column(pa.field("extra", pa.int64()))
    )
    assert error is None
    assert result.rows_indexed == 110
    assert whole(vectors) == {"id_idx": (5, 1310, 0)}
    assert "extra" in vectors.schema.names
    assert no_duplicates(vectors) == sorted([*range(1200), *NEW])


@pytest.mark.parametrize("point", POINTS)
@pytest.mark.parametrize("column", ["txt", "vec"])
def test_renaming_a_column_while_optimize_indices_indexes(
    vectors: PartitionedNamespace, point: str, column: str
) -> None:
    """``txt`` carries an index of its own (renaming the indexed column), ``vec`` none."""
    pending(vectors, "txt")
    result, error, _ = race(vectors, point, upkeep, lambda ns: ns.rename_column(column, "renamed"))
    assert error is None
    assert result.rows_indexed == 110  # rows newly indexed, once for both indexes
    assert whole(vectors) == {"id_idx": (5, 1310, 0), "txt_idx": (5, 1310, 0)}
    infos = {i.name: i.column for i in vectors.list_indices()}
    assert infos["txt_idx"] == ("renamed" if column == "txt" else "txt")
    assert vectors.to_table(filter="id = 5010").num_rows == 1


@pytest.mark.parametrize("point", POINTS)
def test_dropping_an_unindexed_column_while_optimize_indices_indexes(
    vectors: PartitionedNamespace, point: str
) -> None:
    pending(vectors)
    result, error, _ = race(vectors, point, upkeep, lambda ns: ns.drop_column("vec"))
    assert error is None
    assert result.rows_indexed == 110
    assert whole(vectors) == {"id_idx": (5, 1310, 0)}
    assert "vec" not in vectors.schema.names


@pytest.mark.parametrize("point", POINTS)
def test_dropping_the_indexed_column_while_optimize_indices_indexes_it(
    vectors: PartitionedNamespace, point: str
) -> None:
    """``txt`` goes while the upkeep builds its index on partitions 2 and 5. A schema
    change is a metadata commit the upkeep's swap is rebased over, so the segments it
    built on the leaves' ``txt`` data (still there, dropped columns are not rewritten)
    publish; after that the index of a dropped column builds nothing more, and a new
    column of the same name is never answered by it."""
    pending(vectors, "txt")
    result, error, _ = race(vectors, point, upkeep, lambda ns: ns.drop_column("txt"))
    assert error is None
    assert result.rows_indexed == 110  # rows newly indexed, once for both indexes
    assert {i.name: i.column for i in vectors.list_indices()} == {
        "id_idx": "id",
        "txt_idx": None,
    }
    assert whole(vectors) == {"id_idx": (5, 1310, 0), "txt_idx": (5, 1310, 0)}
    vectors.add_column(pa.field("txt", pa.utf8()))
    vectors.write(vector_rows([2, 5], 3, first_id=9000))
    assert vectors.to_table(filter="txt = 'word1 common'").column("id").to_pylist() == [9001]
    assert sorted(vectors.to_table(filter="txt IS NOT NULL").column("id").to_pylist()) == [
        *range(9000, 9006)
    ]
    assert vectors.optimize_indices(names=["txt_idx"]).manifest_version is None
    # the write rewrote leaves 2 and 5 (a column was added since): id_idx over them anew
    assert vectors.optimize_indices().rows_indexed == 313 + 103
    assert whole(vectors)["id_idx"] == (5, 1316, 0)


@pytest.mark.parametrize("point", POINTS)
def test_dropping_a_partition_while_optimize_indices_indexes_it(
    vectors: PartitionedNamespace, point: str
) -> None:
    """Partition 5 goes while the upkeep indexes it: it stays gone (the upkeep never
    publishes a dropped partition back), partition 2's new rows are indexed."""
    pending(vectors)
    result, error, dropped = race(vectors, point, upkeep, lambda ns: ns.drop_partitions("part = 5"))
    assert error is None
    assert [p.values["part"] for p in dropped.dropped] == [5]
    assert [p.values["part"] for p in result.partitions] == [2]
    assert result.rows_indexed == 10
    assert no_duplicates(vectors) == sorted([*range(1200), *range(8000, 8010)])
    assert whole(vectors) == {"id_idx": (4, 1210, 0)}
    assert sorted(p.values["part"] for p in vectors.state().partitions()) == [1, 2, 3, 4]


@pytest.mark.parametrize("point", POINTS)
def test_a_delete_emptying_a_partition_while_optimize_indices_indexes_it(
    vectors: PartitionedNamespace, point: str
) -> None:
    """A delete covering all of partition 5 drops it: the upkeep must not bring it back."""
    pending(vectors)
    result, error, _ = race(vectors, point, upkeep, lambda ns: ns.delete("part = 5"))
    assert error is None
    assert [p.values["part"] for p in result.partitions] == [2]
    assert no_duplicates(vectors) == sorted([*range(1200), *range(8000, 8010)])
    assert whole(vectors) == {"id_idx": (4, 1210, 0)}
