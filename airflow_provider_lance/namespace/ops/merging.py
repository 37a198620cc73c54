"""``merge(data, on=[...])``: upsert rows by key across partitions, in one swap.

Source rows are routed by the current spec; the key names every source column of its
partition fields, so a row and the stored row with its key share a partition, where an
uncommitted ``merge_insert`` on the published version updates matches and inserts the rest
(new partition values: new partitions). Source rows whose key a partition of an older spec
holds update it where they live. With ``when_not_matched_by_source_delete`` the namespace
ends holding exactly the source's keys. A leaf lacking a namespace column is merged here and
rewritten whole.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation

from airflow_provider_lance.namespace.errors import DataValidationError, InvalidArgumentError
from airflow_provider_lance.namespace.format.schema import NamespaceSchema, field_id
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.types import ArrowData
from airflow_provider_lance.namespace.write.inputs import as_tables
from airflow_provider_lance.namespace.write.leaf_commit import content_after
from airflow_provider_lance.namespace.write.splitting import split

from .runner import ComputedChange, NewLeaf, Selection, TableOperation, leaf_rows, outcome

log = logging.getLogger(__name__)

_INDEX = "__source_row"


def materialize(data: ArrowData) -> pa.Table:
    """Arrow-exportable data (see :func:`~.inputs.as_tables`) as one table."""
    tables = list(as_tables(data))
    if not tables:
        raise DataValidationError("merge() got no data")
    try:
        return pa.concat_tables(tables, promote_options="none")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataValidationError(f"merge() got chunks of different schemas: {exc}") from exc


@dataclass(frozen=True)
class _Source:
    """The source rows one partition merges, and how."""

    rows: pa.Table
    #: Only update (a partition of an older spec version).
    update_only: bool
    digest: str


class MergeRows(TableOperation):
    """Update rows whose key matches, insert the others (see the module docstring)."""

    kind = "merge"
    reads_keys = True

    def __init__(
        self,
        storage: Storage,
        data: ArrowData,
        on: Sequence[str],
        *,
        delete_unmatched: bool = False,
    ) -> None:
        super().__init__(storage)
        if isinstance(on, str):
            on = [on]
        if not on or not all(isinstance(k, str) and k for k in on):
            raise InvalidArgumentError("merge() needs the key columns: on=['col', ...]")
        if len(set(on)) != len(on):
            raise InvalidArgumentError(f"merge() key columns repeat: {list(on)}")
        self.on = list(on)
        self.data = materialize(data)
        self.delete_unmatched = bool(delete_unmatched)
        self._sources: dict[str, _Source] = {}
        self._conformed: tuple[NamespaceSchema, pa.Table] | None = None

    # -- input --------------------------------------------------------------------------------
    def _source(self, state: NamespaceState) -> pa.Table:
        """The data conformed to the namespace schema (once per schema), keys checked."""
        if self._conformed is None or self._conformed[0] != state.schema:
            for key in self.on:
                state.schema.field(key)  # unknown or dropped: a clear SchemaError
            table = state.schema.conform_input(self.data, spec=state.current_spec)
            self._check_keys(state, table)
            indexed = table.append_column(_INDEX, pa.array(range(table.num_rows), pa.int64()))
            self._conformed = (state.schema, indexed)
        return self._conformed[1]

    def _check_keys(self, state: NamespaceState, table: pa.Table) -> None:
        sources = _source_names(state, state.spec_version)
        missing = [name for name in sources if name not in self.on]
        if missing:
            raise InvalidArgumentError(
                f"the merge key {self.on} must include every partition source column of the "
                f"current partition spec, so that a row and the row it updates live in the "
                f"same partition; missing: {missing}"
            )
        if table.num_rows:
            counts = table.group_by(self.on).aggregate([([], "count_all")])
            dupes = counts.filter(pc.greater(counts.column("count_all"), 1))
            if dupes.num_rows:
                example = dupes.select(self.on).slice(0, 1).to_pylist()[0]
                raise DataValidationError(
                    f"merge data has {dupes.num_rows} key(s) on more than one row (e.g. "
                    f"{example}); a key must appear once"
                )

    def validate(self, state: NamespaceState) -> None:
        self._source(state)

    def inputs(self, object_id: str) -> str:
        source = self._sources.get(object_id)
        return "" if source is None else source.digest

    # -- selection --------------------------------------------------------------------------
    def select(self, state: NamespaceState) -> Selection:
        source = self._source(state)
        self._sources = {}
        selection = Selection(spec_version=state.spec_version)
        matched_before = self._select_older(state, source, selection)
        rest = source
        if matched_before:
            keep = pc.invert(pc.is_in(source.column(_INDEX), pa.array(sorted(matched_before))))
            rest = source.filter(keep)
        fields = state.current_spec
        chunks = list(split(rest, fields, state.schema))
        ids = [state.leaf_id(chunk.values) for chunk in chunks]
        existing = state.find(ids)
        for chunk, oid in zip(chunks, ids, strict=True):
            if oid in existing:
                selection.targets[oid] = existing[oid]
            else:
                selection.creates[oid] = chunk.values
            self._sources[oid] = _make_source(chunk.data, update_only=False)
        if self.delete_unmatched:
            for p in state.partitions():
                if p.object_id not in selection.targets:
                    selection.drops[p.object_id] = p
        return selection

    def _select_older(
        self, state: NamespaceState, source: pa.Table, selection: Selection
    ) -> set[int]:
        """Partitions of older spec versions holding source keys become update-only
        targets of those rows; returns the source row numbers they take."""
        matched: set[int] = set()
        older = [v for v in state.specs if v != state.spec_version]
        if not older or source.num_rows == 0:
            return matched
        candidates: dict[str, tuple[Partition, pa.Table]] = {}
        partitions = state.partitions()
        for version in older:
            in_version = [p for p in partitions if p.spec_version == version]
            if not in_version:
                continue
            if all(name in self.on for name in _source_names(state, version)):
                by_id = {p.object_id: p for p in in_version}
                for chunk in split(source, state.specs[version], state.schema):
                    oid = state.leaf_id(chunk.values, version)
                    if oid in by_id:
                        candidates[oid] = (by_id[oid], chunk.data)
            else:  # any of them may hold any key
                candidates.update((p.object_id, (p, source)) for p in in_version)
        items = list(candidates.items())
        found = self.storage.map(lambda c: self._matched_rows(state, *c), [c for _, c in items])
        for (oid, (partition, _)), rows in zip(items, found, strict=True):
            if rows.num_rows:
                _check_stays(state, partition, rows)
                selection.targets[oid] = partition
                self._sources[oid] = _make_source(rows, update_only=True)
                matched.update(rows.column(_INDEX).to_pylist())
        return matched

    def _matched_rows(
        self, state: NamespaceState, partition: Partition, rows: pa.Table
    ) -> pa.Table:
        """The rows of ``rows`` whose key ``partition`` holds (at its published version)."""
        leaf = self.storage.table(partition.location, partition.read_version)
        plan = state.schema.read_plan(leaf.schema, self.on)
        if any(plan.sources[k] is None for k in self.on):
            return rows.slice(0, 0)  # the leaf lacks a key column: every key is NULL there
        stored = plan.apply(leaf.to_table(columns=plan.leaf_columns))
        return rows.filter(_key_mask(rows, stored, self.on))

    # -- changes ------------------------------------------------------------------------------
    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        source = self._sources[partition.object_id]
        rows = source.rows.drop_columns([_INDEX])
        leaf = self.storage.table(partition.location, base)
        fragments = len(leaf.get_fragments())
        if state.schema.missing_in_leaf(leaf.schema):
            operation, stats = self._rewrite(state, partition, leaf, rows, source.update_only)
        else:
            operation, stats = self._merge_insert(state, leaf, rows, source.update_only)
        change = outcome(
            partition,
            rows_removed=stats["num_deleted_rows"],
            rows_updated=stats["num_updated_rows"],
            rows_inserted=stats["num_inserted_rows"],
            fragments_before=fragments,
        )
        changed = operation if any(stats.values()) else None
        if changed is not None:
            change = replace(change, fragments_after=len(content_after(leaf, base, changed)))
        kept = leaf if changed is not None else None  # kept for the commit only
        return ComputedChange(partition, base, changed, change, inputs=source.digest, leaf=kept)

    def _merge_insert(
        self, state: NamespaceState, leaf: lance.LanceDataset, rows: pa.Table, update_only: bool
    ) -> tuple[LanceOperation.BaseOperation, dict[str, int]]:
        """Lance's merge_insert on the leaf, uncommitted."""
        plan = state.schema.read_plan(leaf.schema, self.on)
        keys = [str(plan.sources[k]) for k in self.on]  # present: no column is missing
        builder = leaf.merge_insert(keys).when_matched_update_all()
        if not update_only:
            builder = builder.when_not_matched_insert_all()
        if self.delete_unmatched:
            builder = builder.when_not_matched_by_source_delete()
        with self.storage.failures("merge into", leaf.uri):
            transaction, stats = builder.execute_uncommitted(
                state.schema.to_leaf(rows, leaf.schema)
            )
        return transaction.operation, {k: int(v) for k, v in stats.items()}

    def _rewrite(
        self,
        state: NamespaceState,
        partition: Partition,
        leaf: lance.LanceDataset,
        rows: pa.Table,
        update_only: bool,
    ) -> tuple[LanceOperation.BaseOperation, dict[str, int]]:
        """A leaf that lacks namespace columns, merged here and rewritten whole."""
        stored = leaf_rows(state, leaf)
        in_source = _key_mask(stored, rows, self.on)
        in_stored = _key_mask(rows, stored, self.on)
        updated = int(pc.sum(in_source).as_py() or 0)
        kept = stored.filter(pc.invert(in_source))
        removed = 0
        if self.delete_unmatched:
            removed, kept = kept.num_rows, kept.slice(0, 0)
        incoming = rows if not update_only else rows.filter(in_stored)
        inserted = incoming.num_rows - int(pc.sum(in_stored).as_py() or 0)
        merged = pa.concat_tables([kept, incoming.select(kept.column_names)])
        schema, fragments = self.stage_rows(state, partition.location, merged)
        stats = {
            "num_updated_rows": updated,
            "num_inserted_rows": inserted,
            "num_deleted_rows": removed,
        }
        return LanceOperation.Overwrite(schema, fragments), stats

    def create(self, state: NamespaceState, object_id: str, values: tuple[Any, ...]) -> NewLeaf:
        source = self._sources[object_id]
        rows = source.rows.drop_columns([_INDEX])
        return self.stage_new_leaf(state, object_id, values, rows, source.digest)


