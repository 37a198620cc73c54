"""Repairing a ``__manifest`` that a foreign writer (pylance's ``DirectoryNamespace``: pylance
fact test_fact_directory_namespace_writes_rewrite_the_manifest_with_its_base_columns)
rewrote without our columns. The dropped columns come back from the latest version that
still had them; rows added since get their partition values from their ancestors there and
from the ``partition.<name>`` properties in namespace metadata, and a NULL ``read_version``.

Repair never guesses: it raises :class:`ManifestError`, changing nothing, when the current
or the restoring version was written by another dialect of the format (``{"id", "fields"}``
specs in the Arrow schema metadata, ``partition_field_<id>`` columns), or when a leaf table
the foreign tool added has a partition value nothing on record determines.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace.errors import ManifestError
from airflow_provider_lance.namespace.format.manifest import (
    CLAIM,
    METADATA,
    OBJECT_ID,
    OBJECT_TYPE,
    READ_VERSION,
    TABLE,
    Manifest,
    ManifestView,
    manifest_schema,
)
from airflow_provider_lance.namespace.format.naming import (
    LEAF_TABLE_NAME,
    SEPARATOR,
    spec_namespace_id,
)
from airflow_provider_lance.namespace.format.spec import PartitionField, spec_key, spec_versions
from airflow_provider_lance.namespace.format.state import (
    PARTITION_PROPERTY_PREFIX,
    SCHEMA_KEY,
    NamespaceState,
)

log = logging.getLogger(__name__)

#: Partition value columns of the other dialect are ``partition_field_<field id>``.
FOREIGN_COLUMN_PREFIX = "partition_field_"
#: Object ids an error message lists before it says "and N more".
_LISTED = 10


@dataclass(frozen=True)
class RepairReport:
    """What :func:`repair` did."""

    repaired: bool
    from_version: int | None = None
    #: rows whose dropped columns came back from version ``from_version``
    restored_rows: int = 0
    #: rows under a spec-version namespace added since, valued from their ancestors
    rows_from_properties: int = 0
    manifest_version: int | None = None


def missing_columns(dataset: ManifestView, state: NamespaceState) -> list[str]:
    """Columns a foreign rewrite dropped (the claim column alone is just an older format)."""
    wanted = [READ_VERSION, *(f.name for f in state.partition_columns)]
    return [c for c in wanted if c not in dataset.schema.names]


def repair(manifest: Manifest, root: str) -> RepairReport:
    """Restore the dropped columns, or refuse (changing nothing) where that would guess."""
    current = manifest.latest()
    refuse_foreign_dialect(current, root)
    state = NamespaceState.load(root, current)
    if not missing_columns(current, state):
        had_claims = current.has_claim_column
        manifest.ensure_claim_column()
        return RepairReport(not had_claims, manifest_version=int(manifest.open().version))
    good = _last_good_version(manifest, state, int(current.version))
    refuse_foreign_dialect(good, root)
    plan = plan_repair(current.all_rows(), good.all_rows(), state)
    refuse_unresolved(plan, root, int(good.version))
    table = pa.Table.from_pylist(plan.rows, schema=manifest_schema(state.partition_columns))
    meta: dict[str, str | None] = dict(current.metadata)
    repaired = manifest.storage.replace_table(table, manifest.uri)
    repaired.update_metadata(meta)
    manifest.ensure_indices(repaired)
    version = int(manifest.open().version)
    counts = (root, good.version, plan.restored, plan.derived, version)
    log.warning(
        "repaired __manifest of %s from version %d: %d rows restored, %d from partition "
        "properties (manifest v%d)",
        *counts,
    )
    return RepairReport(True, int(good.version), plan.restored, plan.derived, version)


# -- refusing another dialect ----------------------------------------------------------------
def foreign_dialect_markers(dataset: ManifestView) -> list[str]:
    """Signs that another implementation of the format wrote this ``__manifest`` version:
    a spec object in the Arrow schema metadata (we never write any) or a
    ``partition_field_<id>`` column none of our specs declares."""
    own = _own_partition_names(dataset.metadata)
    found = [
        f"a partition spec ({{'id', 'fields'}} JSON) under the Arrow schema metadata key {key!r}"
        for key, value in _schema_metadata(dataset.schema).items()
        if _is_foreign_spec(value)
    ]
    found += [
        f"the partition value column {name!r}"
        for name in dataset.schema.names
        if name.startswith(FOREIGN_COLUMN_PREFIX) and name not in own
    ]
    return found


def refuse_foreign_dialect(dataset: ManifestView, root: str) -> None:
    """Raise if ``dataset`` carries another dialect's markers: its values cannot be mapped."""
    if markers := foreign_dialect_markers(dataset):
        raise ManifestError(
            f"{root}: __manifest version {dataset.version} carries markers of another dialect "
            f"of the partitioned-namespace format: {'; '.join(markers)}. This namespace was "
            "written by another implementation of the format (such as the lance "
            "repository's own partitioned namespace) and cannot be repaired automatically; "
            "nothing was changed. Read it with the implementation that wrote it."
        )


def _own_partition_names(metadata: Mapping[str, str]) -> set[str]:
    """Partition field names our specs (table metadata) declare, read leniently."""
    names: set[str] = set()
    for version in spec_versions(metadata):
        try:
            fields = json.loads(metadata[spec_key(version)])
        except ValueError:
            continue
        if isinstance(fields, list):
            names.update(str(f["name"]) for f in fields if isinstance(f, dict) and "name" in f)
    return names


