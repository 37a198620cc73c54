"""Writes split across processes: what an engine's driver and its workers call (as
delta-rs's ``create_write_transaction`` commits files other writers made).

    # the driver: begin, pin the version every worker stages against, check the schema
    txn = ns.begin("append", txn_id="load-1")
    version = ns.version
    PartitionRouter(ns.state()).check(schema)
    # each worker (any process): route rows by partition, stage them, return the stage
    router = PartitionRouter(PartitionedNamespace.open(uri).state(version))
    keys = router.keys(batch)  # shuffle by these: each partition's rows to one worker
    stage = PartitionedNamespace.open(uri).transaction("load-1").stage(
        batches, stage_id, record=False, manifest_version=version
    )  # stage.to_json() goes back to the driver
    # the driver: record the stages of the workers that succeeded, look, publish
    txn.record_all([Stage.from_json(s) for s in stages])
    TransactionSummary.of(ns, txn)
    ns.commit(txn)  # one atomic __manifest commit
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from airflow_provider_lance.namespace.format.state import NamespaceState
from airflow_provider_lance.namespace.results import value_text
from airflow_provider_lance.namespace.txn.plan import merge_stages
from airflow_provider_lance.namespace.txn.store import TransactionStore
from airflow_provider_lance.namespace.txn.transactions import Transaction
from airflow_provider_lance.namespace.write.splitting import routing_keys
from airflow_provider_lance.namespace.write.staging import Stage, StagedPartition

if TYPE_CHECKING:
    from .facade import PartitionedNamespace


class PartitionRouter:
    """Rows as a write into ``state`` takes them, and the partition (of the current spec)
    each goes to."""

    def __init__(self, state: NamespaceState) -> None:
        self.state = state

    def conform(self, data: pa.Table | pa.RecordBatch) -> pa.Table:
        """``data`` checked and shaped into the active schema as a write does."""
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        return self.state.schema.conform_input(table, spec=self.state.current_spec)

    def check(self, schema: pa.Schema) -> None:
        """Refuse data of ``schema`` a write would refuse (before any worker runs)."""
        self.conform(schema.empty_table())

    def keys(self, data: pa.Table | pa.RecordBatch) -> pa.Array:
        """A 64-bit key per row, equal for the rows of one partition (or on a hash collision)."""
        return routing_keys(self.conform(data), self.state.current_spec, self.state.schema)


@dataclass(frozen=True)
class TransactionSummary:
    """What a transaction has staged, from its stage records: ``record_uri`` is their
    directory, ``partitions`` lists ``{"object_id", "values" (as text), "rows"}``.
    Stages that saw one partition differently: :class:`~.errors.StaleStage`."""

    txn_id: str
    uri: str
    mode: str
    state: str
    record_uri: str
    rows: int
    files: int
    partitions: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(
        cls, ns: PartitionedNamespace, txn: Transaction, stages: Mapping[str, Stage] | None = None
    ) -> TransactionSummary:
        """The summary of ``txn``, of ``stages`` (by id) if given, else of its records."""
        parts = list(merge_stages(txn.stages() if stages is None else stages).values())
        record_uri = f"{ns.uri}/{TransactionStore.directory(txn.txn_id, txn.incarnation)}"
        rows, files = sum(p.rows for p in parts), sum(len(p.fragments) for p in parts)
        listed = [_listed(p) for p in parts]
        return cls(txn.txn_id, ns.uri, txn.mode, txn.state.value, record_uri, rows, files, listed)


def _listed(part: StagedPartition) -> dict[str, Any]:
    values = {k: value_text(v) for k, v in part.values.items()}
    return {"object_id": part.object_id, "values": values, "rows": part.rows}
