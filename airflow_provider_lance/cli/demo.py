"""The end-to-end demo (``demo [DIR] [--force]``): a namespace of realistic events on a
local directory, written, evolved, pruned and read, in a few seconds.

Its own module: the demo's data (:data:`DEMO_SCHEMA`, :func:`demo_events`) is also the
example data of the project's DAGs and Spark tests, and the demo deletes only what it made
(:func:`prepare_demo_directory`), a rule worth keeping apart from the operator commands.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_lance.namespace import (
    InvalidArgumentError,
    Partition,
    PartitionedNamespace,
    PartitionField,
    value_text,
)

DEMO_SCHEMA = pa.schema(
    [
        pa.field("event_id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("event_time", pa.timestamp("us", tz="UTC")),
        pa.field("user_id", pa.int64()),
        pa.field("country", pa.utf8()),
        pa.field("channel", pa.utf8()),
        pa.field("amount", pa.float64()),
    ]
)
COUNTRIES = ["US", "DE", "FR", "GB", "JP", "BR", "IN", "São Tomé", None]
CHANNELS = ["web", "ios", "android", "email"]


def demo_events(day: dt.date, rows: int, seed: int, first_id: int) -> pa.Table:
    """One day of realistic, deterministic purchase events."""
    rng = np.random.default_rng(seed)
    seconds = np.sort(rng.integers(0, 86_400, rows))
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.timezone.utc)
    weights = np.array([30, 12, 10, 9, 8, 7, 14, 1, 9], dtype=float)
    country_idx = rng.choice(len(COUNTRIES), rows, p=weights / weights.sum())
    return pa.table(
        {
            "event_id": pa.array(np.arange(first_id, first_id + rows), pa.int64()),
            "event_date": pa.array([day] * rows, pa.date32()),
            "event_time": pa.array(
                [start + dt.timedelta(seconds=int(s)) for s in seconds],
                pa.timestamp("us", tz="UTC"),
            ),
            "user_id": pa.array(rng.integers(1, 50_000, rows), pa.int64()),
            "country": pa.array([COUNTRIES[i] for i in country_idx], pa.utf8()),
            "channel": pa.array([CHANNELS[i] for i in rng.integers(0, 4, rows)], pa.utf8()),
            "amount": pa.array(np.round(rng.gamma(2.0, 18.0, rows), 2)),
        },
        schema=DEMO_SCHEMA,
    )


def _text(value: object) -> str:
    text = value_text(value)
    return "NULL" if text is None else text


def _print_partitions(ns: PartitionedNamespace, partitions: Sequence[Partition]) -> None:
    print(f"  {'spec':>4}  {'read_version':>12}  {'rows':>8}  values")
    for p in sorted(partitions, key=lambda p: (p.spec_version, json.dumps(p.to_dict()["values"]))):
        rows = ns.count_rows_of(p)
        values = ", ".join(f"{k}={_text(v)}" for k, v in p.values.items())
        print(f"  v{p.spec_version:<3}  {p.read_version!s:>12}  {rows:>8}  {values}")


#: The file the demo leaves in its directory: the proof, on the next run, that the demo made
#: it and may replace it.
DEMO_MARKER = ".lance-demo"


def _made_by_demo(name: str) -> bool:
    """Whether a top-level entry of a demo directory is one the demo writes: its marker or
    part of the namespace (the ``__manifest``, transaction records, partition tables)."""
    return name == DEMO_MARKER or PartitionedNamespace.is_namespace_entry(name)


def prepare_demo_directory(directory: Path, force: bool) -> None:
    """Make ``directory`` an empty directory for the demo, deleting only what the demo made.

    An absent or empty directory is used as it is; one holding the demo's marker and
    nothing but the demo's own entries is emptied; anything else (a user's files, a file
    in place of the directory) is refused, so that a mistyped path never costs data.
    ``force`` empties a directory whatever it holds. The directory itself is kept (it may
    be the user's). The marker is written once the namespace exists
    (:func:`mark_demo_directory`): creating one needs an empty directory.
    """
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise InvalidArgumentError(
            f"{directory} exists and is not a directory (a file or a symbolic link); give the "
            "demo a directory that does not exist yet (e.g. .demo/events)"
        )
    if directory.is_dir():
        entries = sorted(p.name for p in directory.iterdir())
        if entries:
            foreign = [name for name in entries if not _made_by_demo(name)]
            if DEMO_MARKER not in entries:
                foreign = entries
            if foreign and not force:
                shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                raise InvalidArgumentError(
                    f"{directory} is not empty and the demo did not make what it holds "
                    f"({shown}); the demo replaces only a directory it made: give it a new "
                    "or empty directory, or pass --force to delete this one and everything "
                    "in it"
                )
            for entry in directory.iterdir():  # the directory itself stays (it may be the user's)
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def mark_demo_directory(directory: Path) -> None:
    """Leave the marker that lets the next demo replace ``directory``."""
    (directory / DEMO_MARKER).write_text(
        "Made by `python -m airflow_provider_lance demo`, which replaces this directory "
        "when it runs again.\n"
    )


def run_demo(directory: Path, force: bool = False) -> int:
    """The end-to-end demo in ``directory`` (see :func:`prepare_demo_directory`)."""
    prepare_demo_directory(directory, force)
    started = time.monotonic()
    print(f"== creating a namespace partitioned by day at {directory}")
    ns = PartitionedNamespace.create(
        directory, schema=DEMO_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
    mark_demo_directory(directory)
    days = [dt.date(2025, 12, 1) + dt.timedelta(days=i) for i in range(7)]
    first_id = 0
    for i, day in enumerate(days):
        batch = demo_events(day, 20_000, seed=i, first_id=first_id)
        first_id += batch.num_rows
        result = ns.write(batch)
        print(f"   append {day}: {result.rows} rows -> manifest v{result.manifest_version}")

    print("== one write touching three days, published atomically in ONE manifest commit")
    backfill = pa.concat_tables(
        [
            demo_events(d, 5_000, seed=100 + i, first_id=first_id + i * 5_000)
            for i, d in enumerate(days[:3])
        ]
    )
    first_id += backfill.num_rows
    result = ns.write(backfill, mode="overwrite")
    print(
        f"   overwrite {len(result.partitions)} partitions, {result.rows} rows "
        f"-> manifest v{result.manifest_version}"
    )

    print("== evolving the partition spec to (month, country); new data goes to v2")
    ns.evolve_partition_spec(
        [
            PartitionField("event_month", "event_date", "date_trunc('month', col)", pa.date32()),
            PartitionField("country", "country"),
        ]
    )
    later = [dt.date(2025, 12, 8) + dt.timedelta(days=i) for i in range(3)]
    result = ns.write(
        pa.concat_tables(
            [
                demo_events(d, 10_000, seed=200 + i, first_id=first_id + i * 10_000)
                for i, d in enumerate(later)
            ]
        )
    )
    print(
        f"   append {result.rows} rows into {len(result.partitions)} partitions "
        f"-> manifest v{result.manifest_version}"
    )

    print(f"== published partitions (manifest v{ns.version})")
    _print_partitions(ns, ns.partitions())

    where = "event_date BETWEEN DATE '2025-12-06' AND DATE '2025-12-08' AND country = 'DE'"
    pruned = ns.prune(where)
    print(f"== prune: {where}\n   {len(pruned)} of {len(ns.partitions())} partitions to scan:")
    _print_partitions(ns, pruned)
    table = ns.to_table(filter=where, columns=["event_date", "amount"])
    grouped = table.group_by("event_date").aggregate([("amount", "sum"), ("amount", "count")])
    print("== revenue from DE per day (read from one manifest version):")
    for row in grouped.sort_by("event_date").to_pylist():
        print(
            f"   {row['event_date']}  {row['amount_count']:>6} events  {row['amount_sum']:>12.2f}"
        )
    total = ns.count_rows()
    print(
        f"== {total} rows in {len(ns.partitions())} partitions; "
        f"{pc.sum(ns.to_table(columns=['amount'])['amount']).as_py():.2f} total amount; "
        f"done in {time.monotonic() - started:.1f}s"
    )
    return 0
