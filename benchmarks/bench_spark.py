"""Spark writes and reads against Spark's own Parquet layout, in one SparkSession.

For each case (default: 5M rows into 200 partitions, and 1M rows into 5,000 partitions) the
same generated DataFrame (``spark.range`` + expressions: an id, an ``event_date`` partition
key, a country, an amount and a ~40-byte string) is

* written with ``write_partitioned`` (``distribution="hash"``, the default, and ``"none"``),
* written with ``df.write.format("lance_partitioned")`` as it comes (each task writes every
  partition it sees, as ``"none"``) and after ``df.repartition("event_date")`` (each
  partition from one task, as ``"hash"``),
* written with ``df.write.partitionBy("event_date").parquet(...)`` (the baseline),
* written straight from one Python process with pylance, one ``lance.write_dataset`` per
  partition from pre-grouped Arrow data (the floor: no routing, no transactions),

after an untimed warm-up of every path (JIT, Python workers, first-job costs), then read
back with a filter selecting 1% of the partitions, by ``read_partitioned``, by
``spark.read.format("lance_partitioned").option("filter", ...).load(uri)`` (pruned) and by
``spark.read.parquet(...).filter(...)`` (partition pruning on the Parquet layout), each fully
materialised with ``.count()`` over all columns (``noop`` writes would skip columns).

Reported: wall seconds, ratios to the Parquet baseline measured in the same run, and the
peak RSS of the Python driver process after the Spark writes (``ru_maxrss``; the floor runs
in its own process; the JVM's heap is bounded by ``--driver-memory``).

**Cold**, as a scheduled Spark task meets it: each of the four paths (the format's write
then read, ``write_partitioned`` then ``read_partitioned``) in a fresh process of its own,
timed from its new SparkSession on (``--cold``, default 200,000 rows into 200 partitions),
so every Python worker it needs starts then: the format's planning runs in Python planner
workers of PySpark's Data Source API (two per read, two per write, each a new interpreter that
imports PySpark from the ``pyspark.zip`` Spark puts first on its path, then pyarrow, pylance
and DataFusion) on top of the executors' workers both paths start. Beside them, the floor of
that API: a Python data source that does no work (``_null_source.py``: its tasks consume the
rows and write nothing, its reads return none), and Spark's own ``noop`` writer (the rows
made and dropped, no Python), each in a fresh process too: the format's cold cost over
``write_partitioned`` is to be read against that API's over ``noop``.

    .venv/bin/python benchmarks/bench_spark.py                       # ~10 min on 2 cores
    .venv/bin/python benchmarks/bench_spark.py --cases 1000000:200   # rows:partitions
    .venv/bin/python benchmarks/bench_spark.py --cases --cold 200000:200  # cold only
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import resource
import shutil
import time
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (quiets pylance's log before it is imported)
import _null_source
import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from _common import DATA_DIR, print_environment, print_table, write_results
from pyspark import cloudpickle

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.spark import FORMAT, read_partitioned, register, write_partitioned
from airflow_provider_lance.spark.session import get_session

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("amount", pa.float64()),
        pa.field("note", pa.utf8()),
    ]
)
START = dt.date(2010, 1, 1)


def source(spark: Any, rows: int, partitions: int) -> Any:
    return spark.range(rows).selectExpr(
        "id",
        f"date_add(DATE '{START}', CAST(id % {partitions} AS INT)) AS event_date",
        "element_at(array('US','DE','FR','GB','JP'), CAST(id % 5 AS INT) + 1) AS country",
        "CAST(id AS DOUBLE) * 0.25 AS amount",
        "concat('order-', CAST(id AS STRING), '-', sha1(CAST(id AS STRING))) AS note",
    )


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def arrow_data(rows: int, partitions: int) -> pa.Table:
    ids = np.arange(rows, dtype=np.int64)
    days = (ids % partitions).astype(np.int32) + (START - dt.date(1970, 1, 1)).days
    countries = np.array(["US", "DE", "FR", "GB", "JP"])[ids % 5]
    return pa.table(
        {
            "id": ids,
            "event_date": pa.array(days).cast(pa.date32()),
            "country": pa.array(countries),
            "amount": ids * 0.25,
            "note": pa.array([f"order-{i}-{i:040x}" for i in ids]),
        },
        schema=SCHEMA,
    )


def pylance_floor(path: Path, rows: int, partitions: int) -> float:
    """One process, pre-grouped data, one write_dataset per partition: the floor."""
    table = arrow_data(rows, partitions)
    started = time.perf_counter()
    order = pc.sort_indices(table, [("event_date", "ascending")])
    table = table.take(order)
    keys = table.column("event_date").combine_chunks()
    bounds = np.flatnonzero(np.diff(keys.cast(pa.int32()).to_numpy())) + 1
    for lo, hi in zip([0, *bounds], [*bounds, len(table)], strict=True):
        lance.write_dataset(table.slice(lo, hi - lo), str(path / f"p{lo}.lance"))
    return time.perf_counter() - started


def run_case(spark: Any, rows: int, partitions: int, work: Path) -> dict[str, Any]:
    df = source(spark, rows, partitions)
    out: dict[str, Any] = {"rows": rows, "partitions": partitions}

    parquet = work / "parquet"
    out["parquet_write_s"], _ = timed(
        lambda: df.write.mode("overwrite").partitionBy("event_date").parquet(str(parquet))
    )
    for distribution in ("hash", "none"):
        uri = work / f"lance-{distribution}"
        PartitionedNamespace.create(
            uri, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
        )
        seconds, result = timed(
            lambda uri=uri, d=distribution: write_partitioned(df, str(uri), distribution=d)
        )
        assert result.rows == rows
        assert len(result.partitions) == partitions
        out[f"lance_{distribution}_write_s"] = seconds
    for name, frame in (("format", df), ("format_repartitioned", df.repartition("event_date"))):
        uri = work / f"lance-{name}"
        ns = PartitionedNamespace.create(
            uri, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
        )
        out[f"{name}_write_s"], _ = timed(
            lambda uri=uri, f=frame: f.write.format(FORMAT).mode("append").save(str(uri))
        )
        assert ns.count_rows() == rows
        assert len(ns.partitions()) == partitions
    floor_dir = work / "floor"
    floor_dir.mkdir()
    out["driver_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # its data is not ours
        out["pylance_floor_write_s"] = pool.apply(pylance_floor, (floor_dir, rows, partitions))

    chosen = max(partitions // 100, 1)
    last = START + dt.timedelta(days=chosen - 1)
    sql = f"event_date BETWEEN DATE '{START}' AND DATE '{last}'"
    expected = sum(1 for i in range(partitions) if i < chosen) * (rows // partitions)
    out["read_filter"] = sql
    out["lance_read_s"], lance_rows = timed(
        lambda: read_partitioned(spark, str(work / "lance-hash"), filter=sql).count()
    )
    out["format_read_s"], format_rows = timed(
        lambda: (
            spark.read.format(FORMAT).option("filter", sql).load(str(work / "lance-hash")).count()
        )
    )
    assert format_rows == lance_rows
    out["parquet_read_s"], parquet_rows = timed(
        lambda: spark.read.parquet(str(parquet)).filter(sql).count()
    )
    assert lance_rows == parquet_rows, (lance_rows, parquet_rows, expected)
    out["read_rows"] = lance_rows
    return out


def cold_path(
    path: str, rows: int, partitions: int, work: Path, master: str
) -> dict[str, float | None]:
    """One path's write and read, from the new SparkSession of a fresh process on."""
    spark = session(master, "1g")
    df = source(spark, rows, partitions)
    if path == "spark noop":  # Spark making the rows and dropping them: no Python at all
        write_s, _ = timed(lambda: df.write.format("noop").mode("overwrite").save())
        spark.stop()
        return {"write_s": write_s, "read_s": None}
    if path == "python data source floor":
        write_s, _ = timed(lambda: df.write.format(_null_source.NAME).mode("append").save())
        read_s, _ = timed(lambda: spark.read.format(_null_source.NAME).load().count())
        spark.stop()
        return {"write_s": write_s, "read_s": read_s}
    root = work / path
    shutil.rmtree(root, ignore_errors=True)
    ns = PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    sql = f"event_date BETWEEN DATE '{START}' AND DATE '{START + dt.timedelta(days=1)}'"
    if path == "format":
        write_s, _ = timed(lambda: df.write.format(FORMAT).mode("append").save(str(root)))
        pruned = spark.read.format(FORMAT).option("filter", sql)
        read_s, got = timed(lambda: pruned.load(str(root)).count())
    else:
        write_s, _ = timed(lambda: write_partitioned(df, str(root), distribution="none"))
        read_s, got = timed(lambda: read_partitioned(spark, str(root), filter=sql).count())
    assert ns.count_rows() == rows
    assert got == ns.count_rows(filter=sql)
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    return {"write_s": write_s, "read_s": read_s}


