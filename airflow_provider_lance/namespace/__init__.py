"""The Lance Partitioned Namespace format in plain Python (pyarrow + pylance + DataFusion).

No Airflow and no Spark here: Spark executors, scripts and the Airflow provider all use this.

    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
"""

from .catalog import Partition
from .errors import (
    CommitConflict,
    DataValidationError,
    ExpressionError,
    FilterError,
    InvalidArgumentError,
    LanceNamespaceError,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionNotFoundError,
    PartitionSpecError,
    SchemaError,
    StorageError,
    TransactionAborted,
    TransactionClosed,
    is_retryable,
)
from .hashing import hash_array
from .lifecycle import TxnState
from .namespace import PartitionedNamespace
from .results import CommitResult, PartitionCommit
from .spec import PartitionField
from .staging import Stage
from .transactions import Transaction, TransactionInfo

__all__ = [
    "CommitConflict",
    "CommitResult",
    "DataValidationError",
    "ExpressionError",
    "FilterError",
    "InvalidArgumentError",
    "LanceNamespaceError",
    "ManifestError",
    "NamespaceExistsError",
    "NamespaceNotFoundError",
    "Partition",
    "PartitionCommit",
    "PartitionField",
    "PartitionNotFoundError",
    "PartitionSpecError",
    "PartitionedNamespace",
    "SchemaError",
    "Stage",
    "StorageError",
    "Transaction",
    "TransactionAborted",
    "TransactionClosed",
    "TransactionInfo",
    "TxnState",
    "hash_array",
    "is_retryable",
]
