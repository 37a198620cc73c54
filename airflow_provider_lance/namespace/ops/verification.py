"""``verify()``: are the rows of every partition where their values say?

A row belongs in the partition its spec's expressions give for its source columns (see
docs/design.md, "Pruning", for how rows came to be elsewhere). :func:`verify_partitions`
reads the source columns of every published partition (at its ``read_version``),
evaluates the partition's spec on them and counts the rows whose values differ; it
changes nothing. :class:`RelocateRows`, a table operation (one ``__manifest`` swap),
rewrites every partition holding misplaced rows without them and routes those by the
current spec into the partitions their values give (appended, or created).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from lance import LanceOperation

from airflow_provider_lance.namespace.errors import SchemaError
from airflow_provider_lance.namespace.format.schema import is_deprecated
from airflow_provider_lance.namespace.format.spec import PartitionField
from airflow_provider_lance.namespace.format.state import NamespaceState, Partition
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.results import value_text
from airflow_provider_lance.namespace.write.splitting import partition_values, split

from .runner import ComputedChange, NewLeaf, Selection, TableOperation, leaf_rows, outcome

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MisplacedRows:
    """Rows of one partition whose source columns give other partition values."""

    object_id: str
    values: dict[str, Any]
    read_version: int | None
    rows: int
    misplaced: int
    #: The partition values of one misplaced row (where it belongs).
    example: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("values", "example"):
            out[key] = {k: value_text(v) for k, v in out[key].items()}
        return out


@dataclass
class VerifyReport:
    """What :func:`verify_partitions` found at one ``__manifest`` version."""

    manifest_version: int
    partitions_checked: int = 0
    rows_checked: int = 0
    misplaced: list[MisplacedRows] = field(default_factory=list)
    #: Partition fields not checked (their source column was dropped): spec version -> names.
    unchecked_fields: dict[int, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.misplaced

    @property
    def misplaced_rows(self) -> int:
        return sum(m.misplaced for m in self.misplaced)

    def to_dict(self) -> dict[str, Any]:
        return {
            "manifest_version": self.manifest_version,
            "ok": self.ok,
            "partitions_checked": self.partitions_checked,
            "rows_checked": self.rows_checked,
            "misplaced_rows": self.misplaced_rows,
            "misplaced": [m.to_dict() for m in self.misplaced],
            "unchecked_fields": {str(k): v for k, v in self.unchecked_fields.items()},
        }


def verify_partitions(
    storage: Storage, state: NamespaceState, partitions: Sequence[Partition]
) -> VerifyReport:
    """Check ``partitions`` (of ``state``) in parallel; see the module docstring."""
    report = VerifyReport(int(state.version))
    checkable = checkable_fields(state)
    for version, fields in state.specs.items():
        if unchecked := [f.name for f in fields if f not in checkable[version]]:
            report.unchecked_fields[version] = unchecked

    def one(partition: Partition) -> tuple[int, MisplacedRows | None]:
        fields = checkable.get(partition.spec_version or 0, [])
        leaf = storage.table(partition.location, partition.read_version)
        if not fields:
            return int(leaf.count_rows()), None
        names = sorted({state.schema.field_by_id(f.source_id).name for f in fields})  # type: ignore[arg-type]
        table = leaf_rows(state, leaf, names)
        wrong, expected = misplaced_mask(state, partition, fields, table)
        count = int(pc.sum(wrong).as_py() or 0)
        if not count:
            return table.num_rows, None
        first = int(pc.index(wrong, True).as_py())
        example = {f.name: v[first].as_py() for f, v in zip(fields, expected, strict=True)}
        p, rows = partition, table.num_rows
        return rows, MisplacedRows(
            p.object_id, dict(p.values), p.read_version, rows, count, example
        )

    for rows, found in storage.map(one, list(partitions)):
        report.partitions_checked += 1
        report.rows_checked += rows
        if found is not None:
            report.misplaced.append(found)
    if report.misplaced:
        counts = (report.misplaced_rows, len(report.misplaced))
        log.warning("%d row(s) in %d partition(s) are not where their values say", *counts)
    return report


def checkable_fields(state: NamespaceState) -> dict[int, list[PartitionField]]:
    """Per spec version, the fields whose source column is still active."""
    out: dict[int, list[PartitionField]] = {}
    for version, fields in state.specs.items():
        usable = []
        for f in fields:
            try:
                source = state.schema.field_by_id(f.source_id)  # type: ignore[arg-type]
            except SchemaError:
                continue
            if not is_deprecated(source):
                usable.append(f)
        out[version] = usable
    return out


def misplaced_mask(
    state: NamespaceState, partition: Partition, fields: Sequence[PartitionField], table: pa.Table
) -> tuple[pa.Array, list[pa.Array]]:
    """Per row of ``table``: whether it is misplaced; and the values of ``fields`` it gives."""
    expected = partition_values(table, fields, state.schema)
    wrong = pa.array([False] * table.num_rows, pa.bool_())
    for f, values in zip(fields, expected, strict=True):
        wrong = pc.or_(wrong, _differs(values, partition.values.get(f.name)))
    return wrong, expected


class RelocateRows(TableOperation):
    """Move misplaced rows where their values say: the selection reads every candidate
    partition whole (at its published version); each partition losing or receiving rows
    is rewritten (an ``Overwrite`` on that version), the others created."""

    kind = "relocate"

    def __init__(self, storage: Storage, candidates: Sequence[str] | None = None) -> None:
        super().__init__(storage)
        self.candidates = None if candidates is None else set(candidates)
        self._keep: dict[str, pa.Table] = {}
        self._incoming: dict[str, pa.Table] = {}
        self._moved_out: dict[str, int] = {}
        self._digests: dict[str, str] = {}

    def validate(self, state: NamespaceState) -> None:
        """Nothing to check (the selection reads every candidate)."""

    def select(self, state: NamespaceState) -> Selection:
        self._keep, self._incoming, self._moved_out, self._digests = {}, {}, {}, {}
        selection = Selection(spec_version=state.spec_version)
        checkable = checkable_fields(state)
        partitions = [
            p
            for p in state.partitions()
            if (self.candidates is None or p.object_id in self.candidates)
            and checkable.get(p.spec_version or 0)
        ]

        def read(partition: Partition) -> tuple[Partition, pa.Table, pa.Array]:
            table = leaf_rows(state, self.storage.table(partition.location, partition.read_version))
            fields = checkable[partition.spec_version or 0]
            return partition, table, misplaced_mask(state, partition, fields, table)[0]

        moving: list[pa.Table] = []
        for partition, table, wrong in self.storage.map(read, partitions):
            count = int(pc.sum(wrong).as_py() or 0)
            if count:
                selection.targets[partition.object_id] = partition
                self._keep[partition.object_id] = table.filter(pc.invert(wrong))
                self._moved_out[partition.object_id] = count
                moving.append(table.filter(wrong))
        if not moving:
            return selection
        existing = {p.object_id: p for p in state.partitions()}
        for chunk in split(pa.concat_tables(moving), state.current_spec, state.schema):
            oid = state.leaf_id(chunk.values)
            self._incoming[oid] = chunk.data
            if oid in existing:
                selection.targets[oid] = existing[oid]
            else:
                selection.creates[oid] = chunk.values
        for oid in selection.object_ids:
            self._digests[oid] = _digest(self._keep.get(oid), self._incoming.get(oid))
        return selection

    def inputs(self, object_id: str) -> str:
        """Which rows this partition keeps and receives, as of the last selection."""
        return self._digests.get(object_id, "")

    def compute(self, state: NamespaceState, partition: Partition, base: int) -> ComputedChange:
        oid = partition.object_id
        leaf = self.storage.table(partition.location, base)
        kept = self._keep.get(oid)
        rows = kept if kept is not None else leaf_rows(state, leaf)
        incoming = self._incoming.get(oid)
        if incoming is not None:
            rows = pa.concat_tables([rows, incoming.select(rows.column_names)])
        schema, fragments = self.stage_rows(state, partition.location, rows)
        inserted = 0 if incoming is None else incoming.num_rows
        change = outcome(
            partition,
            rows_removed=self._moved_out.get(oid, 0),
            rows_inserted=inserted,
            fragments_before=len(leaf.get_fragments()),
        )
        overwrite = LanceOperation.Overwrite(schema, fragments)
        return ComputedChange(partition, base, overwrite, change, inputs=self.inputs(oid))

    def create(self, state: NamespaceState, object_id: str, values: tuple[Any, ...]) -> NewLeaf:
        rows = self._incoming[object_id]
        return self.stage_new_leaf(state, object_id, values, rows, self.inputs(object_id))


def _digest(*tables: pa.Table | None) -> str:
    """A digest of the contents of ``tables`` (None: absent)."""
    digest = hashlib.blake2b(digest_size=12)
    for table in tables:
        if table is None:
            digest.update(b"-")
            continue
        digest.update(str(table.num_rows).encode())
        for column in (c for batch in table.to_batches() for c in batch.columns):
            for buffer in filter(None, column.buffers()):
                digest.update(buffer)
    return digest.hexdigest()


def _differs(values: pa.Array, expected: Any) -> pa.Array:
    """Per row: whether ``values`` is not ``expected`` (NULL only equals NULL, NaN NaN)."""
    if expected is None:
        return pc.is_valid(values)
    scalar = pa.scalar(expected, values.type)
    same = pc.fill_null(pc.equal(values, scalar), False)
    if pa.types.is_floating(values.type) and expected != expected:  # a NaN partition
        same = pc.fill_null(pc.is_nan(values), False)
    return pc.invert(same)
