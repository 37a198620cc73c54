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
