"""The commands: each opens the namespace with the storage options it was given, reads or
changes it, and prints a table (people) or JSON (scripts, ``--json``).

Listings (``describe``, ``prune``, ``head``, ``history``, ``transactions``, ``tag list``)
print aligned tables by default and, with ``--json``, exactly the JSON lines they printed
before tables became their default. Commands that change or check something (the table
operations, ``verify``, ``repair``, ``tag create``) print their result as one JSON
document, with or without ``--json``: scripts and Airflow tasks parse it, and its fields
are the result's own.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_provider_lance.namespace import (
    MIN_SAFE_ORPHAN_AGE,
    AsOf,
    IndexInfo,
    InvalidArgumentError,
    NamespaceState,
    Partition,
    PartitionedNamespace,
    ScanTask,
)

from . import options, output, progress

#: Partitions ``describe`` lists in a table unless ``--partitions`` says otherwise.
DEFAULT_LISTED_PARTITIONS = 20
#: Rows ``head`` prints unless ``-n`` says otherwise.
DEFAULT_HEAD_ROWS = 10
#: The longest age ``maintain`` takes in hours (a million years: older than any file).
MAX_HOURS = 10**6 * 365 * 24
#: Characters of one cell ``head`` shows (longer values end in ``…``; ``--json`` has all).
HEAD_CELL_WIDTH = 40


def open_namespace(args: argparse.Namespace) -> PartitionedNamespace:
    """The namespace ``args.uri`` names, opened with the command's storage options."""
    flags = [*args.global_storage_option, *getattr(args, "storage_option", [])]
    return PartitionedNamespace.open(args.uri, options.storage_options(flags))


def as_json(args: argparse.Namespace) -> bool:
    """Whether the command prints JSON (``--json`` before or after the command name)."""
    return bool(args.global_json or getattr(args, "json", False))


def _state(ns: PartitionedNamespace, args: argparse.Namespace) -> NamespaceState:
    """The state a reading command reads: the one ``--as-of`` names, or the latest."""
    return ns.state(getattr(args, "as_of", None))


def _sorted(partitions: Sequence[Partition]) -> list[Partition]:
    """Partitions in the order every listing uses: by spec version, then by their typed
    values (``2`` before ``10``, dates by date), NULL last."""
    return output.sorted_by(
        partitions, lambda p: (p.spec_version, *output.sort_key(list(p.values.values())))
    )


# -- describe ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class LeafStats:
    """What a partition holds at its ``read_version``, from Lance's fragment metadata (no
    data is read): live rows (deleted ones subtracted), data file bytes (None when a file's
    size was not recorded, as in tables written by old Lance versions) and fragments."""

    rows: int
    bytes: int | None
    fragments: int


def leaf_stats(task: ScanTask) -> LeafStats:
    """:class:`LeafStats` of one partition, from the data files its task lists."""
    fragments = task.fragments or ()
    sizes = [f.bytes for f in fragments]
    size = None if None in sizes else sum(b or 0 for b in sizes)
    return LeafStats(sum(f.rows for f in fragments), size, len(fragments))


def _total(values: Sequence[int | None]) -> int | None:
    return None if None in values else sum(v or 0 for v in values)


