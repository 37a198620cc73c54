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
from lance import LanceOperation
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata, write_fragments

from .errors import LanceNamespaceError
from .schema import NamespaceSchema

log = logging.getLogger(__name__)

#: Rows per data file written to a leaf table.
MAX_ROWS_PER_FILE = 1_048_576


def _opts(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


def create_leaf(uri: str, schema: pa.Schema, storage_options: Mapping[str, str] | None) -> int:
    """Create an empty leaf table (version 1) with the namespace's leaf schema."""
    empty = pa.Table.from_batches([], schema=schema)
    ds = lance.write_dataset(empty, uri, mode="create", storage_options=_opts(storage_options))
    return int(ds.version)


def drop_leaf(uri: str, storage_options: Mapping[str, str] | None) -> None:
    """Delete a leaf table that never became visible (best effort; logs what it leaves)."""
    try:
        lance.LanceDataset.drop(uri, storage_options=_opts(storage_options), ignore_not_found=True)
    except (ValueError, OSError) as exc:
        log.warning("could not remove unpublished partition table %s: %s", uri, exc)


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


def leaf_schema_for_append(
    uri: str, schema: NamespaceSchema, storage_options: Mapping[str, str] | None
) -> pa.Schema:
    """The leaf's schema, after adding (as all-NULL) namespace columns it does not have.

    Partitions created before ``add_column`` lack the new column. Adding it to the leaf is a
    metadata-only Lance commit that changes no row, so appends carrying the column can go on.
    """
    ds = lance.dataset(uri, storage_options=_opts(storage_options))
    missing = schema.missing_in_leaf(ds.schema)
    if missing:
        if any(not f.nullable for f in missing):
            raise LanceNamespaceError(
                f"partition table {uri} lacks non-nullable column(s) "
                f"{[f.name for f in missing if not f.nullable]}"
            )
        log.info("adding columns %s to partition table %s", [f.name for f in missing], uri)
        ds.add_columns(pa.schema(missing))
        ds = lance.dataset(uri, storage_options=_opts(storage_options))
    return ds.schema


def commit_leaf(
    uri: str,
    fragments: Sequence[FragmentMetadata],
    *,
    overwrite: bool,
    schema: pa.Schema,
    storage_options: Mapping[str, str] | None,
) -> int:
    """Commit staged fragments to the leaf (Append, or Overwrite replacing all its data)."""
    ds = lance.dataset(uri, storage_options=_opts(storage_options))
    operation: LanceOperation.BaseOperation
    if overwrite:
        operation = LanceOperation.Overwrite(schema, list(fragments))
    else:
        operation = LanceOperation.Append(list(fragments))
    committed = lance.LanceDataset.commit(
        uri, operation, read_version=ds.version, storage_options=_opts(storage_options)
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
