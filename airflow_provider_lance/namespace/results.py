"""What a publish reports, and what the history says of each version: small, JSON-friendly
(fit for XCom and job result files)."""

from __future__ import annotations

import datetime as dt
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
    """What one ``__manifest`` version did to one partition (see :class:`HistoryEntry`).

    ``rows``: rows the publish wrote into it (an overwrite: the rows that replaced it);
    None when the leaf version that says so is gone.
    """

    object_id: str
    values: Mapping[str, Any]
    read_version: int
    rows: int | None
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
class HistoryEntry:
    """One ``__manifest`` version: when it was committed and what it did.

    ``operation`` names what a user did (``write``, ``create_partitions``, ``add_column``,
    ``evolve_partition_spec``, ...) or, for versions that change nothing a reader sees,
    the bookkeeping step (``seal``, ``compact``, ... : :attr:`internal`). ``mode`` is the
    write mode of a ``write``; ``details`` what a schema or spec change changed.
    """

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
        return {
            "name": self.name,
            "version": self.version,
            "created_at": None if self.created_at is None else self.created_at.isoformat(),
        }
