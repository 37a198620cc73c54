"""Airflow operators over partitioned namespaces (thin wrappers over the hook and Spark job).

``LanceSparkWriteOperator`` needs the ``apache-spark`` extra; it is imported on first use so
the other operators work without it.
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
    from airflow_provider_lance.operators.spark import LanceSparkWriteOperator

__all__ = [
    "LanceCommitOperator",
    "LanceCreatePartitionOperator",
    "LancePruneOperator",
    "LanceSparkWriteOperator",
]


__getattr__, __dir__ = lazy_exports(__name__, globals(), {"LanceSparkWriteOperator": "spark"})