def describe(args: argparse.Namespace) -> int:
    """Schema, partition specs, totals (rows, bytes, fragments) and the partitions, as of
    ``--as-of``. Totals come from fragment metadata: every leaf's manifest is read (as
    many at once as the namespace's concurrency), none of its data."""
    ns = open_namespace(args)
    state = _state(ns, args)
    with progress.shown(args) as line:
        plan = ns.plan_scan(as_of=state.version, fragments=True, progress=line)
    by_id = {t.object_id: t for t in plan.tasks}  # every leaf, listed
    partitions = _sorted([t.partition for t in plan.tasks])
    stats = [leaf_stats(by_id[p.object_id]) for p in partitions]
    totals = {
        "partitions": len(partitions),
        "rows": sum(s.rows for s in stats),
        "bytes": _total([s.bytes for s in stats]),
        "fragments": sum(s.fragments for s in stats),
    }
    limit = args.partitions
    if limit is None:
        limit = len(partitions) if as_json(args) else DEFAULT_LISTED_PARTITIONS
    listed = list(zip(partitions, stats, strict=True))[:limit]
    schema = state.schema.arrow
    indices = ns.list_indices(as_of=state.version)
    if as_json(args):
        output.json_line(
            {
                "uri": ns.uri,
                "version": state.version,
                "latest_version": ns.version,
                "schema": [
                    {
                        "name": f.name,
                        "type": str(f.type),
                        "nullable": f.nullable,
                        "metadata": _metadata(f),
                    }
                    for f in schema
                ],
                "partition_specs": {
                    str(v): [_spec_field(field) for field in state.specs[v]]
                    for v in sorted(state.specs)
                },
                "totals": totals,
                "indices": [i.to_dict() for i in indices],
                "partitions": [
                    {
                        **output.with_values(p.to_dict(), p.values),
                        "rows": s.rows,
                        "bytes": s.bytes,
                        "fragments": s.fragments,
                    }
                    for p, s in listed
                ],
            }
        )
        return 0
    latest = ns.version
    at = "the latest" if state.version == latest else f"the latest is v{latest}"
    output.fields(
        [
            ("namespace", ns.uri),
            ("version", f"v{state.version} ({at})"),
            ("partitions", str(totals["partitions"])),
            ("rows", str(totals["rows"])),
            ("bytes", f"{output.byte_size(totals['bytes'])} ({totals['bytes']})"),
            ("fragments", str(totals["fragments"])),
        ]
    )
    # The columns reads return and writes take, and the dropped ones apart: their field
    # ids are never reused, and a name added again is a new column (in one list, a name
    # dropped and added again would read as one column twice).
    active_ids = {_metadata(f).get("lance:field_id") for f in state.schema.active}
    dropped = [f for f in schema if _metadata(f).get("lance:field_id") not in active_ids]
    for title, fields in (("columns", state.schema.active), ("dropped columns", dropped)):
        if not fields and title != "columns":
            continue
        note = " (not read or written; their ids are never reused)" if fields is dropped else ""
        print(f"\n{title}{note}:")
        output.table(
            ["column", "type", "nullable", "field_id", "metadata"],
            [
                (
                    f.name,
                    str(f.type),
                    f.nullable,
                    _metadata(f).pop("lance:field_id", None),
                    _note(f),
                )
                for f in fields
            ],
            right=["field_id"],
            indent="  ",
        )
    for version in sorted(state.specs):
        print(f"\npartition spec v{version}:")
        output.table(
            ["field_id", "name", "expression", "source", "type"],
            [
                (
                    f.field_id,
                    f.name,
                    f.expression,
                    f"{f.source} (dropped)" if str(f.source_id) not in active_ids else f.source,
                    str(f.result_type),
                )
                for f in state.specs[version]
            ],
            right=["field_id"],
            indent="  ",
        )
    if indices:
        print("\nindexes:")
        index_table(indices, indent="  ")
    if not listed and partitions:  # --partitions 0: the totals only
        return 0
    shown = f"the first {len(listed)} of {len(partitions)}" if len(listed) < len(partitions) else ""
    print(f"\npartitions{f' ({shown})' if shown else ''}:")
    output.table(
        ["spec", "read_version", "rows", "bytes", "fragments", "values"],
        [
            (
                f"v{p.spec_version}",
                p.read_version,
                s.rows,
                output.byte_size(s.bytes),
                s.fragments,
                output.values_text(p.values),
            )
            for p, s in listed
        ],
        right=["read_version", "rows", "bytes", "fragments"],
        indent="  ",
    )
    if shown:
        print(f"  ... {len(partitions) - len(listed)} more (--partitions all lists every one)")
    return 0


def _metadata(f: pa.Field) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (f.metadata or {}).items()}


def _note(f: pa.Field) -> output.Shown:
    """A column's metadata besides its field id (e.g. ``lance:deprecated``), or empty."""
    rest = {k: v for k, v in _metadata(f).items() if k != "lance:field_id"}
    return output.Shown(", ".join(f"{output.cell(k)}={output.cell(v)}" for k, v in rest.items()))


def _spec_field(field: Any) -> dict[str, Any]:
    return {
        "field_id": field.field_id,
        "name": field.name,
        "expression": field.expression,
        "source": field.source,
        "result_type": str(field.result_type),
    }


def partitions_limit(text: str) -> int:
    """``--partitions N|all``: how many partitions ``describe`` lists."""
    if text.strip().lower() == "all":
        return sys.maxsize
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of partitions (or all)")
    return value


# -- prune, head --------------------------------------------------------------------------------
def prune(args: argparse.Namespace) -> int:
    """The partitions a filter needs (as of ``--as-of``); every partition without one."""
    ns = open_namespace(args)
    partitions = _sorted(ns.prune(args.filter, as_of=getattr(args, "as_of", None)))
    if as_json(args):
        for p in partitions:
            output.json_line(output.with_values(p.to_dict(), p.values))
        return 0
    output.table(
        ["spec", "read_version", "values", "directory"],
        [
            (f"v{p.spec_version}", p.read_version, output.values_text(p.values), p.directory)
            for p in partitions
        ],
        right=["read_version"],
    )
    return 0


