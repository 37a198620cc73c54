"""The command line of partitioned Lance namespaces: inspect, read, operate, or run the demo.

Installed as lance-partitioned (the same as python -m airflow_provider_lance):

  lance-partitioned describe URI [--partitions N|all] [--as-of V|TIME|TAG]
  lance-partitioned head URI [-n 10] [--filter SQL] [--columns a,b] [--as-of ...]
  lance-partitioned prune URI ["event_date >= DATE '2025-12-01'"] [--as-of ...]
  lance-partitioned history URI [--limit N] [--all] [--as-of ...]
  lance-partitioned transactions URI | recover URI [--lease-seconds S] | repair URI
  lance-partitioned verify URI [FILTER] [--fix | --as-of ...]
  lance-partitioned tag create URI NAME [--version N | --at 2025-12-01T00:00] | tag list URI
  lance-partitioned tag delete URI NAME
  lance-partitioned delete URI "user_id = 42" [--txn-id ID]
  lance-partitioned drop-partitions URI "event_date < '2025-01-01'"
  lance-partitioned merge URI updates.parquet|- --on id --on event_date [--delete-unmatched]
  lance-partitioned optimize URI [FILTER] [--target-rows-per-fragment N]
  lance-partitioned indices URI [--as-of ...]
  lance-partitioned create-index URI COLUMN TYPE [--name N] [--filter SQL] [--param K=V]
  lance-partitioned optimize-indices URI [FILTER] [--name N] | drop-index URI NAME
  lance-partitioned maintain URI [--older-than-hours H] [--sweep-orphans] [--dry-run]
  lance-partitioned demo [DIR] [--force]

Object stores: --storage-option KEY=VALUE (repeatable; before or after the command) and
the LANCE_STORAGE_OPTIONS variable, a JSON object such as {"aws_endpoint":
"http://localhost:9000", "allow_http": true} (the Spark write job reads the same one);
flags win over the variable. --as-of takes a __manifest version, an ISO 8601 date or time
(UTC unless it has an offset) or a tag.

Output: listings (describe, head, prune, history, transactions, tag list, indices) print tables,
"(none)" when empty, NULL for a missing value and a string that could read as something
else quoted ('NULL', '', ' a', 'a\tb'); --json prints JSON lines instead, values with
their JSON types, describe --json one JSON document. Commands that change or check
something print their result as one JSON document on stdout, progress on stderr.

Exit codes (as the Spark write job's): 0 done, 1 a failure a retry may fix (storage
unreachable, an unexpected error), 2 an error no retry can fix (not a namespace, bad filter,
bad option, a read-only or denied store, ...), 3 a conflict with a concurrent writer; verify
exits 4 when rows lie outside the partition their values give (with --fix: when they still
do after moving them); 130 after Ctrl-C, 141 when stdout's reader went away (| head). An
unexpected error prints one line; --debug (or LANCE_PARTITIONED_DEBUG=1) its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from airflow_provider_lance import __version__
from airflow_provider_lance.namespace import (
    DEFAULT_MIN_AGE,
    MIN_SAFE_ORPHAN_AGE,
    CommitConflict,
    LanceNamespaceError,
    permanent_failure,
)
from airflow_provider_lance.namespace.errors import is_retryable

from . import commands, options
from .demo import (
    DEMO_MARKER,
    DEMO_SCHEMA,
    demo_events,
    mark_demo_directory,
    prepare_demo_directory,
    run_demo,
)

__all__ = [
    "DEMO_MARKER",
    "DEMO_SCHEMA",
    "PROG",
    "build_parser",
    "demo_events",
    "exit_code",
    "main",
    "mark_demo_directory",
    "prepare_demo_directory",
    "run_demo",
]

#: The console script ``pyproject.toml`` installs (``[project.scripts]``).
PROG = "lance-partitioned"
_MODULE_PROG = "python -m airflow_provider_lance"

#: Set to 1 for the traceback of an unexpected error (as ``--debug`` does).
DEBUG_ENV = "LANCE_PARTITIONED_DEBUG"
#: The exit code of a command whose reader went away (``| head``): 128 + SIGPIPE, as a
#: shell reports a tool that SIGPIPE ended.
EXIT_BROKEN_PIPE = 141
#: The exit code of a command stopped with Ctrl-C: 128 + SIGINT.
EXIT_INTERRUPTED = 130

_URI_HELP = "the namespace: a local path or an object store URI (s3://bucket/events, gs://...)"
_FILTER_HELP = "an SQL filter, e.g. \"event_date >= DATE '2025-12-01' AND country = 'DE'\""
_TXN_HELP = "a transaction id: a retry with the same id returns the first result"


def _version_text() -> str:
    """The package version, with pylance's (what a bug report needs first)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        lance_version = version("pylance")
    except PackageNotFoundError:  # pragma: no cover - pylance is a dependency
        lance_version = "?"
    return f"%(prog)s {__version__} (pylance {lance_version})"


