"""Airflow sensors: ``LancePartitionSensor`` waits for published partitions."""

from airflow_provider_lance.sensors.partition import LancePartitionSensor

__all__ = ["LancePartitionSensor"]