def head(args: argparse.Namespace) -> int:
    """The first ``-n`` rows a filter selects (as of ``--as-of``): partitions are pruned and
    reading stops once ``-n`` rows are found, so a peek at a large namespace is cheap."""
    if args.rows < 0:
        raise InvalidArgumentError(f"-n must be at least 0, got {args.rows}")
    ns = open_namespace(args)
    columns = _columns(args.columns)
    batches = []
    found = 0
    if args.rows:
        with progress.shown(args) as shown:
            for batch in ns.to_batches(
                columns=columns,
                filter=args.filter,
                as_of=getattr(args, "as_of", None),
                progress=shown,
            ):
                batches.append(batch.slice(0, args.rows - found))
                found += batches[-1].num_rows
                if found >= args.rows:
                    break
    else:  # -n 0: the columns only (the filter and columns are still checked)
        ns.to_batches(columns=columns, filter=args.filter, as_of=getattr(args, "as_of", None))
    rows = [row for b in batches for row in b.to_pylist()]
    if as_json(args):
        for row in rows:
            output.json_line(row)
        return 0
    schema = batches[0].schema if batches else pa.schema([])
    numeric = [f.name for f in schema if _is_number(f.type)]
    output.table(
        schema.names,
        [[r[n] for n in schema.names] for r in rows],
        right=numeric,
        width=HEAD_CELL_WIDTH,
    )
    return 0


def _is_number(dtype: pa.DataType) -> bool:
    """Whether a column holds numbers (aligned right, as people compare them)."""
    types = pa.types
    return bool(types.is_integer(dtype) or types.is_floating(dtype) or types.is_decimal(dtype))


def _columns(text: Sequence[str] | None) -> list[str] | None:
    """``--columns a,b`` (repeatable) as a list, None for every column."""
    if not text:
        return None
    names = [n.strip() for item in text for n in item.split(",") if n.strip()]
    if not names:  # (an empty shell variable): not every column by surprise
        raise InvalidArgumentError(
            f"--columns {' '.join(map(repr, text))} names no column; leave it out for every one"
        )
    return names


# -- history, transactions, tags, recover, repair, verify ------------------------------------
def history(args: argparse.Namespace) -> int:
    """What each ``__manifest`` version did, newest first; with ``--as-of``, only the
    versions up to the state it names (what led to it)."""
    ns = open_namespace(args)
    target: AsOf | None = getattr(args, "as_of", None)
    if target is None:
        entries = ns.history(args.limit, include_internal=args.all)
    else:
        if args.limit is not None and args.limit < 1:
            raise InvalidArgumentError(f"limit must be a positive number, got {args.limit}")
        upto = ns.state(target).version
        entries = [e for e in ns.history(None, include_internal=args.all) if e.version <= upto]
        entries = entries[: args.limit] if args.limit is not None else entries
    cleaned = _cleaned_up(ns)
    if as_json(args):
        for entry in entries:
            output.result_json(entry)
        if cleaned:
            print(cleaned, file=sys.stderr)
        return 0
    output.table(
        ["version", "committed (UTC)", "operation", "mode", "txn_id", "partitions", "rows", "tags"],
        [
            (
                e.version,
                output.utc_time(e.timestamp),
                e.operation,
                e.mode,
                e.txn_id,
                len(e.partitions),
                e.rows,
                output.Shown(", ".join(output.cell(t) for t in e.tags)),
            )
            for e in entries
        ],
        right=["version", "partitions", "rows"],
    )
    if cleaned:
        print(cleaned)
    return 0


def _cleaned_up(ns: PartitionedNamespace) -> str | None:
    """A note when ``maintain`` removed ``__manifest`` versions (their history went with
    them), or None."""
    retained = ns.versions()
    gone = [v for v in range(1, max(retained, default=0)) if v not in set(retained)]
    if not gone:
        return None
    kept = [v for v in retained if v < max(gone)]
    tagged = f"; kept: tagged v{', v'.join(map(str, kept))}" if kept else ""
    return (
        f"(__manifest versions {output.ranges(gone)} and their history were removed by "
        "maintain: it keeps the versions younger than its --older-than-hours and tagged "
        f"ones{tagged})"
    )


