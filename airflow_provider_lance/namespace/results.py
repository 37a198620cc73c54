"""What a publish reports, and what the history says of each version: small, JSON-friendly
(fit for XCom and job result files)."""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def value_text(value: Any) -> str | None:
    """The string form of a partition value (the spec's ``partition.<name>`` property)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def text_value(text: str | None, dtype: pa.DataType) -> Any:
    """A partition value back from its :func:`value_text`, as the Python value of
    ``dtype`` (exact for every type ``value_text`` writes)."""
    if text is None:
        return None
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return bytes.fromhex(text)
    if pa.types.is_time(dtype):  # Arrow casts no strings to times
        return pa.scalar(dt.time.fromisoformat(text), dtype).as_py()
    return pc.cast(pa.array([text], pa.utf8()), dtype)[0].as_py()


def typed_values(
    values: Mapping[str, Any], types: Mapping[str, pa.DataType] | None
) -> dict[str, Any]:
    """Partition values as a record keeps them (:func:`value_text`) back as values of
    their columns' ``types`` (by name; a name without a type stays a string)."""
    types = types or {}
    return {
        k: text_value(v, types[k]) if k in types and isinstance(v, str) else v
        for k, v in values.items()
    }


class SkipReason(enum.StrEnum):
    """Why a table operation or ``maintain`` left a partition alone (values serialised)."""

    #: A transaction holds it: its commit may be under way.
    CLAIMED = "claimed"
    #: Its published version moved under two attempts in a row (optimize gives way).
    KEPT_MOVING = "kept_moving"
    #: It has an index that a rewrite would drop (optimize).
    INDEXED = "indexed"
    #: A NULL read_version: no version to keep is known (maintain).
    READ_LATEST = "read_latest"
    #: Absent at the oldest retained version (maintain).
    CREATED_IN_WINDOW = "created_in_window"
    #: A live transaction staged files into it: its commit needs them (maintain).
    STAGED = "staged"
    #: No rows, or no such column, to index (create_index).
    NOT_INDEXED = "nothing_to_index"


@dataclass(frozen=True)
class PartitionCommit:
    """What one transaction did to one partition."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int
    rows: int
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class CommitResult:
    """The outcome of a publish: the manifest version and every partition it touched."""

    manifest_version: int
    mode: str
    partitions: list[PartitionCommit] = field(default_factory=list)
    txn_id: str | None = None

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def created(self) -> list[PartitionCommit]:
        return [p for p in self.partitions if p.created]

    def to_dict(self) -> dict[str, Any]:
        return {
            "txn_id": self.txn_id,
            "manifest_version": self.manifest_version,
            "mode": self.mode,
            "rows": self.rows,
            "partitions": [p.to_dict() for p in self.partitions],
        }

    @classmethod
    def from_dict(
        cls, obj: Mapping[str, Any], types: Mapping[str, pa.DataType] | None = None
    ) -> CommitResult:
        """The result :meth:`to_dict` recorded; ``types`` (of the partition columns, by
        name) give the values their types back."""
        partitions: list[PartitionCommit] = []
        for p in obj["partitions"]:
            values = typed_values(p["values"], types)
            counts = int(p["read_version"]), int(p["rows"]), bool(p["created"])
            partitions.append(PartitionCommit(p["object_id"], values, *counts))
        return cls(int(obj["manifest_version"]), str(obj["mode"]), partitions, obj.get("txn_id"))


@dataclass(frozen=True)
class PartitionChange:
    """What one ``__manifest`` version did to one partition; ``rows``: the rows written
    (None: the leaf version that says so is gone)."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int
    rows: int | None
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)