def _common_parents() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The options every namespace command takes (storage options, ``--json``) and the
    reading commands add (``--as-of``). Their defaults are SUPPRESS so that the same
    options given before the command (the top-level parser's) are not overwritten."""
    store = argparse.ArgumentParser(add_help=False)
    store.add_argument(
        "--storage-option",
        action="append",
        type=options.storage_option,
        default=argparse.SUPPRESS,
        metavar="KEY=VALUE",
        help="an object store option, e.g. aws_endpoint=http://localhost:9000 (repeat for "
        f"more; over those in ${options.STORAGE_OPTIONS_ENV})",
    )
    store.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON for scripts instead of tables",
    )
    store.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help=f"show the traceback of an unexpected error (or set {DEBUG_ENV}=1)",
    )
    reading = argparse.ArgumentParser(add_help=False)
    reading.add_argument(
        "--as-of",
        type=options.as_of,
        default=None,
        metavar="V|TIME|TAG",
        help="read a past state: a __manifest version (42), an ISO 8601 date or time "
        "(2025-12-10, 2025-12-10T06:00:00+01:00; UTC without an offset) or a tag name",
    )
    return store, reading


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The whole command line (its own function: tests walk it)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version", action="version", version=_version_text(), help="print the version and exit"
    )
    parser.add_argument(
        "--storage-option",
        dest="global_storage_option",
        action="append",
        type=options.storage_option,
        default=[],
        metavar="KEY=VALUE",
        help="an object store option for the command that follows (repeat for more)",
    )
    parser.add_argument(
        "--json",
        dest="global_json",
        action="store_true",
        help="print JSON for scripts instead of tables",
    )
    parser.add_argument(
        "--debug",
        dest="global_debug",
        action="store_true",
        help=f"show the traceback of an unexpected error (or set {DEBUG_ENV}=1)",
    )
    store, reading = _common_parents()
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="one of:")

    def command(name: str, help: str, *, reads: bool = False, parent: Any = sub) -> Any:
        parents = [store, reading] if reads else [store]
        made = parent.add_parser(name, help=help, description=help, parents=parents)
        made.add_argument("uri", metavar="URI", help=_URI_HELP)
        return made

    _add_reading_commands(command)
    _add_operator_commands(command, sub)
    _add_table_operations(command)
    demo_p = sub.add_parser(
        "demo",
        help="end-to-end demo of the format on a local directory",
        description="end-to-end demo of the format on a local directory",
    )
    demo_p.add_argument(
        "directory",
        nargs="?",
        default=Path(".demo/events"),
        type=options.local_directory,
        metavar="DIR",
        help="where to create the demo namespace (default %(default)s); must not exist, be "
        "empty, or be a directory an earlier demo made",
    )
    demo_p.add_argument(
        "--force",
        action="store_true",
        help="empty DIR first, deleting even files the demo did not make",
    )
    return parser


def _add_reading_commands(command: Callable[..., Any]) -> None:
    describe_p = command(
        "describe",
        "schema, partition specs, totals (rows, bytes, fragments) and partitions",
        reads=True,
    )
    describe_p.add_argument(
        "--partitions",
        type=commands.partitions_limit,
        default=None,
        metavar="N|all",
        help=f"list the first N partitions (default {commands.DEFAULT_LISTED_PARTITIONS}; "
        "with --json: all); totals always cover every partition",
    )
    head_p = command("head", "the first rows a filter selects", reads=True)
    head_p.add_argument(
        "-n",
        "--rows",
        type=int,
        default=commands.DEFAULT_HEAD_ROWS,
        metavar="N",
        help="how many rows (default %(default)s)",
    )
    head_p.add_argument("--filter", default=None, metavar="SQL", help=_FILTER_HELP)
    head_p.add_argument(
        "--columns",
        action="append",
        metavar="A,B",
        help="only these columns, comma-separated (default: every column)",
    )
    prune_p = command("prune", "the partitions a filter needs", reads=True)
    prune_p.add_argument(
        "filter", nargs="?", metavar="FILTER", help=f"{_FILTER_HELP} (default: every partition)"
    )
    history_p = command("history", "what each __manifest version did, newest first", reads=True)
    history_p.add_argument("--limit", type=int, default=None, help="the newest N entries only")
    history_p.add_argument(
        "--all", action="store_true", help="also the bookkeeping versions (claims, compaction)"
    )
    command("indices", "the declared indexes and how much each covers", reads=True)
    verify_p = command(
        "verify",
        "check every row lies in the partition its values give (exit 4 if not)",
        reads=True,
    )
    verify_p.add_argument(
        "filter", nargs="?", metavar="FILTER", help="only the partitions this filter selects"
    )
    verify_p.add_argument(
        "--fix",
        action="store_true",
        help="move misplaced rows where they belong (one commit; not with --as-of)",
    )


