"""Reading what a transaction staged, before anything of it is published.

Write-audit-publish needs the rows of a staged transaction while no reader can see them:
its stages record, per partition, the Lance data files written into the partition's
directory (:class:`~.staging.StagedPartition`). Those files are read here directly, one
data file at a time with Lance's file reader: no leaf version is committed, nothing is
written, and the published ``read_version`` of every partition stays what it was.

The rows returned are the ones the transaction *writes*: for an append the new rows, for
an overwrite the partitions' new content. The copy of published rows an append makes when
a partition predates a column (``base_fragments``) is not part of it and is skipped. Each
file names its columns by namespace field id (the ``partitioned-namespace:field_id``
metadata), so a column renamed since staging is still read under its current name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace.errors import DataValidationError, InvalidArgumentError
from airflow_provider_lance.namespace.format.expressions import BoundExpression
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, ReadPlan
from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.read.pruning import parse_filter
from airflow_provider_lance.namespace.read.scan import filter_columns, output_batches

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
    """The rows ``stages`` staged, in the namespace schema of ``state``, as a stream.

    ``columns`` projects, ``filter`` (a SQL boolean expression over namespace columns, as
    for reads) keeps matching rows. Bad names and filters raise here, before a file is
    opened; files are read one batch at a time (nothing is collected).
    """
    schema = state.schema
    output = schema.project(columns)  # validates the names
    residual = parse_filter(filter, schema)[0] if filter is not None else None
    needed = list(output.names)
    if residual is not None:
        needed += [c for c in filter_columns(residual) if c not in needed]
    size = DEFAULT_BATCH_SIZE if batch_size is None else batch_size
    if size < 1:
        raise InvalidArgumentError(f"batch_size must be positive, got {batch_size}")
    batches = _batches(storage, schema, list(stages), output, needed, residual, size)
    return pa.RecordBatchReader.from_batches(output, batches)


def _batches(
    storage: Storage,
    schema: NamespaceSchema,
    stages: list[Stage],
    output: pa.Schema,
    needed: list[str],
    residual: BoundExpression | None,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    for stage in stages:
        for part in stage.partitions.values():
            for fragment in staged_fragments(part):
                for table in _fragment_tables(storage, schema, part, fragment, needed, batch_size):
                    yield from output_batches(table, residual, output)


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
    """One fragment's rows in the namespace schema (``needed`` columns), batch by batch.

    A fragment's data files hold different columns of the same rows (Lance adds a file
    when columns are added): they are read in step and joined side by side.
    """
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
    # The files' columns side by side (each column from the first file holding it), with
    # their field metadata: the namespace field ids map them to the current names.
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
        yield from _null_tables(plan, int(metadata[0].num_rows), batch_size)
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


def _null_tables(plan: ReadPlan, rows: int, batch_size: int) -> Iterator[pa.Table]:
    """Tables of ``rows`` rows in which every wanted column is NULL (the file lacks them)."""
    while rows > 0:
        n = min(batch_size, rows)
        yield plan.apply(pa.Table.from_batches([pa.record_batch([pa.nulls(n)], names=["_"])]))
        rows -= n


def _reader(storage: Storage, uri: str, columns: list[str] | None = None) -> Any:
    from lance.file import LanceFileReader

    return LanceFileReader(uri, storage_options=storage.options, columns=columns)
