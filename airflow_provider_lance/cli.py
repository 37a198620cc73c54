"""A small command line for partitioned namespaces: inspect one, prune it, or run the demo.

python -m airflow_provider_lance describe URI
python -m airflow_provider_lance prune URI "event_date >= DATE '2025-12-01'"
python -m airflow_provider_lance history URI [--limit N] [--all]
python -m airflow_provider_lance tag create URI NAME [--version N | --at 2025-12-01T00:00]
python -m airflow_provider_lance tag list URI
python -m airflow_provider_lance tag delete URI NAME
python -m airflow_provider_lance demo DIR

Exit codes (as the Spark write job's): 0 done, 1 a failure a retry may fix (storage
unreachable, an unexpected error), 2 an error no retry can fix (not a namespace, bad filter,
...), 3 a conflict with a concurrent writer.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .namespace import CommitConflict, LanceNamespaceError, PartitionedNamespace, PartitionField
from .namespace.catalog import Partition, value_text
from .namespace.errors import is_retryable

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


def run_demo(directory: Path) -> int:
    if directory.exists():
        shutil.rmtree(directory)
    started = time.monotonic()
    print(f"== creating a namespace partitioned by day at {directory}")
    ns = PartitionedNamespace.create(
        directory, schema=DEMO_SCHEMA, partition_fields=[PartitionField("event_date", "event_date")]
    )
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


def describe(uri: str) -> int:
    ns = PartitionedNamespace.open(uri)
    print(f"namespace {ns.uri}  manifest v{ns.version}")
    print("schema:")
    for f in ns.schema:
        meta = {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}
        print(f"  {f.name}: {f.type}{'' if f.nullable else ' not null'}  {meta}")
    state = ns.state()
    for version in sorted(state.specs):
        print(f"partition_spec_v{version}:")
        for field in state.specs[version]:
            print(
                f"  [{field.field_id}] {field.name} = {field.expression} over "
                f"{field.source} -> {field.result_type}"
            )
    print("partitions:")
    _print_partitions(ns, ns.partitions())
    return 0


def prune(uri: str, where: str) -> int:
    ns = PartitionedNamespace.open(uri)
    for p in ns.prune(where):
        print(json.dumps(p.to_dict(), ensure_ascii=False))
    return 0


def list_transactions(uri: str) -> int:
    for info in PartitionedNamespace.open(uri).transactions():
        print(json.dumps(info.to_dict()))
    return 0


def recover(uri: str, lease_seconds: float) -> int:
    aborted = PartitionedNamespace.open(uri).recover(lease_seconds)
    print(f"aborted {len(aborted)} abandoned transaction(s): {', '.join(aborted) or '-'}")
    return 0


def history(uri: str, limit: int | None, include_internal: bool) -> int:
    """One JSON line per ``__manifest`` version, newest first."""
    ns = PartitionedNamespace.open(uri)
    for entry in ns.history(limit, include_internal=include_internal):
        print(json.dumps(entry.to_dict(), ensure_ascii=False))
    return 0


def tag(args: argparse.Namespace) -> int:
    ns = PartitionedNamespace.open(args.uri)
    if args.tag_command == "create":
        as_of = args.version if args.version is not None else args.at
        print(json.dumps(ns.tag(args.name, as_of).to_dict()))
    elif args.tag_command == "list":
        for info in ns.tags():
            print(json.dumps(info.to_dict()))
    else:
        ns.untag(args.name)
        print(f"deleted tag {args.name}")
    return 0


def _moment(text: str) -> dt.datetime:
    """An ISO 8601 moment for ``--at`` (without an offset: UTC)."""
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date and time (e.g. 2025-12-01T06:00:00+00:00)"
        ) from None


def repair(uri: str) -> int:
    report = PartitionedNamespace.open(uri).repair()
    print(json.dumps(report.__dict__))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_lance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo_p = sub.add_parser("demo", help="end-to-end demo of the format on a local directory")
    demo_p.add_argument("directory", nargs="?", default=".demo/events", type=Path)
    describe_p = sub.add_parser("describe", help="schema, partition specs and partitions")
    describe_p.add_argument("uri")
    prune_p = sub.add_parser("prune", help="the partitions a filter needs, as JSON lines")
    prune_p.add_argument("uri")
    prune_p.add_argument("filter")
    sub.add_parser("transactions", help="recorded transactions and their states").add_argument(
        "uri"
    )
    recover_p = sub.add_parser("recover", help="abort transactions idle for longer than a lease")
    recover_p.add_argument("uri")
    recover_p.add_argument("--lease-seconds", type=float, default=6 * 3600.0)
    sub.add_parser("repair", help="restore __manifest columns a foreign tool dropped").add_argument(
        "uri"
    )
    history_p = sub.add_parser("history", help="what each __manifest version did, as JSON lines")
    history_p.add_argument("uri")
    history_p.add_argument("--limit", type=int, default=None, help="the newest N entries only")
    history_p.add_argument(
        "--all", action="store_true", help="also the bookkeeping versions (claims, compaction)"
    )
    tag_p = sub.add_parser("tag", help="pin __manifest versions (kept by maintain) by name")
    tag_sub = tag_p.add_subparsers(dest="tag_command", required=True)
    create_p = tag_sub.add_parser("create", help="tag the latest version, or an earlier one")
    create_p.add_argument("uri")
    create_p.add_argument("name")
    at = create_p.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="a __manifest version")
    at.add_argument("--at", type=_moment, default=None, help="the version current at a moment")
    tag_sub.add_parser("list", help="every tag, as JSON lines").add_argument("uri")
    delete_p = tag_sub.add_parser("delete", help="remove a tag (maintain may then clean up)")
    delete_p.add_argument("uri")
    delete_p.add_argument("name")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "demo":
            return run_demo(args.directory)
        if args.command == "describe":
            return describe(args.uri)
        if args.command == "transactions":
            return list_transactions(args.uri)
        if args.command == "recover":
            return recover(args.uri, args.lease_seconds)
        if args.command == "repair":
            return repair(args.uri)
        if args.command == "history":
            return history(args.uri, args.limit, args.all)
        if args.command == "tag":
            return tag(args)
        return prune(args.uri, args.filter)
    except LanceNamespaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc)


def exit_code(exc: BaseException) -> int:
    """The exit code for an error (see the module docstring): its class decides."""
    if isinstance(exc, CommitConflict):
        return 3
    return 1 if is_retryable(exc) else 2
