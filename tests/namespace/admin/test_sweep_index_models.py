"""The orphan sweep removes shared index models no declaration names (issue 41, leftover
files): a crashed build's and a dropped index's, once older than the safety age; the
model a declared index names stays, however old."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.admin.sweep import MODEL_DIR
from airflow_provider_lance.namespace.ops import index_model
from airflow_provider_lance.namespace.testing import FailpointError
from tests.namespace.ops.index_data import VECTORS, vector_rows
from tests.support import crashing, other


@pytest.fixture
def vectors(root: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(root, VECTORS, [PartitionField("part", "part")])
    ns.write(vector_rows([1, 2], 300, first_id=0))
    return ns


def models(root: Path) -> list[str]:
    return sorted(p.name for p in (root / MODEL_DIR).glob("*.json"))


def age(root: Path, seconds: float) -> None:
    """Make every model file ``seconds`` old."""
    for p in (root / MODEL_DIR).glob("*.json"):
        then = p.stat().st_mtime - seconds
        os.utime(p, (then, then))


def sweep(ns: PartitionedNamespace, min_age: dt.timedelta) -> dict[str, object]:
    report = ns.maintain(sweep_orphans=True, orphan_min_age=min_age, enforce_min_age=False)
    assert report.orphans is not None
    return report.orphans


def test_the_directory_is_the_models(root: Path) -> None:
    assert MODEL_DIR == index_model.MODEL_DIR


def test_models_of_a_crashed_build_and_a_dropped_index_go_the_declared_one_stays(
    vectors: PartitionedNamespace, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: every model file stayed forever."""
    vectors.create_index("vec", "IVF_PQ", "kept", num_sub_vectors=2, num_partitions=2)
    vectors.create_index("vec", "IVF_FLAT", "dropped", num_partitions=2)
    with crashing(monkeypatch, "create_index.computed"), pytest.raises(FailpointError):
        other(vectors).create_index("vec", "IVF_SQ", "crashed", num_partitions=2)
    assert len(models(root)) == 3
    vectors.drop_index("dropped")
    (kept,) = [m for m in models(root) if m.startswith("kept-")]
    assert sweep(vectors, dt.timedelta(hours=1))["files_removed"] == 0  # all young
    age(root, 2 * 3600)
    sweep(vectors, dt.timedelta(hours=1))
    assert models(root) == [kept]
    (info,) = vectors.list_indices()
    assert info.name == "kept"
    vectors.write(vector_rows([9], 20, 9000))
    assert vectors.optimize_indices().rows_indexed == 20  # the kept model still loads
