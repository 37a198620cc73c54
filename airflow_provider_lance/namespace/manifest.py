"""The ``__manifest`` Lance table: its columns, table metadata, and atomic row commits.

Base columns are exactly those pylance's ``DirectoryNamespace`` writes (so it reads what we
write); extensions are ``read_version`` and one nullable column per partition field. Rows are
only ever changed through ``merge_insert`` keyed on ``object_id`` (which carries Lance's
primary-key field metadata, without which concurrent inserts duplicate rows; the facts
about ``merge_insert`` this module rests on are pinned by tests/test_pylance_facts.py):

* :meth:`Manifest.insert_absent`: insert-if-absent, exactly one winner per ``object_id``;
* :meth:`Manifest.compare_and_swap`: update/insert rows against the version they were read
  at, failing with :class:`CommitConflict` if any of them changed since.

Table metadata (``schema``, ``partition_spec_v<N>``) is its own commit (Lance cannot change
rows and metadata together), always written before any row depends on it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation, Transaction
from lance.dataset import Session  # type: ignore[attr-defined]

from .errors import (
    CommitConflict,
    ManifestError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    StorageError,
    TableNotFoundError,
)
from .failpoints import failpoint
from .retry import Budget, Outcome, retry_until
from .storage import Storage, first_line
from .uri import local_path

log = logging.getLogger(__name__)

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
#: ``object_id`` prefix of transaction rows (``__txn$<txn_id>``, object_type ``namespace``):
#: each holds the state of one transaction, the arbiter of its fate (see ``lifecycle``).
#: Foreign DirectoryNamespace writers keep such rows (and their ``metadata``) when they
#: rewrite ``__manifest``; listings of the spec-version namespaces never show them.
TXN_PREFIX = "__txn$"
#: Column names a partition field may not take (``__``-prefixed names are reserved too).
RESERVED_COLUMNS = frozenset(f.name for f in (*BASE_FIELDS, READ_VERSION_FIELD, CLAIM_FIELD))


def partition_ids(ids: Sequence[object]) -> list[str]:
    """The ids among ``ids`` that name namespace objects (not the reserved ``__`` rows of
    transactions, merges and fences): what a conflict error lists."""
    return [i for i in ids if isinstance(i, str) and not i.startswith("__")]


def manifest_schema(partition_columns: list[pa.Field]) -> pa.Schema:
    return pa.schema([*BASE_FIELDS, READ_VERSION_FIELD, CLAIM_FIELD, *partition_columns])


class Manifest:
    """Access to one namespace's ``__manifest`` table, through the namespace's storage."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage
        self.root = storage.root
        self.uri = storage.uri(MANIFEST_NAME)
        #: One Lance session for every version opened: fragment and file metadata read once
        #: (a commit opens several versions; most of their fragments are the same files).
        self._session = Session()
        #: The table as this handle's last compare-and-swap left it (None before one):
        #: what the compaction check after a publish looks at, without opening it again.
        self.last_swapped: lance.LanceDataset | None = None

    # -- opening ---------------------------------------------------------------------------
    def open(self, version: int | None = None) -> lance.LanceDataset:
        try:
            return self.storage.table(self.uri, version, session=self._session)
        except TableNotFoundError as exc:
            if version is not None and self._exists():
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

    def _exists(self) -> bool:
        try:
            self.open()
        except NamespaceNotFoundError:
            return False
        return True

    def create(self, metadata: Mapping[str, str], first_rows: pa.Table) -> lance.LanceDataset:
        """Create the table with ``first_rows``, its metadata and scalar indices.

        Crash-safe and idempotent: creating takes three Lance commits (table, metadata,
        index), so a ``__manifest`` with our first rows but no metadata is an interrupted
        create and is finished, and one that already holds exactly ``metadata`` is returned
        as it is. Anything else at the root raises :class:`NamespaceExistsError`.
        """

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
                self._ensure_index(ds)
                return self.open()
            if any(v is not None for v in present.values()) or not self._is_fresh(ds):
                raise NamespaceExistsError(
                    f"{self.root} already holds a namespace with a different schema or "
                    "partition spec; open it instead of creating, or pick another location"
                )
            if not ds.schema.equals(first_rows.schema):
                # A create of another partition spec began here (its manifest columns
                # differ) and has not set its metadata yet: still running, or killed.
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
            return Outcome.AGAIN  # set: index it and return it

        racing = Budget(
            lambda: NamespaceExistsError(
                f"{self.root}: concurrent creators kept changing __manifest"
            ),
            attempts=CREATE_ATTEMPTS,
        )
        return retry_until(attempt, {Outcome.AGAIN: racing})

    def _check_empty_root(self) -> None:
        """A local root must be empty or missing; a ``__manifest`` without a table (the
        data files of a concurrent or killed create, before its commit) does not count."""
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

    @staticmethod
    def _ensure_index(ds: lance.LanceDataset) -> None:
        # No BTREE on object_id: that index makes merge_insert miss concurrent inserts
        # of the same key (duplicate partitions; pinned by tests/test_pylance_facts.py::
        # test_fact_btree_on_merge_key_makes_merge_insert_miss_concurrent_inserts).
        if any(i.field_names == [OBJECT_TYPE] for i in ds.describe_indices()):
            return
        try:
            ds.create_scalar_index(OBJECT_TYPE, "BITMAP")
        except (ValueError, OSError) as exc:  # a concurrent creator indexed it first
            log.info("did not index %s: %s", OBJECT_TYPE, first_line(exc))

    # -- metadata and columns -------------------------------------------------------------
    def add_columns(self, fields: list[pa.Field]) -> None:
        """Add nullable partition columns (schema only: existing rows read NULL)."""
        if not fields:
            return
        ds = self.open()
        missing = [f for f in fields if f.name not in ds.schema.names]
        if missing:
            with self.storage.failures(
                "add columns to",
                self.uri,
                conflict="a concurrent commit to __manifest won the race to add "
                f"{[f.name for f in missing]}",
            ):
                ds.add_columns(pa.schema([f.with_nullable(True) for f in missing]))

    # -- rows ---------------------------------------------------------------------------
    def conform(self, rows: pa.Table, ds: lance.LanceDataset) -> pa.Table:
        """Reorder/fill ``rows`` into the table's current schema (missing columns NULL)."""
        schema = ds.schema
        arrays = []
        for f in schema:
            if f.name in rows.column_names:
                arrays.append(rows.column(f.name).cast(f.type))
            else:
                arrays.append(pa.nulls(rows.num_rows, f.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    def insert_absent(self, rows: pa.Table) -> int:
        """Insert the rows whose ``object_id`` is absent; present ones are left untouched.

        Returns the number of rows inserted. Under concurrency exactly one writer inserts
        each ``object_id`` (the others see it as present: pinned by
        tests/test_pylance_facts.py::
        test_fact_insert_if_absent_with_primary_key_metadata_has_one_winner).
        """
        if rows.num_rows == 0:
            return 0
        ds = self.open()
        result = (
            ds.merge_insert(OBJECT_ID).when_not_matched_insert_all().execute(self.conform(rows, ds))
        )
        return int(result["num_inserted_rows"])

    def compare_and_swap(self, rows: pa.Table, base_version: int, *, delete: bool = False) -> int:
        """Upsert ``rows`` atomically, failing if any of them changed after ``base_version``.

        ``base_version`` is the manifest version the caller read the rows at. Changes to
        *other* rows since then are rebased by Lance; a concurrent insert of the same
        ``object_id`` also conflicts. With ``delete`` the rows are removed instead, under
        the same condition. Returns the new version. (Pinned by the
        ``test_fact_merge_insert_conflict_retries_0_*`` tests of
        tests/test_pylance_facts.py.)
        """
        if rows.num_rows == 0:
            return base_version
        # A fresh handle: a commit advances the dataset object it runs on in place.
        try:
            base = self.open(base_version)
        except ManifestError as exc:  # cleaned up meanwhile: the rows may have changed since
            raise CommitConflict(
                f"__manifest version {base_version}, which this commit read, was cleaned up "
                "meanwhile (maintain); read the namespace again",
                partition_ids(rows.column(OBJECT_ID).to_pylist()),
            ) from exc
        builder = base.merge_insert(OBJECT_ID)
        builder = (
            builder.when_matched_delete()
            if delete
            else builder.when_matched_update_all().when_not_matched_insert_all()
        )
        ids = rows.column(OBJECT_ID).to_pylist()
        with self.storage.failures(
            "commit to",
            self.uri,
            conflict="a concurrent writer changed the __manifest rows this commit depends on",
            partitions=partition_ids(ids),
        ):
            failpoint("manifest.before_swap")
            builder.conflict_retries(0).execute(self.conform(rows, base))
            failpoint("manifest.after_swap")  # committed: "=error" makes its outcome unknown
        self.last_swapped = base  # the commit advanced it to the version it made
        return int(base.version)

    def compare_and_swap_dropping(
        self, rows: pa.Table, drop: Sequence[str], base_version: int
    ) -> int:
        """Upsert ``rows`` and delete the rows with ids ``drop``, in ONE commit, failing
        with :class:`CommitConflict` if any of them changed (or was inserted) after
        ``base_version``. Returns the new version.

        One ``merge_insert``: matched rows updated, unmatched inserted, and target rows not
        in ``rows`` whose id is in ``drop`` deleted (``when_not_matched_by_source_delete``).
        With ``conflict_retries(0)``, a concurrent update or delete of a dropped row or of
        an upserted one makes it fail; a change to any other row is rebased, as for
        :meth:`compare_and_swap`; an empty ``rows`` deletes only (pinned by
        tests/test_pylance_facts.py::test_fact_merge_insert_by_source_delete_*).
        """
        if not drop:
            return self.compare_and_swap(rows, base_version)
        try:
            base = self.open(base_version)
        except ManifestError as exc:
            raise CommitConflict(
                f"__manifest version {base_version}, which this commit read, was cleaned up "
                "meanwhile (maintain); read the namespace again",
                list(drop),
            ) from exc
        builder = (
            base.merge_insert(OBJECT_ID)
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .when_not_matched_by_source_delete(ids_filter(drop))
        )
        ids = [i for i in rows.column(OBJECT_ID).to_pylist() if isinstance(i, str)]
        with self.storage.failures(
            "commit to",
            self.uri,
            conflict="a concurrent writer changed the __manifest rows this commit depends on",
            partitions=partition_ids([*ids, *drop]),
        ):
            failpoint("manifest.before_swap")
            builder.conflict_retries(0).execute(self.conform(rows, base))
            failpoint("manifest.after_swap")
        self.last_swapped = base
        return int(base.version)

    def commit_metadata(self, values: Mapping[str, str], base_version: int) -> int:
        """Set table metadata keys, failing if a concurrent commit set any of them since
        ``base_version`` (Lance reports same-key ``UpdateConfig`` races as conflicts: pinned
        by tests/test_pylance_facts.py::
        test_fact_update_config_races_conflict_on_the_same_key_only)."""
        operation = LanceOperation.UpdateConfig(
            table_metadata_updates=LanceOperation.UpdateMap(dict(values))
        )
        committed = self.storage.commit(
            self.uri,
            Transaction(base_version, operation),
            conflict=f"a concurrent change to the namespace metadata ({', '.join(values)}) "
            "won the race",
        )
        return int(committed.version)

    def delete_rows(self, object_ids: list[str]) -> None:
        """Delete rows by id (rows of partitions that were never published, intents of
        merges); unconditional, Lance retries what conflicts."""
        if object_ids:
            with self.storage.failures(
                "delete rows of",
                self.uri,
                conflict="a concurrent commit to __manifest changed the rows being deleted",
            ):
                self.open().delete(ids_filter(object_ids))

    def ensure_claim_column(self) -> None:
        """Namespaces created before transactions lack the claim column: add it."""
        if CLAIM not in self.open().schema.names:
            self.add_columns([CLAIM_FIELD])


def sql_literal(text: str) -> str:
    """``text`` as a SQL string literal for a Lance filter."""
    return "'" + text.replace("'", "''") + "'"


def ids_filter(object_ids: Iterable[str]) -> str:
    """A Lance filter selecting the rows with these ids (``object_id`` has no index: see
    :meth:`Manifest._ensure_index`)."""
    return f"{OBJECT_ID} IN ({', '.join(map(sql_literal, object_ids))})"


def row(
    object_id: str,
    object_type: str,
    *,
    location: str | None = None,
    metadata: str | None = None,
    read_version: int | None = None,
    partition_values: Mapping[str, Any] | None = None,
    claim: str | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        OBJECT_ID: object_id,
        OBJECT_TYPE: object_type,
        LOCATION: location,
        METADATA: metadata,
        BASE_OBJECTS: None,
        READ_VERSION: read_version,
        CLAIM: claim,
    }
    out.update(partition_values or {})
    return out