def transactions(args: argparse.Namespace) -> int:
    """Every recorded transaction and its state, oldest first."""
    infos = open_namespace(args).transactions()
    if as_json(args):
        for info in infos:
            output.json_line(info.to_dict(), ensure_ascii=True)
        return 0
    output.table(
        [
            "txn_id",
            "state",
            "mode",
            "incarnation",
            "stages",
            "partitions",
            "rows",
            "created (UTC)",
            "updated (UTC)",
            "error",
        ],
        [
            (
                i.txn_id,
                i.state,
                i.mode,
                i.incarnation,
                i.stages,
                i.partitions,
                i.rows,
                output.utc_time(i.created_at),
                output.utc_time(i.updated_at),
                i.error,
            )
            for i in infos
        ],
        right=["incarnation", "stages", "partitions", "rows"],
        width=80,
        whole=["txn_id"],
    )
    return 0


def recover(args: argparse.Namespace) -> int:
    """Abort transactions idle for longer than the lease."""
    aborted = open_namespace(args).recover(args.lease_seconds)
    if as_json(args):
        output.json_line({"aborted": aborted})
    else:
        listed = ", ".join(aborted) or output.NONE
        print(f"aborted {len(aborted)} abandoned transaction(s): {listed}")
    return 0


def tag(args: argparse.Namespace) -> int:
    """``tag create|list|delete``."""
    ns = open_namespace(args)
    if args.tag_command == "create":
        target = args.version if args.version is not None else args.at
        output.json_line(ns.tag(args.name, target).to_dict(), ensure_ascii=True)
    elif args.tag_command == "list":
        tags = ns.tags()
        if as_json(args):
            for info in tags:
                output.json_line(info.to_dict(), ensure_ascii=True)
            return 0
        output.table(
            ["name", "version", "created (UTC)"],
            [(t.name, t.version, output.utc_time(t.created_at)) for t in tags],
            right=["version"],
        )
    else:
        ns.untag(args.name)
        if as_json(args):
            output.json_line({"deleted": args.name})
        else:
            print(f"deleted tag {args.name}")
    return 0


def indices(args: argparse.Namespace) -> int:
    """The indexes declared on the namespace (as of ``--as-of``), each with its coverage."""
    found = open_namespace(args).list_indices(as_of=getattr(args, "as_of", None))
    if as_json(args):
        for info in found:
            output.json_line(info.to_dict())
        return 0
    index_table(found)
    return 0


def index_table(found: Sequence[IndexInfo], indent: str = "") -> None:
    """Indexes as a table: what each indexes, and how much of its scope it covers."""
    output.table(
        [
            "name",
            "column",
            "type",
            "filter",
            "partitions",
            "indexed",
            "rows indexed",
            "rows not indexed",
            "params",
        ],
        [
            (
                i.name,
                i.column,
                i.index_type,
                i.filter,
                i.partitions,
                i.partitions_indexed,
                i.rows_indexed,
                i.rows_unindexed,
                dict(i.params) if i.params else None,
            )
            for i in found
        ],
        right=["partitions", "indexed", "rows indexed", "rows not indexed"],
        indent=indent,
    )


def repair(args: argparse.Namespace) -> int:
    """Restore ``__manifest`` columns a foreign tool dropped."""
    output.json_line(open_namespace(args).repair().__dict__, ensure_ascii=True)
    return 0


def verify(args: argparse.Namespace) -> int:
    """Check rows lie in the partition their values give (exit 4 if not); ``--fix`` moves
    them, always in the latest state (a past state cannot be changed)."""
    target = getattr(args, "as_of", None)
    if args.fix and target is not None:
        raise InvalidArgumentError(
            "--fix changes the latest state; give --as-of without --fix to check a past one"
        )
    ns = open_namespace(args)
    report = ns.verify(args.filter, as_of=target)
    output.json_line(report.to_dict())
    if report.ok:
        return 0
    print(
        f"{report.misplaced_rows} row(s) in {len(report.misplaced)} partition(s) are not in "
        "the partition their values give (written before the routing fix of 2026-11-24?)"
        + ("; moving them" if args.fix else "; `verify --fix` moves them where they belong"),
        file=sys.stderr,
    )
    if not args.fix:
        return 4
    output.result_json(ns.relocate(args.filter))
    return 0 if ns.verify(args.filter).ok else 4


# -- table operations -----------------------------------------------------------------------
def delete(args: argparse.Namespace) -> int:
    with progress.shown(args) as shown:
        result = open_namespace(args).delete(args.filter, txn_id=args.txn_id, progress=shown)
    output.result_json(result)
    return 0


