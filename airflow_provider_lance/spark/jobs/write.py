"""spark-submit job: read a source, optionally transform it with SQL, write it partitioned.

    spark-submit --master local[*] write.py \\
        --uri s3://bucket/events --source s3a://raw/events/2025-12-10 --format parquet \\
        --sql "SELECT * FROM source WHERE amount > 0" \\
        --mode overwrite --txn-id daily.2025-12-10 --commit --result-path /tmp/result.json

Storage options (object-store credentials, endpoint) come from the environment variable
``LANCE_STORAGE_OPTIONS`` (a JSON object), never a secret from the command line. In cluster
deploy mode, where the driver does not inherit spark-submit's environment, options without
secrets may come as ``--storage-options JSON`` and secrets from a reference resolved on the
driver, ``--storage-options-from env:NAME`` (e.g. a Kubernetes secret mapped into the
driver's environment) or ``file:/path`` (a mounted secret); later sources win: command line,
environment, reference. Ambient credentials (instance roles, IRSA) need none. The job writes a
small JSON result (txn id, state, partitions, rows, files) to ``--result-path``, a local
path or an object-store URI, so an orchestrator can pick it up; Spark jobs cannot return
values. A rerun with the same ``--txn-id`` replaces what an earlier run staged, or reports
the published result if that run was committed.

Exit codes, decided by the error's class (``is_retryable`` of the project's errors):

* 0 done;
* 1 a failure a retry may fix: storage unreachable or refusing access (``StorageError``),
  or an unexpected error;
* 2 bad input no retry can fix: arguments, source, SQL, namespace, schema or data, an
  aborted or closed transaction (every project error that is not retryable);
* 3 the commit conflicted with another writer (a retryable ``CommitConflict``; nothing of
  it was published, a retry may succeed; ``StaleStage``, whose stages can never be
  published, is a 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_lance.namespace import (
    MODES,
    CommitConflict,
    CommitResult,
    InvalidArgumentError,
    LanceNamespaceError,
    PartitionedNamespace,
    normalize_options,
    options_from_json,
    write_json,
)
from airflow_provider_lance.namespace.errors import is_retryable
from airflow_provider_lance.spark.datasource import register
from airflow_provider_lance.spark.jobs import (
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_FAILED,
    EXIT_OK,
    FORMATS,
    STORAGE_OPTIONS_ENV,
)
from airflow_provider_lance.spark.session import get_session
from airflow_provider_lance.spark.writer import StagedWrite, stage_partitioned

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("airflow_provider_lance.spark.jobs.write")


class BadInput(Exception):
    """The job was given something it cannot use (exit code 2)."""


def exit_code(exc: BaseException) -> int:
    """The exit code for a failed run (see the module docstring)."""
    if isinstance(exc, CommitConflict) and exc.retryable:  # StaleStage is for good
        return EXIT_CONFLICT
    if isinstance(exc, BadInput) or _is_analysis_error(exc):
        return EXIT_BAD_INPUT
    return EXIT_FAILED if is_retryable(exc) else EXIT_BAD_INPUT


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="airflow_provider_lance.spark.jobs.write",
        description="Write a source into a Lance partitioned namespace with Spark.",
    )
    parser.add_argument("--uri", required=True, help="the namespace root URI")
    parser.add_argument(
        "--source", required=True, help="a path/URI (parquet, csv, json) or a table name"
    )
    parser.add_argument("--format", choices=FORMATS, default="parquet")
    parser.add_argument(
        "--read-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark reader option, e.g. header=true (repeatable)",
    )
    parser.add_argument(
        "--sql",
        help="a transform over the source, which is the view `source`: SELECT ... FROM source",
    )
    parser.add_argument("--mode", choices=MODES, default="append")
    parser.add_argument("--txn-id", help="the transaction id (a rerun with it never duplicates)")
    parser.add_argument(
        "--commit", action="store_true", help="publish atomically (default: leave it staged)"
    )
    parser.add_argument(
        "--distribution",
        choices=("hash", "none"),
        default="hash",
        help="shuffle rows so each partition is written by one task (hash) or not (none)",
    )
    parser.add_argument("--result-path", required=True, help="where to write the JSON result")
    parser.add_argument(
        "--storage-options",
        help="storage options without secrets, as a JSON object (cluster deploy mode)",
    )
    parser.add_argument(
        "--storage-options-from",
        metavar="env:NAME|file:PATH",
        help="where the driver finds storage options with secrets (a JSON object)",
    )
    return parser.parse_args(argv)


def storage_options_of(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> dict[str, str] | None:
    """The job's storage options: command line, environment, then the reference."""
    options: dict[str, str] = {}
    if args.storage_options:
        options.update(_options_object(args.storage_options, "--storage-options"))
    options.update(storage_options_from_env(environ) or {})
    if args.storage_options_from:
        options.update(_resolve_reference(args.storage_options_from, environ))
    return options or None


