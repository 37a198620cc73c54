"""Airflow triggers: ``LancePartitionTrigger`` polls a namespace in the triggerer."""

from airflow_provider_lance.triggers.partition import LancePartitionTrigger

__all__ = ["LancePartitionTrigger"]
