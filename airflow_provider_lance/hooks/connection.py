"""The ``lance`` connection: where namespaces live and the storage options to reach them.

Parsing is kept free of Airflow so it is testable on its own and shared by the hook (sync, in
tasks) and the trigger (async, in the triggerer). The connection holds:

* ``root`` (extra, or the ``host`` field): the base URI, e.g. ``s3://lake/warehouse`` or
  ``/data/lance``. Operators name a namespace relative to it (``events`` ->
  ``s3://lake/warehouse/events``) or give a full URI of their own.
* ``secret_storage_options`` (extra; "Storage options" in the connection form): a JSON
  object (or its text) of Lance storage options. Its name marks it sensitive for Airflow:
  the form masks it and the REST API and UI redact it whole, whatever it holds.
* ``storage_options`` (extra): the same for options that are not secret (region, timeouts);
  an object value is redacted by Airflow key by key (``aws_secret_access_key``...), a JSON
  text value is not, so secrets belong in ``secret_storage_options``.
* convenience fields ``endpoint``, ``region``, ``allow_http``, ``session_token`` and the
  connection ``login``/``password``, mapped to the store's option names (for ``s3://``:
  ``aws_endpoint``, ``aws_region``, ``aws_access_key_id``, ``aws_secret_access_key``...).
* any top-level extra named like a storage option (``aws_*``, ``google_*``, ``azure_*``).
* ``concurrency`` (extra, optional): how many leaf tables the hook's namespaces write,
  commit or read at once (default 8 on a local disk, 32 on an object store); raise it for a
  store with high latency and many partitions per write, lower it to spare a small worker.
  (A Spark write's leaves are written by its executors, one partition per task.)

Explicit storage options win over the convenience fields (``secret_storage_options`` over
``storage_options``). Every value whose key looks secret is returned by
:meth:`LanceConnectionConfig.secrets` so the caller can hand it to Airflow's secret masker:
a secret nested in a JSON text is invisible to Airflow's own key-name based masking.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from airflow_provider_lance.namespace import (
    has_scheme,
    normalize_root,
    option_text,
    options_from_json,
)
from airflow_provider_lance.namespace.errors import InvalidArgumentError, LanceNamespaceError

CONN_TYPE = "lance"
#: Extras that are ours; everything else is either a storage option or rejected.
FIELD_ROOT = "root"
FIELD_STORAGE_OPTIONS = "storage_options"
#: Sensitive by name for Airflow's secrets masker ("secret"): redacted whole in the REST API.
FIELD_SECRET_STORAGE_OPTIONS = "secret_storage_options"
FIELD_CONCURRENCY = "concurrency"
CONVENIENCE_FIELDS = ("endpoint", "region", "allow_http", "session_token")
_OPTION_PREFIXES = ("aws_", "google_", "azure_", "gcs_", "s3_")
_GENERIC_OPTIONS = frozenset(
    {"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url"}
)

_SECRET_WORDS = re.compile(
    r"secret|token|password|passwd|passphrase|credential|private|signature|(^|_)sas($|_)", re.I
)
_KEY_WORD = re.compile(r"(^|_)key($|_)", re.I)


class LanceConnectionError(LanceNamespaceError, ValueError):
    """A ``lance`` connection is malformed (bad JSON, no root...); no retry fixes it."""


def is_secret_key(name: str) -> bool:
    """Whether a storage option's value must be masked (``*_key`` but not ``*_key_id``)."""
    if _SECRET_WORDS.search(name):
        return True
    return bool(_KEY_WORD.search(name)) and not name.lower().endswith("_id")


def _as_text(value: Any, key: str = "") -> str:
    """An extra's value as a storage option: an object or list (e.g. a service account key)
    as its JSON text, anything else as the core takes it (``True`` -> ``"true"``, a number
    for a duration option -> seconds, ``"30s"``)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    try:
        return option_text(key, value)
    except InvalidArgumentError as exc:
        raise LanceConnectionError(f"the lance connection's {exc}") from None


def _store_scheme(root: str) -> str:
    scheme = urlparse(root).scheme.lower() if has_scheme(root) else "file"
    return scheme.split("+", 1)[0]


def _convenience_options(
    scheme: str, extras: Mapping[str, Any], login: str | None, password: str | None
) -> dict[str, str]:
    """Connection form fields translated to the option names of the root's object store."""
    out: dict[str, str] = {}

    def put(key: str, value: Any) -> None:
        if value not in (None, ""):
            out[key] = _as_text(value, key)

    if scheme in ("s3", "s3a"):
        put("aws_access_key_id", login)
        put("aws_secret_access_key", password)
        put("aws_session_token", extras.get("session_token"))
        put("aws_endpoint", extras.get("endpoint"))
        put("aws_region", extras.get("region"))
    elif scheme in ("gs", "gcs"):
        put("google_service_account_key", password)
    elif scheme in ("az", "abfs", "abfss", "adl", "azure"):
        put("azure_storage_account_name", login)
        put("azure_storage_account_key", password)
        put("azure_storage_endpoint", extras.get("endpoint"))
    else:
        put("endpoint", extras.get("endpoint"))
        put("region", extras.get("region"))
    allow_http = extras.get("allow_http")
    if allow_http not in (None, ""):
        text = _as_text(allow_http).strip().lower()
        out["allow_http"] = "true" if text in ("1", "true", "yes", "on") else "false"
    return out


