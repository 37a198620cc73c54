"""Reading what a transaction staged, before anything of it is published: the rows it
*writes* (never the copy of published rows a rewrite starts from), under the current column
names, read from the staged data files directly; nothing is committed or written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import DataValidationError, InvalidArgumentError
from airflow_provider_lance.namespace.format.schema import NamespaceSchema
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.pruning import parse_filter
from airflow_provider_lance.namespace.read.scan import null_batches, output_batches, read_columns

from .staging import Stage, StagedPartition

#: Rows per batch when the caller gives no batch size (Lance's file reader reads this many).
DEFAULT_BATCH_SIZE = 65_536


def staged_reader(
    storage: Storage,
    state: NamespaceState,
    stages: Iterable[Stage],
    *,
    columns: Sequence[str] | None = None,
    filter: str | None = None,
    batch_size: int | None = None,
) -> pa.RecordBatchReader:
    """The rows ``stages`` staged, in the namespace schema of ``state``, as a stream;
    ``columns`` projects, ``filter`` (SQL, as for reads) keeps matching rows. Bad names and
    filters raise here, before a file is opened."""
    schema = state.schema
    output = schema.project(columns)  # validates the names
    residual = parse_filter(filter, schema)[0] if filter is not None else None
    needed = read_columns(output, residual)
    size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    if size < 1:
        raise InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
    batches = (
        batch
        for stage in list(stages)
        for part in stage.partitions.values()
        for fragment in staged_fragments(part)
        for table in _fragment_tables(storage, schema, part, fragment, needed, size)
        for batch in output_batches(table, residual, output)
    )
    return pa.RecordBatchReader.from_batches(output, batches)


def staged_fragments(part: StagedPartition) -> list[dict[str, Any]]:
    """The fragments (as JSON objects) holding the rows a staged partition writes: its
    fragments without the copy of published rows a rewrite starts from."""
    base = set(part.base_fragments)
    return [json.loads(text) for text in part.fragments if text not in base]


def _fragment_tables(
    storage: Storage,
    schema: NamespaceSchema,
    part: StagedPartition,
    fragment: dict[str, Any],
    needed: list[str],
    batch_size: int,
) -> Iterator[pa.Table]:
    """One fragment's rows in the namespace schema (``needed`` columns), batch by batch;
    its data files (different columns of the same rows) are read in step."""
    if fragment.get("deletion_file"):
        raise InvalidArgumentError(
            f"staged fragment {fragment.get('id')} of partition {part.object_id} has deleted "
            "rows; staged data files never do (a record not written by this library?)"
        )
    files = fragment.get("files")
    if not isinstance(files, list) or not files:
        raise InvalidArgumentError(
            f"staged fragment {fragment.get('id')} of partition {part.object_id} has no files"
        )
    table_uri = storage.uri(part.directory)
    uris = [f"{table_uri}/data/{data_file['path']}" for data_file in files]
    metadata = []
    for uri in uris:
        with storage.failures("read the staged data file", uri):
            metadata.append(_reader(storage, uri).metadata())
    # Each column from the first file holding it, with its field id metadata.
    fields: dict[str, pa.Field] = {}
    owner: dict[str, int] = {}
    for i, meta in enumerate(metadata):
        for f in meta.schema:
            if f.name not in fields:
                fields[f.name], owner[f.name] = f, i
    leaf = pa.schema(list(fields.values()))
    plan = schema.read_plan(leaf, needed)
    wanted = [[c for c in plan.leaf_columns if owner[c] == i] for i in range(len(uris))]
    readers = []
    for uri, columns in zip(uris, wanted, strict=True):
        if columns:
            with storage.failures("read the staged data file", uri):
                results = _reader(storage, uri, columns).read_all(batch_size=batch_size)
            readers.append(iter(results.to_batches()))
    if not readers:  # none of the wanted columns is stored: only the row count matters
        for batch in null_batches(int(metadata[0].num_rows), batch_size):
            yield plan.apply(batch)
        return
    while True:
        with storage.failures("read the staged data files of", table_uri):
            read = [next(batches, None) for batches in readers]
        if all(b is None for b in read):
            return
        chunks = [b for b in read if b is not None]
        if len(chunks) != len(read) or len({b.num_rows for b in chunks}) != 1:
            raise DataValidationError(
                f"the data files of staged fragment {fragment.get('id')} of partition "
                f"{part.object_id} do not hold the same rows"
            )
        names = [c for columns in wanted for c in columns]
        stored = [columns for columns in wanted if columns]  # the files read, in order
        arrays = [b.column(c) for columns, b in zip(stored, chunks, strict=True) for c in columns]
        joined = pa.Table.from_arrays(arrays, schema=pa.schema([fields[c] for c in names]))
        try:
            yield plan.apply(joined)
        except DataValidationError as exc:
            raise DataValidationError(f"staged partition {part.object_id}: {exc}") from exc


def _reader(storage: Storage, uri: str, columns: list[str] | None = None) -> Any:
    from lance.file import LanceFileReader

    return LanceFileReader(uri, storage_options=storage.options, columns=columns)
