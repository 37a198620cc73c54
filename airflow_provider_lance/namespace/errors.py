"""The project's exception hierarchy.

Every error a user can provoke with bad input surfaces as one of these, with a message that
names the problem and what to do about it, never as a stack trace from deep inside pylance,
pyarrow or DataFusion. ``LanceNamespaceError`` is the root so callers can catch them all.
"""

from __future__ import annotations

from collections.abc import Iterable


class LanceNamespaceError(Exception):
    """Base class of every error raised by airflow_provider_lance."""


class NamespaceNotFoundError(LanceNamespaceError):
    """Nothing at the URI is a partitioned namespace (no ``__manifest``, or no partition spec)."""


class NamespaceExistsError(LanceNamespaceError):
    """``create`` was asked to make a namespace where something already exists."""


class SchemaError(LanceNamespaceError):
    """A schema definition or schema change is invalid (unknown column, narrowing, ...)."""


class PartitionSpecError(LanceNamespaceError):
    """A partition spec is invalid: bad JSON, unknown source, name collision, type mismatch."""


class ExpressionError(PartitionSpecError):
    """A partition expression does not parse, is not deterministic or has the wrong type."""


class FilterError(LanceNamespaceError):
    """A read or prune filter does not parse or references unknown columns."""


class DataValidationError(LanceNamespaceError):
    """Data handed to a write violates the namespace schema (unknown column, NULL, cast)."""


class StorageError(LanceNamespaceError):
    """The storage could not be reached or refused access (credentials, endpoint, network)."""


class PartitionNotFoundError(LanceNamespaceError):
    """A partition that was named does not exist in the namespace."""


class ManifestError(LanceNamespaceError):
    """The ``__manifest`` table is not in the shape this library writes (e.g. clobbered)."""


class CommitConflict(LanceNamespaceError):
    """A concurrent writer changed partitions this commit depends on; nothing was published."""

    def __init__(self, message: str, partitions: Iterable[str] = ()) -> None:
        self.partitions = sorted(partitions)
        if self.partitions:
            shown = ", ".join(self.partitions[:10])
            more = f" and {len(self.partitions) - 10} more" if len(self.partitions) > 10 else ""
            message = f"{message} (partitions: {shown}{more})"
        super().__init__(message)


class InvalidArgumentError(LanceNamespaceError, ValueError):
    """An argument has a wrong value (unknown mode, bad column list, ...)."""