def _parse_storage_options(raw: Any, name: str = FIELD_STORAGE_OPTIONS) -> dict[str, str]:
    if raw in (None, ""):
        return {}
    if isinstance(raw, str):
        try:
            raw = options_from_json(raw, f"the {name!r} extra")
        except InvalidArgumentError as exc:
            raise LanceConnectionError(str(exc)) from None
    if not isinstance(raw, Mapping):
        raise LanceConnectionError(
            f"the {name!r} extra must be a JSON object, got {type(raw).__name__}"
        )
    return {str(k): _as_text(v, str(k)) for k, v in raw.items() if v is not None}


def _parse_concurrency(raw: Any) -> int | None:
    if raw in (None, ""):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1 or isinstance(raw, bool):
        raise LanceConnectionError(
            f"the {FIELD_CONCURRENCY!r} extra must be a whole number of at least 1, got {raw!r}"
        )
    return value


@dataclass(frozen=True)
class LanceConnectionConfig:
    """A resolved ``lance`` connection: the base URI and the storage options."""

    root: str
    storage_options: dict[str, str] = field(default_factory=dict)
    #: Leaf tables worked on at once (None: the core's default for the root's store).
    concurrency: int | None = None

    @classmethod
    def from_fields(
        cls,
        *,
        host: str | None = None,
        login: str | None = None,
        password: str | None = None,
        extras: Mapping[str, Any] | None = None,
        default_root: str | None = None,
    ) -> LanceConnectionConfig:
        """Build the config from a connection's fields (see the module docstring)."""
        prefix = f"extra__{CONN_TYPE}__"  # the form's legacy key names
        extras = {
            (k[len(prefix) :] if k.startswith(prefix) else k): v for k, v in (extras or {}).items()
        }
        root = extras.get(FIELD_ROOT) or host or default_root
        if not root or not isinstance(root, str):
            raise LanceConnectionError(
                "a lance connection needs a root URI: set the 'root' extra (e.g. "
                "s3://bucket/warehouse or /data/lance)"
            )
        root = normalize_root(root)
        options = _convenience_options(_store_scheme(root), extras, login, password)
        for key, value in extras.items():
            lowered = key.lower()
            if value is not None and (
                lowered.startswith(_OPTION_PREFIXES) or lowered in _GENERIC_OPTIONS
            ):
                options[key] = _as_text(value, key)
        for name in (FIELD_STORAGE_OPTIONS, FIELD_SECRET_STORAGE_OPTIONS):
            options.update(_parse_storage_options(extras.get(name), name))
        return cls(
            root=root,
            storage_options=options,
            concurrency=_parse_concurrency(extras.get(FIELD_CONCURRENCY)),
        )

    def secrets(self) -> list[tuple[str, str]]:
        """``(key, value)`` of every storage option that must never be shown."""
        return [(k, v) for k, v in self.storage_options.items() if v and is_secret_key(k)]

    def namespace_uri(self, namespace: str | os.PathLike[str] | None = None) -> str:
        """``namespace`` resolved against the root: a full URI or absolute path is kept."""
        if namespace is None or os.fspath(namespace) in ("", "/", "."):
            return self.root
        text = os.fspath(namespace)
        if has_scheme(text) or os.path.isabs(text):
            return normalize_root(text)
        parts = [p for p in text.strip("/").split("/") if p not in ("", ".")]
        if ".." in parts:
            raise LanceConnectionError(f"namespace {text!r} must not contain '..'")
        return f"{self.root.rstrip('/')}/{'/'.join(parts)}"

    @property
    def redacted(self) -> dict[str, Any]:
        """A loggable view: secret option values replaced by ``***``."""
        return {
            "root": self.root,
            "concurrency": self.concurrency,
            "storage_options": {
                k: ("***" if is_secret_key(k) else v) for k, v in self.storage_options.items()
            },
        }