@dataclass(frozen=True)
class HistoryEntry:
    """One ``__manifest`` version: when and what. ``operation`` names what a user did
    (``write``, ``add_column``, ...) or a bookkeeping step invisible to readers (``seal``,
    ``compact``: :attr:`internal`); ``details``: what a schema or spec change changed."""

    version: int
    timestamp: dt.datetime
    operation: str
    internal: bool = False
    mode: str | None = None
    txn_id: str | None = None
    partitions: tuple[PartitionChange, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    #: Tags pointing at this version.
    tags: tuple[str, ...] = ()

    @property
    def rows(self) -> int | None:
        """Rows written by this version (None: not a write, or a leaf version is gone)."""
        if self.operation not in ("write", "create_partitions"):
            return None
        counts = [p.rows for p in self.partitions]
        return None if None in counts else sum(c or 0 for c in counts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": self.timestamp.isoformat(),
            "operation": self.operation,
            "internal": self.internal,
            "mode": self.mode,
            "txn_id": self.txn_id,
            "rows": self.rows,
            "partitions": [p.to_dict() for p in self.partitions],
            "details": dict(self.details),
            "tags": list(self.tags),
        }


@dataclass(frozen=True)
class TagInfo:
    """A tag: a name pinning one ``__manifest`` version (and what it reads) for good."""

    name: str
    version: int
    created_at: dt.datetime | None

    def to_dict(self) -> dict[str, Any]:
        created = None if self.created_at is None else self.created_at.isoformat()
        return {"name": self.name, "version": self.version, "created_at": created}


@dataclass(frozen=True)
class PartitionOutcome:
    """What a table operation did to one partition (``read_version`` None: dropped)."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int | None
    rows_removed: int = 0
    rows_updated: int = 0
    rows_inserted: int = 0
    created: bool = False
    fragments_before: int = 0
    fragments_after: int = 0
    #: Rows of the partition an index operation newly indexed, each counted once however
    #: many of its indexes now cover it.
    rows_indexed: int = 0

    @property
    def dropped(self) -> bool:
        return self.read_version is None

    def to_dict(self) -> dict[str, Any]:
        return _as_dict(self)

    @classmethod
    def from_dict(
        cls, obj: Mapping[str, Any], types: Mapping[str, pa.DataType] | None = None
    ) -> PartitionOutcome:
        counts = {f.name: int(obj.get(f.name, 0)) for f in fields(cls)[3:] if f.name != "created"}
        version = None if obj["read_version"] is None else int(obj["read_version"])
        values = typed_values(obj["values"], types)
        created = bool(obj.get("created", False))
        return cls(str(obj["object_id"]), values, version, created=created, **counts)


def _as_dict(part: PartitionCommit | PartitionChange | PartitionOutcome) -> dict[str, Any]:
    """A partition's result as JSON-friendly fields (values as :func:`value_text`)."""
    out = {f.name: getattr(part, f.name) for f in fields(part)}
    out["values"] = {k: value_text(v) for k, v in part.values.items()}
    return out


@dataclass(frozen=True)
class OperationResult:
    """The outcome of one table operation, published in ONE ``__manifest`` commit
    (``manifest_version`` None: nothing changed)."""

    operation: str
    manifest_version: int | None
    partitions: list[PartitionOutcome] = field(default_factory=list)
    txn_id: str | None = None
    #: Partitions left alone and why (a :class:`SkipReason` value).
    skipped: Mapping[str, str] = field(default_factory=dict)

    @property
    def dropped(self) -> list[PartitionOutcome]:
        return [p for p in self.partitions if p.dropped]

    @property
    def rewritten(self) -> list[PartitionOutcome]:
        """Partitions that got a new version (not dropped)."""
        return [p for p in self.partitions if not p.dropped]

    @property
    def rows_removed(self) -> int:
        return sum(p.rows_removed for p in self.partitions)

    @property
    def rows_updated(self) -> int:
        return sum(p.rows_updated for p in self.partitions)

    @property
    def rows_inserted(self) -> int:
        return sum(p.rows_inserted for p in self.partitions)

    @property
    def rows_indexed(self) -> int:
        """Rows newly indexed (one row two indexes now cover counts once)."""
        return sum(p.rows_indexed for p in self.partitions)

    @property
    def fragments_before(self) -> int:
        return sum(p.fragments_before for p in self.partitions)

    @property
    def fragments_after(self) -> int:
        return sum(p.fragments_after for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "txn_id": self.txn_id,
            "manifest_version": self.manifest_version,
            "rows_removed": self.rows_removed,
            "rows_updated": self.rows_updated,
            "rows_inserted": self.rows_inserted,
            "rows_indexed": self.rows_indexed,
            "partitions_dropped": len(self.dropped),
            "partitions_rewritten": len(self.rewritten),
            "partitions": [p.to_dict() for p in self.partitions],
            "skipped": {oid: str(why) for oid, why in self.skipped.items()},
        }

    @classmethod
    def from_dict(
        cls, obj: Mapping[str, Any], types: Mapping[str, pa.DataType] | None = None
    ) -> OperationResult:
        """The result :meth:`to_dict` recorded (``types``: see CommitResult.from_dict)."""
        version = obj.get("manifest_version")
        parts = [PartitionOutcome.from_dict(p, types) for p in obj.get("partitions", ())]
        skipped, version = dict(obj.get("skipped") or {}), None if version is None else int(version)
        return cls(str(obj["operation"]), version, parts, obj.get("txn_id"), skipped)


@dataclass(frozen=True)
class IndexInfo:
    """An index declared on the namespace and how much of its scope it covers; or, with
    ``declared=False``, one built on published leaves outside the namespace (with
    pylance) that no declaration names, its scope the partitions whose leaf has it."""

    name: str
    #: The column's current name (None: the column was dropped since).
    column: str | None
    index_type: str
    params: Mapping[str, Any]
    #: The partitions it covers (None: all of them).
    filter: str | None
    #: Whether every partition's index uses one model trained across partitions.
    shared_model: bool
    #: Partitions in its scope, and those whose leaf has the index.
    partitions: int
    partitions_indexed: int | None
    rows_indexed: int | None
    #: Rows in its scope the index does not cover yet (``optimize_indices`` adds them).
    #: These three are None when listed without coverage (``list_indices(coverage=False)``).
    rows_unindexed: int | None
    #: False: built on leaves outside the namespace; kept by its commits, not maintained
    #: by ``optimize_indices`` (``create_index(..., replace=True)`` declares it).
    declared: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {"params": dict(self.params)}
