"""The project's exception hierarchy.

Every error a user can provoke with bad input surfaces as one of these, with a message that
names the problem and what to do about it, never as a stack trace from deep inside pylance,
pyarrow or DataFusion. ``LanceNamespaceError`` is the root so callers can catch them all.

Whether retrying can help is decided here, once, by each class's :attr:`retryable`: storage
errors and conflicts with concurrent writers are retryable (a later attempt may succeed),
bad input, bad paths, denied access and finished transactions are not. Airflow operators,
the spark-submit job's exit codes and the CLI all ask :func:`is_retryable` instead of
keeping their own lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


class LanceNamespaceError(Exception):
    """Base class of every error raised by airflow_provider_lance."""

    #: Whether the same call may succeed when retried later (nothing about the input changes).
    retryable: bool = False


class NamespaceNotFoundError(LanceNamespaceError):
    """Nothing at the URI is a partitioned namespace (no ``__manifest``, or no partition spec)."""


class NamespaceExistsError(LanceNamespaceError):
    """``create`` was asked to make a namespace where something different already exists."""


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


class MissingPartitionSourceError(DataValidationError):
    """Data handed to a write lacks a column the partition spec routes rows by.

    Filling it with NULL, as other missing nullable columns are, would put every row in the
    NULL partition, where no filter on the column finds them: refused instead.
    """

    def __init__(
        self,
        message: str,
        columns: Iterable[str] = (),
        fields: Iterable[str] = (),
    ) -> None:
        #: The missing source columns, and the partition fields computed from them.
        self.columns = list(columns)
        self.fields = list(fields)
        super().__init__(message)


class StorageError(LanceNamespaceError):
    """The storage could not be reached or failed (endpoint, network, an overloaded store)."""

    retryable = True


class StorageAccessError(StorageError):
    """The storage answered, and no retry will change its answer: the URI names no place a
    namespace can be (a path through a plain file, a scheme no object store serves), access
    is denied (file permissions, credentials the store refuses) or a storage option has a
    value the store cannot parse. Fix the URI, the permissions or the storage options.

    A :class:`StorageError`, so code that handles storage failures handles it too, but not
    retryable: a task fails at once, the command line exits 2."""

    retryable = False


class TableNotFoundError(LanceNamespaceError):
    """A Lance table (or a version of it) that was asked for does not exist."""


class PartitionNotFoundError(LanceNamespaceError):
    """A partition that was named does not exist in the namespace."""


class VersionNotFoundError(LanceNamespaceError):
    """A past state that was asked for does not exist: a ``__manifest`` version that never
    existed or was cleaned up (``maintain``), a moment before the namespace was created or
    whose version was cleaned up, or an unknown tag."""


class VersionBeforeCreationError(VersionNotFoundError):
    """A ``__manifest`` version from while the namespace was being created: it exists, but
    holds no namespace yet (its schema and spec were set at a later version)."""


class VersionCleanedUp(VersionNotFoundError):
    """A version a read had resolved (a ``__manifest`` version, or a leaf version it reads)
    was removed by retention (``maintain(older_than=...)``) before or while it was read.

    Not retryable: the read named that version itself (``as_of``, a moment or a tag that
    resolved to it), and it is gone for good. A read of the latest state raises
    :class:`LatestVersionCleanedUp` instead, which a retry resolves afresh."""


class LatestVersionCleanedUp(VersionCleanedUp):
    """A read of the *latest* state was outrun by retention: the version it resolved was
    the latest when it started, and ``maintain`` removed it (or a leaf version it reads)
    meanwhile. Retryable: reading again resolves the new latest version, which
    retention keeps."""

    retryable = True


class StagedFilesMissing(LanceNamespaceError):
    """Data files a transaction staged are gone (deleted by retention, the orphan sweep or
    by hand) before its commit published them; nothing of the commit was published.

    Not retryable: committing again finds the same files missing. Abort the transaction and
    stage its rows again. ``missing`` maps each partition to its missing files."""

    def __init__(self, message: str, missing: Mapping[str, Sequence[str]] | None = None) -> None:
        self.missing = {k: list(v) for k, v in sorted((missing or {}).items())}
        super().__init__(message)


class ManifestError(LanceNamespaceError):
    """The ``__manifest`` table is not in the shape this library writes (e.g. clobbered)."""


class CommitConflict(LanceNamespaceError):
    """A concurrent writer changed what this operation depends on; nothing was published.

    Also raised when partitions stay claimed by another live transaction for longer than
    the claim timeout, and when a concurrent schema or spec change won the race.
    """

    retryable = True

    def __init__(self, message: str, partitions: Iterable[str] = ()) -> None:
        self.partitions = sorted(partitions)
        if self.partitions:
            shown = ", ".join(self.partitions[:10])
            more = f" and {len(self.partitions) - 10} more" if len(self.partitions) > 10 else ""
            message = f"{message} (partitions: {shown}{more})"
        super().__init__(message)


class StaleStage(CommitConflict):
    """Data was staged against partitions that changed since in a way no commit can mend:
    a partition it appends to was dropped, a partition it replaces (overwrite, rewrite) got
    a newer version, or two stages of one transaction saw one partition differently.

    Committing the same stages again meets the same partitions, so a commit raising this
    is not retryable (a retry loop would repeat it forever); the message names the stages
    and what to do: discard them and stage their rows again, or abort the transaction and
    begin it again. A write that stages its data itself (``write``, a Spark job that
    commits) is retryable instead: its retry stages afresh (see :func:`stage_again`).
    """

    retryable = False

    def __init__(self, problem: str, partitions: Iterable[str] = (), remedy: str = "") -> None:
        #: What went stale, without the remedy (a write that stages again says its own).
        self.problem = problem
        super().__init__(f"{problem}; {remedy}" if remedy else problem, partitions)


class TransactionAborted(LanceNamespaceError):
    """The transaction was aborted (by the user or by recovery); this incarnation can never
    commit. ``begin`` with the same id starts a new incarnation."""


class OutcomeUnknown(LanceNamespaceError):
    """Whether a commit was published cannot be told any more: its publishing swap failed
    in a way that may have committed it, and its records were collected since. Not
    retryable: the rows may be published already; read the data to find out."""


class InvalidArgumentError(LanceNamespaceError, ValueError):
    """An argument has a wrong value (unknown mode, bad column list, ...)."""


class InvalidLiteralError(FilterError, InvalidArgumentError):
    """A constant in a filter cannot be evaluated (``DATE '2025-13-45'``, ``id = 'abc'``,
    ``1/0``): the filter can match nothing as written, so it is refused in planning
    (``prune``) and reading alike instead of keeping every partition or failing late."""

    def __init__(self, message: str, literal: str | None = None) -> None:
        #: The offending constant as it appears in the filter (None if it cannot be told).
        self.literal = literal
        super().__init__(message)


class InstallationError(LanceNamespaceError):
    """The installed packages cannot work together (e.g. PySpark's Python files and jars
    from different releases); the message says what to reinstall."""


class TagExistsError(InvalidArgumentError):
    """A tag with that name already exists (delete it first to move it)."""


class TransactionClosed(InvalidArgumentError):
    """The transaction no longer takes stages: a commit sealed it (or it was merged)."""


def aborted_meanwhile(txn_id: str, cause: TransactionAborted) -> CommitConflict:
    """A *write* whose transaction an operator, ``recover()`` or a writer waiting past its
    lease aborted while it ran: a retry of the write begins a new incarnation with the
    same data, so it is retryable."""
    return CommitConflict(
        f"transaction {txn_id} was aborted while this write ran (by recover(), an operator, "
        f"or a writer that waited for its partitions past its lease: {cause}); nothing of "
        "it was published, write again"
    )


def stage_again(cause: StaleStage) -> CommitConflict:
    """A *write* whose staged data went stale before it published: nothing of it was
    published and its staged files are gone (discarded, or aborted with its transaction),
    and a retry of the write stages the data again against the partitions as they are then
    (e.g. creating a dropped one anew), so it is retryable."""
    return CommitConflict(
        f"{cause.problem}; nothing of the write was published and what it staged was "
        "removed: write again (a retry stages the data afresh)",
        cause.partitions,
    )


def is_retryable(exc: BaseException) -> bool:
    """Whether retrying the operation that raised ``exc`` may succeed.

    Project errors say so themselves; anything else (an unexpected library or OS error) is
    treated as retryable, since nothing shows the input was wrong.
    """
    if isinstance(exc, LanceNamespaceError):
        return exc.retryable
    return True


def error_classes() -> dict[str, type[LanceNamespaceError]]:
    """Every error class this module defines, by name (the root included): e.g. to raise a
    project error again under its own class after it crossed a process boundary."""
    return {
        obj.__name__: obj
        for obj in globals().values()
        if isinstance(obj, type)
        and issubclass(obj, LanceNamespaceError)
        and obj.__module__ == __name__
    }
