"""Airflow hooks: ``LancePartitionedHook`` resolves a ``lance`` connection into namespaces."""

from airflow_provider_lance.hooks.lance import LancePartitionedHook

__all__ = ["LancePartitionedHook"]
