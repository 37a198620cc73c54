"""Airflow assets for partitioned namespaces: the ``lance`` URI scheme.

An asset URI names the namespace's storage location with the store as the authority, so the
same namespace has the same asset URI whatever connection a DAG reaches it through:

==============================  ==========================================
namespace root                  asset URI
==============================  ==========================================
``s3://lake/warehouse/events``  ``lance://s3/lake/warehouse/events``
``gs://bucket/events``          ``lance://gs/bucket/events``
``file:///data/lance/events``   ``lance://file/data/lance/events``
==============================  ==========================================

``sanitize_uri`` is the provider's URI handler (Airflow calls it for every ``lance://`` asset);
``create_asset`` is the factory for hook-level lineage; ``convert_asset_to_openlineage``
maps an asset to the OpenLineage dataset naming of the underlying store.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, urlsplit

from airflow.providers.common.compat.sdk import Asset

from airflow_provider_lance.namespace import normalize_root

if TYPE_CHECKING:
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

SCHEME = "lance"
_STORE = re.compile(r"^[a-z][a-z0-9+.-]*$")


def asset_uri(namespace_uri: str) -> str:
    """The ``lance://`` asset URI of a namespace root (a path or a store URI)."""
    parsed = urlsplit(normalize_root(namespace_uri))
    if parsed.scheme == SCHEME:
        return sanitize_text(namespace_uri)
    path = posixpath.normpath("/" + (parsed.netloc + parsed.path).lstrip("/"))
    return f"{SCHEME}://{parsed.scheme.lower()}{path}"


def storage_uri(uri: str) -> str:
    """The namespace root a ``lance://`` asset URI names (the inverse of :func:`asset_uri`)."""
    parsed = sanitize_uri(urlsplit(uri))
    if parsed.netloc == "file":
        return f"file://{parsed.path}"
    return f"{parsed.netloc}://{parsed.path.lstrip('/')}"


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """Validate and normalise a ``lance://<store>/<location>`` asset URI (Airflow's handler)."""
    store = uri.netloc.lower()
    if not store or not _STORE.match(store):
        raise ValueError(
            f"a lance asset URI must name the store as its authority, e.g. "
            f"lance://s3/bucket/path or lance://file/abs/path (got {uri.geturl()!r})"
        )
    if ".." in uri.path.split("/"):
        raise ValueError(f"a lance asset URI must not contain '..' (got {uri.geturl()!r})")
    path = posixpath.normpath("/" + uri.path.lstrip("/")) if uri.path else ""
    if path in ("", "/"):
        raise ValueError(f"a lance asset URI needs a location path (got {uri.geturl()!r})")
    return uri._replace(scheme=SCHEME, netloc=store, path=path, query="", fragment="")


def sanitize_text(uri: str) -> str:
    return sanitize_uri(urlsplit(uri)).geturl()


def create_asset(
    *, uri: str, name: str | None = None, extra: dict[str, Any] | None = None
) -> Asset:
    """An :class:`Asset` for the namespace at ``uri`` (a root URI, path or ``lance://`` URI)."""
    lance_uri = asset_uri(uri)
    return Asset(uri=lance_uri, name=name or lance_uri, extra=extra or {})


def is_lance_asset(obj: object) -> bool:
    return isinstance(obj, Asset) and urlsplit(obj.uri).scheme == SCHEME


def convert_asset_to_openlineage(asset: Asset, lineage_context: Any) -> OpenLineageDataset:
    """OpenLineage naming of the underlying store: namespace ``s3://bucket``, name ``path``."""
    from airflow.providers.common.compat.openlineage.facet import Dataset as OpenLineageDataset

    namespace, name = openlineage_name(asset.uri)
    return OpenLineageDataset(namespace=namespace, name=name)


def openlineage_name(uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of a namespace root or ``lance://`` URI, per OpenLineage naming."""
    parsed = urlsplit(asset_uri(uri))
    if parsed.netloc == "file":
        return "file", parsed.path
    bucket, _, rest = parsed.path.lstrip("/").partition("/")
    return f"{parsed.netloc}://{bucket}", rest or "/"
