"""Leaf tables: creating them, staging data files into them, and committing those files.

Writers only produce data files (``lance.fragment.write_fragments``); the commit of each leaf
is a separate step (``Append`` or ``Overwrite``), and publishing the new versions is a third
one, in ``__manifest``. Keeping the steps apart is what lets a transaction span many
partitions and many processes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import lance
import pyarrow as pa
from lance import LanceOperation, Transaction
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata, write_fragments

from .errors import LanceNamespaceError

log = logging.getLogger(__name__)

#: Leaf-commit property naming the transaction that made the version.
TXN_PROPERTY = "partitioned-namespace.txn_id"
#: Rows per data file written to a leaf table.
MAX_ROWS_PER_FILE = 1_048_576


def _opts(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


def stage_fragments(
    uri: str,
    data: pa.Table,
    storage_options: Mapping[str, str] | None,
    *,
    overwrite: bool = False,
) -> list[FragmentMetadata]:
    """Write ``data`` as new data files of the leaf at ``uri``; nothing becomes visible.

    Files staged for an overwrite carry field ids of ``data``'s own schema (the leaf is
    replaced whole), files for an append those of the leaf's current schema.
    """
    return list(
        write_fragments(
            data,
            uri,
            mode="overwrite" if overwrite else "append",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            storage_options=_opts(storage_options),
        )
    )


def leaf_schema(
    uri: str, storage_options: Mapping[str, str] | None, version: int | None = None
) -> pa.Schema:
    """The schema of the leaf table at ``uri`` (at ``version``, default latest)."""
    return lance.dataset(uri, version=version, storage_options=_opts(storage_options)).schema


def leaf_version(uri: str, storage_options: Mapping[str, str] | None) -> int:
    """The latest version of the leaf table at ``uri``."""
    return int(lance.dataset(uri, storage_options=_opts(storage_options)).version)


def committed_by(ds: lance.LanceDataset, version: int) -> str | None:
    """The transaction id recorded on a leaf version (None for foreign commits)."""
    txn = ds.read_transaction(version)
    props = (txn.transaction_properties or {}) if txn is not None else {}
    return props.get(TXN_PROPERTY)


def own_versions(
    uri: str, txn_id: str, upto: int, storage_options: Mapping[str, str] | None
) -> tuple[int, bool] | None:
    """The last leaf version up to ``upto`` committed by ``txn_id`` and whether it created
    the table (its version 1), or None if the transaction committed none."""
    ds = lance.dataset(uri, storage_options=_opts(storage_options))
    for version in range(upto, 0, -1):
        if committed_by(ds, version) == txn_id:
            return version, version == 1
    return None


def commit_leaf(
    uri: str,
    fragments: Sequence[FragmentMetadata],
    *,
    replace: bool,
    schema: pa.Schema,
    published: int | None,
    txn_id: str,
    storage_options: Mapping[str, str] | None,
) -> int:
    """Commit staged fragments as the leaf's next version after ``published``.

    Runs only while ``txn_id`` holds the partition's claim, so no other transaction commits
    to this leaf meanwhile. A latest version committed by ``txn_id`` itself (an earlier
    attempt) is returned as is; versions after ``published`` from anyone else belong to no
    published transaction (orphans of a crashed writer) and are rolled back first, so they
    are never published by accident. The commit records ``txn_id`` in its properties.
    """
    opts = _opts(storage_options)
    try:
        ds: lance.LanceDataset | None = lance.dataset(uri, storage_options=opts)
    except ValueError as exc:
        if "was not found" not in str(exc):
            raise
        ds = None
    if ds is None:
        if published is not None:
            raise LanceNamespaceError(f"partition table {uri} (version {published}) is missing")
        base, replace = 0, True
    else:
        latest = int(ds.version)
        if latest != (published or 0):
            if committed_by(ds, latest) == txn_id:
                return latest
            if published is None:
                log.warning("replacing never-published partition table %s", uri)
                replace = True
            else:
                log.warning(
                    "rolling back %d unpublished version(s) of %s to version %d",
                    latest - published,
                    uri,
                    published,
                )
                lance.dataset(uri, version=published, storage_options=opts).restore()  # type: ignore[no-untyped-call]
                latest = int(lance.dataset(uri, storage_options=opts).version)
        base = latest
    operation: LanceOperation.BaseOperation = (
        LanceOperation.Overwrite(schema, list(fragments))
        if replace
        else LanceOperation.Append(list(fragments))
    )
    committed = lance.LanceDataset.commit(
        uri,
        Transaction(base, operation, transaction_properties={TXN_PROPERTY: txn_id}),
        storage_options=opts,
        max_retries=0,
    )
    return int(committed.version)


def discard_fragments(
    uri: str, fragments: Sequence[FragmentMetadata], storage_options: Mapping[str, str] | None
) -> None:
    """Delete the data files of staged fragments that will never be committed."""
    if not fragments:
        return
    session = LanceFileSession(uri, storage_options=_opts(storage_options))
    for fragment in fragments:
        for data_file in fragment.to_json().get("files", []):
            try:
                session.delete_file(f"data/{data_file['path']}")
            except (OSError, ValueError) as exc:
                log.warning(
                    "could not delete staged file %s of %s: %s", data_file["path"], uri, exc
                )
