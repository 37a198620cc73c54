"""The Lance Partitioned Namespace format in plain Python (pyarrow + pylance + DataFusion).

No Airflow and no Spark here: Spark executors, scripts and the Airflow provider all use this.

    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports

if TYPE_CHECKING:
    from .catalog import Partition
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
    from .hashing import hash_array
    from .namespace import PartitionedNamespace
    from .results import (
        CommitResult,
        HistoryEntry,
        OperationResult,
        PartitionChange,
        PartitionCommit,
        PartitionOutcome,
        TagInfo,
    )
    from .spec import PartitionField
    from .staging import Stage
    from .timetravel import AsOf
    from .transactions import (
        Transaction,
        TransactionInfo,
    )
    from .txn_row import TxnState
    from .types import ArrowData, WriteMode
    from .verification import MisplacedRows, VerifyReport

#: Where each public name lives: imported on first use, so that importing a light
#: module of the core (errors, naming) or an Airflow DAG file that names an operator
#: does not load pylance, PyArrow and DataFusion.
_EXPORTS = {
    "Partition": "catalog",
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
    "hash_array": "hashing",
    "TxnState": "txn_row",
    "PartitionedNamespace": "namespace",
    "CommitResult": "results",
    "PartitionCommit": "results",
    "HistoryEntry": "results",
    "OperationResult": "results",
    "PartitionChange": "results",
    "PartitionOutcome": "results",
    "TagInfo": "results",
    "VerifyReport": "verification",
    "MisplacedRows": "verification",
    "AsOf": "timetravel",
    "PartitionField": "spec",
    "Stage": "staging",
    "Transaction": "transactions",
    "TransactionInfo": "transactions",
    "ArrowData": "types",
    "WriteMode": "types",
}


__all__ = [
    "ArrowData",
    "AsOf",
    "CommitConflict",
    "CommitResult",
    "DataValidationError",
    "ExpressionError",
    "FilterError",
    "HistoryEntry",
    "InvalidArgumentError",
    "InvalidLiteralError",
    "LanceNamespaceError",
    "ManifestError",
    "MisplacedRows",
    "MissingPartitionSourceError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
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
    "SchemaError",
    "Stage",
    "StaleStage",
    "StorageError",
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
    "hash_array",
    "is_retryable",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
