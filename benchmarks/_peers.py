"""The systems the benchmarks compare, each driven through the same operations.

``Ours`` (this project), ``Delta`` (delta-rs) and ``Iceberg`` (pyiceberg with a SQLite
catalog) take a location and, for an object store, its options; every method opens a fresh
handle, as a scheduled task would. Used by ``bench_peers.py`` (local disk),
``bench_table_ops.py`` (delete, merge, optimize), ``bench_s3.py`` (the same calls on S3)
and ``bench_first_query.py`` (one call in a fresh interpreter).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bench_floor import SCHEMA

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField


class System(Protocol):
    """One table format driven through the measured operations (a fresh handle each)."""

    name: str

    def load(self, data: pa.Table) -> None: ...
    def append(self, data: pa.Table) -> None: ...
    def overwrite(self, data: pa.Table) -> None: ...
    def plan(self, day: dt.date) -> int: ...
    def read(self, first: dt.date, last: dt.date) -> pa.Table: ...


def canonical(table: pa.Table, schema: pa.Schema = SCHEMA) -> pa.Table:
    """The rows in one shape and order, to compare systems."""
    return table.select(schema.names).cast(schema).sort_by("id").combine_chunks()


def updates(data: pa.Table, k: int) -> pa.Table:
    """1% of ``data`` (``id % 100 == k``) with new values: the source of a wide merge."""
    picked = data.filter(pa.array(data.column("id").to_numpy() % 100 == k))
    values = pa.array(np.random.default_rng(k).random(picked.num_rows))
    return picked.set_column(picked.schema.get_field_index("value"), "value", values)


class Ours:
    name = "ours"

    def __init__(
        self, uri: str, *, by: str = "event_date", storage_options: dict[str, str] | None = None
    ) -> None:
        self.uri, self.by, self.options = uri, by, storage_options

    def ns(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.uri, storage_options=self.options)

    def load(self, data: pa.Table) -> None:
        PartitionedNamespace.create(
            self.uri,
            schema=data.schema,
            partition_fields=[PartitionField(self.by, self.by)],
            storage_options=self.options,
        ).write(data)

    def append(self, data: pa.Table) -> None:
        self.ns().write(data)

    def overwrite(self, data: pa.Table) -> None:
        self.ns().write(data, "overwrite")

    def plan(self, day: dt.date) -> int:
        return len(self.ns().prune(f"{self.by} = DATE '{day}'"))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        return self.ns().to_table(filter=f"{self.by} BETWEEN DATE '{first}' AND DATE '{last}'")

    def delete(self, where: str) -> int:
        return self.ns().delete(where).rows_removed

    def merge(self, data: pa.Table) -> int:
        result = self.ns().merge(data, on=["id", self.by])
        return result.rows_updated + result.rows_inserted

    def optimize(self) -> tuple[int, int]:
        result = self.ns().optimize()
        return result.fragments_before, result.fragments_after

    def files(self) -> int:
        ns = self.ns()
        return sum(
            len(ns.storage.table(p.location, p.read_version).get_fragments())
            for p in ns.partitions()
        )

    def rows(self) -> pa.Table:
        return self.ns().to_table()


class Delta:
    name = "delta-rs"

    def __init__(
        self, uri: str, *, by: str = "event_date", storage_options: dict[str, str] | None = None
    ) -> None:
        self.uri, self.by, self.options = uri, by, storage_options

    def table(self) -> Any:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.options)

    def load(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(
            self.uri, data, partition_by=[self.by], mode="error", storage_options=self.options
        )

    def append(self, data: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, data, mode="append", storage_options=self.options)

    def overwrite(self, data: pa.Table) -> None:
        """Replace exactly the dates in ``data`` (a contiguous range here)."""
        from deltalake import write_deltalake

        low, high = pc.min_max(data.column(self.by)).values()
        where = f"{self.by} >= '{low.as_py()}' AND {self.by} <= '{high.as_py()}'"
        write_deltalake(
            self.uri, data, mode="overwrite", predicate=where, storage_options=self.options
        )

    def plan(self, day: dt.date) -> int:
        where = [(self.by, "=", day.isoformat())]
        return len(self.table().file_uris(file_pruning_predicate=where))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        """Through delta-rs's DataFusion ``QueryBuilder``: its fastest read here (pruned by
        the partition values; ``to_pyarrow_table(filters=...)`` takes 8x longer)."""
        sql = f"SELECT * FROM t WHERE {self.by} BETWEEN DATE '{first}' AND DATE '{last}'"
        return self.query(sql)

    def query(self, sql: str) -> pa.Table:
        from deltalake import QueryBuilder

        return pa.table(QueryBuilder().register("t", self.table()).execute(sql))

    def delete(self, where: str) -> int:
        return int(self.table().delete(where)["num_deleted_rows"])

    def merge(self, data: pa.Table) -> int:
        metrics = (
            self.table()
            .merge(
                data,
                predicate=f"t.id = s.id AND t.{self.by} = s.{self.by}",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return int(metrics["num_target_rows_updated"]) + int(metrics["num_target_rows_inserted"])

    def optimize(self) -> tuple[int, int]:
        metrics = self.table().optimize.compact()
        return int(metrics["numFilesRemoved"]), int(metrics["numFilesAdded"])

    def files(self) -> int:
        return len(self.table().file_uris())

    def rows(self) -> pa.Table:
        return self.query("SELECT * FROM t")


class Iceberg:
    """pyiceberg with a SQLite catalog in ``catalog_dir``; the data and metadata files go to
    ``warehouse`` (default: ``catalog_dir/warehouse``), with the FileIO ``properties``
    (e.g. ``s3.endpoint``) for an object store."""

    name = "pyiceberg"
    TABLE = "bench.events"

    def __init__(
        self,
        catalog_dir: Path,
        *,
        warehouse: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.root = catalog_dir
        self.warehouse = warehouse or f"file://{catalog_dir}/warehouse"
        self.properties = properties or {}

    def catalog(self) -> Any:
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog(
            "bench",
            uri=f"sqlite:///{self.root}/catalog.db",
            warehouse=self.warehouse,
            **self.properties,
        )

    def load(self, data: pa.Table) -> None:
        self.root.mkdir(parents=True)
        catalog = self.catalog()
        catalog.create_namespace("bench")
        table = catalog.create_table(self.TABLE, schema=SCHEMA)
        with table.update_spec() as spec:
            spec.add_identity("event_date")
        table.append(data)

    def append(self, data: pa.Table) -> None:
        self.catalog().load_table(self.TABLE).append(data)

    def overwrite(self, data: pa.Table) -> None:
        self.catalog().load_table(self.TABLE).dynamic_partition_overwrite(data)

    def plan(self, day: dt.date) -> int:
        from pyiceberg.expressions import EqualTo

        table = self.catalog().load_table(self.TABLE)
        return len(list(table.scan(row_filter=EqualTo("event_date", day.isoformat())).plan_files()))

    def read(self, first: dt.date, last: dt.date) -> pa.Table:
        from pyiceberg.expressions import And, GreaterThanOrEqual, LessThanOrEqual

        table = self.catalog().load_table(self.TABLE)
        where = And(
            GreaterThanOrEqual("event_date", first.isoformat()),
            LessThanOrEqual("event_date", last.isoformat()),
        )
        return table.scan(row_filter=where).to_arrow()

    def rows(self) -> pa.Table:
        return self.catalog().load_table(self.TABLE).scan().to_arrow()
