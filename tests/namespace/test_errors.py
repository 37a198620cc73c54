"""Bad input: a clear project exception naming the problem, and nothing changed on disk."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import lance
import lance.namespace
import pyarrow as pa
import pytest

from airflow_provider_lance import cli
from airflow_provider_lance.namespace import (
    CommitConflict,
    DataValidationError,
    ExpressionError,
    FilterError,
    InvalidArgumentError,
    LanceNamespaceError,
    NamespaceExistsError,
    NamespaceNotFoundError,
    PartitionedNamespace,
    PartitionField,
    PartitionNotFoundError,
    PartitionSpecError,
    SchemaError,
    StorageError,
)
from airflow_provider_lance.namespace import errors as project_errors
from airflow_provider_lance.namespace.errors import is_retryable
from tests.support import EVENTS_SCHEMA, events, leaf_files, tree


@pytest.fixture
def populated(daily: PartitionedNamespace) -> PartitionedNamespace:
    daily.write(events(9))
    return daily


def unchanged(
    ns: PartitionedNamespace, root: Path, action: Callable[[], object], error: type, match: str
) -> None:
    before_files, before_version = tree(root), ns.version
    before_rows = ns.to_table().num_rows
    with pytest.raises(error, match=match) as info:
        action()
    assert isinstance(info.value, LanceNamespaceError)
    assert tree(root) == before_files
    assert ns.version == before_version
    assert ns.to_table().num_rows == before_rows


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            events(3).append_column("nope", pa.array([1, 2, 3])),
            "column 'nope' is not in the namespace",
        ),
        (events(3).drop_columns(["id"]), "'id' is not nullable and is missing"),
        (
            events(3).set_column(0, "id", pa.array([1, None, 3], pa.int64())),
            "'id' is not nullable but",
        ),
        (
            events(3).set_column(3, "amount", pa.array(["1", "x", "3"])),
            "column 'amount'.*cannot be written",
        ),
        (
            events(3).set_column(0, "id", pa.array([1.5, 2.0, 3.0])),
            "column 'id'.*cannot be written",
        ),
        ({"id": [1]}, r"got a dict: .*pyarrow\.table\(data\)"),
        ("not data", r"got a str\. write\(\) takes Arrow data"),
        ([1, 2], "got a list of int values, one column and not a table"),
    ],
    ids=[
        "unknown-column",
        "missing-required",
        "null-in-required",
        "bad-cast",
        "lossy-cast",
        "dict",
        "str",
        "list-of-ints",
    ],
)
def test_bad_data(populated: PartitionedNamespace, root: Path, data: object, match: str) -> None:
    unchanged(populated, root, lambda: populated.write(data), DataValidationError, match)


def test_bad_mode(populated: PartitionedNamespace, root: Path) -> None:
    unchanged(
        populated,
        root,
        lambda: populated.write(events(1), mode="upsert"),
        InvalidArgumentError,
        "mode must be one of",
    )


@pytest.mark.parametrize("timeout", ["soon", -1, float("nan"), float("inf"), True])
@pytest.mark.parametrize("call", ["write", "write_txn", "commit", "delete"])
def test_a_bad_claim_timeout_is_refused_before_anything_is_written(
    populated: PartitionedNamespace, root: Path, timeout: object, call: str
) -> None:
    """A claim timeout that is no number of seconds (or negative, NaN, infinite) is
    refused up front; otherwise a write that never waits accepts it silently and one that
    waits fails inside the retry loop with a TypeError."""
    if call == "commit":
        populated.begin("append", "staged").stage(events(2, first_id=100))
    actions: dict[str, Callable[[], object]] = {
        "write": lambda: populated.write(events(1), claim_timeout=timeout),  # type: ignore[arg-type]
        "write_txn": lambda: populated.write(events(1), txn_id="w", claim_timeout=timeout),  # type: ignore[arg-type]
        "commit": lambda: populated.commit("staged", claim_timeout=timeout),  # type: ignore[arg-type]
        "delete": lambda: populated.delete("id = 1", claim_timeout=timeout),  # type: ignore[arg-type]
    }
    unchanged(populated, root, actions[call], InvalidArgumentError, "claim_timeout must be")


def test_bad_data_in_a_later_batch_publishes_nothing(
    populated: PartitionedNamespace, root: Path
) -> None:
    good = events(3, start=dt.date(2026, 5, 1), first_id=500)
    bad = events(3, first_id=600).append_column("nope", pa.array([1, 2, 3]))
    version, rows = populated.version, populated.to_table().num_rows
    leaves = set(leaf_files(root))
    with pytest.raises(DataValidationError, match="nope"):
        populated.write([good, bad])
    assert populated.version == version
    assert populated.to_table().num_rows == rows
    assert not [p for p in populated.partitions() if p.values["event_date"] == dt.date(2026, 5, 1)]
    # the tables created for the new partitions were removed again (compared as a whole:
    # a random file name may well contain "2026")
    assert set(leaf_files(root)) == leaves


@pytest.mark.parametrize(
    ("filter", "error", "match"),
    [
        ("nope = 1", FilterError, "nope"),
        ("id = ", FilterError, "not a valid expression"),
        ("id", FilterError, "not a boolean"),
        ("amount > random()", FilterError, "not deterministic"),
        (["id = 1"], FilterError, "must be a non-empty SQL expression string"),
        ({"id": 1}, FilterError, "must be a non-empty SQL expression string"),
    ],
)
def test_bad_filters(
    populated: PartitionedNamespace, root: Path, filter: str, error: type, match: str
) -> None:
    unchanged(populated, root, lambda: populated.to_table(filter=filter), error, match)
    unchanged(populated, root, lambda: populated.prune(filter), error, match)


def test_columns_named_by_an_iterator_are_read_once(populated: PartitionedNamespace) -> None:
    """The names are read once: a generator's names were consumed by the check and the read
    returned no column at all."""
    names = (name for name in ["country", "id"])
    assert populated.to_table(columns=names).column_names == ["country", "id"]
    plan = populated.plan_scan(columns=iter(["id"]))
    assert plan.schema.names == ["id"]
    assert plan.to_table().column_names == ["id"]


def test_bad_columns(populated: PartitionedNamespace, root: Path) -> None:
    unchanged(
        populated,
        root,
        lambda: populated.to_table(columns=["nope"]),
        SchemaError,
        "unknown column 'nope'",
    )
    unchanged(
        populated,
        root,
        lambda: populated.to_table(columns="id"),
        InvalidArgumentError,
        "not a string",
    )
    for bad, match in [
        (["id", ["country"]], r"column names \(strings\), got \['country'\]"),
        ([None], r"column names \(strings\), got None"),
        (5, "a list of column names, got int"),
        ({"double": "id * 2"}, "computed columns.* not supported"),
    ]:
        for read in (populated.to_table, populated.plan_scan):
            unchanged(
                populated,
                root,
                lambda read=read, bad=bad: read(columns=bad),
                InvalidArgumentError,
                match,
            )
    for read in (populated.to_table, populated.plan_scan, populated.to_pyarrow_dataset().to_table):
        unchanged(  # as pylance: "Duplicate column name"
            populated,
            root,
            lambda read=read: read(columns=["id", "country", "id"]),
            InvalidArgumentError,
            r"^columns names 'id' more than once; name each column once",
        )


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ([PartitionField("x", "nope")], PartitionSpecError, "unknown column 'nope'"),
        ([PartitionField("x", "id", "col +")], ExpressionError, "not a valid expression"),
        ([PartitionField("x", "country", "col", pa.int32())], ExpressionError, "cannot be stored"),
        (
            [PartitionField("location", "country")],
            PartitionSpecError,
            "collides with a __manifest column",
        ),
        ([PartitionField("read_version", "id")], PartitionSpecError, "collides"),
        ([PartitionField("event_date", "country")], PartitionSpecError, "same type"),
        ([], PartitionSpecError, "at least one"),
    ],
)
def test_bad_spec_evolution(
    populated: PartitionedNamespace, root: Path, fields: list, error: type, match: str
) -> None:
    unchanged(populated, root, lambda: populated.evolve_partition_spec(fields), error, match)


def test_bad_schema_changes(populated: PartitionedNamespace, root: Path) -> None:
    unchanged(
        populated,
        root,
        lambda: populated.add_column(pa.field("id", pa.int8())),
        SchemaError,
        "duplicate",
    )
    unchanged(populated, root, lambda: populated.drop_column("nope"), SchemaError, "unknown column")
    unchanged(
        populated, root, lambda: populated.rename_column("id", "country"), SchemaError, "duplicate"
    )
    unchanged(
        populated,
        root,
        lambda: populated.promote_column("amount", pa.float32()),
        SchemaError,
        "widening",
    )
    for change, match in [  # a name that is no string: an error naming it, never a TypeError
        (lambda: populated.drop_column(["id"]), r"unknown column \['id'\]"),
        (lambda: populated.rename_column(["id"], "ident"), r"unknown column \['id'\]"),
        (lambda: populated.rename_column("id", ["ident"]), r"got \['ident'\]"),
        (lambda: populated.promote_column(["id"], pa.int64()), r"unknown column \['id'\]"),
    ]:
        unchanged(populated, root, change, SchemaError, match)


def test_bad_partition_values(populated: PartitionedNamespace, root: Path) -> None:
    unchanged(
        populated,
        root,
        lambda: populated.create_partition({"nope": 1}),
        PartitionSpecError,
        "unknown",
    )
    unchanged(
        populated,
        root,
        lambda: populated.create_partition({"event_date": "not a date"}),
        PartitionSpecError,
        "is not a date32",
    )
    unchanged(
        populated,
        root,
        lambda: populated.partition({"event_date": "2030-01-01"}),
        PartitionNotFoundError,
        "no partition",
    )


def test_create_refuses_existing_things(
    populated: PartitionedNamespace, root: Path, tmp_path: Path
) -> None:
    unchanged(
        populated,
        root,
        lambda: PartitionedNamespace.create(
            root, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("id", "id")]
        ),
        NamespaceExistsError,
        "already",
    )
    other = tmp_path / "not-empty"
    other.mkdir()
    (other / "file.txt").write_text("hello")
    with pytest.raises(NamespaceExistsError, match="not empty"):
        PartitionedNamespace.create(
            other, schema=EVENTS_SCHEMA, partition_fields=[PartitionField("id", "id")]
        )
    assert tree(other) == ["file.txt"]


@pytest.mark.parametrize(
    ("schema", "fields", "match"),
    [
        (pa.schema([]), [PartitionField("id", "id")], "at least one column"),
        (
            pa.schema([pa.field("a", pa.int64()), pa.field("a", pa.utf8())]),
            [PartitionField("a", "a")],
            "duplicate",
        ),
        ("not a schema", [PartitionField("id", "id")], "pyarrow.Schema"),
    ],
)
def test_create_with_a_bad_schema(tmp_path: Path, schema: object, fields: list, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        PartitionedNamespace.create(tmp_path / "x", schema=schema, partition_fields=fields)  # type: ignore[arg-type]
    assert not (tmp_path / "x").exists()


def test_open_something_that_is_not_a_namespace(tmp_path: Path) -> None:
    with pytest.raises(NamespaceNotFoundError, match="not a partitioned namespace"):
        PartitionedNamespace.open(tmp_path / "missing")
    plain = tmp_path / "plain"
    lance.namespace.DirectoryNamespace(root=str(plain)).create_namespace(
        lance.namespace.CreateNamespaceRequest(id=["x"])
    )
    with pytest.raises(NamespaceNotFoundError, match="no partition_spec_v"):
        PartitionedNamespace.open(plain)
    assert not PartitionedNamespace.exists(plain)


def test_open_with_a_corrupt_spec(populated: PartitionedNamespace, root: Path) -> None:
    lance.dataset(str(root / "__manifest")).update_metadata({"partition_spec_v1": "{not json"})
    with pytest.raises(PartitionSpecError, match="partition_spec_v1 is not valid JSON"):
        PartitionedNamespace.open(root)
    lance.dataset(str(root / "__manifest")).update_metadata(
        {"partition_spec_v1": '[{"name": "x"}]'}
    )
    with pytest.raises(PartitionSpecError, match="lacks field_id"):
        PartitionedNamespace.open(root)


# -- retry or fail: decided by the error classes -----------------------------------------------
def test_only_storage_errors_and_conflicts_are_retryable() -> None:
    """What the Airflow operators, the Spark job's exit codes and the CLI rely on."""
    classes = [
        cls
        for cls in vars(project_errors).values()
        if isinstance(cls, type) and issubclass(cls, LanceNamespaceError)
    ]
    retryable = sorted(cls.__name__ for cls in classes if cls.retryable)
    # A read of the latest state outrun by retention: reading again resolves the new latest.
    assert retryable == ["CommitConflict", "LatestVersionCleanedUp", "StorageError"]
    for cls in classes:
        assert is_retryable(cls("x")) is cls.retryable
    assert not is_retryable(project_errors.TransactionAborted("x"))
    assert not is_retryable(project_errors.TransactionClosed("x"))
    assert is_retryable(RuntimeError("nothing says the input was wrong"))


def test_cli_exit_code_for_bad_input_is_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["describe", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ")
    assert "not a partitioned namespace" in err[-1]


def test_cli_exit_code_for_unreachable_storage_is_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An S3 endpoint on a closed loopback port: refused at once, nothing leaves the machine."""
    for key in list(os.environ):
        if key.upper().startswith("AWS_") or key.lower() in ("http_proxy", "https_proxy"):
            monkeypatch.delenv(key)
    for key, value in {
        "NO_PROXY": "127.0.0.1,localhost",
        "AWS_ENDPOINT": "http://127.0.0.1:9",
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "unreachable",
        "AWS_SECRET_ACCESS_KEY": "unreachable",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    assert cli.main(["describe", "s3://bucket/x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: cannot read the __manifest of s3://bucket/x")


def test_cli_exit_code_follows_the_error_class() -> None:
    assert cli.exit_code(CommitConflict("x")) == 3
    assert cli.exit_code(StorageError("x")) == 1
    assert cli.exit_code(project_errors.TransactionAborted("x")) == 2
    assert cli.exit_code(DataValidationError("x")) == 2
