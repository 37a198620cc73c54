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
from lance.dataset import Session  # type: ignore[attr-defined]

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
from airflow_provider_lance.namespace.ops import indexing
from airflow_provider_lance.namespace.ops.compaction import DEFAULT_TARGET_ROWS, Optimize
from airflow_provider_lance.namespace.ops.deletion import DeleteRows, DropPartitions
from airflow_provider_lance.namespace.ops.index_model import MODEL_DIR
from airflow_provider_lance.namespace.ops.merging import MergeRows
from airflow_provider_lance.namespace.ops.runner import TableOperation, run_operation
from airflow_provider_lance.namespace.ops.verification import (
    RelocateRows,
    VerifyReport,
    verify_partitions,
)
from airflow_provider_lance.namespace.read import engines
from airflow_provider_lance.namespace.read.dataset import NamespaceDataset
from airflow_provider_lance.namespace.read.fulltext import TextQueryLike
from airflow_provider_lance.namespace.read.history import History
from airflow_provider_lance.namespace.read.plan import ScanPlan, plan_scan
from airflow_provider_lance.namespace.read.pruned import PlanCache, PruneCache
from airflow_provider_lance.namespace.read.scan import open_leaf
from airflow_provider_lance.namespace.read.search import Search as _Search
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
from airflow_provider_lance.namespace.write.staging import FLUSH_BYTES, Stage, StagedPartition

