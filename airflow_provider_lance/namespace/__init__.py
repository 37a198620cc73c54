"""The Lance Partitioned Namespace format in plain Python (pyarrow + pylance + DataFusion).

No Airflow and no Spark here: Spark executors, scripts and the Airflow provider all use this.

    from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

The public API is ``__all__`` (the README's "The public API" lists it), the ``errors``
module and the ``testing`` failpoints; every other module is internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_lance._lazy import lazy_exports

if TYPE_CHECKING:  # what type checkers see (``X as X``: re-exported); at run time, _EXPORTS
    from .admin.sweep import DEFAULT_MIN_AGE as DEFAULT_MIN_AGE
    from .admin.sweep import MIN_SAFE_ORPHAN_AGE as MIN_SAFE_ORPHAN_AGE
    from .distributed import PartitionRouter as PartitionRouter
    from .distributed import TransactionSummary as TransactionSummary
    from .errors import CommitConflict as CommitConflict
    from .errors import DataValidationError as DataValidationError
    from .errors import ExpressionError as ExpressionError
    from .errors import FilterError as FilterError
    from .errors import IndexExistsError as IndexExistsError
    from .errors import IndexNotFoundError as IndexNotFoundError
    from .errors import InstallationError as InstallationError
    from .errors import InvalidArgumentError as InvalidArgumentError
    from .errors import InvalidLiteralError as InvalidLiteralError
    from .errors import LanceNamespaceError as LanceNamespaceError
    from .errors import ManifestError as ManifestError
    from .errors import MissingPartitionSourceError as MissingPartitionSourceError
    from .errors import NamespaceExistsError as NamespaceExistsError
    from .errors import NamespaceNotFoundError as NamespaceNotFoundError
    from .errors import OutcomeUnknown as OutcomeUnknown
    from .errors import PartitionNotFoundError as PartitionNotFoundError
    from .errors import PartitionSpecError as PartitionSpecError
    from .errors import SchemaError as SchemaError
    from .errors import StaleStage as StaleStage
    from .errors import StorageError as StorageError
    from .errors import TableNotFoundError as TableNotFoundError
    from .errors import TagExistsError as TagExistsError
    from .errors import TransactionAborted as TransactionAborted
    from .errors import TransactionClosed as TransactionClosed
    from .errors import VersionBeforeCreationError as VersionBeforeCreationError
    from .errors import VersionNotFoundError as VersionNotFoundError
    from .errors import is_retryable as is_retryable
    from .facade import PartitionedNamespace as PartitionedNamespace
    from .format.arrow_json import type_from_json as type_from_json
    from .format.arrow_json import type_to_json as type_to_json
    from .format.naming import TXN_ID_PATTERN as TXN_ID_PATTERN
    from .format.naming import spec_version_of as spec_version_of
    from .format.spec import PartitionField as PartitionField
    from .format.state import NamespaceState as NamespaceState
    from .format.state import Partition as Partition
    from .format.txn_row import TxnState as TxnState
    from .io.json_files import read_json as read_json
    from .io.json_files import remove_json as remove_json
    from .io.json_files import write_json as write_json
    from .io.storage import permanent_failure as permanent_failure
    from .io.storage_options import StorageOptionValue as StorageOptionValue
    from .io.storage_options import normalize_options as normalize_options
    from .io.storage_options import option_text as option_text
    from .io.storage_options import options_from_json as options_from_json
    from .io.uri import has_scheme as has_scheme
    from .io.uri import normalize_root as normalize_root
    from .ops.compaction import DEFAULT_TARGET_ROWS as DEFAULT_TARGET_ROWS
    from .ops.verification import MisplacedRows as MisplacedRows
    from .ops.verification import VerifyReport as VerifyReport
    from .progress import Progress as Progress
    from .progress import ProgressCallback as ProgressCallback
    from .read.dataset import NamespaceDataset as NamespaceDataset
    from .read.dataset import NamespaceFragment as NamespaceFragment
    from .read.dataset import NamespaceScanner as NamespaceScanner
    from .read.plan import FragmentInfo as FragmentInfo
    from .read.plan import RowFilter as RowFilter
    from .read.plan import Scan as Scan
    from .read.plan import ScanPlan as ScanPlan
    from .read.plan import ScanTask as ScanTask
    from .read.timetravel import AsOf as AsOf
    from .read.timetravel import check_tag_name as check_tag_name
    from .results import CommitResult as CommitResult
    from .results import HistoryEntry as HistoryEntry
    from .results import IndexInfo as IndexInfo
    from .results import OperationResult as OperationResult
    from .results import PartitionChange as PartitionChange
    from .results import PartitionCommit as PartitionCommit
    from .results import PartitionOutcome as PartitionOutcome
    from .results import SkipReason as SkipReason
    from .results import TagInfo as TagInfo
    from .results import value_text as value_text
    from .txn.transactions import Transaction as Transaction
    from .txn.transactions import TransactionInfo as TransactionInfo
    from .types import MODES as MODES
    from .types import ArrowData as ArrowData
    from .types import WriteMode as WriteMode
    from .write.staging import FLUSH_BYTES as FLUSH_BYTES
    from .write.staging import Stage as Stage

#: Where each public name lives, by module (README's "The public API" says what each is): imported
#: on first use, so that importing a light module of the core (errors, naming) or an Airflow
#: DAG file that names an operator does not load pylance, PyArrow and DataFusion.
_EXPORTS = {
    name: module
    for module, names in {
        "facade": "PartitionedNamespace",
        "format.spec": "PartitionField",
        "format.state": "Partition NamespaceState",
        "read.timetravel": "AsOf check_tag_name",
        "types": "ArrowData WriteMode MODES",
        "read.plan": "ScanPlan ScanTask Scan FragmentInfo RowFilter",
        "read.dataset": "NamespaceDataset NamespaceScanner NamespaceFragment",
        "txn.transactions": "Transaction TransactionInfo",
        "format.txn_row": "TxnState",
        "write.staging": "Stage FLUSH_BYTES",
        "distributed": "PartitionRouter TransactionSummary",
        "progress": "Progress ProgressCallback",
        "results": "CommitResult PartitionCommit OperationResult PartitionOutcome "
        "PartitionChange SkipReason HistoryEntry TagInfo IndexInfo value_text",
        "ops.verification": "VerifyReport MisplacedRows",
        "admin.sweep": "DEFAULT_MIN_AGE MIN_SAFE_ORPHAN_AGE",
        "ops.compaction": "DEFAULT_TARGET_ROWS",
        "format.naming": "TXN_ID_PATTERN spec_version_of",
        "format.arrow_json": "type_from_json type_to_json",
        "io.uri": "normalize_root has_scheme",
        "io.storage_options": "StorageOptionValue normalize_options options_from_json option_text",
        "io.json_files": "read_json write_json remove_json",
        "errors": "LanceNamespaceError is_retryable CommitConflict StaleStage "
        "TransactionAborted TransactionClosed OutcomeUnknown StorageError "
        "DataValidationError MissingPartitionSourceError SchemaError FilterError "
        "ExpressionError InvalidLiteralError InvalidArgumentError InstallationError "
        "PartitionSpecError "
        "ManifestError NamespaceExistsError NamespaceNotFoundError PartitionNotFoundError "
        "TableNotFoundError TagExistsError VersionBeforeCreationError VersionNotFoundError "
        "IndexExistsError IndexNotFoundError",
        "io.storage": "permanent_failure",
    }.items()
    for name in names.split()
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
