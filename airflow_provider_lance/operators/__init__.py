"""Airflow operators over partitioned namespaces (thin wrappers over the hook and Spark job)."""

from airflow_provider_lance.operators.commit import LanceCommitOperator
from airflow_provider_lance.operators.partitions import (
    LanceCreatePartitionOperator,
    LancePruneOperator,
)
from airflow_provider_lance.operators.spark import LanceSparkWriteOperator

__all__ = [
    "LanceCommitOperator",
    "LanceCreatePartitionOperator",
    "LancePruneOperator",
    "LanceSparkWriteOperator",
]