def session(master: str, driver_memory: str) -> Any:
    spark = get_session(
        "bench_spark",
        {
            "spark.master": master,
            "spark.driver.memory": driver_memory,
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    cloudpickle.register_pickle_by_value(_null_source)  # planner workers never import it
    spark.dataSource.register(_null_source.NullSource)
    return spark


def cold(rows: int, partitions: int, master: str) -> dict[str, dict[str, float | None]]:
    """Each path in a process of its own (``spawn``: nothing imported or started before)."""
    work = DATA_DIR / "spark" / "cold"
    work.mkdir(parents=True, exist_ok=True)
    out = {}
    for path in ("format", "write_partitioned", "python data source floor", "spark noop"):
        with multiprocessing.get_context("spawn").Pool(1) as pool:
            out[path] = pool.apply(cold_path, (path, rows, partitions, work, master))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--cases", nargs="*", default=["5000000:200", "1000000:5000"], help="rows:partitions"
    )
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="2g")
    parser.add_argument("--cold", default="200000:200", help="rows:partitions ('' for none)")
    args = parser.parse_args()
    env = print_environment()
    cold_runs = {}
    if args.cold:
        rows, partitions = (int(x) for x in args.cold.split(":"))
        cold_runs = cold(rows, partitions, args.master)
        print_table(
            ["path", "cold write s", "cold read s"],
            [
                [k, f"{v['write_s']:.2f}", "-" if v["read_s"] is None else f"{v['read_s']:.2f}"]
                for k, v in cold_runs.items()
            ],
            title=f"cold: {rows:,} rows / {partitions} partitions, a fresh process per path",
        )
    if not args.cases:
        write_results("bench_spark", {"environment": env, "cases": [], "cold": cold_runs})
        return
    spark = session(args.master, args.driver_memory)
    warm = DATA_DIR / "spark" / "warm-up"  # JIT, Python workers, first-job costs: untimed
    shutil.rmtree(warm, ignore_errors=True)
    warm.mkdir(parents=True)
    run_case(spark, 20_000, 20, warm)
    shutil.rmtree(warm, ignore_errors=True)
    results = []
    for case in args.cases:
        rows, partitions = (int(x) for x in case.split(":"))
        work = DATA_DIR / "spark" / f"{rows}x{partitions}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        results.append(run_case(spark, rows, partitions, work))
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    driver_peak = max(r["driver_peak_rss_bytes"] for r in results)
    rows_out = []
    for r in results:
        base = r["parquet_write_s"]
        rows_out.append(
            [
                f"{r['rows']:,} rows / {r['partitions']:,} partitions",
                f"{base:.1f}",
                f"{r['lance_hash_write_s']:.1f} ({r['lance_hash_write_s'] / base:.2f}x)",
                f"{r['lance_none_write_s']:.1f} ({r['lance_none_write_s'] / base:.2f}x)",
                f"{r['format_repartitioned_write_s']:.1f} "
                f"({r['format_repartitioned_write_s'] / base:.2f}x)",
                f"{r['format_write_s']:.1f} ({r['format_write_s'] / base:.2f}x)",
                f"{r['pylance_floor_write_s']:.1f} ({r['pylance_floor_write_s'] / base:.2f}x)",
                f"{r['parquet_read_s']:.2f}",
                f"{r['lance_read_s']:.2f} ({r['lance_read_s'] / r['parquet_read_s']:.2f}x)",
                f"{r['format_read_s']:.2f} ({r['format_read_s'] / r['parquet_read_s']:.2f}x)",
            ]
        )
    print_table(
        [
            "case",
            "parquet partitionBy s",
            "write_partitioned hash s",
            "write_partitioned none s",
            "format repartition(event_date) s",
            "format as is s",
            "pylance floor s",
            "parquet 1% read s",
            "read_partitioned 1% s",
            "format 1% read s",
        ],
        rows_out,
        title=f"Spark ({args.master}); driver peak RSS {driver_peak / 2**20:.0f} MiB",
    )
    write_results(
        "bench_spark",
        {
            "environment": env,
            "driver_peak_rss_bytes": driver_peak,
            "cases": results,
            "cold": cold_runs,
        },
    )


if __name__ == "__main__":
    main()
