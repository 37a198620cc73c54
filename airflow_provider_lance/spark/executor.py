"""What executor-side code shares: the namespace state, loaded once per Python worker."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from airflow_provider_lance.namespace import NamespaceState, PartitionedNamespace


def pinned_state(
    uri: str, storage_options: Mapping[str, str] | None, version: int
) -> NamespaceState:
    """The namespace as of ``__manifest`` ``version`` (cached: Python workers are reused)."""
    return _pinned_state(uri, json.dumps(dict(storage_options or {}), sort_keys=True), version)


@functools.lru_cache(maxsize=8)
def _pinned_state(uri: str, options_json: str, version: int) -> NamespaceState:
    options = json.loads(options_json) or None
    return PartitionedNamespace.open(uri, options).state(version)
