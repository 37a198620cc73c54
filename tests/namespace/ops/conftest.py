"""Fixtures of the table-operation tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from tests.namespace.ops.index_data import VECTORS, vector_rows


@pytest.fixture
def vectors(root: Path) -> PartitionedNamespace:
    """Partitions 1-4 by ``part``, 300 rows each (ids 0-1199)."""
    ns = PartitionedNamespace.create(root, VECTORS, [PartitionField("part", "part")])
    ns.write(vector_rows([1, 2, 3, 4], 300, first_id=0))
    return ns
