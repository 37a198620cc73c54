"""Spark writes and reads on an S3-compatible store: storage options must reach executors.

The Python workers of the shared session were started without any AWS environment, so a
task that did not receive the storage options could not reach the loopback moto server.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from airflow_provider_lance.hooks.connection import is_secret_key
from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.io.json_files import read_json
from airflow_provider_lance.spark import read_partitioned, write_partitioned
from airflow_provider_lance.spark.jobs.write import (
    STORAGE_OPTIONS_ENV,
    BadInput,
    main,
    parse_args,
    storage_options_of,
)
from tests.support import BUCKET, EVENTS_SCHEMA, events, sort_rows

pytestmark = [pytest.mark.s3, pytest.mark.integration]


def daily_namespace(uri: str, options: dict[str, str]) -> PartitionedNamespace:
    return PartitionedNamespace.create(
        uri,
        schema=EVENTS_SCHEMA,
        partition_fields=[PartitionField("d", "event_date")],
        storage_options=options,
    )


def test_spark_round_trip_on_s3(spark: SparkSession, storage_options: dict[str, str]) -> None:
    uri = f"s3://{BUCKET}/spark-events"
    ns = daily_namespace(uri, storage_options)
    table = events(900)
    result = write_partitioned(spark.createDataFrame(table), uri, storage_options=storage_options)
    assert result.rows == 900
    assert sort_rows(ns.to_table()) == sort_rows(table)
    df = read_partitioned(
        spark, uri, filter="event_date = DATE '2025-12-11'", storage_options=storage_options
    )
    assert sort_rows(df.toArrow()) == sort_rows(
        ns.to_table(filter="event_date = DATE '2025-12-11'")
    )


def test_write_job_for_cluster_mode_resolves_secrets_on_the_driver(
    spark: SparkSession,
    storage_options: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cluster deploy mode: options without secrets on the command line, the secrets from a
    file the driver reads (a mounted Kubernetes secret), nothing in the environment."""
    uri = f"s3://{BUCKET}/cluster-events"
    ns = daily_namespace(uri, storage_options)
    source = tmp_path / "events.parquet"
    pq.write_table(events(300), source)
    secrets = {k: v for k, v in storage_options.items() if is_secret_key(k)}
    public = {k: v for k, v in storage_options.items() if k not in secrets}
    assert secrets
    assert public
    secret_file = tmp_path / "mounted" / "lance.json"
    secret_file.parent.mkdir()
    secret_file.write_text(json.dumps(secrets))
    monkeypatch.delenv(STORAGE_OPTIONS_ENV, raising=False)
    result_uri = f"s3://{BUCKET}/_results/cluster.json"
    args = [
        "--uri", uri,
        "--source", str(source),
        "--txn-id", "cluster.1",
        "--commit",
        "--result-path", result_uri,
        "--storage-options", json.dumps(public),
        "--storage-options-from", f"file:{secret_file}",
    ]  # fmt: skip
    assert not any(key in " ".join(args) for key in secrets)  # no secret on the command line
    assert main(args) == 0
    assert ns.count_rows() == 300
    result = read_json(result_uri, storage_options)
    assert (result["state"], result["rows"]) == ("published", 300)
    # without the secrets the driver cannot reach the store: the job says what is missing
    missing = [*args[:-2], "--storage-options-from", "env:LANCE_OPTIONS_NOT_SET"]
    assert main(missing) == 2


def test_storage_option_references(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def options(*argv: str, environ: dict[str, str] | None = None) -> dict[str, str] | None:
        parsed = parse_args(["--uri", "u", "--source", "s", "--result-path", "r", *argv])
        return storage_options_of(parsed, environ or {})

    assert options() is None
    assert options("--storage-options", '{"aws_region": "eu"}') == {"aws_region": "eu"}
    assert options(
        "--storage-options",
        '{"aws_region": "eu", "a": "cli"}',
        "--storage-options-from",
        "env:OPTS",
        environ={STORAGE_OPTIONS_ENV: '{"a": "env", "b": "env"}', "OPTS": '{"b": "ref"}'},
    ) == {"aws_region": "eu", "a": "env", "b": "ref"}  # later sources win
    for bad, message in [
        ("vault:x", "is not env:NAME or file:PATH"),
        ("env:NOPE", "spark.kubernetes.driver.secretKeyRef.NOPE"),
        (f"file:{tmp_path / 'nope.json'}", "spark.kubernetes.driver.secrets"),
    ]:
        with pytest.raises(BadInput, match=message.replace(".", r"\.")):
            options("--storage-options-from", bad)
    with pytest.raises(BadInput, match="must be a JSON object"):
        options("--storage-options", "[1]")
    # values as the core takes them, wherever they come from: not Python's str()
    written = '{"allow_http": true, "aws_endpoint": null, "timeout": 30, "a": "x"}'
    assert options(environ={STORAGE_OPTIONS_ENV: written}) == {
        "allow_http": "true",
        "timeout": "30s",
        "a": "x",
    }
    with pytest.raises(BadInput, match=f"^{STORAGE_OPTIONS_ENV}: storage option 'x' must be"):
        options(environ={STORAGE_OPTIONS_ENV: '{"x": [1]}'})