def _add_operator_commands(command: Callable[..., Any], sub: Any) -> None:
    command("transactions", "recorded transactions and their states")
    recover_p = command("recover", "abort transactions idle for longer than a lease")
    recover_p.add_argument(
        "--lease-seconds",
        type=options.duration,
        default=6 * 3600.0,
        help="how long a transaction may be idle before it counts as abandoned "
        "(default %(default)s)",
    )
    command("repair", "restore __manifest columns a foreign tool dropped")
    help = "pin __manifest versions (kept by maintain) by name"
    tag_p = sub.add_parser("tag", help=help, description=help)
    tag_sub = tag_p.add_subparsers(
        dest="tag_command", required=True, metavar="ACTION", help="one of:"
    )
    create_p = command("create", "tag the latest version, or an earlier one", parent=tag_sub)
    create_p.add_argument("name", metavar="NAME", help="the tag (letters, digits, ._-)")
    at = create_p.add_mutually_exclusive_group()
    at.add_argument("--version", type=int, default=None, help="a __manifest version")
    at.add_argument(
        "--at",
        type=options.moment,
        default=None,
        help="the version current at an ISO 8601 moment (UTC without an offset)",
    )
    command("list", "every tag", parent=tag_sub)
    delete_p = command("delete", "remove a tag (maintain may then clean up)", parent=tag_sub)
    delete_p.add_argument("name", metavar="NAME", help="the tag to remove")