def _resolve_reference(reference: str, environ: Mapping[str, str]) -> dict[str, str]:
    kind, sep, name = reference.partition(":")
    if not sep or not name or kind not in ("env", "file"):
        raise BadInput(f"--storage-options-from {reference!r} is not env:NAME or file:PATH")
    if kind == "env":
        if name not in environ:
            raise BadInput(
                f"--storage-options-from {reference}: the driver has no variable {name} "
                "(map the secret into the driver's environment, e.g. "
                f"spark.kubernetes.driver.secretKeyRef.{name}=<secret>:<key>)"
            )
        return _options_object(environ[name], f"the variable {name}")
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise BadInput(
            f"--storage-options-from {reference}: cannot read it on the driver ({exc}); "
            "mount the secret there, e.g. spark.kubernetes.driver.secrets.<secret>=<dir>"
        ) from exc
    return _options_object(text, name)


def storage_options_from_env(environ: Mapping[str, str] = os.environ) -> dict[str, str] | None:
    raw = environ.get(STORAGE_OPTIONS_ENV)
    if not raw:
        return None
    return _options_object(raw, STORAGE_OPTIONS_ENV)


def _options_object(raw: str, where: str) -> dict[str, str]:
    """The storage options a JSON object gives, as the core takes them (``true`` ->
    ``"true"``, a duration in seconds -> ``"30s"``, ``null`` unset: ``normalize_options``)."""
    try:
        options = options_from_json(raw, where)
    except InvalidArgumentError as exc:
        raise BadInput(str(exc)) from None
    try:
        return normalize_options(options) or {}
    except InvalidArgumentError as exc:
        raise BadInput(f"{where}: {exc}") from None


def read_source(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The source DataFrame, with the optional SQL transform applied."""
    options = {}
    for item in args.read_option:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadInput(f"--read-option {item!r} is not KEY=VALUE")
        options[key] = value
    if args.format == "table":
        df = spark.table(args.source)
    else:
        df = spark.read.options(**options).format(args.format).load(args.source)
    if args.sql:
        df.createOrReplaceTempView("source")
        df = spark.sql(args.sql)
    return df


def result_document(staged: StagedWrite, published: CommitResult | None) -> dict[str, Any]:
    """The job's JSON result (see the module docstring)."""
    doc = staged.to_dict()
    doc["manifest_version"] = None
    if published is not None:
        versions = {p.object_id: p.read_version for p in published.partitions}
        doc["state"] = "published"
        doc["manifest_version"] = published.manifest_version
        doc["txn_id"] = published.txn_id or staged.txn_id
        for part in doc["partitions"]:
            part["read_version"] = versions.get(part["object_id"])
    return doc


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    storage_options = storage_options_of(args)
    owned = SparkSession.getActiveSession() is None  # else it belongs to the caller
    spark = get_session(f"lance-write {args.txn_id or args.uri}")
    register(spark)  # a source or a --sql transform may read format("lance_partitioned")
    try:
        df = read_source(spark, args)
        staged = stage_partitioned(
            df,
            args.uri,
            args.mode,
            storage_options,
            txn_id=args.txn_id,
            distribution=args.distribution,
        )
        published = None
        if args.commit:
            ns = PartitionedNamespace.open(args.uri, storage_options)
            published = ns.commit(staged.txn_id)
        doc = result_document(staged, published)
        write_json(args.result_path, doc, storage_options)
        return doc
    finally:
        if owned:
            spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse_args(argv)  # exits with 2 on bad arguments
    try:
        doc = run(args)
    except Exception as exc:
        code = exit_code(exc)
        if isinstance(exc, CommitConflict):
            print(f"error: commit conflict: {exc}", file=sys.stderr)
        elif isinstance(exc, (BadInput, LanceNamespaceError)):
            print(f"error: {exc}", file=sys.stderr)
        elif code == EXIT_BAD_INPUT:  # a missing source, a bad SQL transform
            print(f"error: {_first_line(exc)}", file=sys.stderr)
        else:
            log.exception("the write job failed")
            print(f"error: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return code
    summary = {k: v for k, v in doc.items() if k != "partitions"}
    print(json.dumps(summary))
    return EXIT_OK


def _is_analysis_error(exc: BaseException) -> bool:
    from pyspark.errors import AnalysisException, ParseException

    return isinstance(exc, (AnalysisException, ParseException))


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else ""


if __name__ == "__main__":
    sys.exit(main())
