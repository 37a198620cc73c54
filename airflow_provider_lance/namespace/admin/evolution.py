"""Schema and partition-spec evolution: each change is computed from the latest state and
committed as a compare-and-swap on the ``__manifest`` version it read, so a concurrent change
makes it recompute (a new column gets a field id above the concurrent one's, a new spec a
new version number) or fail with a clear error; nothing is ever applied on a stale read."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from airflow_provider_lance.namespace.errors import CommitConflict, PartitionSpecError
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.manifest import (
    NAMESPACE,
    RESERVED_COLUMNS,
    Manifest,
    row,
)
from airflow_provider_lance.namespace.format.naming import spec_namespace_id
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.format.spec import (
    PartitionField,
    resolve_spec,
    spec_key,
    spec_to_json,
)
from airflow_provider_lance.namespace.format.state import SCHEMA_KEY, NamespaceState
from airflow_provider_lance.namespace.retry import Budget, Outcome, Spent, backoff, retry_until
from airflow_provider_lance.namespace.txn.spec_fence import fence_spec, needs_fence

log = logging.getLogger(__name__)

#: Attempts of a schema or spec change against concurrent changes before giving up.
EVOLVE_ATTEMPTS = 32

#: The latest state of the namespace (``PartitionedNamespace.state``).
Latest = Callable[[], NamespaceState]


def evolve_partition_spec(
    manifest: Manifest, latest: Latest, fields: Sequence[PartitionField]
) -> int:
    """Add a partition spec version computed from the latest state; returns the version."""

    def attempt(_: int) -> int | Outcome:
        state = latest()
        resolved = resolve_spec(fields, state.schema, state.specs, RESERVED_COLUMNS)
        version = state.spec_version + 1
        existing = state.view.column_types
        for f in resolved:
            if f.name in existing and existing[f.name] != f.result_type:
                raise PartitionSpecError(
                    f"__manifest already has a column {f.name!r} of type {existing[f.name]}"
                )
        columns = [pa.field(f.name, f.result_type) for f in resolved]
        if any(c.name not in existing for c in columns):
            # Nullable columns first (a schema-only commit), then the spec naming them.
            try:
                manifest.add_columns(columns)
            except CommitConflict:  # a concurrent commit won: read again and retry
                return Outcome.LOST
            return Outcome.AGAIN  # added: the spec naming them, on the state with them
        values = {spec_key(version): spec_to_json(resolved), SCHEMA_KEY: state.schema.to_json()}
        if not _swap_metadata(manifest, values, state):
            return Outcome.LOST
        namespace_row = row(spec_namespace_id(version), NAMESPACE, metadata="{}")
        manifest.insert_absent(latest().rows_table([namespace_row]))
        _fence_spec(manifest, latest, version)
        manifest.ensure_indices()  # the new partition columns', for pushed-down prunes
        log.info("partition spec v%d: %s", version, [f.name for f in resolved])
        return version

    spent = _evolution_budget("evolve_partition_spec")  # shared: 32 attempts in all
    return retry_until(attempt, {Outcome.LOST: spent, Outcome.AGAIN: spent}, sleep=backoff)


def evolve_schema(
    manifest: Manifest,
    latest: Latest,
    change: Callable[[NamespaceState], NamespaceSchema],
    what: str,
) -> None:
    """Apply a schema change computed from the latest state (see the module docstring)."""

    def attempt(_: int) -> Outcome | None:
        state = latest()
        values = {SCHEMA_KEY: change(state).to_json()}
        return None if _swap_metadata(manifest, values, state) else Outcome.LOST

    retry_until(attempt, {Outcome.LOST: _evolution_budget(what)}, sleep=backoff)


def dropping(name: str) -> Callable[[NamespaceState], NamespaceSchema]:
    """The schema without ``name``, refused while the current spec partitions by it."""

    def change(state: NamespaceState) -> NamespaceSchema:
        fid = state.schema.id_of(name)
        users = [f.name for f in state.current_spec if f.source_id == fid]
        if users:
            raise PartitionSpecError(
                f"cannot drop {name!r}: the current partition spec uses it ({users}); "
                "evolve the partition spec without it first"
            )
        return state.schema.drop_column(name)

    return change


def promoting(name: str, dtype: pa.DataType) -> Callable[[NamespaceState], NamespaceSchema]:
    """The schema with ``name`` widened to ``dtype``, refused if a partition field breaks."""

    def change(state: NamespaceState) -> NamespaceSchema:
        promoted = state.schema.promote_column(name, dtype)
        fid = state.schema.id_of(name)
        for f in state.current_spec:
            if f.source_id == fid:
                try:
                    resolve_spec([f], promoted, {}, ())
                except PartitionSpecError as exc:
                    raise PartitionSpecError(
                        f"promoting {name!r} to {dtype} breaks partition field {f.name!r}: {exc}"
                    ) from exc
        return promoted

    return change


def _fence_spec(manifest: Manifest, latest: Latest, version: int) -> None:
    """Fence merges still computing under older specs (see :mod:`..txn.spec_fence`); if
    this keeps losing races, the first merge under ``version`` fences instead."""

    def attempt(_: int) -> Outcome | None:
        state = latest()
        if state.spec_version != version or not needs_fence(state):
            return None
        return None if fence_spec(manifest, state, version) else Outcome.LOST

    try:
        retry_until(attempt, {Outcome.LOST: Budget(Spent, attempts=EVOLVE_ATTEMPTS)}, sleep=backoff)
    except Spent:
        log.info("partition spec v%d: not fenced yet, its first merge fences it", version)


def _swap_metadata(manifest: Manifest, values: Mapping[str, str], state: NamespaceState) -> bool:
    """Commit metadata against ``state``'s version; False if a concurrent change won."""
    failpoint("evolve.before_commit")
    with contextlib.suppress(CommitConflict):
        manifest.commit_metadata(values, state.version)
        return True
    return False


def _evolution_budget(what: str) -> Budget:
    """The attempts of a schema or spec change, then the error saying it lost them all."""
    return Budget(
        lambda: CommitConflict(
            f"{what}: concurrent schema or partition spec changes kept winning "
            f"({EVOLVE_ATTEMPTS} attempts); nothing was changed, try again"
        ),
        attempts=EVOLVE_ATTEMPTS,
    )
