"""Repairing a ``__manifest`` that a foreign writer rewrote without our columns.

pylance's ``DirectoryNamespace`` rewrites the whole ``__manifest`` with its five base columns
on every write it makes, dropping ``read_version``, the claim column and the partition
columns (and the scalar indices). Nothing else is lost: the table metadata stays, and the
rows it kept or added are all there. Repair takes the dropped columns back from the latest
manifest version that still had them; rows added since (by the foreign tool) get their
partition values from the ``partition.<name>`` properties mirrored in namespace metadata and
a NULL ``read_version`` ("read the latest version").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc

from .catalog import PARTITION_PROPERTY_PREFIX, SCHEMA_KEY, NamespaceState
from .errors import ManifestError
from .manifest import (
    CLAIM,
    METADATA,
    OBJECT_ID,
    OBJECT_TYPE,
    READ_VERSION,
    TABLE,
    Manifest,
    manifest_schema,
)
from .naming import SEPARATOR

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RepairReport:
    """What :func:`repair` did."""

    repaired: bool
    from_version: int | None = None
    restored_rows: int = 0
    rows_from_properties: int = 0
    manifest_version: int | None = None


def missing_columns(dataset: lance.LanceDataset, state: NamespaceState) -> list[str]:
    """Columns a foreign rewrite dropped (the claim column alone is just an older format)."""
    wanted = [READ_VERSION, *(f.name for f in state.partition_columns)]
    return [c for c in wanted if c not in dataset.schema.names]


def repair(manifest: Manifest, root: str) -> RepairReport:
    current = manifest.open()
    state = NamespaceState.load(root, current)
    if not missing_columns(current, state):
        had_claims = CLAIM in current.schema.names
        manifest.ensure_claim_column()
        return RepairReport(not had_claims, manifest_version=int(manifest.open().version))
    good = _last_good_version(manifest, state, int(current.version))
    columns = state.partition_columns
    schema = manifest_schema(columns)
    ours = {r[OBJECT_ID]: r for r in good.to_table().to_pylist()}
    rows = current.to_table().to_pylist()
    metadata = {r[OBJECT_ID]: _props(r.get(METADATA)) for r in rows}
    restored = derived = 0
    out: list[dict[str, Any]] = []
    for r in rows:
        before = ours.get(r[OBJECT_ID])
        if before is not None:
            extra = {k: before.get(k) for k in (READ_VERSION, CLAIM, *(f.name for f in columns))}
            restored += 1
        else:
            extra = _from_properties(r, metadata, columns)
            derived += 1
        out.append({**{k: r.get(k) for k in schema.names if k in r}, **extra})
    table = pa.Table.from_pylist(out, schema=schema)
    meta: dict[str, str | None] = dict(current.metadata)
    repaired = lance.write_dataset(
        table, manifest.uri, mode="overwrite", storage_options=manifest.storage_options
    )
    repaired.update_metadata(meta)
    repaired.create_scalar_index(OBJECT_TYPE, "BITMAP")
    version = int(manifest.open().version)
    log.warning(
        "repaired __manifest of %s from version %d: %d rows restored, %d from partition "
        "properties (manifest v%d)",
        root,
        good.version,
        restored,
        derived,
        version,
    )
    return RepairReport(True, int(good.version), restored, derived, version)


def _last_good_version(
    manifest: Manifest, state: NamespaceState, latest: int
) -> lance.LanceDataset:
    for version in range(latest - 1, 0, -1):
        try:
            candidate = manifest.open(version)
        except ManifestError:
            break  # cleaned up: nothing older is left either
        if SCHEMA_KEY in candidate.metadata and not missing_columns(candidate, state):
            return candidate
    raise ManifestError(
        f"{manifest.root}: no earlier __manifest version has the partition columns any more "
        "(old versions were cleaned up); the namespace cannot be repaired automatically"
    )


def _props(text: str | None) -> dict[str, str]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _from_properties(
    row: dict[str, Any], metadata: dict[str, dict[str, str]], columns: list[pa.Field]
) -> dict[str, Any]:
    """Partition values of a row the foreign tool added, from mirrored properties."""
    oid = row[OBJECT_ID]
    props = metadata.get(oid, {})
    if row[OBJECT_TYPE] == TABLE and SEPARATOR in oid:
        props = {**metadata.get(oid.rsplit(SEPARATOR, 1)[0], {}), **props}
    out: dict[str, Any] = {READ_VERSION: None, CLAIM: None}
    for f in columns:
        text = props.get(PARTITION_PROPERTY_PREFIX + f.name)
        out[f.name] = None if text is None else _cast(text, f.type)
    return out


def _cast(text: str, dtype: pa.DataType) -> Any:
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return bytes.fromhex(text)
    try:
        return pc.cast(pa.array([text]), dtype)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
