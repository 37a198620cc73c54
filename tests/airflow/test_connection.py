"""The ``lance`` connection: parsing, env connections (JSON and URI), secret masking."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest

from airflow_provider_lance.hooks import LancePartitionedHook
from airflow_provider_lance.hooks.connection import (
    LanceConnectionConfig,
    LanceConnectionError,
    is_secret_key,
)
from airflow_provider_lance.namespace import PartitionedNamespace
from airflow_provider_lance.namespace.errors import StorageError
from tests.support import UNREACHABLE_OPTIONS


def test_s3_fields_map_to_lance_storage_options() -> None:
    config = LanceConnectionConfig.from_fields(
        login="AKIAEXAMPLE",
        password="s3cr3t-value",
        extras={
            "root": "s3://lake/warehouse/",
            "endpoint": "http://minio:9000",
            "region": "eu-west-1",
            "allow_http": True,
            "session_token": "tok-123456",
            "aws_virtual_hosted_style_request": False,
            "storage_options": json.dumps({"aws_region": "us-east-1", "timeout": 30}),
        },
    )
    assert config.root == "s3://lake/warehouse"
    assert config.storage_options == {
        "aws_access_key_id": "AKIAEXAMPLE",
        "aws_secret_access_key": "s3cr3t-value",
        "aws_session_token": "tok-123456",
        "aws_endpoint": "http://minio:9000",
        "aws_region": "us-east-1",  # the explicit JSON wins over the convenience field
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
        "timeout": "30s",  # a number for a duration is seconds ("30" is no duration to Lance)
    }
    assert sorted(k for k, _ in config.secrets()) == ["aws_secret_access_key", "aws_session_token"]
    assert config.redacted["storage_options"]["aws_secret_access_key"] == "***"


@pytest.mark.usefixtures("no_aws_environment")
@pytest.mark.parametrize("as_json_text", [False, True], ids=["object", "json-text"])
def test_numbers_and_booleans_in_extras_reach_lance_as_it_parses_them(as_json_text: bool) -> None:
    """Issue 25: ``{"timeout": 30}`` became ``"30"``, which S3 refuses as no duration (a
    config error on every call); now it is 30 seconds, as in the core's own options."""
    options = {**UNREACHABLE_OPTIONS, "allow_http": True, "timeout": 30, "client_max_retries": 0}
    config = LanceConnectionConfig.from_fields(
        extras={
            "root": "s3://bucket/wh",
            "aws_connect_timeout": 1.5,
            "storage_options": json.dumps(options) if as_json_text else options,
        }
    )
    assert config.storage_options["timeout"] == "30s"
    assert config.storage_options["aws_connect_timeout"] == "1500ms"
    assert config.storage_options["allow_http"] == "true"
    assert config.storage_options["client_max_retries"] == "0"
    with pytest.raises(StorageError) as raised:
        PartitionedNamespace.open("s3://bucket/wh/events", config.storage_options)
    assert type(raised.value) is StorageError  # nobody answers: retryable, not a config error
    assert "Duration" not in str(raised.value)


def test_an_extra_no_option_can_hold_is_refused_naming_it() -> None:
    with pytest.raises(LanceConnectionError, match="storage option 'timeout' is a duration"):
        LanceConnectionConfig.from_fields(extras={"root": "/x", "storage_options": {"timeout": -1}})


def test_other_stores_and_local_roots() -> None:
    gs = LanceConnectionConfig.from_fields(
        password='{"type": "service_account"}', extras={"root": "gs://bucket/ns"}
    )
    assert gs.storage_options == {"google_service_account_key": '{"type": "service_account"}'}
    az = LanceConnectionConfig.from_fields(
        login="acct", password="k3y", extras={"root": "az://container/ns"}
    )
    assert az.storage_options == {
        "azure_storage_account_name": "acct",
        "azure_storage_account_key": "k3y",
    }
    local = LanceConnectionConfig.from_fields(host="/data/lance")
    assert (local.root, local.storage_options) == ("file:///data/lance", {})
    # the form's legacy prefixed keys are understood too
    legacy = LanceConnectionConfig.from_fields(extras={"extra__lance__root": "/x"})
    assert legacy.root == "file:///x"


def test_namespace_names_resolve_against_the_root() -> None:
    config = LanceConnectionConfig.from_fields(extras={"root": "s3://lake/wh"})
    assert config.namespace_uri(None) == "s3://lake/wh"
    assert config.namespace_uri("events") == "s3://lake/wh/events"
    assert config.namespace_uri("/team/events/") == "file:///team/events"
    assert config.namespace_uri("gs://other/ns") == "gs://other/ns"
    with pytest.raises(LanceConnectionError, match=r"\.\."):
        config.namespace_uri("../escape")


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        ({}, "needs a root URI"),
        ({"root": "/x", "storage_options": "{not json"}, "not valid JSON"),
        ({"root": "/x", "storage_options": "[1, 2]"}, "must be a JSON object"),
        ({"root": "/x", "concurrency": "0"}, "whole number of at least 1"),
        ({"root": "/x", "concurrency": "many"}, "whole number of at least 1"),
    ],
)
def test_malformed_connections_say_what_is_wrong(extras: dict[str, str], message: str) -> None:
    with pytest.raises(LanceConnectionError, match=message):
        LanceConnectionConfig.from_fields(extras=extras)


