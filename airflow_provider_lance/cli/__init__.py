"""A small command line for partitioned namespaces: inspect one, prune it, or run the demo.

python -m airflow_provider_lance describe URI
python -m airflow_provider_lance prune URI "event_date >= DATE '2025-12-01'"
python -m airflow_provider_lance history URI [--limit N] [--all]
python -m airflow_provider_lance verify URI [FILTER] [--fix]
python -m airflow_provider_lance tag create URI NAME [--version N | --at 2025-12-01T00:00]
python -m airflow_provider_lance tag list URI
python -m airflow_provider_lance tag delete URI NAME
python -m airflow_provider_lance demo [DIR] [--force]
python -m airflow_provider_lance delete URI "user_id = 42" [--txn-id ID]
python -m airflow_provider_lance drop-partitions URI "event_date < '2025-01-01'"
python -m airflow_provider_lance merge URI updates.parquet --on id --on event_date
python -m airflow_provider_lance optimize URI [FILTER] [--target-rows-per-fragment N]
python -m airflow_provider_lance maintain URI [--older-than-hours H] [--sweep-orphans] [--dry-run]
    [--orphan-min-age-hours H [--no-enforce-min-age]]

Table operations print their result as JSON on stdout and their progress on stderr.

Exit codes (as the Spark write job's): 0 done, 1 a failure a retry may fix (storage
unreachable, an unexpected error), 2 an error no retry can fix (not a namespace, bad filter,
...), 3 a conflict with a concurrent writer; ``verify`` exits 4 when rows lie outside the
partition their values give (with ``--fix``: when they still do after moving them).

``demo`` replaces DIR only when it made it (it leaves a ``.lance-demo`` marker there) and
nothing else was put in it since; any other non-empty DIR is refused (exit 2) unless
``--force`` is given.
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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .namespace import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    PartitionField,
)
from .namespace.catalog import Partition, value_text
from .namespace.errors import is_retryable
from .namespace.manifest import MANIFEST_NAME
from .namespace.sweep import DEFAULT_MIN_AGE, LEAF_DIRECTORY, MIN_SAFE_ORPHAN_AGE, check_min_age
from .namespace.txnstore import TXN_DIR

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
    return name in (DEMO_MARKER, MANIFEST_NAME, TXN_DIR) or bool(LEAF_DIRECTORY.match(name))


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


def verify(uri: str, where: str | None, fix: bool) -> int:
    ns = PartitionedNamespace.open(uri)
    report = ns.verify(where)
    print(json.dumps(report.to_dict(), ensure_ascii=False))
    if report.ok:
        return 0
    print(
        f"{report.misplaced_rows} row(s) in {len(report.misplaced)} partition(s) are not in "
        "the partition their values give (written before the routing fix of 2026-11-24?)"
        + ("; moving them" if fix else "; `verify --fix` moves them where they belong"),
        file=sys.stderr,
    )
    if not fix:
        return 4
    _print_json(ns.relocate(where).to_dict())
    return 0 if ns.verify(where).ok else 4


# -- table operations -----------------------------------------------------------------------
def _print_json(obj: object) -> None:
    print(json.dumps(obj, ensure_ascii=False, default=str))


def delete(uri: str, where: str, txn_id: str | None) -> int:
    _print_json(PartitionedNamespace.open(uri).delete(where, txn_id=txn_id).to_dict())
    return 0


def drop_partitions(uri: str, where: str, txn_id: str | None) -> int:
    _print_json(PartitionedNamespace.open(uri).drop_partitions(where, txn_id=txn_id).to_dict())
    return 0


def merge(uri: str, path: str, on: list[str], delete_unmatched: bool, txn_id: str | None) -> int:
    import pyarrow.parquet as pq

    try:
        data = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise InvalidArgumentError(f"cannot read the Parquet file {path}: {exc}") from exc
    result = PartitionedNamespace.open(uri).merge(
        data, on, when_not_matched_by_source_delete=delete_unmatched, txn_id=txn_id
    )
    _print_json(result.to_dict())
    return 0


def optimize(uri: str, where: str | None, target_rows: int, txn_id: str | None) -> int:
    ns = PartitionedNamespace.open(uri)
    result = ns.optimize(where, target_rows_per_fragment=target_rows, txn_id=txn_id)
    _print_json(result.to_dict())
    return 0


def maintain(
    uri: str,
    older_than_hours: float | None,
    sweep_orphans: bool,
    orphan_min_age_hours: float,
    dry_run: bool,
    enforce_min_age: bool = True,
) -> int:
    orphan_min_age = dt.timedelta(hours=orphan_min_age_hours)
    if sweep_orphans:  # refused in the command line's own words, before the namespace opens
        check_min_age(
            orphan_min_age,
            enforce=enforce_min_age,
            dry_run=dry_run,
            name="--orphan-min-age-hours",
            override="--no-enforce-min-age",
        )
    report = PartitionedNamespace.open(uri).maintain(
        older_than=None if older_than_hours is None else dt.timedelta(hours=older_than_hours),
        sweep_orphans=sweep_orphans,
        orphan_min_age=orphan_min_age,
        dry_run=dry_run,
        enforce_min_age=enforce_min_age,
    )
    _print_json(report.to_dict())
    return 0


def _add_table_operations(sub: Any) -> None:
    delete_p = sub.add_parser("delete", help="delete the rows matching a filter (one commit)")
    delete_p.add_argument("uri")
    delete_p.add_argument("filter")
    delete_p.add_argument("--txn-id", help="makes a retry return the first result")
    drop_p = sub.add_parser(
        "drop-partitions", help="drop the partitions whose partition values match a filter"
    )
    drop_p.add_argument("uri")
    drop_p.add_argument("filter", help="on partition fields, e.g. \"event_date < '2025-01-01'\"")
    drop_p.add_argument("--txn-id")
    merge_p = sub.add_parser("merge", help="upsert the rows of a Parquet file by key columns")
    merge_p.add_argument("uri")
    merge_p.add_argument("parquet")
    merge_p.add_argument("--on", action="append", required=True, help="a key column (repeat)")
    merge_p.add_argument(
        "--delete-unmatched",
        action="store_true",
        help="also delete stored rows whose key the file lacks",
    )
    merge_p.add_argument("--txn-id")
    optimize_p = sub.add_parser("optimize", help="compact leaves with many small fragments")
    optimize_p.add_argument("uri")
    optimize_p.add_argument("filter", nargs="?")
    optimize_p.add_argument("--target-rows-per-fragment", type=int, default=1024 * 1024)
    optimize_p.add_argument("--txn-id")
    maintain_p = sub.add_parser(
        "maintain", help="compact __manifest, clean up old versions, sweep orphaned files"
    )
    maintain_p.add_argument("uri")
    maintain_p.add_argument("--older-than-hours", type=float)
    maintain_p.add_argument("--sweep-orphans", action="store_true")
    maintain_p.add_argument(
        "--orphan-min-age-hours",
        type=float,
        default=DEFAULT_MIN_AGE.total_seconds() / 3600,
        help="the sweep keeps unreferenced files younger than this (default %(default)s; "
        f"below {MIN_SAFE_ORPHAN_AGE.total_seconds() / 3600:g} hours it is refused unless "
        "--no-enforce-min-age or --dry-run)",
    )
    maintain_p.add_argument(
        "--no-enforce-min-age",
        dest="enforce_min_age",
        action="store_false",
        help="allow a shorter age: the files of writes still in flight are deleted too, so "
        "only when no write can be running",
    )
    maintain_p.add_argument(
        "--dry-run", action="store_true", help="report what the sweep would remove; change nothing"
    )


def _run_table_operation(args: argparse.Namespace) -> int | None:
    """Run a table operation command (None: not one), its progress logged to stderr."""
    if args.command not in ("delete", "drop-partitions", "merge", "optimize", "maintain"):
        return None
    logging.getLogger("airflow_provider_lance").setLevel(logging.INFO)
    if args.command == "delete":
        return delete(args.uri, args.filter, args.txn_id)
    if args.command == "drop-partitions":
        return drop_partitions(args.uri, args.filter, args.txn_id)
    if args.command == "merge":
        return merge(args.uri, args.parquet, args.on, args.delete_unmatched, args.txn_id)
    if args.command == "optimize":
        return optimize(args.uri, args.filter, args.target_rows_per_fragment, args.txn_id)
    return maintain(
        args.uri,
        args.older_than_hours,
        args.sweep_orphans,
        args.orphan_min_age_hours,
        args.dry_run,
        args.enforce_min_age,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_provider_lance",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    demo_p = sub.add_parser("demo", help="end-to-end demo of the format on a local directory")
    demo_p.add_argument(
        "directory",
        nargs="?",
        default=".demo/events",
        type=Path,
        metavar="DIR",
        help="where to create the demo namespace (default %(default)s); must not exist, be "
        "empty, or be a directory an earlier demo made",
    )
    demo_p.add_argument(
        "--force",
        action="store_true",
        help="empty DIR first, deleting even files the demo did not make",
    )
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
    verify_p = sub.add_parser(
        "verify", help="check every row lies in the partition its values give (exit 4 if not)"
    )
    verify_p.add_argument("uri")
    verify_p.add_argument("filter", nargs="?", help="only the partitions this filter selects")
    verify_p.add_argument(
        "--fix", action="store_true", help="move misplaced rows where they belong (one commit)"
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
    _add_table_operations(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        done = _run_table_operation(args)
        if done is not None:
            return done
        if args.command == "demo":
            return run_demo(args.directory, args.force)
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
        if args.command == "verify":
            return verify(args.uri, args.filter, args.fix)
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