def drop_partitions(args: argparse.Namespace) -> int:
    output.result_json(open_namespace(args).drop_partitions(args.filter, txn_id=args.txn_id))
    return 0


def merge(args: argparse.Namespace) -> int:
    data = read_parquet(args.parquet)
    with progress.shown(args) as shown:
        result = open_namespace(args).merge(
            data,
            args.on,
            when_not_matched_by_source_delete=args.delete_unmatched,
            txn_id=args.txn_id,
            progress=shown,
        )
    output.result_json(result)
    return 0


def read_parquet(path: str) -> pa.Table:
    """The rows of the Parquet file at ``path`` (``-``: read from stdin)."""
    import pyarrow.parquet as pq

    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read()
            if not raw:
                raise InvalidArgumentError(
                    "stdin is empty: pipe a Parquet file in (... | lance-partitioned merge URI "
                    "- --on id), or give its path"
                )
            return pq.read_table(pa.BufferReader(raw))
        return pq.read_table(path)
    except FileNotFoundError:
        raise InvalidArgumentError(f"there is no file {path}") from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise InvalidArgumentError(f"cannot read {name} as Parquet: {exc}") from exc


def optimize(args: argparse.Namespace) -> int:
    ns = open_namespace(args)
    with progress.shown(args) as shown:
        result = ns.optimize(
            args.filter,
            target_rows_per_fragment=args.target_rows_per_fragment,
            txn_id=args.txn_id,
            progress=shown,
        )
    output.result_json(result)
    return 0


def create_index(args: argparse.Namespace) -> int:
    """``create-index``: any of pylance's types (the core names them when one is not)."""
    ns = open_namespace(args)
    with progress.shown(args) as shown:
        result = ns.create_index(
            args.column,
            args.index_type,
            args.name,
            filter=args.filter,
            replace=args.replace,
            shared_model=args.shared_model,
            txn_id=args.txn_id,
            progress=shown,
            **dict(args.param),
        )
    output.result_json(result)
    return 0


def optimize_indices(args: argparse.Namespace) -> int:
    ns = open_namespace(args)
    with progress.shown(args) as shown:
        result = ns.optimize_indices(
            args.filter, names=args.name or None, txn_id=args.txn_id, progress=shown
        )
    output.result_json(result)
    return 0


def drop_index(args: argparse.Namespace) -> int:
    output.result_json(open_namespace(args).drop_index(args.name, txn_id=args.txn_id))
    return 0


def _hours(value: float, flag: str) -> dt.timedelta:
    """A number of hours as a duration; NaN, infinities and ages beyond any date are
    refused naming the flag (Python's own error was a traceback)."""
    if not math.isfinite(value) or abs(value) > MAX_HOURS:
        raise InvalidArgumentError(
            f"{flag} must be a number of hours up to {MAX_HOURS:,}, got {value}"
        )
    return dt.timedelta(hours=value)


def maintain(args: argparse.Namespace) -> int:
    orphan_min_age = _hours(args.orphan_min_age_hours, "--orphan-min-age-hours")
    if args.sweep_orphans:  # refused in the command line's own words, before the namespace opens
        _check_orphan_min_age(orphan_min_age, args)
    older = args.older_than_hours
    with progress.shown(args) as shown:
        report = open_namespace(args).maintain(
            older_than=None if older is None else _hours(older, "--older-than-hours"),
            sweep_orphans=args.sweep_orphans,
            orphan_min_age=orphan_min_age,
            dry_run=args.dry_run,
            enforce_min_age=args.enforce_min_age,
            progress=shown,
        )
    output.result_json(report)
    return 0


def _check_orphan_min_age(age: dt.timedelta, args: argparse.Namespace) -> None:
    """The rule ``maintain`` enforces (no sweep younger than ``MIN_SAFE_ORPHAN_AGE``
    unless told), in the command line's flags."""
    if age < dt.timedelta(0):
        raise InvalidArgumentError(f"--orphan-min-age-hours must not be negative, got {age}")
    if args.enforce_min_age and not args.dry_run and age < MIN_SAFE_ORPHAN_AGE:
        raise InvalidArgumentError(
            f"--orphan-min-age-hours of {age} is below the safe minimum of "
            f"{MIN_SAFE_ORPHAN_AGE}: the files of writes still in flight (not yet committed) "
            "are referenced by no version yet and would be deleted. Use an age of at least "
            f"{MIN_SAFE_ORPHAN_AGE} (a dry run accepts any), or pass --no-enforce-min-age if "
            "no write can be running while the sweep does"
        )
