"""The internal interface of the provider's own outer layers to the core.

Spark executors (and the Spark driver's staging) route rows, stage files, read leaves and
name failpoints with these; the CLI and the audit operator read leaves and parse filters
with them. Everything else goes through
:class:`~airflow_provider_lance.namespace.PartitionedNamespace` and the public API
(``tests/test_layering.py`` holds every module outside the core to that). These are
re-exports: nothing here has logic of its own, and none of it is a promise to users."""

from __future__ import annotations

from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.pruning import parse_filter
from airflow_provider_lance.namespace.read.scan import open_leaf, read_partition
from airflow_provider_lance.namespace.txn.plan import merge_stages
from airflow_provider_lance.namespace.txn.store import TransactionStore
from airflow_provider_lance.namespace.write.splitting import routing_keys

from .failpoints import failpoint
from .progress import reporting

__all__ = [
    "Storage",
    "TransactionStore",
    "failpoint",
    "merge_stages",
    "open_leaf",
    "parse_filter",
    "read_partition",
    "reporting",
    "routing_keys",
]