from .errors import (
    InvalidArgumentError,
    NamespaceNotFoundError,
    PartitionNotFoundError,
    PartitionSpecError,
    VersionBeforeCreationError,
)
from .failpoints import failpoint
from .progress import ProgressCallback, check_callback, iterate_reporting, reporting
from .results import CommitResult, HistoryEntry, IndexInfo, OperationResult, TagInfo
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
        #: What filters pruned to, and the plans of reads of the latest versions, per
        #: ``__manifest`` version (a read repeated skips the prune and the planning).
        self._pruned = PruneCache()
        self._plans = PlanCache()

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
        session: Session | None = None,
    ) -> PartitionedNamespace:
        """Create a namespace at ``uri``; an error if anything already exists there.
        ``concurrency`` bounds the leaf tables written, committed or opened at once (default
        8 on a local disk, 32 on an object store). ``session``: the ``lance.Session`` whose
        caches searches keep the leaves' indexes and metadata in, e.g.
        ``lance.Session(index_cache_size_bytes=4 << 30)`` (default: one per handle, capped at
        16 GiB of indexes and 256 MiB of metadata by Lance's count)."""
        root = normalize_root(uri)
        ns_schema = NamespaceSchema.from_user_schema(schema)
        fields = resolve_spec(partition_fields, ns_schema, {}, RESERVED_COLUMNS)
        columns = [pa.field(f.name, f.result_type) for f in fields]
        first = pa.Table.from_pylist(
            [row(spec_namespace_id(1), NAMESPACE, metadata="{}")], schema=manifest_schema(columns)
        )
        storage = Storage(root, storage_options, concurrency=concurrency, session=session)
        manifest = Manifest(storage)
        manifest.create({SCHEMA_KEY: ns_schema.to_json(), spec_key(1): spec_to_json(fields)}, first)
        log.info(
            "created partitioned namespace %s partitioned by %s", root, [f.name for f in fields]
        )
        return cls.open(root, storage_options, concurrency=concurrency, session=session)

    @classmethod
    def open(
        cls,
        uri: str | os.PathLike[str],
        storage_options: StorageOptions = None,
        *,
        concurrency: int | None = None,
        session: Session | None = None,
    ) -> PartitionedNamespace:
        """Open an existing namespace (see :meth:`create`); an error if there is none."""
        root = normalize_root(uri)
        storage = Storage(root, storage_options, concurrency=concurrency, session=session)
        manifest = Manifest(storage)
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
        """Whether ``name``, a top-level entry of a namespace's directory, is the format's."""
        return name in (MANIFEST_NAME, TXN_DIR, MODEL_DIR) or bool(LEAF_DIRECTORY.match(name))

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
        """The namespace as of ``as_of`` (default: the latest): a ``__manifest`` version
        (int), a moment (a datetime, naive = UTC: the latest version committed at or before
        it) or a tag name; ``version`` is the older name of an int ``as_of``.
        :class:`VersionNotFoundError` when that state does not exist (not yet, never, or
        cleaned up by :meth:`maintain`)."""
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
        """Hold the state this handle's own publish made, if its ``__manifest`` is open."""
        view = self._manifest.held(version)
        if view is None or version <= self._state.version:
            return
        state = NamespaceState.load(self._root, view)
        with self._adopting:  # another thread's write may have adopted a newer one since
            if version > self._state.version:
                self._state = state

    def _on_latest(self, read: Callable[[NamespaceState], R]) -> tuple[NamespaceState, R]:
        """``read`` (read-only) done on the latest state, and that state: checked meanwhile,
        and done again on a newer version if one was committed."""
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
        """The current columns (what reads return and writes take), with field ids."""
        return self.state().schema.active

    @property
    def stored_schema(self) -> pa.Schema:
        """Every column ever defined, the dropped ones marked ``lance:deprecated``."""
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
        """Add a partition spec version (returned); new data is written under it. Concurrent
        evolutions and schema changes all apply, in some order."""
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
            value = values[f.name]
            try:
                out.append(
                    None
                    if value is None
                    else cast_losslessly(pa.array([value]), f.result_type)[0].as_py()
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
        """Create many (empty) partitions in one transaction; existing ones are returned."""
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
        """Every leaf table of the namespace (all spec versions), as of ``as_of``."""
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
        """The partitions that can hold rows matching the SQL ``filter``, as of ``as_of``."""
        return self._resolve(as_of, version, filter)[1]

    def _resolve(
        self, as_of: AsOf | None, version: int | None, filter: str | None
    ) -> tuple[NamespaceState, list[Partition]]:
        if as_of is None and version is None:
            state = self._state
            kept = self._pruned.get(state, filter)
            if kept is not None and state.view.is_latest():  # nothing to overlap the check with
                return state, kept
            return self._on_latest(lambda state: self._pruned.prune(state, filter))
        state = self.state(as_of, version=version)
        return state, self._pruned.prune(state, filter)

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
        """Serialisable tasks (``task.to_reader()``), one per partition that may hold rows
        matching ``filter`` in ONE ``__manifest`` version (see :meth:`state`). ``fragments``
        lists each task's data files; ``target_tasks`` splits the plan into a task per data
        file when it has fewer partitions. Bad filters and unknown columns raise here."""
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
        latest = as_of is None and version is None and not fragments and target_tasks is None
        if latest:
            held = self._state
            kept_plan = self._plans.get(held.version, filter, columns)
            if kept_plan is not None and held.view.is_latest():
                return kept_plan
        state, kept = self._resolve(as_of, version, filter)
        plan = plan_scan(
            self._storage,
            state,
            kept,
            filter=filter,
            columns=columns,
            fragments=fragments,
            target_tasks=target_tasks,
        )
        if latest:
            self._plans.keep(plan)
        return plan

    def to_batches(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        batch_size: int | None = None,
        progress: ProgressCallback | None = None,
        nearest: Mapping[str, Any] | None = None,
        full_text_query: TextQueryLike | None = None,
        prefilter: bool = False,
        limit: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Stream the rows matching ``filter`` from one manifest version (see :meth:`state`).
        Bad filters and unknown columns raise here. ``progress`` hears partitions started.
        ``limit`` stops after that many rows. ``nearest`` and ``full_text_query`` search as
        pylance's do (see :meth:`to_table`)."""
        check_callback(progress)
        plan = self._plan(filter, columns, as_of, version)
        search = _Search(nearest, full_text_query, prefilter, limit)
        return _batches(plan, search, batch_size, progress)

    def to_reader(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        batch_size: int | None = None,
        progress: ProgressCallback | None = None,
        nearest: Mapping[str, Any] | None = None,
        full_text_query: TextQueryLike | None = None,
        prefilter: bool = False,
        limit: int | None = None,
    ) -> pa.RecordBatchReader:
        """A ``RecordBatchReader`` over :meth:`to_batches` (streams; nothing is collected
        but a search's top rows)."""
        check_callback(progress)
        plan = self._plan(filter, columns, as_of, version)
        failpoint("read.resolved")
        search = _Search(nearest, full_text_query, prefilter, limit)
        return _reader(plan, search, batch_size, progress)

    def to_table(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: str | None = None,
        as_of: AsOf | None = None,
        version: int | None = None,
        progress: ProgressCallback | None = None,
        nearest: Mapping[str, Any] | None = None,
        full_text_query: TextQueryLike | None = None,
        prefilter: bool = False,
        limit: int | None = None,
    ) -> pa.Table:
        """All rows matching ``filter``; ``as_of`` reads a past state in its schema of then.

        ``nearest`` (pylance's dict: ``column``, ``q``, ``k``, ``metric``, ``nprobes``,
        ``refine_factor``, ...) returns the global top k across partitions by ``_distance``;
        ``full_text_query`` (a string, a dict or a ``lance.query`` object) the matches by
        ``_score``, ranked with the term statistics of all searched partitions (``limit``:
        the best ones). The filter prunes partitions first; what it leaves is applied inside
        each leaf before ranking with ``prefilter=True``, else to the top rows after."""
        check_callback(progress)
        plan = self._plan(filter, columns, as_of, version)
        failpoint("read.resolved")
        search = _Search(nearest, full_text_query, prefilter, limit)
        if search.searching:
            with reporting(progress, "search"):
                return search.top(plan)
        return _reader(plan, search, None, progress).read_all()

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
        """A ``pyarrow.dataset.Dataset`` of the namespace as of ``as_of`` (default: now); the
        filters and projections engines push into its scans prune partitions."""
        return NamespaceDataset(self._storage, self.state(as_of))

    def to_polars(self, as_of: AsOf | None = None) -> pl.LazyFrame:
        """A lazy Polars frame of :meth:`to_pyarrow_dataset` (the ``polars`` extra)."""
        return engines.to_polars(self.to_pyarrow_dataset(as_of))

    def to_duckdb(
        self,
        table_name: str,
        connection: duckdb.DuckDBPyConnection | None = None,
        *,
        as_of: AsOf | None = None,
    ) -> duckdb.DuckDBPyConnection:
        """``connection`` (None: a new in-memory one) with :meth:`to_pyarrow_dataset` as the
        view ``table_name`` (the ``duckdb`` extra)."""
        return engines.to_duckdb(self.to_pyarrow_dataset(as_of), table_name, connection)

    # -- table operations: each one __manifest swap (see operations) ------------------------
    def drop_partitions(
        self, filter: str, *, txn_id: str | None = None, claim_timeout: float | None = None
    ) -> OperationResult:
        """Remove, in one ``__manifest`` commit, the partitions whose partition values make
        ``filter`` true (a field a spec version lacks is NULL there). ``txn_id`` makes a
        retry return the first result; ``claim_timeout`` bounds the wait for partitions a
        transaction is committing (default 120 s)."""
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
        return self._operate(DeleteRows(self._storage, filter), txn_id, claim_timeout, progress)

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
        """Upsert ``data`` by the key columns ``on`` (including every source column of the
        current spec) in one ``__manifest`` commit. ``when_not_matched_by_source_delete``
        also deletes every stored row whose key ``data`` lacks. ``txn_id``,
        ``claim_timeout``: see :meth:`drop_partitions`; ``progress``: see :meth:`write`."""
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
        """Compact the leaves ``filter`` may touch (None: all) into fragments of
        ``target_rows_per_fragment`` rows in one ``__manifest`` commit; rows never change.
        A leaf that keeps changing or is being committed is left alone (``skipped``)."""
        operation = Optimize(
            self._storage,
            filter,
            target_rows_per_fragment=target_rows_per_fragment,
            materialize_deletions=materialize_deletions,
        )
        return self._operate(operation, txn_id, None, progress)

    # -- indexes: declared on the namespace, built per leaf, each one __manifest swap ----------
    def create_index(
        self,
        column: str,
        index_type: str,
        name: str | None = None,
        *,
        filter: str | None = None,
        replace: bool = False,
        shared_model: bool = True,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
        progress: ProgressCallback | None = None,
        **params: Any,
    ) -> OperationResult:
        """Declare an index ``name`` (default ``<column>_idx``) on ``column`` and build it on
        every partition ``filter`` may touch (None: all), published in one ``__manifest``
        commit; ``params`` are pylance's ``create_index`` arguments (``metric``,
        ``num_partitions``, ``num_sub_vectors``, ...). IVF types share one model trained on
        a sample of all partitions unless ``shared_model=False``. Partitions created later
        get it from :meth:`optimize_indices`. ``txn_id``, ``claim_timeout``: see
        :meth:`drop_partitions`."""
        types = indexing.VECTOR_TYPES | indexing.SCALAR_TYPES
        operation = self._create_index(
            column, index_type, name, filter, types, replace, params, shared_model
        )
        return self._operate(operation, txn_id, claim_timeout, progress)

    def create_scalar_index(
        self,
        column: str,
        index_type: str,
        name: str | None = None,
        *,
        filter: str | None = None,
        replace: bool = False,
        txn_id: str | None = None,
        claim_timeout: float | None = None,
        progress: ProgressCallback | None = None,
        **params: Any,
    ) -> OperationResult:
        """:meth:`create_index` for pylance's scalar types (BTREE, BITMAP, LABEL_LIST,
        INVERTED, FTS, NGRAM, ZONEMAP, BLOOMFILTER, RTREE)."""
        types = indexing.SCALAR_TYPES
        operation = self._create_index(column, index_type, name, filter, types, replace, params)
        return self._operate(operation, txn_id, claim_timeout, progress)

    def _create_index(
        self,
        column: str,
        index_type: str,
        name: str | None,
        filter: str | None,
        types: frozenset[str],
        replace: bool,
        params: dict[str, Any],
        shared_model: bool = False,
    ) -> indexing.CreateIndex:
        given: dict[str, Any] = {
            k: params.pop(k) for k in ("ivf_centroids", "pq_codebook") if k in params
        }
        declaration = indexing.declaration_for(
            self.state(), column, index_type, name, filter=filter, params=params, types=types
        )
        if given:
            indexing.check_given_model(declaration.index_type, given, shared_model)
        return indexing.CreateIndex(
            self._storage,
            declaration,
            replace=replace,
            shared_model=shared_model,
            given_model=given or None,
        )

    def optimize_indices(
        self,
        filter: str | None = None,
        *,
        names: Sequence[str] | None = None,
        txn_id: str | None = None,
        progress: ProgressCallback | None = None,
    ) -> OperationResult:
        """Index what the declared indexes (``names``; None: all) do not cover yet in the
        partitions ``filter`` may touch: new partitions whole, new fragments of indexed
        ones as a new segment, in one ``__manifest`` commit. A partition being committed
        or that keeps changing is left for the next run (``skipped``)."""
        operation = indexing.OptimizeIndices(self._storage, filter, names)
        return self._operate(operation, txn_id, None, progress)

    def list_indices(self, as_of: AsOf | None = None, *, coverage: bool = True) -> list[IndexInfo]:
        """The declared indexes as of ``as_of`` (default: now), each with its coverage,
        then those built on leaves with pylance (``declared=False``); every leaf is opened.
        ``coverage=False``: the declarations alone, from ``__manifest`` (no leaf opened;
        ``partitions_indexed``, ``rows_indexed`` and ``rows_unindexed`` None)."""
        return indexing.index_info(self._storage, self.state(as_of), coverage=coverage)

    def drop_index(
        self, name: str, *, txn_id: str | None = None, claim_timeout: float | None = None
    ) -> OperationResult:
        """Remove the index ``name`` from the namespace and every leaf, in one
        ``__manifest`` commit (see :meth:`drop_partitions`)."""
        return self._operate(indexing.DropIndex(self._storage, name), txn_id, claim_timeout)

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
        counts = (result.rows_removed, result.rows_updated, result.rows_inserted)
        what = f"{len(result.dropped)} partitions dropped (manifest v{result.manifest_version})"
        log.info("%s: %d rows removed, %d updated, %d inserted, %s", operation.kind, *counts, what)
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
        """Write rows in one transaction, published in one ``__manifest`` commit: readers
        see all of it or nothing; a failed write leaves nothing. ``overwrite`` replaces
        exactly the partitions the data touches. ``data``: anything Arrow-exportable or an
        iterable of pyarrow tables or batches, buffered up to ``flush_bytes`` as views (a
        generator must not refill a buffer it yielded). With ``txn_id`` a retry returns
        the first result; ``claim_timeout``: see :meth:`drop_partitions`. ``progress`` (a
        callable taking a :class:`~.progress.Progress`) hears the partitions of each step
        done, on the calling thread (one that raises is logged, not called again). An
        interrupt stops it within a second, publishing nothing (``maintain(sweep_orphans=True)``
        removes what it left)."""
        options = CommitOptions.for_claim_timeout(claim_timeout)
        check_callback(progress)
        with reporting(progress, "write"):
            result = writes.write(
                self._txn, data, mode, txn_id=txn_id, options=options, flush_bytes=flush_bytes
            )
        self._adopt(result.manifest_version)
        counts = (result.rows, len(result.partitions), result.manifest_version)
        log.info("%s %d rows into %d partitions (manifest v%d)", mode, *counts)
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
        commits: recording skips a ``__manifest`` commit, and it cannot be retried."""
        return transactions.begin_transaction(self._txn, mode, txn_id, anonymous=anonymous)

    def transaction(self, txn_id: str) -> Transaction:
        """The current incarnation of a transaction (to stage into it from elsewhere)."""
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
        combined transaction ``txn_id`` (default: derived from their ids). Committing again
        returns the same result (an anonymous transaction's raises InvalidArgumentError)."""
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
        """Undo an unpublished transaction; its record stays as a tombstone unless
        ``forget`` (only for one's own anonymous transaction whose commit failed)."""
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
        indices: bool = True,
        progress: ProgressCallback | None = None,
    ) -> MaintenanceReport:
        """Compact ``__manifest``; with ``older_than``, remove older versions (not tagged
        ones nor the leaf versions those read); with ``sweep_orphans``, remove what killed
        writers left, older than ``orphan_min_age`` (``dry_run``: only report it); with
        ``indices``, :meth:`optimize_indices` first (it compacts no leaf: run
        :meth:`optimize` before, so the compacted fragments are indexed). Arguments are
        checked first: an ``orphan_min_age`` below ``MIN_SAFE_ORPHAN_AGE`` (6 hours) is
        refused unless ``enforce_min_age=False`` or ``dry_run``."""
        flags = {"compact": compact, "sweep_orphans": sweep_orphans, "dry_run": dry_run}
        flags["indices"] = indices
        check_flags(**flags, enforce_min_age=enforce_min_age)
        older_than = checked_older_than(older_than)
        if sweep_orphans:
            check_min_age(
                orphan_min_age, enforce=enforce_min_age, dry_run=dry_run, name="orphan_min_age"
            )
        check_callback(progress)
        with reporting(progress, "maintain"):
            # Unpublished versions first: the version cleanup then sees what they left.
            age: dict[str, Any] = {"min_age": orphan_min_age, "dry_run": dry_run}
            reclaimed = reclaim(self._txn, **age) if sweep_orphans else None
            report = MaintenanceReport()
            indexed = None
            if indices and not dry_run and self.state().view.index_rows():
                indexed = self.optimize_indices().to_dict()
            if not dry_run:
                collect_finished(self._manifest, self.state(), self._store.delete)
                state = NamespaceState.load(self._root, self._manifest.latest())
                report = maintain(self._manifest, state, compact=compact, older_than=older_than)
                report.indices = indexed
            if reclaimed is not None:
                report.unpublished = reclaimed.to_dict()
                report.orphans = sweep(self._txn, **age, enforce_min_age=enforce_min_age).to_dict()
        self._reload()
        return report

    # -- history and tags ----------------------------------------------------------------
    def history(
        self, limit: int | None = None, *, include_internal: bool = False
    ) -> list[HistoryEntry]:
        """What each retained ``__manifest`` version did, newest first (``include_internal``:
        the bookkeeping versions too)."""
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise InvalidArgumentError(f"limit must be a positive number, got {limit!r}")
        return self._history.entries(limit, include_internal)

    def versions(self) -> list[int]:
        """The ``__manifest`` versions that exist now, oldest first."""
        return sorted(self._manifest.latest().retained_versions())

    def tag(self, name: str, as_of: AsOf | None = None, *, version: int | None = None) -> TagInfo:
        """Pin the state ``as_of`` names (default: the latest) under ``name``, read with
        ``as_of=name`` and kept by :meth:`maintain` until :meth:`untag`."""
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
        """Move the rows :meth:`verify` finds misplaced to their partition of the current
        spec, in one ``__manifest`` commit (see :meth:`drop_partitions`)."""
        candidates = None if filter is None else [p.object_id for p in self.prune(filter)]
        return self._operate(RelocateRows(self._storage, candidates), txn_id, claim_timeout)

    def repair(self) -> RepairReport:
        """Restore the ``__manifest`` columns a foreign writer dropped (see ``repair``)."""
        report = repair_manifest(self._manifest, self._root)
        self._reload()
        return report

    def transactions(self) -> list[TransactionInfo]:
        """Every recorded transaction and its state, oldest first (for operators)."""
        return transactions.listing(self._txn)


def _batches(
    plan: ScanPlan, search: _Search, batch_size: int | None, progress: ProgressCallback | None
) -> Iterator[pa.RecordBatch]:
    """``search``'s rows of ``plan``: a search searches now, a read reads as its batches are
    taken; ``progress`` hears the leaves searched, or the partitions read."""
    with reporting(progress, "search"):
        batches = search.run(plan, batch_size)
    return iterate_reporting(progress, "read", batches)


def _reader(
    plan: ScanPlan, search: _Search, batch_size: int | None, progress: ProgressCallback | None
) -> pa.RecordBatchReader:
    """:func:`_batches` as a reader."""
    return pa.RecordBatchReader.from_batches(
        search.schema(plan), _batches(plan, search, batch_size, progress)
    )
