"""Partitioned writes: route rows, stage data files per leaf, commit leaves, publish once.

``write`` runs three steps. (1) Stage: rows are conformed to the namespace schema, routed to
partitions by the current spec and written as data files into each leaf table; partitions
that do not exist yet get a fresh, still invisible, leaf table. (2) Commit leaves: one Lance
commit per touched leaf (Append, or Overwrite for a dynamic partition overwrite). (3)
Publish: ONE ``__manifest`` compare-and-swap that inserts the rows of new partitions and sets
the ``read_version`` of every touched partition, so a reader sees all of the write or none.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lance.fragment import FragmentMetadata

from .catalog import NamespaceState, Partition, value_text
from .errors import CommitConflict, DataValidationError, InvalidArgumentError
from .leaves import (
    commit_leaf,
    create_leaf,
    discard_fragments,
    drop_leaf,
    leaf_schema_for_append,
    stage_fragments,
)
from .manifest import READ_VERSION, Manifest
from .splitting import split

log = logging.getLogger(__name__)

MODES = ("append", "overwrite")
#: Buffered bytes of routed rows before they are flushed to data files.
FLUSH_BYTES = 128 * 1024 * 1024
PUBLISH_ATTEMPTS = 8


@dataclass(frozen=True)
class PartitionCommit:
    """What one write did to one partition."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int
    rows: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "object_id": self.object_id,
            "values": {k: value_text(v) for k, v in self.values.items()},
            "read_version": self.read_version,
            "rows": self.rows,
            "created": self.created,
        }


@dataclass(frozen=True)
class CommitResult:
    """The outcome of a publish: the manifest version and every partition it touched."""

    manifest_version: int
    mode: str
    partitions: list[PartitionCommit] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def created(self) -> list[PartitionCommit]:
        return [p for p in self.partitions if p.created]

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_version": self.manifest_version,
            "mode": self.mode,
            "rows": self.rows,
            "partitions": [p.to_dict() for p in self.partitions],
        }


@dataclass
class _Target:
    """A partition being written: where, what was staged, and whether it is new."""

    partition: Partition
    created: bool
    fragments: list[FragmentMetadata] = field(default_factory=list)
    buffered: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    leaf_schema: pa.Schema | None = None
    committed: bool = False


def as_batches(data: Any) -> Iterator[pa.Table]:
    """Accept a Table, RecordBatch, RecordBatchReader, or an iterable of batches/tables."""
    if isinstance(data, pa.Table):
        yield data
    elif isinstance(data, pa.RecordBatch):
        yield pa.Table.from_batches([data])
    elif isinstance(data, pa.RecordBatchReader):
        for batch in data:
            yield pa.Table.from_batches([batch])
    elif hasattr(data, "__arrow_c_stream__") and not isinstance(data, (str, bytes)):
        yield from as_batches(pa.RecordBatchReader.from_stream(data))
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        for item in data:
            if not isinstance(item, (pa.Table, pa.RecordBatch)):
                raise DataValidationError(
                    f"write() got an iterable of {type(item).__name__}; expected pyarrow "
                    "Tables or RecordBatches"
                )
            yield item if isinstance(item, pa.Table) else pa.Table.from_batches([item])
    else:
        raise DataValidationError(
            f"write() needs a pyarrow Table, RecordBatch, RecordBatchReader or an iterable of "
            f"batches, got {type(data).__name__}"
        )


