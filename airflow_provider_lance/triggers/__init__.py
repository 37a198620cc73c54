"""Airflow triggers: ``LancePartitionTrigger`` polls a namespace in the triggerer (deferred
sensors); ``LanceManifestTrigger`` fires on every publish (``AssetWatcher``)."""

from airflow_provider_lance.triggers.manifest import LanceManifestTrigger
from airflow_provider_lance.triggers.partition import LancePartitionTrigger

__all__ = ["LanceManifestTrigger", "LancePartitionTrigger"]
