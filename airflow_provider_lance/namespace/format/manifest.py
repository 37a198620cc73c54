"""The ``__manifest`` Lance table: its columns, table metadata, and atomic row commits.

Base columns are exactly those pylance's ``DirectoryNamespace`` writes; extensions are
``read_version``, the claim column and one column per partition field. Rows change only
through ``merge_insert`` keyed on ``object_id``, which carries Lance's primary-key metadata
(pylance facts: ``test_fact_merge_insert_*``, ``test_fact_insert_if_absent_*``):

* :meth:`Manifest.insert_absent`: insert-if-absent, exactly one winner per ``object_id``;
* :meth:`Manifest.commit`: a :class:`~.swap.Swap` against the version its rows were read
  at, failing with :class:`CommitConflict` if any of them changed since.

Table metadata (``schema``, ``partition_spec_v<N>``) is its own commit (Lance cannot change
rows and metadata together), always written before any row depends on it.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
import operator
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation, Transaction
from lance.dataset import Session  # type: ignore[attr-defined]

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.io.storage import Storage, first_line
from airflow_provider_lance.namespace.io.uri import local_path
from airflow_provider_lance.namespace.retry import Budget, Outcome, retry_until


class SwapToCommit(Protocol):
    """What :meth:`Manifest.commit` needs of a swap (:class:`~.swap.Swap` is one)."""

    @property
    def base_version(self) -> int: ...
    @property
    def is_empty(self) -> bool: ...
    @property
    def drops(self) -> Sequence[str]: ...
    def check(self) -> None: ...
    def table(self) -> pa.Table: ...


log = logging.getLogger(__name__)

#: The scalar indices ``__manifest`` has (see :meth:`Manifest.ensure_indices`).
IndexKind = Literal["BTREE", "BITMAP", "BLOOMFILTER"]

#: Looks at a root that concurrent creators keep changing before create gives up.
CREATE_ATTEMPTS = 16

MANIFEST_NAME = "__manifest"
PRIMARY_KEY_METADATA = {"lance-schema:unenforced-primary-key:position": "0"}
OBJECT_ID = "object_id"
OBJECT_TYPE = "object_type"
LOCATION = "location"
METADATA = "metadata"
BASE_OBJECTS = "base_objects"
READ_VERSION = "read_version"
NAMESPACE = "namespace"
TABLE = "table"

BASE_FIELDS = (
    pa.field(OBJECT_ID, pa.utf8(), nullable=False, metadata=PRIMARY_KEY_METADATA),
    pa.field(OBJECT_TYPE, pa.utf8(), nullable=False),
    pa.field(LOCATION, pa.utf8()),
    pa.field(METADATA, pa.utf8()),
    pa.field(BASE_OBJECTS, pa.list_(pa.field(OBJECT_ID, pa.utf8()))),
)
READ_VERSION_FIELD = pa.field(READ_VERSION, pa.uint64())
#: Bookkeeping (reserved ``__`` prefix): the transaction holding a partition's commit claim.
CLAIM = "__txn_id"
CLAIM_FIELD = pa.field(CLAIM, pa.utf8())
#: ``object_id`` prefixes of reserved rows (type ``namespace``, outside every spec version,
#: so no partition listing shows them): a transaction's state (``lifecycle``), a running
#: merge's intent, the fence row of a spec version (``__fence$v3``; ``spec_fence``) and
#: an index declared on the namespace (``__index$<name>``; ``ops.indexing``).
TXN_PREFIX = "__txn$"
INTENT_PREFIX = "__merge$"
FENCE_PREFIX = "__fence$v"
INDEX_PREFIX = "__index$"
#: Column names a partition field may not take (``__``-prefixed names are reserved too).
RESERVED_COLUMNS = frozenset(f.name for f in (*BASE_FIELDS, READ_VERSION_FIELD, CLAIM_FIELD))


#: A ``__manifest`` row as Lance returns it: column name -> value.
ManifestRow = dict[str, Any]
#: Ids :meth:`ManifestView.existing` looks up by an ``IN`` filter before reading every id.
POINT_LOOKUP_IDS = 64
#: Rows of ``__manifest`` read whole in about the time of a filtered scan.
CHEAP_WHOLE_ROWS = 5000
_CLAIMED = f"{CLAIM} IS NOT NULL"


def partition_ids(ids: Sequence[object]) -> list[str]:
    """The ids among ``ids`` of namespace objects, not reserved rows: what a conflict lists."""
    return [i for i in ids if isinstance(i, str) and not i.startswith("__")]


def manifest_schema(partition_columns: list[pa.Field]) -> pa.Schema:
    return pa.schema([*BASE_FIELDS, READ_VERSION_FIELD, CLAIM_FIELD, *partition_columns])


#: Versions of ``__manifest`` a :class:`Manifest` keeps open for its commits.
OPENED_KEPT = 4
#: Lance's I/O block size for ``__manifest`` on an object store (one request per file).
MANIFEST_BLOCK_SIZE = 1 << 20


def _cleaned_up(base_version: int, ids: Sequence[str]) -> CommitConflict:
    return CommitConflict(
        f"__manifest version {base_version}, which this commit read, was cleaned up "
        "meanwhile (maintain); read the namespace again",
        partition_ids(list(ids)),
    )


class Manifest:
    """Access to one namespace's ``__manifest`` table, through the namespace's storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage, self.root, self.uri = storage, storage.root, storage.uri(MANIFEST_NAME)
        self._session = Session()  # one for every version opened: metadata read once
        #: The table as this handle's last compare-and-swap left it (None before one).
        self.last_swapped: lance.LanceDataset | None = None
        self._opened: dict[int, lance.LanceDataset] = {}
        self._lock = threading.Lock()

    def at(self, version: int) -> ManifestView:
        """The table at ``version``, to query (:class:`ManifestError` if cleaned up)."""
        return ManifestView(self.open(version))

    def latest(self) -> ManifestView:
        """The table at its latest version, to query."""
        return ManifestView(self.open())

    def open(self, version: int | None = None) -> lance.LanceDataset:
        block_size = None if self.storage.local else MANIFEST_BLOCK_SIZE
        try:
            ds = self.storage.table(self.uri, version, session=self._session, block_size=block_size)
        except TableNotFoundError as exc:
            if version is not None and self._opens(None, NamespaceNotFoundError):
                raise ManifestError(
                    f"__manifest version {version} of {self.root} no longer exists "
                    f"(cleaned up?): {exc}"
                ) from exc
            raise NamespaceNotFoundError(
                f"{self.root} is not a partitioned namespace: it has no __manifest table. "
                "Create one first with PartitionedNamespace.create(uri, schema=..., "
                "partition_fields=[...]) (in Airflow: LancePartitionedHook.create_or_open), "
                "or check the URI and its storage options"
            ) from exc
        except StorageError as exc:  # its own class: whether a retry helps stays decided
            raise type(exc)(f"cannot read the __manifest of {self.root}: {exc}") from exc
        self._keep(ds)
        return ds

    def _keep(self, ds: lance.LanceDataset) -> None:
        """Keep a copy of ``ds`` (the last :data:`OPENED_KEPT`): commits advance theirs."""
        with self._lock:
            self._opened[int(ds.version)] = copy.copy(ds)
            while len(self._opened) > OPENED_KEPT:
                del self._opened[min(self._opened)]

    def _copy_of(self, version: int) -> lance.LanceDataset | None:
        """A copy of the table at ``version`` if this handle holds it open (no request)."""
        with self._lock:
            ds = self._opened.get(version)
        return None if ds is None else copy.copy(ds)

    def held(self, version: int) -> ManifestView | None:
        """The table at ``version`` to query, if this handle holds it open (no request)."""
        ds = self._copy_of(version)
        return None if ds is None else ManifestView(ds)

    def _base(self, base_version: int, ids: Sequence[str]) -> tuple[lance.LanceDataset, bool]:
        """A table at ``base_version`` to commit on, and whether it is a copy of one held."""
        opened = self._copy_of(base_version)
        if opened is not None:
            return opened, True
        try:
            return self.open(base_version), False
        except ManifestError as exc:  # cleaned up meanwhile: the rows may have changed since
            raise _cleaned_up(base_version, ids) from exc

    def _opens(self, version: int | None, missing: type[Exception]) -> bool:
        """Whether ``version`` (None: the latest) opens, rather than raising ``missing``."""
        try:
            self.open(version)
        except missing:
            return False
        return True

    def create(self, metadata: Mapping[str, str], first_rows: pa.Table) -> lance.LanceDataset:
        """Create the table with ``first_rows``, its metadata and scalar indices. Crash-safe
        and idempotent: an interrupted create (our first rows, no metadata) is finished, one
        holding exactly ``metadata`` returned; anything else: :class:`NamespaceExistsError`."""

        def attempt(_: int) -> lance.LanceDataset | Outcome:
            try:
                ds: lance.LanceDataset | None = self.open()
            except NamespaceNotFoundError:
                ds = None
            if ds is None:
                self._check_empty_root()
                self.storage.create_table(first_rows, self.uri)
                failpoint("create.after_table")
                return Outcome.AGAIN  # created (by us or a concurrent creator): look again
            present = {k: ds.metadata.get(k) for k in metadata}
            if present == dict(metadata):
                self.ensure_indices(ds)
                return self.open()
            if any(v is not None for v in present.values()) or not self._is_fresh(ds):
                raise NamespaceExistsError(
                    f"{self.root} already holds a namespace with a different schema or "
                    "partition spec; open it instead of creating, or pick another location"
                )
            if not ds.schema.equals(first_rows.schema):  # another spec's create began here
                raise NamespaceExistsError(
                    f"{self.root} holds the start of a namespace with another partition "
                    "spec (a concurrent or interrupted create); open it once created, or "
                    "remove the directory if that create was killed"
                )
            try:
                self.commit_metadata(metadata, int(ds.version))
            except CommitConflict:
                return Outcome.AGAIN  # a concurrent create finished it first: compare again
            failpoint("create.after_metadata")
            return Outcome.AGAIN

        kept = NamespaceExistsError(f"{self.root}: concurrent creators kept changing __manifest")
        racing = Budget(lambda: kept, attempts=CREATE_ATTEMPTS)
        return retry_until(attempt, {Outcome.AGAIN: racing})

    def _check_empty_root(self) -> None:
        """A local root must be empty or missing (but for a ``__manifest`` being created)."""
        path = local_path(self.root)
        if path is not None and (
            os.path.isfile(path)
            or (os.path.isdir(path) and set(os.listdir(path)) - {MANIFEST_NAME})
        ):
            raise NamespaceExistsError(
                f"{path} already exists and is not empty; a new partitioned namespace "
                "needs an empty or missing directory"
            )

    @staticmethod
    def _is_fresh(ds: lance.LanceDataset) -> bool:
        """A manifest an interrupted ``create`` left: our columns, spec-version rows only."""
        if READ_VERSION not in ds.schema.names or ds.count_rows() > 8:
            return False
        types = set(ds.to_table(columns=[OBJECT_TYPE]).column(OBJECT_TYPE).to_pylist())
        return types <= {NAMESPACE}

    def ensure_indices(self, ds: lance.LanceDataset | None = None) -> None:
        """Best effort: a BTREE on every partition column, a BLOOMFILTER on ``object_id``, a
        BITMAP on ``object_type``. Never a BTREE on ``object_id``: ``merge_insert`` would miss
        concurrent inserts (pylance facts: test_fact_btree_on_merge_key_makes_merge_insert_miss_*,
        test_fact_other_indices_keep_merge_insert_conflicts)."""
        ds = ds if ds is not None else self.open()
        for column, kind in self.missing_indices(ds):
            try:
                ds.create_scalar_index(column, kind)
            except (ValueError, OSError, NotImplementedError) as exc:
                log.info("did not index %s: %s", column, first_line(exc))

    @staticmethod
    def missing_indices(ds: lance.LanceDataset) -> list[tuple[str, IndexKind]]:
        """The indices :meth:`ensure_indices` makes that ``ds`` lacks: (column, kind)."""
        indexed = {tuple(i.field_names) for i in ds.describe_indices()}
        wanted: list[tuple[str, IndexKind]] = [(OBJECT_TYPE, "BITMAP"), (OBJECT_ID, "BLOOMFILTER")]
        wanted += [(name, "BTREE") for name in btree_columns(ds.schema)]
        return [(column, kind) for column, kind in wanted if (column,) not in indexed]

    def add_columns(self, fields: list[pa.Field]) -> None:
        """Add nullable partition columns (schema only: existing rows read NULL)."""
        if not fields:
            return
        ds = self.open()
        missing = [f for f in fields if f.name not in ds.schema.names]
        if missing:
            names = [f.name for f in missing]
            race = f"a concurrent commit to __manifest won the race to add {names}"
            with self.storage.failures("add columns to", self.uri, conflict=race):
                ds.add_columns(pa.schema([f.with_nullable(True) for f in missing]))

    def conform(self, rows: pa.Table, ds: lance.LanceDataset) -> pa.Table:
        """Reorder/fill ``rows`` into the table's current schema (missing columns NULL)."""
        arrays = [
            rows.column(f.name).cast(f.type)
            if f.name in rows.column_names
            else pa.nulls(rows.num_rows, f.type)
            for f in ds.schema
        ]
        return pa.Table.from_arrays(arrays, schema=ds.schema)

    def insert_absent(self, rows: pa.Table) -> int:
        """Insert the rows whose ``object_id`` is absent (present ones are left untouched);
        how many were inserted. Of concurrent writers exactly one inserts each id (pylance
        fact: test_fact_insert_if_absent_with_primary_key_metadata_has_one_winner)."""
        if rows.num_rows == 0:
            return 0
        ds = self.open()
        builder = ds.merge_insert(OBJECT_ID).when_not_matched_insert_all()
        return int(builder.execute(self.conform(rows, ds))["num_inserted_rows"])

    def commit(self, swap: SwapToCommit) -> int:
        """Apply ``swap``: its moves and requirements checked, then its rows upserted and its
        drops deleted in ONE ``merge_insert`` without retries, which fails with
        :class:`CommitConflict` if any of those rows changed (or was inserted) since its base
        version; changes to other rows are rebased (pylance facts: ``test_fact_merge_insert_*``).
        Returns the new version (the base version for an empty swap)."""
        swap.check()
        if swap.is_empty:
            return swap.base_version
        rows = swap.table()
        ids = [*rows.column(OBJECT_ID).to_pylist(), *swap.drops]
        drops, base_version = list(swap.drops), swap.base_version
        base, copied = self._base(base_version, ids)
        lost = "a concurrent writer changed the __manifest rows this commit depends on"
        try:
            touched = partition_ids(ids)
            with self.storage.failures("commit to", self.uri, conflict=lost, partitions=touched):
                failpoint("manifest.before_swap")
                builder = base.merge_insert(OBJECT_ID).when_matched_update_all()
                builder = builder.when_not_matched_insert_all()
                if drops:
                    builder = builder.when_not_matched_by_source_delete(ids_filter(drops))
                builder.conflict_retries(0).execute(self.conform(rows, base))
                failpoint("manifest.after_swap")  # committed: "=error" makes it unknown
        except (StorageError, TableNotFoundError) as exc:  # on a copy: cleaned up meanwhile?
            if copied and not self._opens(base_version, ManifestError):
                raise _cleaned_up(base_version, ids) from exc
            raise
        self.last_swapped = base  # the commit advanced it to the version it made
        self._keep(base)
        return int(base.version)

    def commit_metadata(self, values: Mapping[str, str], base_version: int) -> int:
        """Set table metadata keys, failing if a concurrent commit set any of them since
        ``base_version`` (pylance fact:
        test_fact_update_config_races_conflict_on_the_same_key_only)."""
        updates = LanceOperation.UpdateMap(dict(values))
        txn = Transaction(base_version, LanceOperation.UpdateConfig(table_metadata_updates=updates))
        conflict = (
            f"a concurrent change to the namespace metadata ({', '.join(values)}) won the race"
        )
        return int(self.storage.commit(self.uri, txn, conflict=conflict).version)

    def delete_rows(self, object_ids: list[str]) -> None:
        """Delete rows by id (rows of partitions that were never published, intents of
        merges); unconditional, Lance retries what conflicts."""
        if object_ids:
            changed = "a concurrent commit to __manifest changed the rows being deleted"
            with self.storage.failures("delete rows of", self.uri, conflict=changed):
                self.open().delete(ids_filter(object_ids))

    def ensure_claim_column(self) -> None:
        """Namespaces created before transactions lack the claim column: add it."""
        if CLAIM not in self.open().schema.names:
            self.add_columns([CLAIM_FIELD])