def _source_names(state: NamespaceState, version: int) -> list[str]:
    """The namespace columns spec ``version``'s partition fields read (deduplicated)."""
    by_id = {field_id(f): f.name for f in state.schema.arrow}
    names = [by_id.get(f.source_id, f"<field id {f.source_id}>") for f in state.specs[version]]
    return list(dict.fromkeys(names))


def _make_source(rows: pa.Table, *, update_only: bool) -> _Source:
    """Source rows and a digest of which rows and how (see ``TableOperation.inputs``)."""
    ordinals = rows.column(_INDEX).to_numpy()
    digest = hashlib.blake2b(ordinals.tobytes(), digest_size=12)
    digest.update(b"u" if update_only else b"i")
    return _Source(rows, update_only, digest.hexdigest())


def _key_mask(table: pa.Table, other: pa.Table, on: list[str]) -> pa.ChunkedArray:
    """For each row of ``table``: whether ``other`` holds its key."""
    numbered = table.select(on).append_column("__n", pa.array(range(table.num_rows), pa.int64()))
    keys = other.select(on).group_by(on).aggregate([])
    joined = numbered.join(keys, keys=on, join_type="inner")
    return pc.is_in(numbered.column("__n"), joined.column("__n"))


def _check_stays(state: NamespaceState, partition: Partition, rows: pa.Table) -> None:
    """Refuse (before anything is written) to update rows of an older spec's partition
    into partition values other than its own."""
    expected = tuple(partition.values.values())
    moved = [
        chunk.values
        for chunk in split(rows, state.specs[partition.spec_version], state.schema)
        if chunk.values != expected
    ]
    if moved:
        raise InvalidArgumentError(
            f"merge() would move rows out of partition {dict(partition.values)} of the "
            f"older partition spec v{partition.spec_version} (their partition columns "
            f"change, to {moved[:3]}): rows are updated where they are. Delete those keys "
            "and write the rows again, or rewrite the partition with an overwrite"
        )