class PartitionedWrite:
    """One write into the namespace (stage, commit leaves, publish)."""

    def __init__(
        self,
        manifest: Manifest,
        state: NamespaceState,
        mode: str,
        storage_options: Mapping[str, str] | None,
    ) -> None:
        if mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
        self.manifest = manifest
        self.state = state
        self.mode = mode
        self.storage_options = storage_options
        self.targets: dict[str, _Target] = {}
        self._buffered_bytes = 0

    @property
    def overwrite(self) -> bool:
        return self.mode == "overwrite"

    # -- stage -------------------------------------------------------------------------
    def stage(self, data: Any) -> None:
        fields = self.state.current_spec
        started, rows = time.monotonic(), 0
        for table in as_batches(data):
            conformed = self.state.schema.conform_input(table)
            for chunk in split(conformed, fields, self.state.schema):
                target = self._target(chunk.values)
                target.buffered.append(chunk.data)
                target.rows += chunk.data.num_rows
                self._buffered_bytes += chunk.data.nbytes
            rows += table.num_rows
            if self._buffered_bytes >= FLUSH_BYTES:
                self._flush()
                log.info(
                    "staged %d rows into %d partitions (%.1fs)",
                    rows,
                    len(self.targets),
                    time.monotonic() - started,
                )
        self._flush()

    def _target(self, values: tuple[Any, ...]) -> _Target:
        leaf_id = self.state.leaf_id(values)
        target = self.targets.get(leaf_id)
        if target is not None:
            return target
        existing = self.state.find([leaf_id]).get(leaf_id)
        if existing is not None:
            target = _Target(existing, created=False)
        else:
            planned = self.state.plan_partitions([values], read_version=None).partitions[0]
            create_leaf(planned.location, self.state.schema.leaf_schema(), self.storage_options)
            target = _Target(planned, created=True)
        self.targets[leaf_id] = target
        return target

    def _flush(self) -> None:
        for target in self.targets.values():
            if not target.buffered:
                continue
            data = pa.concat_tables(target.buffered)
            target.buffered.clear()
            if self.overwrite or target.created:
                leaf = self.state.schema.leaf_schema()
            else:
                if target.leaf_schema is None:
                    target.leaf_schema = leaf_schema_for_append(
                        target.partition.location, self.state.schema, self.storage_options
                    )
                leaf = target.leaf_schema
            shaped = self.state.schema.to_leaf(data, leaf)
            target.fragments += stage_fragments(
                target.partition.location,
                shaped,
                self.storage_options,
                overwrite=self.overwrite,
            )
        self._buffered_bytes = 0

    # -- commit ------------------------------------------------------------------------
    def commit(self) -> CommitResult:
        versions: dict[str, int] = {}
        for leaf_id, target in self.targets.items():
            if not target.fragments and not self.overwrite:
                continue
            versions[leaf_id] = commit_leaf(
                target.partition.location,
                target.fragments,
                overwrite=self.overwrite or target.created,
                schema=self.state.schema.leaf_schema(),
                storage_options=self.storage_options,
            )
            target.committed = True
        return self._publish(versions)

    def _publish(self, versions: dict[str, int]) -> CommitResult:
        state = self.state
        for attempt in range(1, PUBLISH_ATTEMPTS + 1):
            rows = self._publish_rows(state, versions)
            try:
                version = self.manifest.compare_and_swap(rows, state.version)
            except CommitConflict:
                if attempt == PUBLISH_ATTEMPTS:
                    raise
                time.sleep(min(0.05 * 2**attempt, 1.0))
                state = NamespaceState.load(state.root, self.manifest.open())
                self._rebase(state, versions)
                continue
            return CommitResult(
                version,
                self.mode,
                [
                    PartitionCommit(
                        leaf_id,
                        dict(t.partition.values),
                        versions[leaf_id],
                        t.rows,
                        t.created,
                    )
                    for leaf_id, t in self.targets.items()
                    if leaf_id in versions
                ],
            )
        raise AssertionError("unreachable")

    def _publish_rows(self, state: NamespaceState, versions: dict[str, int]) -> pa.Table:
        created = [t for t in self.targets.values() if t.created]
        new_rows = state.plan_partitions(
            [tuple(t.partition.values.values()) for t in created],
            read_version=None,
            locations={t.partition.object_id: t.partition.directory for t in created},
        ).rows
        existing = state.find([k for k, t in self.targets.items() if not t.created])
        updated = state.full_rows(list(existing)).to_pylist()
        for r in updated:
            r[READ_VERSION] = versions.get(r["object_id"], r[READ_VERSION])
        for r in new_rows:
            if r["object_id"] in versions:
                r[READ_VERSION] = versions[r["object_id"]]
        return state.rows_table([*new_rows, *updated])

    def _rebase(self, state: NamespaceState, versions: dict[str, int]) -> None:
        """After a conflict: re-check what changed underneath this write."""
        now = state.find(list(versions))
        for leaf_id, target in self.targets.items():
            if leaf_id not in versions:
                continue
            theirs = now.get(leaf_id)
            if target.created and theirs is not None:
                raise CommitConflict(
                    "another writer created the same partition concurrently", [leaf_id]
                )
            if theirs is None or target.created:
                continue
            if theirs.read_version != target.partition.read_version:
                if self.overwrite:
                    raise CommitConflict(
                        "another writer published the partitions this overwrite replaces",
                        [leaf_id],
                    )
                versions[leaf_id] = max(versions[leaf_id], theirs.read_version or 0)
        self.state = state

    def abandon(self) -> None:
        """Remove what this unpublished write left: new leaf tables and staged data files."""
        for target in self.targets.values():
            if target.created:
                drop_leaf(target.partition.location, self.storage_options)
            elif not target.committed:
                discard_fragments(target.partition.location, target.fragments, self.storage_options)