def _schema_metadata(schema: pa.Schema) -> dict[str, str]:
    raw = schema.metadata or {}
    return {
        k.decode(errors="replace"): v.decode(errors="replace")
        for k, v in raw.items()
        if isinstance(k, bytes) and isinstance(v, bytes)
    }


def _is_foreign_spec(text: str) -> bool:
    """A ``{"id": ..., "fields": [...]}`` spec object (or a list of them) in JSON text."""
    try:
        value = json.loads(text)
    except ValueError:
        return False
    candidates = value if isinstance(value, list) else [value]
    return any(isinstance(c, dict) and {"id", "fields"} <= c.keys() for c in candidates)


# -- planning the restored rows --------------------------------------------------------------
@dataclass
class RepairPlan:
    """The rows a repair would write, and the foreign leaves it could not resolve."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    restored: int = 0
    derived: int = 0
    #: leaf table object id -> partition fields of its spec version nothing determines
    unresolved: dict[str, list[str]] = field(default_factory=dict)


def plan_repair(
    current: list[dict[str, Any]], good: list[dict[str, Any]], state: NamespaceState
) -> RepairPlan:
    """Every current row with its dropped columns back (pure): from the good version where
    it has the row, else only the values :func:`known_values` proves (a leaf table missing
    any is recorded as unresolved)."""
    columns = state.partition_columns
    names = manifest_schema(columns).names
    ours = {r[OBJECT_ID]: r for r in good}
    props = {r[OBJECT_ID]: _props(r.get(METADATA)) for r in current}
    plan = RepairPlan()
    for r in current:
        oid = r[OBJECT_ID]
        before = ours.get(oid)
        if before is not None:
            extra = {k: before.get(k) for k in (READ_VERSION, CLAIM, *(f.name for f in columns))}
            plan.restored += 1
        else:
            known = known_values(oid, ours, props, state)
            extra = {
                READ_VERSION: None,
                CLAIM: None,
                **{f.name: known.get(f.name) for f in columns},
            }
            if _spec_fields(oid.split(SEPARATOR)[0], state):
                plan.derived += 1  # (other tools' objects, txn records: nothing to derive)
            leaf_fields = _leaf_fields(oid, r[OBJECT_TYPE], state)
            if lacking := [f.name for f in leaf_fields if f.name not in known]:
                plan.unresolved[oid] = lacking
        plan.rows.append({**{k: r.get(k) for k in names if k in r}, **extra})
    return plan


def known_values(
    object_id: str,
    ours: Mapping[str, dict[str, Any]],
    props: Mapping[str, dict[str, str]],
    state: NamespaceState,
) -> dict[str, Any]:
    """The partition values a row the foreign tool added provably has, by name (absent:
    unknown, not NULL). From the root down to the row, nearer winning: an ancestor the good
    version has gives the values of its level and those above; a ``partition.<name>``
    property on the row or an ancestor gives that value if it parses as the column's type."""
    parts = object_id.split(SEPARATOR)
    fields = _spec_fields(parts[0], state)
    known: dict[str, Any] = {}
    for depth in range(1, len(parts) + 1):
        ancestor = SEPARATOR.join(parts[:depth])
        restored = ours.get(ancestor)
        if restored is not None:
            known.update({f.name: restored.get(f.name) for f in fields[: depth - 1]})
        mirrored = props.get(ancestor, {})
        for column in state.partition_columns:
            text = mirrored.get(PARTITION_PROPERTY_PREFIX + column.name)
            if isinstance(text, str):
                with contextlib.suppress(pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
                    known[column.name] = _cast(text, column.type)
    return known


def _spec_fields(first_part: str, state: NamespaceState) -> list[PartitionField]:
    """The fields of the spec version a ``v<N>`` namespace id names ([] for anything else)."""
    by_id = {spec_namespace_id(v): fields for v, fields in state.specs.items()}
    return by_id.get(first_part, [])


def _leaf_fields(object_id: str, object_type: str, state: NamespaceState) -> list[PartitionField]:
    """The fields a row needs values for: those of its spec if it is a leaf table, else none."""
    parts = object_id.split(SEPARATOR)
    if object_type != TABLE or len(parts) < 2 or parts[-1] != LEAF_TABLE_NAME:
        return []
    return _spec_fields(parts[0], state)


def refuse_unresolved(plan: RepairPlan, root: str, good_version: int) -> None:
    """Raise if a foreign leaf would get a guessed (NULL) partition value."""
    if not plan.unresolved:
        return
    ids = sorted(plan.unresolved)
    shown = ", ".join(f"{i} (no {', '.join(plan.unresolved[i])})" for i in ids[:_LISTED])
    more = f" and {len(ids) - _LISTED} more" if len(ids) > _LISTED else ""
    raise ManifestError(
        f"{root}: cannot repair the __manifest without guessing: {len(ids)} leaf table(s) a "
        f"foreign writer added have partition values that are neither in __manifest version "
        f"{good_version} nor mirrored as partition.<name> properties on their namespaces: "
        f"{shown}{more}. Nothing was changed; add the partition.<name> properties to those "
        "namespaces (or drop the tables) and run repair again."
    )


def _last_good_version(manifest: Manifest, state: NamespaceState, latest: int) -> ManifestView:
    for version in range(latest - 1, 0, -1):
        try:
            candidate = manifest.at(version)
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


def _cast(text: str, dtype: pa.DataType) -> Any:
    """A mirrored property back in the column's type (raises if it does not parse)."""
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return bytes.fromhex(text)
    return pc.cast(pa.array([text]), dtype)[0].as_py()
