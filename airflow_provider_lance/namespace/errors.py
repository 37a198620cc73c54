"""The project's exceptions: every error bad input can cause is a :class:`LanceNamespaceError`
whose message names the problem and what to do, never a library's stack trace.

Whether a retry can help is decided once, by each class's :attr:`retryable` (storage errors
and conflicts with concurrent writers: yes; bad input, paths, access, finished
transactions: no); operators, the Spark job's exit codes and the CLI ask
:func:`is_retryable`.
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
    """Data handed to a write lacks a column the partition spec routes rows by (filled
    with NULL, every row would land in the NULL partition)."""

    def __init__(
        self, message: str, columns: Iterable[str] = (), fields: Iterable[str] = ()
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
    namespace can be, access is denied, or a storage option has a value the store cannot
    parse. A :class:`StorageError` that is not retryable (the command line exits 2)."""

    retryable = False


class TableNotFoundError(LanceNamespaceError):
    """A Lance table (or a version of it) that was asked for does not exist."""


class PartitionNotFoundError(LanceNamespaceError):
    """A partition that was named does not exist in the namespace."""


class VersionNotFoundError(LanceNamespaceError):
    """A past state asked for does not exist: a ``__manifest`` version never made or
    cleaned up, a moment before the namespace or of a cleaned-up version, an unknown tag."""


class VersionBeforeCreationError(VersionNotFoundError):
    """A ``__manifest`` version from before the namespace's schema and spec were set."""


class VersionCleanedUp(VersionNotFoundError):
    """A version a read resolved (of ``__manifest`` or a leaf) was removed by retention
    before or while it was read. Not retryable: the read named it (``as_of``), and it is
    gone for good; a read of the latest raises :class:`LatestVersionCleanedUp`."""


class LatestVersionCleanedUp(VersionCleanedUp):
    """A read of the *latest* state was outrun by retention. Retryable: reading again
    resolves the new latest version, which retention keeps."""

    retryable = True


class StagedFilesMissing(LanceNamespaceError):
    """Data files a transaction staged are gone before its commit published them; nothing
    was published. Not retryable: abort the transaction and stage its rows again.
    ``missing`` maps each partition to its missing files."""

    def __init__(self, message: str, missing: Mapping[str, Sequence[str]] | None = None) -> None:
        self.missing = {k: list(v) for k, v in sorted((missing or {}).items())}
        super().__init__(message)


class ManifestError(LanceNamespaceError):
    """The ``__manifest`` table is not in the shape this library writes (e.g. clobbered)."""


class CommitConflict(LanceNamespaceError):
    """A concurrent writer changed what this operation depends on, or held its partitions
    past the claim timeout; nothing was published."""

    retryable = True

    def __init__(self, message: str, partitions: Iterable[str] = ()) -> None:
        self.partitions = sorted(partitions)
        if self.partitions:
            shown = ", ".join(self.partitions[:10])
            more = f" and {len(self.partitions) - 10} more" if len(self.partitions) > 10 else ""
            message = f"{message} (partitions: {shown}{more})"
        super().__init__(message)


class StaleStage(CommitConflict):
    """Data was staged against partitions that changed since in a way no commit can mend
    (a partition appended to was dropped, one replaced got a newer version, two stages saw
    one differently). Not retryable: the message names the stages to discard and stage
    again, or says to abort; a write that stages itself is retried (:func:`stage_again`).
    """

    retryable = False

    def __init__(self, problem: str, partitions: Iterable[str] = (), remedy: str = "") -> None:
        #: What went stale, without the remedy.
        self.problem = problem
        super().__init__(f"{problem}; {remedy}" if remedy else problem, partitions)


class TransactionAborted(LanceNamespaceError):
    """The transaction was aborted (by the user or by recovery); this incarnation can never
    commit. ``begin`` with the same id starts a new incarnation."""


class OutcomeUnknown(LanceNamespaceError):
    """Whether a commit was published cannot be told (its swap failed in a way that may
    have committed). Not retryable: read the data to find out."""


class InvalidArgumentError(LanceNamespaceError, ValueError):
    """An argument has a wrong value (unknown mode, bad column list, ...)."""


class InvalidLiteralError(FilterError, InvalidArgumentError):
    """A constant in a filter cannot be evaluated (``DATE '2025-13-45'``, ``id = 'abc'``,
    ``1/0``): refused in planning and reading alike."""

    def __init__(self, message: str, literal: str | None = None) -> None:
        #: The offending constant as the filter has it (None: unknown).
        self.literal = literal
        super().__init__(message)


class InstallationError(LanceNamespaceError):
    """The installed packages cannot work together (e.g. PySpark's Python files and jars
    from different releases); the message says what to reinstall."""


class TagExistsError(InvalidArgumentError):
    """A tag with that name already exists (delete it first to move it)."""


class IndexExistsError(InvalidArgumentError):
    """An index with that name is declared on the namespace already (``replace=True``
    rebuilds it)."""


class IndexNotFoundError(InvalidArgumentError):
    """No index with that name is declared on the namespace."""


class TransactionClosed(InvalidArgumentError):
    """The transaction no longer takes stages: a commit sealed it (or it was merged)."""


def aborted_meanwhile(txn_id: str, cause: TransactionAborted) -> CommitConflict:
    """A *write* whose transaction was aborted while it ran: retryable (a new incarnation)."""
    return CommitConflict(
        f"transaction {txn_id} was aborted while this write ran (by recover(), an operator, "
        f"or a writer that waited for its partitions past its lease: {cause}); nothing of "
        "it was published, write again"
    )


def stage_again(cause: StaleStage) -> CommitConflict:
    """A *write* whose staged data went stale (its files removed): retryable, since a
    retry stages the data again against the partitions as they are then."""
    return CommitConflict(
        f"{cause.problem}; nothing of the write was published and what it staged was "
        "removed: write again (a retry stages the data afresh)",
        cause.partitions,
    )


def is_retryable(exc: BaseException) -> bool:
    """Whether retrying the operation that raised ``exc`` may succeed (an error not of
    this project: yes, nothing shows the input was wrong)."""
    return exc.retryable if isinstance(exc, LanceNamespaceError) else True


def error_classes() -> dict[str, type[LanceNamespaceError]]:
    """Every error class of this module by name (to raise one again in another process)."""
    found = [o for o in globals().values() if isinstance(o, type) and o.__module__ == __name__]
    return {o.__name__: o for o in found if issubclass(o, LanceNamespaceError)}
