"""The systems the benchmarks compare, each driven through the same operations.

``Ours`` (this project), ``Delta`` (delta-rs), ``Iceberg`` (pyiceberg with a SQLite
catalog) and ``Floor`` (the bare Lance calls under ours: a table per date and a reduced
``__manifest``) take a location and, for an object store, its options; every method opens a fresh
handle, as a scheduled task would. Used by ``bench_peers.py`` (local disk),
``bench_table_ops.py`` (delete, merge, optimize), ``bench_s3.py`` (the same calls on S3)
and ``bench_first_query.py`` (one call in a fresh interpreter).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Protocol

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from bench_floor import MANIFEST_SCHEMA, SCHEMA, by_date, leaf_uri, parallel

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

    def drop_date(self, day: dt.date) -> int:
        return self.delete(f"{self.by} = DATE '{day}'")

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

    def drop_date(self, day: dt.date) -> int:
        return self.delete(f"{self.by} = '{day}'")

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


class Floor:
    """The bare Lance calls: one Lance table per date and a reduced ``__manifest``.

    The leaf calls and the ``__manifest`` call of an operation are measured apart (the
    manifest call publishes the versions the leaf call made, so it runs right after it).
    ``versions`` is what the ``__manifest`` would say: each leaf's current version.
    """

    name = "floor"

    def __init__(self, root: str, *, storage_options: dict[str, str] | None = None) -> None:
        self.root, self.options = root, storage_options or {}
        self.versions: dict[dt.date, int] = {}
        #: The ``__manifest`` handle :meth:`look_up` opened, for the next :meth:`publish`.
        self.held: lance.LanceDataset | None = None

    def manifest(self) -> str:
        return f"{self.root}/__manifest"

    def load(self, data: pa.Table) -> None:
        """The initial load of the leaves in ``data`` and their ``__manifest`` rows."""
        self.publish(self.write_leaves(data, "append"))

    def write_leaves(self, data: pa.Table, mode: str) -> list[dt.date]:
        """One ``write_dataset`` per date in ``data`` (``append`` also creates a new leaf)."""

        def one(part: tuple[dt.date, pa.Table]) -> tuple[dt.date, int]:
            ds = lance.write_dataset(
                part[1], leaf_uri(self.root, part[0]), mode=mode, storage_options=self.options
            )
            return part[0], int(ds.version)

        written = dict(parallel(one, by_date(data)))
        self.versions |= written
        return sorted(written)

    def leaf(self, day: dt.date) -> lance.LanceDataset:
        return lance.dataset(
            leaf_uri(self.root, day), version=self.versions[day], storage_options=self.options
        )

    def delete_leaves(self, where: str) -> list[dt.date]:
        """A delete on every leaf, in parallel (deletion files, one commit each)."""

        def one(day: dt.date) -> tuple[dt.date, int]:
            ds = self.leaf(day)
            ds.delete(where)
            return day, int(ds.version)

        self.versions |= dict(parallel(one, sorted(self.versions)))
        return sorted(self.versions)

    def merge_leaves(self, data: pa.Table) -> list[dt.date]:
        """One ``merge_insert`` on ``id`` per date in ``data``, in parallel."""

        def one(part: tuple[dt.date, pa.Table]) -> tuple[dt.date, int]:
            ds = self.leaf(part[0])
            ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
                part[1]
            )
            return part[0], int(ds.version)

        written = dict(parallel(one, by_date(data)))
        self.versions |= written
        return sorted(written)

    def look_up(self, days: list[dt.date]) -> int:
        """What a correct write must learn from ``__manifest`` before it writes a leaf:
        whether each of ``days`` has a row, and its version (the floor's ``versions``
        knows it without asking, a writer in a fresh process does not). One filtered scan,
        on the handle the next :meth:`publish` commits with (one open for both, as a
        write's); the rows found."""
        self.held = lance.dataset(self.manifest(), storage_options=self.options)
        found = self.held.to_table(
            columns=["object_id", "read_version"],
            filter=pc.field("event_date").isin(pa.array(days, pa.date32())),
        )
        return found.num_rows

    def publish(self, days: list[dt.date]) -> None:
        """One ``merge_insert`` of the rows of ``days`` into ``__manifest`` (created with a
        BTREE index on ``object_id`` the first time), on the handle :meth:`look_up` opened
        if it ran."""
        table = pa.table(
            {
                "object_id": [leaf_uri("", d)[1:] for d in days],
                "event_date": pa.array(days, pa.date32()),
                "read_version": pa.array([self.versions[d] for d in days], pa.int64()),
            },
            schema=MANIFEST_SCHEMA,
        )
        try:
            held, self.held = self.held, None
            ds = held or lance.dataset(self.manifest(), storage_options=self.options)
        except ValueError:
            ds = lance.write_dataset(table, self.manifest(), storage_options=self.options)
            ds.create_scalar_index("object_id", "BTREE")
            return
        (
            ds.merge_insert("object_id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute(table)
        )

    def plan(self, day: dt.date) -> int:
        """One filtered scan of ``__manifest`` (fresh handle)."""
        ds = lance.dataset(self.manifest(), storage_options=self.options)
        return ds.to_table(filter=pc.field("event_date") == pa.scalar(day, pa.date32())).num_rows

    def read_leaf(self, day: dt.date) -> pa.Table:
        """Open the leaf of ``day`` at its version (known from ``__manifest``) and scan it."""
        return self.leaf(day).to_table()

    def rows(self) -> pa.Table:
        """Every row, through ``__manifest`` (checks that it names each leaf's version)."""
        ds = lance.dataset(self.manifest(), storage_options=self.options)
        listed = ds.to_table()
        pinned = dict(
            zip(
                listed.column("event_date").to_pylist(),
                listed.column("read_version").to_pylist(),
                strict=True,
            )
        )
        if pinned != self.versions:
            wrong = {d: (pinned.get(d), v) for d, v in self.versions.items() if pinned.get(d) != v}
            raise AssertionError(f"the floor's __manifest names other versions: {wrong}")
        return pa.concat_tables(parallel(self.read_leaf, sorted(self.versions)))

    # -- whole operations (leaves, then the __manifest call), as the other systems' --------
    def delete(self, where: str) -> int:
        """A delete on every leaf, then one ``__manifest`` call publishing them; leaves."""
        days = self.delete_leaves(where)
        self.publish(days)
        return len(days)

    def merge(self, data: pa.Table) -> int:
        """One ``merge_insert`` per date in ``data``, then one ``__manifest`` call; leaves."""
        days = self.merge_leaves(data)
        self.publish(days)
        return len(days)

    def drop_date(self, day: dt.date) -> int:
        """A whole date removed: its ``__manifest`` row deleted (the leaf stays)."""
        ds = lance.dataset(self.manifest(), storage_options=self.options)
        ds.delete(pc.field("event_date") == pa.scalar(day, pa.date32()))
        return int(self.versions.pop(day) is not None)


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
