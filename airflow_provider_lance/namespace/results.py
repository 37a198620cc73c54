"""What a publish reports: small, JSON-friendly (fit for XCom and job result files)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .catalog import value_text


@dataclass(frozen=True)
class PartitionCommit:
    """What one transaction did to one partition."""

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
    def from_dict(cls, obj: Mapping[str, Any]) -> CommitResult:
        """The result as recorded (partition values in their string form)."""
        return cls(
            int(obj["manifest_version"]),
            str(obj["mode"]),
            [
                PartitionCommit(
                    p["object_id"],
                    dict(p["values"]),
                    int(p["read_version"]),
                    int(p["rows"]),
                    bool(p["created"]),
                )
                for p in obj["partitions"]
            ],
            obj.get("txn_id"),
        )


@dataclass(frozen=True)
class PartitionChange:
    """What a table operation (delete, drop_partitions, merge, optimize) did to one
    partition. ``read_version`` is its new published version (None: dropped)."""

    object_id: str
    values: Mapping[str, Any]
    read_version: int | None
    rows_removed: int = 0
    rows_updated: int = 0
    rows_inserted: int = 0
    created: bool = False
    fragments_before: int = 0
    fragments_after: int = 0

    @property
    def dropped(self) -> bool:
        return self.read_version is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "object_id": self.object_id,
            "values": {k: value_text(v) for k, v in self.values.items()},
            "read_version": self.read_version,
            "rows_removed": self.rows_removed,
            "rows_updated": self.rows_updated,
            "rows_inserted": self.rows_inserted,
            "created": self.created,
            "fragments_before": self.fragments_before,
            "fragments_after": self.fragments_after,
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> PartitionChange:
        return cls(
            str(obj["object_id"]),
            dict(obj["values"]),
            None if obj["read_version"] is None else int(obj["read_version"]),
            int(obj.get("rows_removed", 0)),
            int(obj.get("rows_updated", 0)),
            int(obj.get("rows_inserted", 0)),
            bool(obj.get("created", False)),
            int(obj.get("fragments_before", 0)),
            int(obj.get("fragments_after", 0)),
        )


@dataclass(frozen=True)
class OperationResult:
    """The outcome of one table operation: published in ONE ``__manifest`` commit,
    ``manifest_version`` (None: it changed nothing, so it published nothing)."""

    operation: str
    manifest_version: int | None
    partitions: list[PartitionChange] = field(default_factory=list)
    txn_id: str | None = None
    #: Partitions left alone and why (optimize: ``claimed``, ``kept_moving``).
    skipped: Mapping[str, str] = field(default_factory=dict)

    @property
    def dropped(self) -> list[PartitionChange]:
        return [p for p in self.partitions if p.dropped]

    @property
    def rewritten(self) -> list[PartitionChange]:
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
            "partitions_dropped": len(self.dropped),
            "partitions_rewritten": len(self.rewritten),
            "partitions": [p.to_dict() for p in self.partitions],
            "skipped": dict(self.skipped),
        }

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> OperationResult:
        version = obj.get("manifest_version")
        return cls(
            str(obj["operation"]),
            None if version is None else int(version),
            [PartitionChange.from_dict(p) for p in obj.get("partitions", ())],
            obj.get("txn_id"),
            dict(obj.get("skipped") or {}),
        )