def test_concurrency_reaches_the_namespaces_the_hook_opens(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ``concurrency`` extra bounds the leaf work of every namespace the hook opens or
    creates (unset: the core's default for the store)."""
    extra = {"root": str(tmp_path), "concurrency": "3"}
    monkeypatch.setenv("AIRFLOW_CONN_LANCE_C", json.dumps({"conn_type": "lance", "extra": extra}))
    hook = LancePartitionedHook("lance_c")
    assert hook.config.concurrency == 3
    schema = [{"name": "id", "type": "int64"}, {"name": "day", "type": "date32"}]
    by_day = [{"name": "day", "source": "day"}]
    created, _ = hook.create_or_open("events", schema=schema, partition_fields=by_day)
    assert created.storage.concurrency == 3
    assert hook.open("events").storage.concurrency == 3
    assert LanceConnectionConfig.from_fields(extras={"root": "/x"}).concurrency is None


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("aws_secret_access_key", True),
        ("aws_session_token", True),
        ("google_service_account_key", True),
        ("azure_storage_account_key", True),
        ("azure_storage_sas_token", True),
        ("password", True),
        ("aws_access_key_id", False),
        ("aws_region", False),
        ("aws_endpoint", False),
        ("allow_http", False),
    ],
)
def test_secret_key_detection(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


def test_env_connection_in_json_form(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_JSON",
        json.dumps(
            {
                "conn_type": "lance",
                "login": "AKIAJSON",
                "password": "json-secret-0001",
                "extra": {"root": "s3://bucket/wh", "endpoint": "http://127.0.0.1:9"},
            }
        ),
    )
    hook = LancePartitionedHook("lance_json")
    assert hook.namespace_uri("events") == "s3://bucket/wh/events"
    assert hook.storage_options["aws_secret_access_key"] == "json-secret-0001"
    assert hook.storage_options["aws_endpoint"] == "http://127.0.0.1:9"


def test_env_connection_in_uri_form(monkeypatch: pytest.MonkeyPatch) -> None:
    query = urlencode(
        {
            "root": "s3://bucket/warehouse",
            "endpoint": "http://minio:9000",
            "region": "us-east-1",
            "allow_http": "true",
            "storage_options": json.dumps({"aws_secret_access_key": "nested-secret-42"}),
        }
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_URI", f"lance://AKIAURI:{quote('p@ss/word', safe='')}@/?{query}"
    )
    hook = LancePartitionedHook("lance_uri")
    assert hook.config.root == "s3://bucket/warehouse"
    assert hook.storage_options == {
        "aws_access_key_id": "AKIAURI",
        "aws_secret_access_key": "nested-secret-42",
        "aws_endpoint": "http://minio:9000",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


def test_secrets_nested_in_storage_options_are_registered_with_the_masker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Airflow masks extras by key name; a secret inside the JSON text needs the hook."""
    from airflow.sdk._shared.secrets_masker import redact

    secret = "nested-only-secret-7f3a9c"
    monkeypatch.setenv(
        "AIRFLOW_CONN_LANCE_NESTED",
        json.dumps(
            {
                "conn_type": "lance",
                "extra": {
                    "root": "/tmp/unused",
                    "storage_options": json.dumps({"azure_storage_sas_token": secret}),
                },
            }
        ),
    )
    assert secret in str(redact(f"token={secret}"))  # nobody has seen it yet
    hook = LancePartitionedHook("lance_nested")
    assert hook.storage_options["azure_storage_sas_token"] == secret
    assert secret not in str(redact(f"token={secret}"))


def test_undefined_default_connection_falls_back_to_a_local_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_LANCE_DEFAULT", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    hook = LancePartitionedHook()
    assert hook.namespace_uri("events") == f"file://{tmp_path}/lance/events"
    from airflow.sdk.exceptions import AirflowNotFoundException

    with pytest.raises(AirflowNotFoundException):
        _ = LancePartitionedHook("no_such_connection").config


def test_the_forms_storage_options_are_redacted_whole_by_the_rest_api() -> None:
    """What ``GET /api/v2/connections/{id}`` returns (Airflow's own response model):
    the form's ``secret_storage_options`` is redacted whatever its JSON text holds, even
    under option names Airflow does not know as secret; the hook still reads it, and it
    wins over ``storage_options``."""
    from airflow.api_fastapi.core_api.datamodels.connections import ConnectionResponse
    from airflow.models.connection import Connection

    secret = "account-key-only-in-text-41c9"
    extra = {
        "root": "az://container/wh",
        "storage_options": json.dumps({"azure_storage_account_name": "lake", "timeout": "9s"}),
        "secret_storage_options": json.dumps(
            {"azure_storage_account_key": secret, "timeout": "30s"}
        ),
    }
    conn = Connection(conn_id="lance_form", conn_type="lance", extra=json.dumps(extra))
    shown = ConnectionResponse.model_validate(conn).model_dump(by_alias=True)
    assert secret not in json.dumps(shown)
    assert json.loads(shown["extra"])["secret_storage_options"] == "***"
    assert json.loads(shown["extra"])["root"] == "az://container/wh"  # the rest stays readable
    config = LanceConnectionConfig.from_fields(extras=conn.extra_dejson)
    assert config.storage_options == {
        "azure_storage_account_name": "lake",
        "azure_storage_account_key": secret,
        "timeout": "30s",
    }
    assert ("azure_storage_account_key", secret) in config.secrets()


def test_bad_secret_storage_options_name_the_field() -> None:
    with pytest.raises(LanceConnectionError, match="'secret_storage_options' extra is not valid"):
        LanceConnectionConfig.from_fields(extras={"root": "/x", "secret_storage_options": "{"})
