"""Three pairs of the index attack matrix (test_index_attacks.py, BTREE there) run with
vector indexes too (issue 41): a build against a direct write and against a delete, and
``optimize_indices`` against ``optimize``, for BTREE, IVF_FLAT and IVF_PQ on 8-dimension
vectors (shared model, 2 lists). After each, the index answers: a search finds the row
it asks for, and never a deleted one."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace
from tests.namespace.ops.index_data import vector_rows
from tests.namespace.ops.test_index_attacks import race, whole
from tests.support import no_duplicates

#: index type -> (column, pylance parameters)
KINDS: dict[str, tuple[str, dict[str, Any]]] = {
    "BTREE": ("id", {}),
    "IVF_FLAT": ("vec", {"num_partitions": 2}),
    "IVF_PQ": ("vec", {"num_partitions": 2, "num_sub_vectors": 2}),
}


def build(kind: str) -> Any:
    column, params = KINDS[kind]
    return lambda ns: ns.create_index(column, kind, **params)


def name(kind: str) -> str:
    return f"{KINDS[kind][0]}_idx"


def found(ns: PartitionedNamespace, kind: str, row: int) -> list[int]:
    """The ids the index answers for row ``row``'s key: its id (BTREE) or its vector
    (the nearest one, every list probed and refined: exact)."""
    if kind == "BTREE":
        return list(ns.to_table(filter=f"id = {row}").column("id").to_pylist())
    table = ns.to_table(columns=["vec"], filter=f"id = {row}")
    if table.num_rows == 0:
        table = deleted_vector(row)
    q = table.column("vec")[0].as_py()
    nearest = {"column": "vec", "q": q, "k": 1, "nprobes": 2, "refine_factor": 50}
    hit = ns.to_table(nearest=nearest).column("id").to_pylist()
    return [i for i in hit if i == row]


def deleted_vector(row: int) -> Any:
    """Row ``row`` of the fixture as first written (ids 0-1199, 300 per part)."""
    parts = vector_rows([1, 2, 3, 4], 300, first_id=0)
    return parts.slice(row, 1)


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("point", ["create_index.computed", "create_index.leaf_committed"])
def test_a_direct_write_while_a_vector_index_builds(
    vectors: PartitionedNamespace, kind: str, point: str
) -> None:
    result, error, _ = race(
        vectors, point, build(kind), lambda ns: ns.write(vector_rows([2], 10, first_id=8000))
    )
    assert error is None
    assert result.rows_indexed == 1200
    assert no_duplicates(vectors) == [*range(1200), *range(8000, 8010)]
    assert whole(vectors) == {name(kind): (4, 1200, 10)}
    assert vectors.optimize_indices().rows_indexed == 10
    assert whole(vectors) == {name(kind): (4, 1210, 0)}
    assert found(vectors, kind, 8003) == [8003]


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_delete_while_a_vector_index_builds(vectors: PartitionedNamespace, kind: str) -> None:
    result, error, deleted = race(
        vectors, "create_index.computed", build(kind), lambda ns: ns.delete("id < 100")
    )
    assert error is None
    assert deleted.rows_removed == 100
    assert result.rows_indexed == 1100
    assert no_duplicates(vectors) == list(range(100, 1200))
    assert whole(vectors) == {name(kind): (4, 1100, 0)}
    assert found(vectors, kind, 50) == []
    assert found(vectors, kind, 150) == [150]


@pytest.mark.parametrize("kind", list(KINDS))
def test_optimize_indices_of_a_vector_index_while_optimize_compacts(
    vectors: PartitionedNamespace, kind: str
) -> None:
    """Partition 1 holds three small unindexed fragments; optimize compacts them while the
    upkeep indexes them: whatever the upkeep publishes is whole, the next one covers all."""
    build(kind)(vectors)
    for day in range(3):
        vectors.write(vector_rows([1], 10, first_id=2000 + 100 * day))
    _, error, compacted = race(
        vectors,
        "optimize_indices.computed",
        lambda ns: ns.optimize_indices(),
        lambda ns: ns.optimize(),
    )
    assert error is None
    assert [p.values["part"] for p in compacted.partitions] == [1]
    indexed, rows, unindexed = whole(vectors)[name(kind)]
    assert (indexed, rows + unindexed) == (4, 1230)
    vectors.optimize_indices()
    assert whole(vectors) == {name(kind): (4, 1230, 0)}
    assert found(vectors, kind, 2105) == [2105]
    assert no_duplicates(vectors) == sorted(
        [*range(1200), *(2000 + 100 * d + i for d in range(3) for i in range(10))]
    )