class ManifestView:
    """One version of ``__manifest``, queried by named questions (the only code that writes
    a filter over its rows); reads raise Lance's own errors.

    A version that reads whole in about the time of one filtered scan
    (:attr:`loads_whole_cheaply`: a small table) is read whole at its first question and
    every question is answered from those rows; a larger one is scanned per question,
    through its indices."""

    def __init__(self, dataset: lance.LanceDataset) -> None:
        self._ds = dataset  # read-only: never commit through it (a commit advances it)
        self.version = int(dataset.version)
        self._looked_up: dict[str, ManifestRow | None] = {}
        self._prefixed: dict[str, pa.Table] = {}  # a version never changes: read once

    @property
    def metadata(self) -> dict[str, str]:
        return self._ds.metadata

    @cached_property
    def schema(self) -> pa.Schema:
        return self._ds.schema

    @cached_property
    def column_types(self) -> dict[str, pa.DataType]:
        return {f.name: f.type for f in self.schema}

    @property
    def has_claim_column(self) -> bool:
        """Whether this version has the claim column (added by the first transaction)."""
        return CLAIM in self.column_types

    def is_latest(self) -> bool:
        """Whether no version was committed after this one (asks the storage). On a local
        disk from two small reads (:func:`_latest_on_disk`), where Lance's
        ``latest_version`` reads the name of every version (0.2 ms at 500 versions)."""
        directory = self._versions_directory
        known = None if directory is None else _latest_on_disk(directory, self.version)
        return known if known is not None else int(self._ds.latest_version) == self.version

    @cached_property
    def _versions_directory(self) -> str | None:
        """The directory of the table's manifests on a local disk (None: not local)."""
        path = local_path(str(self._ds.uri))
        return None if path is None else os.path.join(path, "_versions")

    def retained_versions(self) -> list[int]:
        """The versions of the table that exist now (retention removes old ones)."""
        return [int(v["version"]) for v in self._ds.versions()]

    def transaction(self) -> Any:
        """Lance's record of the commit that made this version (None if it has none)."""
        return self._ds.read_transaction(self.version)

    def fragments(self) -> list[Any]:
        """This version's fragments (the rows a commit wrote are in the ones it added)."""
        return list(self._ds.get_fragments())

    def rows_by_id(
        self, object_ids: Sequence[str], where: pc.Expression | None = None
    ) -> dict[str, ManifestRow]:
        """The rows with these ids (every column), each read once per version; ``where``: a
        predicate on partition columns every such row satisfies (answered by their BTREEs)."""
        wanted = [i for i in dict.fromkeys(object_ids) if i not in self._looked_up]
        if wanted:
            cheaper = self.scan_is_cheaper(len(wanted))
            if cheaper or where is not None:
                table = self.scan_by_id(wanted, None if cheaper else where)
            else:
                table = self._ds.to_table(filter=ids_filter(wanted))
            found = {r[OBJECT_ID]: r for r in table.to_pylist()}
            for i in wanted:
                self._looked_up[i] = found.get(i)
        return {i: r for i in object_ids if (r := self._looked_up[i]) is not None}

    def scan_by_id(self, object_ids: Sequence[str], where: pc.Expression | None = None) -> pa.Table:
        """The rows with these ids in table order, read whole (or those ``where`` selects)."""
        rows = self._whole if self._whole is not None else self._ds.to_table(filter=where)
        return _with_ids(rows, object_ids)

    def scan_is_cheaper(self, ids: int) -> bool:
        """Whether reading the whole table finds ``ids`` rows faster than an index does."""
        return self._whole is not None or self._row_count <= 20 * ids + 2000

    @cached_property
    def _row_count(self) -> int:
        return int(self._ds.count_rows())

    @cached_property
    def object_ids(self) -> frozenset[str]:
        """The id of every row."""
        rows = self._whole if self._whole is not None else self._ds.to_table(columns=[OBJECT_ID])
        return frozenset(rows.column(OBJECT_ID).to_pylist())

    def existing(self, object_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``object_ids`` (of any row kind) exist in this version."""
        looked_up = self._looked_up
        if all(i in looked_up for i in object_ids):
            return frozenset(i for i in object_ids if looked_up[i] is not None)
        if "object_ids" in self.__dict__ or len(object_ids) > POINT_LOOKUP_IDS:
            return self.object_ids & frozenset(object_ids)
        return frozenset(self.rows_by_id(object_ids))

    def read_versions(self, object_ids: Sequence[str]) -> dict[str, int | None]:
        """The ``read_version`` of the rows with these ids (absent ids left out; every
        value None in a version without the column)."""
        if not object_ids:
            return {}
        columns = [c for c in (OBJECT_ID, READ_VERSION) if c in self.column_types]
        if self._whole is not None:
            found = _with_ids(self._whole, object_ids).select(columns)
        else:
            found = self._ds.to_table(columns=columns, filter=ids_filter(object_ids))
        return {r[OBJECT_ID]: r.get(READ_VERSION) for r in found.to_pylist()}

    def all_rows(self) -> list[ManifestRow]:
        rows = self._whole if self._whole is not None else self._ds.to_table()
        return list(rows.to_pylist())

    def leaf_rows(self, columns: Sequence[str], where: pc.Expression | None = None) -> pa.Table:
        """These columns of every table row (published, being created, or foreign), or of
        those ``where`` (a predicate on partition columns) selects."""
        if self._whole is not None:
            rows = self._whole.select([*columns, OBJECT_TYPE])
            rows = rows if where is None else rows.filter(where)
        elif where is None:  # every row: filtered here, cheaper than in Lance's scan
            rows = self._ds.to_table(columns=[*columns, OBJECT_TYPE])
        else:
            rows = self._ds.to_table(columns=[*columns, OBJECT_TYPE], filter=where)
        return rows.filter(pc.equal(rows.column(OBJECT_TYPE), TABLE)).drop_columns([OBJECT_TYPE])

    @property
    def loads_whole_cheaply(self) -> bool:
        """Whether reading this version whole costs about what one filtered scan does: at
        most :data:`CHEAP_WHOLE_ROWS` rows, or on an object store data files that fit one
        block each (no request: from the version's manifest)."""
        if self._read_whole:
            return True
        rows = sum(f.metadata.physical_rows or 0 for f in self._ds.get_fragments())
        return rows <= CHEAP_WHOLE_ROWS

    @property
    def reads_whole(self) -> bool:
        """Whether this version is read whole, once, and answers every question from those
        rows (:attr:`loads_whole_cheaply`)."""
        return self._whole is not None

    @cached_property
    def _whole(self) -> pa.Table | None:
        """Every row and column of this version, read once, if that is cheap
        (:attr:`loads_whole_cheaply`); None if not."""
        return self._ds.to_table() if self.loads_whole_cheaply else None

    @cached_property
    def _read_whole(self) -> bool:
        """On an object store: whether the data files fit in one :data:`MANIFEST_BLOCK_SIZE`
        block each, so that reading them whole costs the requests of one filtered scan."""
        if urlparse(str(self._ds.uri)).scheme in ("", "file"):
            return False
        sizes = [f.file_size_bytes for g in self._ds.get_fragments() for f in g.data_files()]
        known = [s for s in sizes if s is not None]  # unknown in files of old writers
        return len(known) == len(sizes) and sum(known) <= MANIFEST_BLOCK_SIZE

    def leaf_ids(self) -> set[str]:
        """The ids of every table row."""
        return set(self.leaf_rows([OBJECT_ID]).column(OBJECT_ID).to_pylist())

    def leaf_locations(self) -> set[str]:
        """The locations every table row points at."""
        if LOCATION not in self.column_types:
            raise ManifestError(
                f"__manifest version {self.version} has no {LOCATION} column; the orphan "
                "sweep cannot tell which leaf tables it reads (repair the namespace first)"
            )
        return {loc for loc in self.leaf_rows([LOCATION]).column(LOCATION).to_pylist() if loc}

    def published_leaves(self) -> dict[str, tuple[str, int | None]]:
        """Leaf object id -> (stored location, read_version) of the published table rows (not
        those a transaction is creating; no ``read_version`` column: None, the latest)."""
        names = self.column_types
        columns = [c for c in (OBJECT_ID, LOCATION, READ_VERSION, CLAIM) if c in names]
        return {
            r[OBJECT_ID]: (r[LOCATION], r.get(READ_VERSION))
            for r in self.leaf_rows(columns).to_pylist()
            if r.get(READ_VERSION) is not None or r.get(CLAIM) is None
        }

    def rows_in_fragments(self, fragments: Sequence[Any]) -> list[ManifestRow]:
        """Every row of these fragments of this version (see :meth:`fragments`)."""
        return list(self._ds.scanner(fragments=list(fragments)).to_table().to_pylist())

    def txn_rows(self) -> list[ManifestRow]:
        """Every transaction row (``__txn$<id>``; see ``lifecycle``)."""
        return self._with_prefix(TXN_PREFIX)

    def intent_rows(self) -> list[ManifestRow]:
        """Every merge intent row (``__merge$<id>``; see ``spec_fence``)."""
        return self._with_prefix(INTENT_PREFIX)

    def index_rows(self) -> list[ManifestRow]:
        """Every index declaration row (``__index$<name>``; see ``ops.indexing``)."""
        return self._with_prefix(INDEX_PREFIX)

    def _with_prefix(self, prefix: str) -> list[ManifestRow]:
        """The rows whose id starts with ``prefix`` (their partition columns are all NULL)."""
        table = self._prefixed.get(prefix)
        if table is None:
            table = self._prefixed[prefix] = self._scan_prefix(prefix)
        return list(table.to_pylist())

    def _scan_prefix(self, prefix: str) -> pa.Table:
        if self._whole is not None:
            return self._whole.filter(pc.starts_with(self._whole.column(OBJECT_ID), prefix))
        nulls = [pc.field(name).is_null() for name in btree_columns(self._ds.schema)]
        if not nulls:
            return self._ds.to_table(filter=f"starts_with({OBJECT_ID}, {_sql_literal(prefix)})")
        table = self._ds.to_table(filter=functools.reduce(operator.and_, nulls))
        return table.filter(pc.starts_with(table.column(OBJECT_ID), prefix))

    def claimed_by(self, claim: str) -> list[ManifestRow]:
        """The rows holding ``claim`` (a transaction incarnation, ``txn#k``)."""
        return self._claimed(claim)

    def claimed_rows(self) -> list[ManifestRow]:
        """Every row some transaction holds a claim on."""
        return self._claimed(None)

    def claimed_ids(self) -> set[str]:
        """The ids of :meth:`claimed_rows`."""
        return {r[OBJECT_ID] for r in self._claimed(None, [OBJECT_ID])}

    def _claimed(self, claim: str | None, columns: list[str] | None = None) -> list[ManifestRow]:
        """The rows holding ``claim`` (None: any claim)."""
        if not self.has_claim_column:
            return []
        if self._whole is None:
            where = _CLAIMED if claim is None else f"{CLAIM} = {_sql_literal(claim)}"
            return list(self._ds.to_table(columns=columns, filter=where).to_pylist())
        held = self._whole.column(CLAIM)
        rows = self._whole.filter(pc.is_valid(held) if claim is None else pc.equal(held, claim))
        return list((rows if columns is None else rows.select(columns)).to_pylist())


def btree_columns(schema: pa.Schema) -> list[str]:
    """The partition columns of a ``__manifest`` schema that have a BTREE."""
    return [f.name for f in schema if f.name not in RESERVED_COLUMNS and prunes_in_scan(f.type)]


def prunes_in_scan(dtype: pa.DataType) -> bool:
    """Whether prunes on a partition column of this type are pushed into the ``__manifest``
    scan (and it is indexed): Lance evaluates them as Arrow does (not floats: NaN)."""
    t = pa.types
    tests = (t.is_integer, t.is_temporal, t.is_string, t.is_large_string, t.is_decimal)
    return t.is_boolean(dtype) or any(test(dtype) for test in tests)


def _sql_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _with_ids(rows: pa.Table, object_ids: Iterable[str]) -> pa.Table:
    """The rows of ``rows`` with these ids, in table order."""
    wanted = pa.array(list(object_ids), pa.utf8())
    return rows.filter(pc.is_in(rows.column(OBJECT_ID), wanted))


def ids_filter(object_ids: Iterable[str]) -> str:
    """A Lance filter selecting the rows with these ids (answered by the bloom filter)."""
    return f"{OBJECT_ID} IN ({', '.join(map(_sql_literal, object_ids))})"


def row(
    object_id: str,
    object_type: str,
    *,
    location: str | None = None,
    metadata: str | None = None,
    read_version: int | None = None,
    claim: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {OBJECT_ID: object_id, OBJECT_TYPE: object_type, LOCATION: location}
    out |= {METADATA: metadata, BASE_OBJECTS: None, READ_VERSION: read_version, CLAIM: claim}
    return out


#: Lance's manifest names of the V2 scheme count down from here (the latest sorts first).
_U64_MAX = (1 << 64) - 1


def _latest_on_disk(directory: str, version: int) -> bool | None:
    """Whether ``version`` is the latest of the manifests in the local ``directory``: no
    manifest of the next version exists (in either of Lance's naming schemes) and Lance's
    ``latest_version_hint.json`` names no later one. Commits are numbered one by one, so the
    next version exists once any later one was committed, unless cleanup removed it while
    keeping ``version`` (tagged); the hint, written after every commit, shows that case
    (both hints of the two commits after ``version`` would have to be lost to miss it).
    None when there is no readable hint: then only a listing tells."""
    following = version + 1
    for name in (f"{_U64_MAX - following:020d}.manifest", f"{following}.manifest"):
        if os.path.exists(os.path.join(directory, name)):
            return False
    try:
        with open(os.path.join(directory, "latest_version_hint.json"), "rb") as hint:
            hinted = int(json.loads(hint.read())["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return hinted <= version
