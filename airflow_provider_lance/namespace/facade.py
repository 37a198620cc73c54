"""``PartitionedNamespace``: the public facade over the Partitioned Namespace format."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from airflow_provider_lance.namespace.admin import evolution
from airflow_provider_lance.namespace.admin.maintenance import (
    MaintenanceReport,
    check_flags,
    checked_older_than,
    maintain,
)
from airflow_provider_lance.namespace.admin.repair import RepairReport
from airflow_provider_lance.namespace.admin.repair import repair as repair_manifest
from airflow_provider_lance.namespace.admin.sweep import (
    DEFAULT_MIN_AGE,
    LEAF_DIRECTORY,
    check_min_age,
)
from airflow_provider_lance.namespace.admin.sweep import sweep_orphans as sweep
from airflow_provider_lance.namespace.admin.unpublished import reclaim
from airflow_provider_lance.namespace.format.conversion import cast_losslessly
from airflow_provider_lance.namespace.format.manifest import (
    MANIFEST_NAME,
    NAMESPACE,
    RESERVED_COLUMNS,
    Manifest,
    ManifestView,
    manifest_schema,
    row,
)
from airflow_provider_lance.namespace.format.naming import leaf_directory, spec_namespace_id
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.format.spec import (
    PartitionField,
    resolve_spec,
    spec_key,
    spec_to_json,
)
from airflow_provider_lance.namespace.format.state import SCHEMA_KEY, NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.io.storage_options import StorageOptionValue
from airflow_provider_lance.namespace.io.uri import normalize_root
from airflow_provider_lance.namespace.ops.compaction import DEFAULT_TARGET_ROWS, Optimize
from airflow_provider_lance.namespace.ops.deletion import DeleteRows, DropPartitions
from airflow_provider_lance.namespace.ops.merging import MergeRows
from airflow_provider_lance.namespace.ops.runner import TableOperation, run_operation
from airflow_provider_lance.namespace.ops.verification import (
    RelocateRows,
    VerifyReport,
    verify_partitions,
)
from airflow_provider_lance.namespace.read import engines
from airflow_provider_lance.namespace.read.coverage import pruned_rows
from airflow_provider_lance.namespace.read.dataset import NamespaceDataset
from airflow_provider_lance.namespace.read.history import History
from airflow_provider_lance.namespace.read.plan import ScanPlan, plan_scan
from airflow_provider_lance.namespace.read.scan import open_leaf
from airflow_provider_lance.namespace.read.timetravel import (
    AsOf,
    create_tag,
    delete_tag,
    list_tags,
    open_version,
    pick,
    resolve_as_of,
)
from airflow_provider_lance.namespace.txn import transactions, writes
from airflow_provider_lance.namespace.txn.abort import (
    DEFAULT_LEASE_SECONDS,
    abort_transaction,
    recover,
)
from airflow_provider_lance.namespace.txn.kernel import (
    CommitOptions,
    TransactionContext,
    state_with_claims,
)
from airflow_provider_lance.namespace.txn.lifecycle import collect_finished
from airflow_provider_lance.namespace.txn.records import resolve
from airflow_provider_lance.namespace.txn.store import TXN_DIR, TransactionStore
from airflow_provider_lance.namespace.txn.transactions import Transaction, TransactionInfo
from airflow_provider_lance.namespace.write.staging import (
    FLUSH_BYTES,
    Stage,
    StagedPartition,
)

from .errors import (
    InvalidArgumentError,
    NamespaceNotFoundError,
    PartitionNotFoundError,
    PartitionSpecError,
    VersionBeforeCreationError,
)
from .failpoints import failpoint
from .progress import ProgressCallback, check_callback, iterate_reporting, reporting
from .results import CommitResult, HistoryEntry, OperationResult, TagInfo
from .types import ArrowData, WriteMode

if TYPE_CHECKING:
    import duckdb
    import polars as pl

log = logging.getLogger(__name__)
R = TypeVar("R")

StorageOptions = Mapping[str, StorageOptionValue | None] | None


class PartitionedNamespace:
    """One logical dataset made of many Lance tables (a Lance Partitioned Namespace).

    Create one with :meth:`create`, open an existing one with :meth:`open`. Every method
    reads the latest ``__manifest`` version; reads resolve all partitions from one version.
    """

    def __init__(self, root: str, manifest: Manifest, state: NamespaceState) -> None:
        self._root = root
        self._manifest = manifest
        self._state = state
        self._storage = manifest.storage
        self._store = TransactionStore(manifest.storage)
        self._history = History(manifest)
        #: Orders :meth:`_adopt`\ s of writes from several threads (none goes back).
        self._adopting = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        uri: str | os.PathLike[str],
        schema: pa.Schema,
        partition_fields: Sequence[PartitionField],
        storage_options: StorageOptions = None,
        *,
        concurrency: int | None = None,
    ) -> PartitionedNamespace:
        """Create a namespace at ``uri``; an error if anything already exists there.

        ``concurrency`` bounds the leaf tables written, committed or opened at once (default
        8 on a local disk, 32 on an object store, where requests are latency bound)."""
        root = normalize_root(uri)
        ns_schema = NamespaceSchema.from_user_schema(schema)
        fields = resolve_spec(partition_fields, ns_schema, {}, RESERVED_COLUMNS)
        columns = [pa.field(f.name, f.result_type) for f in fields]
        first = pa.Table.from_pylist(
            [row(spec_namespace_id(1), NAMESPACE, metadata="{}")], schema=manifest_schema(columns)
        )
        manifest = Manifest(Storage(root, storage_options, concurrency=concurrency))
        manifest.create({SCHEMA_KEY: ns_schema.to_json(), spec_key(1): spec_to_json(fields)}, first)
        log.info(
            "created partitioned namespace %s partitioned by %s", root, [f.name for f in fields]
        )
        return cls.open(root, storage_options, concurrency=concurrency)

    @classmethod
    def open(
        cls,
        uri: str | os.PathLike[str],
        storage_options: StorageOptions = None,
        *,
        concurrency: int | None = None,
    ) -> PartitionedNamespace:
        """Open an existing namespace; an error if ``uri`` is not a partitioned namespace.

        ``concurrency``: see :meth:`create`."""
        root = normalize_root(uri)
        manifest = Manifest(Storage(root, storage_options, concurrency=concurrency))
        return cls(root, manifest, NamespaceState.load(root, manifest.latest()))

    @classmethod
    def exists(cls, uri: str | os.PathLike[str], storage_options: StorageOptions = None) -> bool:
        """Whether ``uri`` holds a partitioned namespace (storage errors still raise)."""
        try:
            cls.open(uri, storage_options)
        except NamespaceNotFoundError:
            return False
        return True

    def __repr__(self) -> str:
        return f"PartitionedNamespace({self._root!r}, version={self.version})"

    @staticmethod
    def is_namespace_entry(name: str) -> bool:
        """Whether ``name``, a top-level entry of a namespace's directory, is one the format
        writes there: ``__manifest``, the transaction records or a leaf table."""
        return name in (MANIFEST_NAME, TXN_DIR) or bool(LEAF_DIRECTORY.match(name))

    # -- state ---------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        return self._root

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The storage options it was opened with (credentials: keep out of logs)."""
        return self._storage.options

    @property
    def storage(self) -> Storage:
        """Its storage I/O (tables, record files), e.g. for readers in other processes."""
        return self._storage

    def state(self, as_of: AsOf | None = None, *, version: int | None = None) -> NamespaceState:
        """The namespace as of ``as_of`` (default: the latest).

        ``as_of`` is a ``__manifest`` version (int), a moment (a datetime, naive = UTC: the
        latest version committed at or before it) or a tag name; ``version`` is the older
        name of an int ``as_of``. :class:`VersionNotFoundError` when that state does not
        exist (not yet, never, or cleaned up by :meth:`maintain`).
        """
        target = pick(as_of, version)
        if target is not None:
            number = resolve_as_of(self._manifest, target)
            if number == self._state.version:  # named: a read of it is never retried as latest
                return dataclasses.replace(self._state, pinned=True)
            view = ManifestView(open_version(self._manifest, number))
            try:
                return NamespaceState.load(self._root, view, pinned=True)
            except NamespaceNotFoundError as exc:
                raise VersionBeforeCreationError(
                    f"__manifest version {number} of {self._root} predates the namespace: "
                    "its creation was finished at a later version"
                ) from exc
        if not self._state.view.is_latest():
            self._reload()
        return self._state

    def _reload(self) -> NamespaceState:
        self._state = NamespaceState.load(self._root, self._manifest.latest())
        return self._state

    def _adopt(self, version: int) -> None:
        """After this handle's own publish: hold the state it made, when its ``__manifest``
        is still open (no request), so that the next write does not stage on the one before."""
        view = self._manifest.held(version)
        if view is None or version <= self._state.version:
            return
        state = NamespaceState.load(self._root, view)
        with self._adopting:  # another thread's write may have adopted a newer one since
            if version > self._state.version:
                self._state = state

    def _on_latest(self, read: Callable[[NamespaceState], R]) -> tuple[NamespaceState, R]:
        """``read`` (which must only read) done on the latest state, and that state: the check
        that the held state is the latest runs while ``read`` works on it; if a newer version
        was committed, ``read`` is done again on it, as when it failed on a state that is no
        longer the latest."""
        state = self._state
        check = self._storage.beside(state.view.is_latest)
        try:
            out = read(state)
        except Exception:
            if check.result():
                raise
        else:
            if check.result():
                return state, out
        state = self._reload()
        return state, read(state)

    @property
    def version(self) -> int:
        """The latest ``__manifest`` version."""
        return self.state().version

    @property
    def schema(self) -> pa.Schema:
        """The current columns: what reads return and writes take, each with its
        ``lance:field_id``. A past version's is ``state(as_of).schema.active``."""
        return self.state().schema.active

    @property
    def stored_schema(self) -> pa.Schema:
        """The namespace schema as the format stores it: every column ever defined, the
        dropped ones marked ``lance:deprecated`` (their field ids are never reused)."""
        return self.state().schema.arrow

    @property
    def active_schema(self) -> pa.Schema:
        """Deprecated: :attr:`schema` (the current columns)."""
        warnings.warn(
            "PartitionedNamespace.active_schema is deprecated: use .schema (the current "
            "columns; .stored_schema has the dropped ones too)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.schema

    @property
    def spec_version(self) -> int:
        return self.state().spec_version

    def partition_spec(self, version: int | None = None) -> list[PartitionField]:
        state = self.state()
        version = version if version is not None else state.spec_version
        if version not in state.specs:
            raise PartitionSpecError(
                f"no partition spec version {version}; versions: {sorted(state.specs)}"
            )
        return list(state.specs[version])

    # -- evolution -------------------------------------------------------------------------
    def evolve_partition_spec(self, fields: Sequence[PartitionField]) -> int:
        """Add a partition spec version; new data is written under it. Returns the version.
        Concurrent evolutions and schema changes all apply, in some order (see
        :mod:`~.admin.evolution`)."""
        return evolution.evolve_partition_spec(self._manifest, self.state, fields)

    def add_column(self, field: pa.Field) -> None:
        """Add a nullable column (a new field id above every earlier one)."""
        self._evolve(lambda state: state.schema.add_column(field), "add_column")

    def drop_column(self, name: str) -> None:
        """Drop a column: it stays in the schema, deprecated, and reads no longer return it."""
        self._evolve(evolution.dropping(name), "drop_column")

    def rename_column(self, old: str, new: str) -> None:
        """Rename a column; its field id, and so every partition field using it, stays."""
        self._evolve(lambda state: state.schema.rename_column(old, new), "rename_column")

    def promote_column(self, name: str, dtype: pa.DataType) -> None:
        """Widen a column's type (e.g. int32 -> int64); narrowing is refused."""
        self._evolve(evolution.promoting(name, dtype), "promote_column")

    def _evolve(self, change: Callable[[NamespaceState], NamespaceSchema], what: str) -> None:
        evolution.evolve_schema(self._manifest, self.state, change, what)

    # -- partitions -------------------------------------------------------------------------
    def partition_values(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """``values`` (partition field name -> value) typed and ordered by the current spec,
        converted as a write converts its columns (a value that would change is refused)."""
        fields = self.state().current_spec
        if not isinstance(values, Mapping):
            raise InvalidArgumentError("partition values must be a mapping of field -> value")
        unknown = set(values) - {f.name for f in fields}
        missing = [f.name for f in fields if f.name not in values]
        if unknown or missing:
            raise PartitionSpecError(
                f"partition values must name exactly the fields {[f.name for f in fields]} "
                f"(unknown: {sorted(unknown)}, missing: {missing})"
            )
        out = []
        for f in fields:
            try:
                out.append(
                    cast_losslessly(pa.array([values[f.name]]), f.result_type)[0].as_py()
                    if values[f.name] is not None
                    else None
                )
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise PartitionSpecError(
                    f"partition value {values[f.name]!r} for {f.name!r} is not a "
                    f"{f.result_type}: {str(exc).splitlines()[0]}"
                ) from exc
        return tuple(out)

    def create_partition(self, values: Mapping[str, Any]) -> Partition:
        """Create the (empty) partition for ``values`` under the current spec; idempotent."""
        return self.create_partitions([values])[0]

    def create_partitions(self, values: Iterable[Mapping[str, Any]]) -> list[Partition]:
        """Create many (empty) partitions in one transaction (one claim, one publish whatever
        the count); existing ones are returned."""
        tuples = [self.partition_values(v) for v in values]
        state = self.state()
        ids = [state.leaf_id(t) for t in tuples]
        missing = sorted(set(ids) - set(state.find(ids)))
        if missing:
            ctx = self._txn
            txn = transactions.begin_transaction(ctx, "append", None, anonymous=True)
            names = [f.name for f in state.current_spec]
            stage = Stage(txn.txn_id, "create", "append", state.spec_version)
            for t, oid in zip(tuples, ids, strict=True):
                if oid in missing and oid not in stage.partitions:
                    stage.partitions[oid] = StagedPartition(
                        oid, leaf_directory(oid), dict(zip(names, t, strict=True)), None
                    )
            writes.commit_staged(ctx, txn, lambda: txn.record(stage), CommitOptions())
            self._store.delete(txn.txn_id)
        found = self.state().find(ids)
        return [found[i] for i in ids]

    def partitions(self, *, as_of: AsOf | None = None) -> list[Partition]:
        """Every leaf table of the namespace (all spec versions), as of ``as_of`` (see
        :meth:`state`; default: the latest)."""
        return self._resolve(as_of, None, None)[1]

    def partition(self, values: Mapping[str, Any]) -> Partition:
        """The partition holding ``values`` under the current spec (an error if absent)."""
        state = self.state()
        leaf_id = state.leaf_id(self.partition_values(values))
        found = state.find([leaf_id])
        if leaf_id not in found:
            raise PartitionNotFoundError(f"no partition for {dict(values)} in {self._root}")
        return found[leaf_id]

    def prune(
        self,
        filter: str | None = None,
        *,
        as_of: AsOf | None = None,
        version: int | None = None,
    ) -> list[Partition]:
        """The partitions that can hold rows matching ``filter`` (a SQL boolean expression),
        as of ``as_of`` (see :meth:`state`)."""
        return self._resolve(as_of, version, filter)[1]

    def _resolve(
        self, as_of: AsOf | None, version: int | None, filter: str | None
    ) -> tuple[NamespaceState, list[Partition]]:
        """The state a read reads (see :meth:`state`) and the partitions ``filter`` keeps
        in it (every one for None)."""
        if as_of is None and version is None:
            return self._on_latest(lambda state: self._prune(state, filter))
        state = self.state(as_of, version=version)
        return state, self._prune(state, filter)

    @staticmethod
    def _prune(state: NamespaceState, filter: str | None) -> list[Partition]:
        if filter is None:
            return state.partitions()
        return state.partitions_from_rows(pruned_rows(state, filter))

    # -- reads -------------------------------------------------------------------------------
    def plan_scan(
        self,
        filter: str | None = None,
        columns: Sequence[str] | None = None,
        as_of: AsOf | None = None,
        *,
        fragments: bool = False,
        target_tasks: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> ScanPlan:
        """The tasks reading the rows matching ``filter`` from ONE ``__manifest`` version
        (the latest, or the one ``as_of`` names: see :meth:`state`), one per partition the
        filter may hold rows of: serialisable, run by any process (``task.to_reader()``).

        ``fragments`` lists each task's data files (one leaf manifest read per partition).
        ``target_tasks`` splits the plan into a task per data file when it has fewer
        partitions than that. Bad filters and unknown columns raise here. ``progress``: see
        :meth:`write`."""
        with reporting(progress, "plan"):
            return self._plan(filter, columns, as_of, None, fragments, target_tasks)

    def _plan(
        self,
        filter: str | None,
        columns: Sequence[str] | None,
        as_of: AsOf | None,
        version: int | None,
        fragments: bool = False,
        target_tasks: int | None = None,
    ) -> ScanPlan:
        state, kept = self._resolve(as_of, version, filter)
        return plan_scan(
            self._storage,
            state,
            kept,
            filter=filter,
            columns=columns,
            fragments=fragments,
            target_tasks=target_tasks,
        )

    def to_batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        batch_size: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the rows matching ``filter`` from one manifest version (the latest, or the
        one ``as_of`` names: see :meth:`state`). Bad filters and unknown columns raise here.
        ``progress`` hears how many of the partitions read were started."""
        check_callback(progress)
        batches = self._plan(filter, columns, as_of, version).to_batches(batch_size)
        return iterate_reporting(progress, "read", iter(batches))

    def to_reader(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        batch_size: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> pa.RecordBatchReader:
        """A ``RecordBatchReader`` over :meth:`to_batches` (streams; nothing is collected)."""
        check_callback(progress)
        plan = self._plan(filter, columns, as_of, version)
        failpoint("read.resolved")
        reader = plan.to_reader(batch_size)
        if progress is None:
            return reader
        return pa.RecordBatchReader.from_batches(
            reader.schema, iterate_reporting(progress, "read", iter(reader))
        )

    def to_table(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        progress: ProgressCallback | None = None,
    ) -> pa.Table:
        """All rows matching ``filter``, in the namespace schema (optionally projected);
        ``as_of`` reads a past state in the schema it had then (see :meth:`state`).
        ``progress``: see :meth:`to_batches`."""
        reader = self.to_reader(
            columns=columns, filter=filter, as_of=as_of, version=version, progress=progress
        )
        return reader.read_all()

    def count_rows_of(self, partition: Partition) -> int:
        """Rows of one partition at its published ``read_version``."""
        return int(open_leaf(self._storage, partition).count_rows())

    def count_rows(
        self,
        *,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
    ) -> int:
        """The number of rows matching ``filter``, as of ``as_of`` (see :meth:`state`)."""
        return self._plan(filter, None, as_of, version).count_rows()

    # -- query engines ---------------------------------------------------------------------
    def to_pyarrow_dataset(self, as_of: AsOf | None = None) -> NamespaceDataset:
        """A ``pyarrow.dataset.Dataset`` of the namespace as of ``as_of`` (see :meth:`state`;
        default: the latest, now): DuckDB (``FROM ds``), Polars (``pl.scan_pyarrow_dataset``),
        DataFusion (``ctx.register_dataset``) and pyarrow push their filters and projections
        into its scans, which prune partitions (see :mod:`~.read.dataset`)."""
        return NamespaceDataset(self._storage, self.state(as_of))

    def to_polars(self, as_of: AsOf | None = None) -> pl.LazyFrame:
        """A lazy Polars frame of the namespace as of ``as_of`` (pinned now, as
        :meth:`to_pyarrow_dataset`); its queries push projection, predicate and limit into
        the scan. Needs the ``polars`` extra."""
        return engines.to_polars(self.to_pyarrow_dataset(as_of))

    def to_duckdb(
        self,
        table_name: str,
        connection: duckdb.DuckDBPyConnection | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> duckdb.DuckDBPyConnection:
        """``connection`` (a new in-memory one for None) with the namespace as of ``as_of``
        registered as the view ``table_name`` (pyiceberg's ``to_duckdb``). Needs the
        ``duckdb`` extra."""
        return engines.to_duckdb(self.to_pyarrow_dataset(as_of), table_name, connection)

    # -- table operations: each one __manifest swap (see operations) ------------------------
    def drop_partitions(
        self, filter: str, *, txn_id: str | None = None, claim_timeout: float | None = None
    ) -> OperationResult:
        """Remove, in one ``__manifest`` commit, the partitions whose partition values make
        ``filter`` true (it names partition fields; one a spec version lacks is NULL there).
        The leaf files stay until maintenance. ``txn_id`` makes a retry return the first
        result; ``claim_timeout`` bounds the wait for partitions a transaction is
        committing (default 120 s)."""
        return self._operate(DropPartitions(self._storage, filter), txn_id, claim_timeout)

    def delete(
        self,
        filter: str,
        *,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> OperationResult:
        """Delete the rows matching ``filter`` in one ``__manifest`` commit: partitions it
        covers entirely are dropped, the others get Lance deletion files. ``txn_id``,
        ``claim_timeout``: see :meth:`drop_partitions`; ``progress``: see :meth:`write`."""
        operation = DeleteRows(self._storage, filter)
        return self._operate(operation, txn_id, claim_timeout, progress)

    def merge(
        self,
        data: ArrowData,
        on: Sequence[str],
        *,
        when_not_matched_by_source_delete: bool = False,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
        progress: ProgressCallback | None = None,
    ) -> OperationResult:
        """Upsert ``data`` by the key columns ``on`` (which must include every source column
        of the current partition spec) in one ``__manifest`` commit: rows whose key is
        stored are updated, the others inserted. ``when_not_matched_by_source_delete`` also
        deletes every stored row whose key ``data`` lacks. ``txn_id``, ``claim_timeout``:
        see :meth:`drop_partitions`; ``progress``: see :meth:`write`."""
        operation = MergeRows(
            self._storage, data, on, delete_unmatched=when_not_matched_by_source_delete
        )
        return self._operate(operation, txn_id, claim_timeout, progress)

    def optimize(
        self,
        filter: str | None = None,
        *,
        target_rows_per_fragment: int = DEFAULT_TARGET_ROWS,
        materialize_deletions: bool = True,
        txn_id: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> OperationResult:
        """Compact the leaves of the partitions ``filter`` may touch (all for None) into
        fragments of ``target_rows_per_fragment`` rows, published in one ``__manifest``
        commit; the rows never change. Writers keep writing meanwhile (a leaf that keeps
        changing or is being committed is left alone, reported in ``skipped``)."""
        operation = Optimize(
            self._storage,
            filter,
            target_rows_per_fragment=target_rows_per_fragment,
            materialize_deletions=materialize_deletions,
        )
        return self._operate(operation, txn_id, None, progress)

    def _operate(
        self,
        operation: TableOperation,
        txn_id: str | None,
        claim_timeout: float | None,
        progress: ProgressCallback | None = None,
    ) -> OperationResult:
        check_callback(progress)
        with reporting(progress, operation.kind):
            result = run_operation(
                self._txn,
                operation,
                txn_id=txn_id,
                claim_timeout=claim_timeout,
                state=state_with_claims(self._txn),
            )
        log.info(
            "%s: %d rows removed, %d updated, %d inserted, %d partitions dropped (manifest v%s)",
            operation.kind,
            result.rows_removed,
            result.rows_updated,
            result.rows_inserted,
            len(result.dropped),
            result.manifest_version,
        )
        return result

    # -- writes and transactions -----------------------------------------------------------
    def write(
        self,
        data: ArrowData,
        mode: WriteMode = "append",
        *,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
        flush_bytes: int = FLUSH_BYTES,
        progress: ProgressCallback | None = None,
    ) -> CommitResult:
        """Write rows in one transaction: every touched partition is published in one
        ``__manifest`` commit, so readers see the whole write or nothing of it; a failed
        write leaves nothing. ``overwrite`` replaces exactly the partitions the data
        touches. ``data`` is anything Arrow-exportable or an iterable of pyarrow tables or
        batches, consumed as it is staged: at most ``flush_bytes`` of routed rows are
        buffered, as views of the input (a generator must not refill a buffer it yielded).
        With ``txn_id`` a retried write returns the first one's result. ``claim_timeout``
        bounds the wait for partitions another transaction is committing (default 120 s).

        ``progress`` (a callable taking a :class:`~.progress.Progress`) hears how many of
        the partitions of each step are done, on the calling thread; one that raises is
        logged and not called again. An interrupt (Ctrl-C) stops the write within a second:
        nothing is published, and ``maintain(sweep_orphans=True)`` removes what it left.
        """
        options = CommitOptions.for_claim_timeout(claim_timeout)
        check_callback(progress)
        with reporting(progress, "write"):
            result = writes.write(
                self._txn, data, mode, txn_id=txn_id, options=options, flush_bytes=flush_bytes
            )
        self._adopt(result.manifest_version)
        log.info(
            "%s %d rows into %d partitions (manifest v%d)",
            mode,
            result.rows,
            len(result.partitions),
            result.manifest_version,
        )
        return result

    @property
    def _txn(self) -> TransactionContext:
        return TransactionContext(
            self._manifest, self._store, self.state, self._storage, lambda: self._state
        )

    def begin(
        self, mode: WriteMode = "append", txn_id: str | None = None, *, anonymous: bool = False
    ) -> Transaction:
        """Start a transaction (or resume the one with this id; an aborted one's id starts a
        new incarnation). ``anonymous`` promises that only this process records stages and
        commits (other processes may write data files for it): recording then skips the
        ``__manifest`` commit that orders concurrent stagers, and it cannot be retried."""
        return transactions.begin_transaction(self._txn, mode, txn_id, anonymous=anonymous)

    def transaction(self, txn_id: str) -> Transaction:
        """The current incarnation of a transaction, e.g. to stage into it from another
        process."""
        ctx = self._txn
        record = resolve(ctx, ctx.load_state(), txn_id)
        header = None if record is None else ctx.store.load(txn_id, record.incarnation)
        if header is None:
            raise InvalidArgumentError(f"no transaction {txn_id!r} in {self._root}")
        return Transaction(header, ctx)

    def commit(
        self,
        txn: Transaction | str | Sequence[Transaction | str],
        *,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
    ) -> CommitResult:
        """Publish staged transactions atomically, several in one ``__manifest`` commit as a
        combined transaction ``txn_id`` (by default derived from their ids). Committing
        again returns the same result (an anonymous transaction's raises
        :class:`InvalidArgumentError`)."""
        ids = [
            t.txn_id if isinstance(t, Transaction) else t
            for t in ([txn] if isinstance(txn, (str, Transaction)) else txn)
        ]
        options = CommitOptions.for_claim_timeout(claim_timeout)
        for t in ids:
            if not isinstance(t, str):
                raise InvalidArgumentError(f"transactions are named by their ids, got {t!r}")
        ctx = self._txn
        if len(ids) == 1 and txn_id is None:
            return transactions.commit(ctx, ids[0], options)
        combined = transactions.combine(ctx, ids, txn_id or transactions.combined_id(ids))
        return transactions.commit(ctx, combined.txn_id, options)

    def abort(
        self, txn_id: str, reason: str = "aborted by the user", *, forget: bool = False
    ) -> None:
        """Undo an unpublished transaction: its leaf versions, claims and staged files. Its
        record stays as a tombstone, unless ``forget``: only for the caller's own anonymous
        transaction, whose commit it saw fail. Anyone else's is fenced first."""
        abort_transaction(self._txn, txn_id, reason, own_write=forget)
        if forget:
            self._store.delete(txn_id)

    def recover(self, lease_seconds: float = DEFAULT_LEASE_SECONDS) -> list[str]:
        """Abort transactions idle for longer than ``lease_seconds`` (returns their ids) and
        release claims that finished or vanished transactions left behind (a dead write
        without a ``txn_id`` is aborted past its own lease of a minute)."""
        return recover(self._txn, lease_seconds)

    def maintain(
        self,
        *,
        compact: bool = True,
        older_than: dt.timedelta | None = None,
        sweep_orphans: bool = False,
        orphan_min_age: dt.timedelta = DEFAULT_MIN_AGE,
        dry_run: bool = False,
        enforce_min_age: bool = True,
        progress: ProgressCallback | None = None,
    ) -> MaintenanceReport:
        """Compact ``__manifest``; with ``older_than``, also remove old versions safely
        (tagged versions and the leaf versions they read are kept); with ``sweep_orphans``,
        remove what killed writers left once older than ``orphan_min_age``: unpublished
        leaf versions, unreferenced files and leaf tables no retained version reads.
        ``dry_run`` only reports what the sweep would remove. Every argument is checked
        before anything runs: an ``orphan_min_age`` below ``MIN_SAFE_ORPHAN_AGE`` (6 hours)
        is refused unless ``enforce_min_age=False`` or ``dry_run``. ``progress``: see
        :meth:`write`."""
        check_flags(
            compact=compact,
            sweep_orphans=sweep_orphans,
            dry_run=dry_run,
            enforce_min_age=enforce_min_age,
        )
        older_than = checked_older_than(older_than)
        if sweep_orphans:
            check_min_age(
                orphan_min_age, enforce=enforce_min_age, dry_run=dry_run, name="orphan_min_age"
            )
        check_callback(progress)
        with reporting(progress, "maintain"):
            # Unpublished versions first: the version cleanup then sees what they left.
            reclaimed = (
                reclaim(self._txn, min_age=orphan_min_age, dry_run=dry_run)
                if sweep_orphans
                else None
            )
            report = self._maintain(compact, older_than, dry_run)
            if reclaimed is not None:
                report.unpublished = reclaimed.to_dict()
                report.orphans = sweep(
                    self._txn,
                    min_age=orphan_min_age,
                    dry_run=dry_run,
                    enforce_min_age=enforce_min_age,
                ).to_dict()
        self._reload()
        return report

    def _maintain(
        self, compact: bool, older_than: dt.timedelta | None, dry_run: bool
    ) -> MaintenanceReport:
        if dry_run:
            return MaintenanceReport()
        collect_finished(self._manifest, self.state(), self._store.delete)
        return maintain(
            self._manifest,
            NamespaceState.load(self._root, self._manifest.latest()),
            compact=compact,
            older_than=older_than,
        )

    # -- history and tags ----------------------------------------------------------------
    def history(
        self, limit: int | None = None, *, include_internal: bool = False
    ) -> list[HistoryEntry]:
        """What each retained ``__manifest`` version did, newest first: one entry per write,
        partition creation, schema or spec change (``include_internal``: the bookkeeping
        versions too). Each entry's ``version`` is readable with ``as_of``."""
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise InvalidArgumentError(f"limit must be a positive number, got {limit!r}")
        return self._history.entries(limit, include_internal)

    def versions(self) -> list[int]:
        """The ``__manifest`` versions that exist now, oldest first (``maintain`` removes
        old ones; each is readable with ``as_of``)."""
        return sorted(self._manifest.latest().retained_versions())

    def tag(self, name: str, as_of: AsOf | None = None, *, version: int | None = None) -> TagInfo:
        """Pin the state ``as_of`` names (default: the latest version) under ``name``:
        :meth:`maintain` keeps that ``__manifest`` version and every leaf version it reads
        until :meth:`untag`; read it with ``as_of=name``."""
        target = pick(as_of, version)
        number = self.version if target is None else resolve_as_of(self._manifest, target)
        return create_tag(self._manifest, name, number)

    def tags(self) -> list[TagInfo]:
        """Every tag, oldest version first."""
        return list_tags(self._manifest)

    def untag(self, name: str) -> None:
        """Remove a tag; the next :meth:`maintain` may then remove what only it kept."""
        delete_tag(self._manifest, name)

    def verify(self, filter: str | None = None, *, as_of: AsOf | None = None) -> VerifyReport:
        """Check that every row of the partitions ``filter`` selects (all: None) lies in the
        partition its values give; changes nothing (:meth:`relocate` puts rows right)."""
        state, kept = self._resolve(as_of, None, filter)
        return verify_partitions(self._storage, state, kept)

    def relocate(
        self,
        filter: str | None = None,
        *,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
    ) -> OperationResult:
        """Move every row :meth:`verify` finds misplaced (in the partitions ``filter``
        selects) to the partition of the current spec its values give, in one
        ``__manifest`` commit. ``txn_id``, ``claim_timeout``: see :meth:`drop_partitions`."""
        candidates = None
        if filter is not None:
            candidates = [p.object_id for p in self._resolve(None, None, filter)[1]]
        return self._operate(RelocateRows(self._storage, candidates), txn_id, claim_timeout)

    def repair(self) -> RepairReport:
        """Restore the ``__manifest`` columns a foreign writer dropped (see ``repair``)."""
        report = repair_manifest(self._manifest, self._root)
        self._reload()
        return report

    def transactions(self) -> list[TransactionInfo]:
        """Every recorded transaction and its state, oldest first (for operators)."""
        return transactions.listing(self._txn)