def _add_table_operations(command: Callable[..., Any]) -> None:
    delete_p = command("delete", "delete the rows matching a filter (one commit)")
    delete_p.add_argument("filter", metavar="FILTER", help=_FILTER_HELP)
    delete_p.add_argument("--txn-id", help=_TXN_HELP)
    drop_p = command("drop-partitions", "drop the partitions whose partition values match a filter")
    drop_p.add_argument(
        "filter", metavar="FILTER", help="on partition fields, e.g. \"event_date < '2025-01-01'\""
    )
    drop_p.add_argument("--txn-id", help=_TXN_HELP)
    merge_p = command("merge", "upsert the rows of a Parquet file by key columns")
    merge_p.add_argument(
        "parquet", metavar="PARQUET", help="the rows to upsert: a local Parquet file, - for stdin"
    )
    merge_p.add_argument("--on", action="append", required=True, help="a key column (repeat)")
    merge_p.add_argument(
        "--delete-unmatched",
        action="store_true",
        help="also delete stored rows whose key the file lacks",
    )
    merge_p.add_argument("--txn-id", help=_TXN_HELP)
    optimize_p = command("optimize", "compact leaves with many small fragments")
    optimize_p.add_argument(
        "filter", nargs="?", metavar="FILTER", help="only the partitions this filter selects"
    )
    optimize_p.add_argument(
        "--target-rows-per-fragment",
        type=int,
        default=1024 * 1024,
        help="rows per compacted fragment (default %(default)s)",
    )
    optimize_p.add_argument("--txn-id", help=_TXN_HELP)
    _add_index_operations(command)
    maintain_p = command(
        "maintain", "compact __manifest, clean up old versions, sweep orphaned files"
    )
    maintain_p.add_argument(
        "--older-than-hours",
        type=options.duration,
        help="remove versions older than this, except tagged ones and what they read "
        "(default: keep every version)",
    )
    maintain_p.add_argument(
        "--sweep-orphans",
        action="store_true",
        help="also delete files no version references (killed writers, dropped partitions)",
    )
    maintain_p.add_argument(
        "--orphan-min-age-hours",
        type=options.duration,
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


def _add_index_operations(command: Callable[..., Any]) -> None:
    create_p = command("create-index", "declare an index and build it on every partition")
    create_p.add_argument("column", metavar="COLUMN", help="the column to index")
    create_p.add_argument(
        "index_type",
        metavar="TYPE",
        help="pylance's index type: IVF_PQ, IVF_HNSW_SQ, ... (vectors), BTREE, BITMAP, "
        "INVERTED, ... (scalars)",
    )
    create_p.add_argument("--name", default=None, help="the index's name (default COLUMN_idx)")
    create_p.add_argument(
        "--filter", default=None, metavar="SQL", help="only the partitions this filter selects"
    )
    create_p.add_argument(
        "--param",
        action="append",
        type=options.index_param,
        default=[],
        metavar="KEY=VALUE",
        help="a pylance create_index argument, the value JSON or text (metric=cosine, "
        "num_partitions=4; repeat for more)",
    )
    create_p.add_argument(
        "--replace", action="store_true", help="rebuild an index of that name declared already"
    )
    create_p.add_argument(
        "--no-shared-model",
        dest="shared_model",
        action="store_false",
        help="IVF types: train a model per partition instead of one shared by all",
    )
    create_p.add_argument("--txn-id", help=_TXN_HELP)
    optimize_p = command("optimize-indices", "index what the declared indexes do not cover yet")
    optimize_p.add_argument(
        "filter", nargs="?", metavar="FILTER", help="only the partitions this filter selects"
    )
    optimize_p.add_argument(
        "--name", action="append", help="only this index (repeat for more; default: all)"
    )
    optimize_p.add_argument("--txn-id", help=_TXN_HELP)
    drop_p = command("drop-index", "remove an index from the namespace and every partition")
    drop_p.add_argument("name", metavar="NAME", help="the index")
    drop_p.add_argument("--txn-id", help=_TXN_HELP)


#: Commands whose progress (INFO logs) goes to stderr: they change the namespace.
_LOGGED = frozenset(
    {
        "delete",
        "drop-partitions",
        "merge",
        "optimize",
        "maintain",
        "create-index",
        "optimize-indices",
        "drop-index",
    }
)
_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "describe": commands.describe,
    "head": commands.head,
    "prune": commands.prune,
    "history": commands.history,
    "verify": commands.verify,
    "transactions": commands.transactions,
    "recover": commands.recover,
    "repair": commands.repair,
    "tag": commands.tag,
    "indices": commands.indices,
    "delete": commands.delete,
    "drop-partitions": commands.drop_partitions,
    "merge": commands.merge,
    "optimize": commands.optimize,
    "create-index": commands.create_index,
    "optimize-indices": commands.optimize_indices,
    "drop-index": commands.drop_index,
    "maintain": commands.maintain,
}


def _prog() -> str:
    """The name the user typed: the console script's, else ``python -m ...``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return PROG if name == PROG else _MODULE_PROG


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (see the module docstring). The console script's
    entry point (``[project.scripts]``) and ``python -m airflow_provider_lance``'s.

    No error ends in a traceback: a project error prints its message (``error: ...``);
    anything else one line naming it and how to see its traceback (``--debug``); a reader
    that went away (``| head``) ends the command quietly."""
    parser = build_parser(_prog())
    args = parser.parse_args(argv)
    bad = options.not_utf8(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        parser.error(bad)
    if args.command == "demo" and args.global_json:
        parser.error("demo prints a walkthrough for people, not JSON: run it without --json")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command in _LOGGED:
        logging.getLogger("airflow_provider_lance").setLevel(logging.INFO)
    debug = bool(
        args.global_debug or getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "")
    )
    try:
        if args.command == "demo":
            code = run_demo(args.directory, args.force)
        else:
            code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except LanceNamespaceError as exc:
        return _failed(exc)
    except Exception as exc:
        if debug:
            raise
        escaped = permanent_failure(exc)
        if escaped is not None:  # a storage failure no call translated
            return _failed(escaped)
        first = next(iter(str(exc).splitlines()), "")
        print(
            f"error: unexpected {type(exc).__name__}: {first} (run again with "
            f"--debug, or {DEBUG_ENV}=1, for the traceback; please report it)",
            file=sys.stderr,
        )
        return 1


def _failed(exc: LanceNamespaceError) -> int:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()
    print(f"error: {exc}", file=sys.stderr)
    return exit_code(exc)


def _reader_gone() -> int:
    """Python's documented way out when stdout's reader went away: point stdout at
    /dev/null, so that nothing is written into the closed pipe at exit (which would print
    a traceback)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        pass
    return EXIT_BROKEN_PIPE


def exit_code(exc: BaseException) -> int:
    """The exit code for an error (see the module docstring): its class decides."""
    if isinstance(exc, CommitConflict):
        return 3
    return 1 if is_retryable(exc) else 2
