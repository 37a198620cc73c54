"""Provider registration: entry point, provider info schema, the CLI, connection type, assets."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from airflow_provider_lance.provider_info import get_provider_info


def test_entry_point_resolves_to_provider_info() -> None:
    eps = [ep for ep in entry_points(group="apache_airflow_provider") if ep.dist is not None]
    ours = [ep for ep in eps if ep.dist is not None and ep.dist.name == "airflow-provider-lance"]
    assert len(ours) == 1
    assert ours[0].load() is get_provider_info


def test_provider_info_matches_airflow_schema() -> None:
    import airflow

    schema_path = Path(airflow.__file__).parent / "provider_info.schema.json"
    info = get_provider_info()
    jsonschema.validate(info, json.loads(schema_path.read_text()))
    assert info["package-name"] == "airflow-provider-lance"
    modules = [
        m
        for group in ("hooks", "operators", "sensors", "triggers")
        for entry in info[group]
        for m in entry["python-modules"]
    ]
    for module in modules:  # every advertised module imports
        __import__(module)


@pytest.mark.integration
def test_airflow_providers_list_shows_the_provider(airflow_db: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(out.stdout)}
    assert providers["airflow-provider-lance"]["version"] == "0.1.0"


def test_providers_manager_registers_hook_and_asset_handler() -> None:
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    pm = ProvidersManager()
    assert "airflow-provider-lance" in pm.providers
    assert "host" in pm.field_behaviours["lance"]["hidden_fields"]
    widgets = pm.connection_form_widgets
    assert {"extra__lance__root", "extra__lance__secret_storage_options"} <= set(widgets)
    assert widgets["extra__lance__session_token"].is_sensitive
    # the form's storage options hold credentials: a password input
    assert widgets["extra__lance__secret_storage_options"].is_sensitive
    assert not widgets["extra__lance__root"].is_sensitive
    runtime = ProvidersManagerTaskRuntime()
    hook = runtime.hooks["lance"]
    assert hook is not None
    assert hook.hook_name == "Lance Partitioned Namespace"
    assert hook.connection_testable
    assert "lance" in runtime.asset_uri_handlers


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("lance://s3/bucket/warehouse/events/", "lance://s3/bucket/warehouse/events"),
        ("lance://S3/bucket//events", "lance://s3/bucket/events"),
        ("lance://file/data/lance/./events", "lance://file/data/lance/events"),
        ("lance://gs/bucket/events#frag", "lance://gs/bucket/events"),
    ],
)
def test_lance_assets_are_normalised(uri: str, expected: str) -> None:
    from airflow.sdk import Asset

    assert Asset(uri).uri == expected


@pytest.mark.parametrize(
    "uri", ["lance:///no-store", "lance://s3", "lance://s3/../etc", "lance://S 3/x"]
)
def test_malformed_lance_assets_are_rejected(uri: str) -> None:
    from airflow.sdk import Asset

    with pytest.raises(ValueError, match="lance asset URI"):
        Asset(uri)


def test_asset_uri_round_trip_and_openlineage_naming() -> None:
    from airflow_provider_lance.assets import (
        asset_uri,
        create_asset,
        openlineage_name,
        storage_uri,
    )

    cases: list[tuple[str, str, tuple[str, str]]] = [
        (
            "s3://lake/warehouse/events",
            "lance://s3/lake/warehouse/events",
            ("s3://lake", "warehouse/events"),
        ),
        ("/data/lance/events", "lance://file/data/lance/events", ("file", "/data/lance/events")),
        ("file:///data/x/", "lance://file/data/x", ("file", "/data/x")),
    ]
    for root, lance, ol in cases:
        assert asset_uri(root) == lance
        assert storage_uri(lance) == (root.rstrip("/") if "://" in root else f"file://{root}")
        assert openlineage_name(root) == ol
    asset: Any = create_asset(uri="s3://lake/events", extra={"k": 1})
    assert (asset.uri, asset.extra) == ("lance://s3/lake/events", {"k": 1})


@pytest.mark.integration
def test_dag_files_and_provider_modules_import_no_heavy_library() -> None:
    """The DAG processor parses DAG files over and over: parsing one that uses the provider
    must not load pylance, DataFusion, PyArrow or Spark (they load when a task runs)."""
    probe = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
import airflow_provider_lance.hooks, airflow_provider_lance.operators
import airflow_provider_lance.sensors, airflow_provider_lance.triggers
from airflow_provider_lance.operators import LanceSparkWriteOperator
bag = DagBag(dag_folder=sys.argv[1])
heavy = ("lance", "datafusion", "pyarrow", "pyspark", "xxhash")
errors = {k: str(v) for k, v in bag.import_errors.items()}
print(json.dumps({"dags": sorted(bag.dags), "errors": errors,
                  "heavy": sorted(m for m in heavy if m in sys.modules)}))
"""
    done = subprocess.run(
        [sys.executable, "-c", probe, str(Path(__file__).parents[2] / "dags" / "examples")],
        capture_output=True,
        text=True,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["errors"] == {}
    assert len(report["dags"]) >= 3
    assert report["heavy"] == []
