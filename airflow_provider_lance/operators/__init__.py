"""Airflow operators over partitioned namespaces (thin wrappers over the hook and the core).

``LanceSparkWriteOperator`` needs the ``apache-spark`` extra; it and the other operators
outside ``commit`` and ``partitions`` are imported on first use, so DAG files stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports
from airflow_provider_lance.operators.commit import LanceCommitOperator
from airflow_provider_lance.operators.partitions import (
    LanceCreatePartitionOperator,
    LancePruneOperator,
)

if TYPE_CHECKING:
    from airflow_provider_lance.operators.audit import LanceAuditOperator
    from airflow_provider_lance.operators.evolution import (
        LanceAddColumnOperator,
        LanceDropColumnOperator,
        LanceEvolvePartitionSpecOperator,
        LancePromoteColumnOperator,
        LanceRenameColumnOperator,
    )
    from airflow_provider_lance.operators.indexes import (
        LanceCreateIndexOperator,
        LanceDropIndexOperator,
        LanceOptimizeIndicesOperator,
    )
    from airflow_provider_lance.operators.spark import LanceSparkWriteOperator
    from airflow_provider_lance.operators.table import (
        LanceDeleteOperator,
        LanceDropPartitionsOperator,
        LanceMergeOperator,
        LanceOptimizeOperator,
    )
    from airflow_provider_lance.operators.timetravel import LanceTagOperator
    from airflow_provider_lance.operators.upkeep import (
        LanceAbortOperator,
        LanceMaintainOperator,
        LanceRecoverOperator,
        LanceRepairOperator,
    )
    from airflow_provider_lance.operators.write import LanceWriteOperator

_EXPORTS = {
    "LanceSparkWriteOperator": "spark",
    "LanceWriteOperator": "write",
    "LanceAuditOperator": "audit",
    "LanceAbortOperator": "upkeep",
    "LanceMaintainOperator": "upkeep",
    "LanceRecoverOperator": "upkeep",
    "LanceRepairOperator": "upkeep",
    "LanceAddColumnOperator": "evolution",
    "LanceDropColumnOperator": "evolution",
    "LanceRenameColumnOperator": "evolution",
    "LancePromoteColumnOperator": "evolution",
    "LanceEvolvePartitionSpecOperator": "evolution",
    "LanceDeleteOperator": "table",
    "LanceDropPartitionsOperator": "table",
    "LanceMergeOperator": "table",
    "LanceOptimizeOperator": "table",
    "LanceTagOperator": "timetravel",
    "LanceCreateIndexOperator": "indexes",
    "LanceOptimizeIndicesOperator": "indexes",
    "LanceDropIndexOperator": "indexes",
}

__all__ = [
    "LanceAbortOperator",
    "LanceAddColumnOperator",
    "LanceAuditOperator",
    "LanceCommitOperator",
    "LanceCreateIndexOperator",
    "LanceCreatePartitionOperator",
    "LanceDeleteOperator",
    "LanceDropColumnOperator",
    "LanceDropIndexOperator",
    "LanceDropPartitionsOperator",
    "LanceEvolvePartitionSpecOperator",
    "LanceMaintainOperator",
    "LanceMergeOperator",
    "LanceOptimizeIndicesOperator",
    "LanceOptimizeOperator",
    "LancePromoteColumnOperator",
    "LancePruneOperator",
    "LanceRecoverOperator",
    "LanceRenameColumnOperator",
    "LanceRepairOperator",
    "LanceSparkWriteOperator",
    "LanceTagOperator",
    "LanceWriteOperator",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
