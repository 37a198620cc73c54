"""The Lance Partitioned Namespace format in plain Python (pyarrow + pylance + DataFusion).

No Airflow and no Spark here: Spark executors, scripts and the Airflow provider all use this.

    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

The public API is ``__all__`` (the README's "The public API" lists it), the ``errors``
module and the ``testing`` failpoints; every other module is internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports

if TYPE_CHECKING:
    from .admin.sweep import DEFAULT_MIN_AGE, MIN_SAFE_ORPHAN_AGE
    from .distributed import PartitionRouter, TransactionSummary
    from .errors import (
        CommitConflict,
        DataValidationError,
        ExpressionError,
        FilterError,
        InstallationError,
        InvalidArgumentError,
        InvalidLiteralError,
        LanceNamespaceError,
        ManifestError,
        MissingPartitionSourceError,
        NamespaceExistsError,
        NamespaceNotFoundError,
        OutcomeUnknown,
        PartitionNotFoundError,
        PartitionSpecError,
        SchemaError,
        StaleStage,
        StorageError,
        TableNotFoundError,
        TagExistsError,
        TransactionAborted,
        TransactionClosed,
        VersionBeforeCreationError,
        VersionNotFoundError,
        is_retryable,
    )
    from .facade import PartitionedNamespace
    from .format.arrow_json import type_from_json, type_to_json
    from .format.naming import TXN_ID_PATTERN, spec_version_of
    from .format.spec import PartitionField
    from .format.state import NamespaceState, Partition
    from .format.txn_row import TxnState
    from .io.json_files import read_json, remove_json, write_json
    from .io.storage import permanent_failure
    from .io.storage_options import (
        StorageOptionValue,
        normalize_options,
        option_text,
        options_from_json,
    )
    from .io.uri import has_scheme, normalize_root
    from .ops.compaction import DEFAULT_TARGET_ROWS
    from .ops.verification import MisplacedRows, VerifyReport
    from .progress import Progress, ProgressCallback
    from .read.dataset import NamespaceDataset, NamespaceFragment, NamespaceScanner
    from .read.plan import FragmentInfo, RowFilter, Scan, ScanPlan, ScanTask
    from .read.timetravel import AsOf, check_tag_name
    from .results import (
        CommitResult,
        HistoryEntry,
        OperationResult,
        PartitionChange,
        PartitionCommit,
        PartitionOutcome,
        SkipReason,
        TagInfo,
        value_text,
    )
    from .txn.transactions import Transaction, TransactionInfo
    from .types import MODES, ArrowData, WriteMode
    from .write.staging import FLUSH_BYTES, Stage

#: Where each public name lives: imported on first use, so that importing a light
#: module of the core (errors, naming) or an Airflow DAG file that names an operator
#: does not load pylance, PyArrow and DataFusion.
_EXPORTS = {
    # the namespace, its fields and states
    "PartitionedNamespace": "facade",
    "PartitionField": "format.spec",
    "Partition": "format.state",
    "NamespaceState": "format.state",
    "AsOf": "read.timetravel",
    "ArrowData": "types",
    "WriteMode": "types",
    "MODES": "types",
    # reads: scan plans
    "ScanPlan": "read.plan",
    "ScanTask": "read.plan",
    "Scan": "read.plan",
    "FragmentInfo": "read.plan",
    "RowFilter": "read.plan",
    # reads by query engines (DuckDB, Polars, DataFusion, pyarrow)
    "NamespaceDataset": "read.dataset",
    "NamespaceScanner": "read.dataset",
    "NamespaceFragment": "read.dataset",
    # writes from many processes, transactions
    "Transaction": "txn.transactions",
    "TransactionInfo": "txn.transactions",
    "TxnState": "format.txn_row",
    "Stage": "write.staging",
    "PartitionRouter": "distributed",
    "TransactionSummary": "distributed",
    # progress of long work
    "Progress": "progress",
    "ProgressCallback": "progress",
    # results
    "CommitResult": "results",
    "PartitionCommit": "results",
    "OperationResult": "results",
    "PartitionOutcome": "results",
    "PartitionChange": "results",
    "SkipReason": "results",
    "HistoryEntry": "results",
    "TagInfo": "results",
    "VerifyReport": "ops.verification",
    "MisplacedRows": "ops.verification",
    "value_text": "results",
    # defaults of the methods' arguments
    "DEFAULT_MIN_AGE": "admin.sweep",
    "MIN_SAFE_ORPHAN_AGE": "admin.sweep",
    "DEFAULT_TARGET_ROWS": "ops.compaction",
    "FLUSH_BYTES": "write.staging",
    # names, ids and types the format defines
    "TXN_ID_PATTERN": "format.naming",
    "spec_version_of": "format.naming",
    "check_tag_name": "read.timetravel",
    "type_from_json": "format.arrow_json",
    "type_to_json": "format.arrow_json",
    # URIs, storage options and small JSON documents beside the data
    "normalize_root": "io.uri",
    "has_scheme": "io.uri",
    "StorageOptionValue": "io.storage_options",
    "normalize_options": "io.storage_options",
    "options_from_json": "io.storage_options",
    "option_text": "io.storage_options",
    "read_json": "io.json_files",
    "write_json": "io.json_files",
    "remove_json": "io.json_files",
    # errors (also in the public module airflow_provider_lance.namespace.errors)
    "LanceNamespaceError": "errors",
    "is_retryable": "errors",
    "permanent_failure": "io.storage",
    "CommitConflict": "errors",
    "StaleStage": "errors",
    "TransactionAborted": "errors",
    "TransactionClosed": "errors",
    "OutcomeUnknown": "errors",
    "StorageError": "errors",
    "DataValidationError": "errors",
    "MissingPartitionSourceError": "errors",
    "SchemaError": "errors",
    "FilterError": "errors",
    "ExpressionError": "errors",
    "InvalidLiteralError": "errors",
    "InvalidArgumentError": "errors",
    "InstallationError": "errors",
    "PartitionSpecError": "errors",
    "ManifestError": "errors",
    "NamespaceExistsError": "errors",
    "NamespaceNotFoundError": "errors",
    "PartitionNotFoundError": "errors",
    "TableNotFoundError": "errors",
    "TagExistsError": "errors",
    "VersionBeforeCreationError": "errors",
    "VersionNotFoundError": "errors",
}

__all__ = [
    "DEFAULT_MIN_AGE",
    "DEFAULT_TARGET_ROWS",
    "FLUSH_BYTES",
    "MIN_SAFE_ORPHAN_AGE",
    "MODES",
    "TXN_ID_PATTERN",
    "ArrowData",
    "AsOf",
    "CommitConflict",
    "CommitResult",
    "DataValidationError",
    "ExpressionError",
    "FilterError",
    "FragmentInfo",
    "HistoryEntry",
    "InstallationError",
    "InvalidArgumentError",
    "InvalidLiteralError",
    "LanceNamespaceError",
    "ManifestError",
    "MisplacedRows",
    "MissingPartitionSourceError",
    "NamespaceDataset",
    "NamespaceExistsError",
    "NamespaceFragment",
    "NamespaceNotFoundError",
    "NamespaceScanner",
    "NamespaceState",
    "OperationResult",
    "OutcomeUnknown",
    "Partition",
    "PartitionChange",
    "PartitionCommit",
    "PartitionField",
    "PartitionNotFoundError",
    "PartitionOutcome",
    "PartitionRouter",
    "PartitionSpecError",
    "PartitionedNamespace",
    "Progress",
    "ProgressCallback",
    "RowFilter",
    "Scan",
    "ScanPlan",
    "ScanTask",
    "SchemaError",
    "SkipReason",
    "Stage",
    "StaleStage",
    "StorageError",
    "StorageOptionValue",
    "TableNotFoundError",
    "TagExistsError",
    "TagInfo",
    "Transaction",
    "TransactionAborted",
    "TransactionClosed",
    "TransactionInfo",
    "TransactionSummary",
    "TxnState",
    "VerifyReport",
    "VersionBeforeCreationError",
    "VersionNotFoundError",
    "WriteMode",
    "check_tag_name",
    "has_scheme",
    "is_retryable",
    "normalize_options",
    "normalize_root",
    "option_text",
    "options_from_json",
    "permanent_failure",
    "read_json",
    "remove_json",
    "spec_version_of",
    "type_from_json",
    "type_to_json",
    "value_text",
    "write_json",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
