"""``docker-compose.yaml`` checked structurally (no Docker engine here).

The environment it sets is fed through the real parsers: the ``lance`` connection through
the hook's parsing, the Spark connection through ``SparkSubmitHook``'s master resolution.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_provider_lance.hooks.connection import LanceConnectionConfig

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
)


def interpolate(value: Any) -> Any:
    """Compose's ``${VAR:-default}`` (unset variables) and ``$$`` escapes."""
    if isinstance(value, str):
        value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: m.group(2), value)
        return value.replace("$$", "$")
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    return value


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load((REPO / "docker-compose.yaml").read_text()))


def test_services_volumes_and_ports(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected = {
        "postgres",
        "minio",
        "minio-init",
        "spark-master",
        "spark-worker",
        *AIRFLOW_SERVICES,
    }
    assert expected <= set(services)
    host_ports = [p.split(":")[0] for s in services.values() for p in s.get("ports", [])]
    assert len(host_ports) == len(set(host_ports)), host_ports
    assert "8080" in host_ports  # the Airflow UI
    named = set(compose["volumes"])
    for name, service in services.items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith("."):
                assert source in named, (name, volume)
            else:
                assert (REPO / source).exists(), (name, volume)
    # the landed raw files are visible to the Spark executors
    assert "landing:/opt/landing" in services["spark-worker"]["volumes"]
    assert "landing:/opt/landing" in services["airflow-scheduler"]["volumes"]


def test_airflow_components_commands_and_ordering(compose: dict[str, Any]) -> None:
    services = compose["services"]
    commands = {name: services[name]["command"] for name in AIRFLOW_SERVICES}
    assert commands["airflow-init"] == "airflow db migrate"
    assert commands["airflow-api-server"].startswith("airflow api-server")
    assert commands["airflow-scheduler"] == "airflow scheduler"
    assert commands["airflow-dag-processor"] == "airflow dag-processor"
    assert commands["airflow-triggerer"] == "airflow triggerer"
    for name in AIRFLOW_SERVICES:
        deps = services[name]["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy"
        assert deps["minio-init"]["condition"] == "service_completed_successfully"
        if name != "airflow-init":
            assert deps["airflow-init"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "false"
    # Spark's executors connect back to the driver inside the scheduler's tasks
    assert services["airflow-scheduler"]["hostname"] == "airflow-scheduler"


def test_image_is_built_from_this_repository(compose: dict[str, Any]) -> None:
    build = compose["services"]["airflow-scheduler"]["build"]
    dockerfile = REPO / build["context"] / build["dockerfile"]
    text = dockerfile.read_text()
    for source in re.findall(r"^COPY (\S+)", text, flags=re.M):
        assert (REPO / source).exists(), source
    # the package with the Spark provider (LanceSparkWriteOperator) from this checkout
    assert re.search(
        r'pip install .*apache-airflow\[postgres\]==\$\{AIRFLOW_VERSION\}.* "\.\[spark\]"',
        text,
    )
    assert "openjdk-17" in text  # spark-submit needs Java
    for name in ("spark-master", "spark-worker"):
        assert (
            compose["services"][name]["image"] == compose["services"]["airflow-scheduler"]["image"]
        )


def test_lance_connection_points_at_the_minio_bucket(compose: dict[str, Any]) -> None:
    services = compose["services"]
    env = services["airflow-scheduler"]["environment"]
    conn = json.loads(env["AIRFLOW_CONN_LANCE_DEFAULT"])
    config = LanceConnectionConfig.from_fields(
        login=conn.get("login"), password=conn.get("password"), extras=conn["extra"]
    )
    assert config.root == "s3://lakehouse/warehouse"
    minio = services["minio"]["environment"]
    assert config.storage_options == {
        "aws_access_key_id": minio["MINIO_ROOT_USER"],
        "aws_secret_access_key": minio["MINIO_ROOT_PASSWORD"],
        "aws_endpoint": "http://minio:9000",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    init = " ".join(services["minio-init"]["entrypoint"])
    assert "mc mb --ignore-existing local/lakehouse" in init
    assert "minio:9000" in init


def test_spark_connection_resolves_to_the_standalone_master(
    compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    env = compose["services"]["airflow-scheduler"]["environment"]
    monkeypatch.setenv("AIRFLOW_CONN_COMPOSE_SPARK", env["AIRFLOW_CONN_SPARK_DEFAULT"])
    hook = SparkSubmitHook(conn_id="compose_spark")
    assert hook._connection["master"] == "spark://spark-master:7077"
    assert hook._connection["deploy_mode"] in (None, "client")
    master = compose["services"]["spark-master"]["command"]
    assert "--host spark-master --port 7077" in master
    assert "spark://spark-master:7077" in compose["services"]["spark-worker"]["command"]
