"""The Lance Partitioned Namespace format in plain Python (pyarrow + pylance + DataFusion).

No Airflow and no Spark here: Spark executors, scripts and the Airflow provider all use this.

    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports

if TYPE_CHECKING:
    from airflow_provider_lance.namespace.format.hashing import hash_array
    from airflow_provider_lance.namespace.format.spec import PartitionField
    from airflow_provider_lance.namespace.format.state import Partition
    from airflow_provider_lance.namespace.format.txn_row import TxnState
    from airflow_provider_lance.namespace.ops.verification import MisplacedRows, VerifyReport
    from airflow_provider_lance.namespace.read.plan import (
        FragmentInfo,
        RowFilter,
        Scan,
        ScanPlan,
        ScanTask,
    )
    from airflow_provider_lance.namespace.read.timetravel import AsOf
    from airflow_provider_lance.namespace.txn.transactions import (
        Transaction,
        TransactionInfo,
    )
    from airflow_provider_lance.namespace.write.staging import Stage

    from .admin.sweep import DEFAULT_MIN_AGE, LEAF_DIRECTORY, MIN_SAFE_ORPHAN_AGE, check_min_age
    from .errors import (
        CommitConflict,
        DataValidationError,
        ExpressionError,
        FilterError,
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
    from .format.manifest import MANIFEST_NAME
    from .format.naming import SEPARATOR, TXN_ID_PATTERN
    from .format.schema import is_deprecated
    from .format.state import NamespaceState
    from .io.json_files import read_json, remove_json, write_json
    from .io.storage_options import (
        StorageOptionValue,
        normalize_options,
        option_text,
        options_from_json,
    )
    from .io.uri import has_scheme, normalize_root
    from .ops.compaction import DEFAULT_TARGET_ROWS
    from .read.timetravel import check_tag_name
    from .results import (
        CommitResult,
        HistoryEntry,
        OperationResult,
        PartitionChange,
        PartitionCommit,
        PartitionOutcome,
        TagInfo,
        value_text,
    )
    from .txn.store import TXN_DIR
    from .types import MODES, ArrowData, WriteMode
    from .write.staging import FLUSH_BYTES

#: Where each public name lives: imported on first use, so that importing a light
#: module of the core (errors, naming) or an Airflow DAG file that names an operator
#: does not load pylance, PyArrow and DataFusion.
_EXPORTS = {
    "Partition": "format.state",
    "CommitConflict": "errors",
    "DataValidationError": "errors",
    "ExpressionError": "errors",
    "FilterError": "errors",
    "InvalidArgumentError": "errors",
    "InvalidLiteralError": "errors",
    "MissingPartitionSourceError": "errors",
    "LanceNamespaceError": "errors",
    "ManifestError": "errors",
    "NamespaceExistsError": "errors",
    "NamespaceNotFoundError": "errors",
    "PartitionNotFoundError": "errors",
    "TableNotFoundError": "errors",
    "PartitionSpecError": "errors",
    "SchemaError": "errors",
    "StaleStage": "errors",
    "StorageError": "errors",
    "OutcomeUnknown": "errors",
    "TransactionAborted": "errors",
    "TransactionClosed": "errors",
    "TagExistsError": "errors",
    "VersionBeforeCreationError": "errors",
    "VersionNotFoundError": "errors",
    "is_retryable": "errors",
    "hash_array": "format.hashing",
    "TxnState": "format.txn_row",
    "PartitionedNamespace": "facade",
    "CommitResult": "results",
    "PartitionCommit": "results",
    "HistoryEntry": "results",
    "OperationResult": "results",
    "SkipReason": "results",
    "PartitionChange": "results",
    "PartitionOutcome": "results",
    "TagInfo": "results",
    "VerifyReport": "ops.verification",
    "MisplacedRows": "ops.verification",
    "AsOf": "read.timetravel",
    "FragmentInfo": "read.plan",
    "RowFilter": "read.plan",
    "Scan": "read.plan",
    "ScanPlan": "read.plan",
    "ScanTask": "read.plan",
    "PartitionField": "format.spec",
    "Stage": "write.staging",
    "Transaction": "txn.transactions",
    "TransactionInfo": "txn.transactions",
    "ArrowData": "types",
    "WriteMode": "types",
    "normalize_root": "io.uri",
    "DEFAULT_MIN_AGE": "admin.sweep",
    "MIN_SAFE_ORPHAN_AGE": "admin.sweep",
    "NamespaceState": "format.state",
    "is_deprecated": "format.schema",
    "check_min_age": "admin.sweep",
    "TXN_DIR": "txn.store",
    "value_text": "results",
    "MANIFEST_NAME": "format.manifest",
    "LEAF_DIRECTORY": "admin.sweep",
    "StorageOptionValue": "io.storage_options",
    "normalize_options": "io.storage_options",
    "option_text": "io.storage_options",
    "options_from_json": "io.storage_options",
    "TXN_ID_PATTERN": "format.naming",
    "has_scheme": "io.uri",
    "type_from_json": "format.arrow_json",
    "type_to_json": "format.arrow_json",
    "remove_json": "io.json_files",
    "read_json": "io.json_files",
    "MODES": "types",
    "DEFAULT_TARGET_ROWS": "ops.compaction",
    "check_tag_name": "read.timetravel",
    "FLUSH_BYTES": "write.staging",
    "SEPARATOR": "format.naming",
    "write_json": "io.json_files",
}


__all__ = [
    "DEFAULT_MIN_AGE",
    "DEFAULT_TARGET_ROWS",
    "FLUSH_BYTES",
    "LEAF_DIRECTORY",
    "MANIFEST_NAME",
    "MIN_SAFE_ORPHAN_AGE",
    "MODES",
    "SEPARATOR",
    "TXN_DIR",
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
    "InvalidArgumentError",
    "InvalidLiteralError",
    "LanceNamespaceError",
    "ManifestError",
    "MisplacedRows",
    "MissingPartitionSourceError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "NamespaceState",
    "OperationResult",
    "OutcomeUnknown",
    "Partition",
    "PartitionChange",
    "PartitionCommit",
    "PartitionField",
    "PartitionNotFoundError",
    "PartitionOutcome",
    "PartitionSpecError",
    "PartitionedNamespace",
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
    "TxnState",
    "VerifyReport",
    "VersionBeforeCreationError",
    "VersionNotFoundError",
    "WriteMode",
    "check_min_age",
    "check_tag_name",
    "has_scheme",
    "hash_array",
    "is_deprecated",
    "is_retryable",
    "normalize_options",
    "normalize_root",
    "option_text",
    "options_from_json",
    "read_json",
    "remove_json",
    "type_from_json",
    "type_to_json",
    "value_text",
    "write_json",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
