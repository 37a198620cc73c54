"""OpenLineage datasets of the operators: the namespace they write and the files Spark reads.

Operators record a small :class:`NamespaceWrite` while they run; their
``get_openlineage_facets_on_complete`` turns it into datasets here, so the facets are built
one way everywhere. A published write carries the ``__manifest`` version it produced
(``DatasetVersionDatasetFacet``: the version readers can pin) and, for an overwrite, an
``OVERWRITE`` lifecycle state change; a staged write changed nothing readers see and
carries neither. All of it needs the optional ``openlineage`` extra: without it the
operators report no lineage.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

#: Spark's names of object stores, and OpenLineage's for the same store.
_STORE_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}


@dataclass(frozen=True)
class NamespaceWrite:
    """What an operator wrote into a namespace (what lineage needs of it)."""

    uri: str
    columns: list[tuple[str, str]] = field(default_factory=list)
    rows: int | None = None
    #: The ``__manifest`` version that published it (None: staged only).
    manifest_version: int | None = None
    mode: str | None = None


def file_dataset_name(path: str) -> tuple[str, str]:
    """``(namespace, name)`` of a file or directory, per OpenLineage's naming.

    ``s3a://bucket/key`` -> ``("s3://bucket", "key")``; a local path -> ``("file",
    "/abs/path")``.
    """
    parsed = urlsplit(path)
    if len(parsed.scheme) <= 1 or parsed.scheme == "file":  # a path (or a Windows drive)
        local = parsed.path if parsed.scheme == "file" else path
        return "file", os.path.abspath(local)
    scheme = _STORE_ALIASES.get(parsed.scheme.lower(), parsed.scheme.lower())
    return f"{scheme}://{parsed.netloc}", parsed.path.lstrip("/") or "/"


def operator_lineage(
    *, inputs: Sequence[tuple[str, str]] = (), output: NamespaceWrite | None = None
) -> OperatorLineage[Any, Any] | None:
    """The operator's lineage: ``inputs`` as ``(namespace, name)`` pairs, ``output`` the
    namespace written. None when the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    from airflow.providers.common.compat.openlineage.facet import InputDataset

    datasets = [InputDataset(namespace=ns, name=name) for ns, name in inputs]
    outputs = [namespace_output(output)] if output is not None else []
    return OperatorLineage(inputs=datasets, outputs=outputs)


def namespace_output(write: NamespaceWrite) -> Any:
    """The namespace as an OpenLineage output dataset with the facets ``write`` supports."""
    from airflow.providers.common.compat.openlineage.facet import (
        LifecycleStateChange,
        LifecycleStateChangeDatasetFacet,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )

    from airflow_provider_lance.assets import openlineage_name

    facets: dict[str, Any] = {}
    if write.columns:
        facets["schema"] = SchemaDatasetFacet(
            fields=[
                SchemaDatasetFacetFields(name=name, type=dtype) for name, dtype in write.columns
            ]
        )
    if write.manifest_version is not None:
        version = _version_facet(write.manifest_version)
        if version is not None:
            facets["version"] = version
        if write.mode == "overwrite":
            facets["lifecycleStateChange"] = LifecycleStateChangeDatasetFacet(
                lifecycleStateChange=LifecycleStateChange.OVERWRITE
            )
    output_facets: dict[str, Any] = {}
    if write.rows is not None:
        output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(rowCount=write.rows)
    namespace, name = openlineage_name(write.uri)
    return OutputDataset(namespace=namespace, name=name, facets=facets, outputFacets=output_facets)


def _version_facet(manifest_version: int) -> Any:
    """``DatasetVersionDatasetFacet`` (not re-exported by common-compat; the OpenLineage
    client has it since 1.0); None with an older client."""
    try:
        from openlineage.client.generated.dataset_version_dataset import (
            DatasetVersionDatasetFacet,
        )
    except ImportError:
        return None
    return DatasetVersionDatasetFacet(datasetVersion=str(manifest_version))
