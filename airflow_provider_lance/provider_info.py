"""What Airflow's ProvidersManager learns about this provider (entry point
``apache_airflow_provider``): connection type, hooks, operators, sensors, triggers, assets.

Kept import-free: Airflow calls it while discovering providers, before any hook is loaded.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_lance import __version__

INTEGRATION = "Lance Partitioned Namespace"
HOOK_CLASS = "airflow_provider_lance.hooks.lance.LancePartitionedHook"


def _string(label: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "label": label,
        "description": description,
        "schema": {"type": ["string", "null"], **schema},
    }


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-provider-lance",
        "name": "Lance",
        "description": (
            "Partitioned Lance datasets (the Lance Partitioned Namespace format): hook, "
            "operators, sensor and trigger, with PySpark writes through spark-submit and "
            "Python writes (@task.lance_write) in the task itself."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://lancedb.github.io/lance/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_lance.hooks.lance"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_lance.operators.partitions",
                    "airflow_provider_lance.operators.commit",
                    "airflow_provider_lance.operators.spark",
                    "airflow_provider_lance.operators.write",
                    "airflow_provider_lance.operators.audit",
                    "airflow_provider_lance.operators.upkeep",
                    "airflow_provider_lance.operators.evolution",
                    "airflow_provider_lance.operators.table",
                    "airflow_provider_lance.operators.indexes",
                    "airflow_provider_lance.operators.timetravel",
                ],
            }
        ],
        "task-decorators": [
            {
                "name": "lance_write",
                "class-name": "airflow_provider_lance.decorators.lance_write.lance_write_task",
            }
        ],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": ["airflow_provider_lance.sensors.partition"],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_provider_lance.triggers.partition",
                    "airflow_provider_lance.triggers.manifest",
                ],
            }
        ],
        "asset-uris": [
            {
                "schemes": ["lance"],
                "handler": "airflow_provider_lance.assets.sanitize_uri",
                "factory": "airflow_provider_lance.assets.create_asset",
                "to_openlineage_converter": (
                    "airflow_provider_lance.assets.convert_asset_to_openlineage"
                ),
            }
        ],
        "connection-types": [
            {
                "connection-type": "lance",
                "hook-class-name": HOOK_CLASS,
                "hook-name": "Lance Partitioned Namespace",
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "port"],
                    "relabeling": {
                        "login": "Access key id / account name",
                        "password": "Secret access key / account key",
                    },
                    "placeholders": {
                        "login": "AKIA... (S3) or the storage account (Azure)",
                        "password": "the secret (never shown in logs)",
                        "root": "s3://bucket/warehouse or /data/lance",
                        "secret_storage_options": '{"aws_secret_access_key": "..."}',
                        "endpoint": "http://minio:9000",
                        "region": "us-east-1",
                    },
                },
                "conn-fields": {
                    "root": _string(
                        "Root URI",
                        "Base URI of the namespaces (s3://, gs://, az://, file:// or a path); "
                        "operators name namespaces relative to it.",
                    ),
                    # Named "secret...": Airflow redacts it whole in the REST API and UI.
                    "secret_storage_options": _string(
                        "Storage options (JSON)",
                        "Lance storage options as a JSON object, credentials included; "
                        "masked here, redacted by the API, masked in task logs.",
                        format="password",
                    ),
                    "endpoint": _string(
                        "Endpoint",
                        "Object store endpoint, e.g. a MinIO URL (aws_endpoint for s3://).",
                    ),
                    "region": _string("Region", "Object store region (aws_region for s3://)."),
                    "allow_http": {
                        "label": "Allow HTTP",
                        "description": "Allow plain-HTTP endpoints (local object stores).",
                        "schema": {"type": ["boolean", "null"], "default": False},
                    },
                    "concurrency": {
                        "label": "Concurrency",
                        "description": "Leaf tables worked on at once (default: 8 on a local "
                        "disk, 32 on an object store).",
                        "schema": {"type": ["integer", "null"], "minimum": 1},
                    },
                    "session_token": _string(
                        "Session token",
                        "Temporary credentials' session token (aws_session_token).",
                        format="password",
                    ),
                },
            }
        ],
    }
