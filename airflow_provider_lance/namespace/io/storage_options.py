"""Storage options as users write them, turned into what Lance takes (text only). Imports
nothing heavy: the Airflow connection, parsed in the API server too, shares it."""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping

from airflow_provider_lance.namespace.errors import InvalidArgumentError

#: A storage option's value as users write it in Python (Lance itself takes text only).
StorageOptionValue = str | bool | int | float

#: Options the object stores parse as a duration ("30s", "1500ms"), also with a store's
#: prefix (``aws_timeout``): a number given for one is seconds.
_DURATION_OPTIONS = frozenset(
    {"timeout", "connect_timeout", "pool_idle_timeout", "http2_keep_alive_interval"}
    | {"http2_keep_alive_timeout"}
)
_STORE_PREFIXES = ("aws_", "google_", "azure_")


def options_from_json(raw: str, where: str) -> dict[str, StorageOptionValue | None]:
    """Storage options written as a JSON object (an environment variable, a Spark option);
    errors name ``where``, never the text (it may hold a secret)."""
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"{where} is not valid JSON ({exc.args[0].split(':')[0]}); it must be a JSON "
            'object, e.g. {"aws_endpoint": "http://localhost:9000", "allow_http": true}'
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidArgumentError(
            f"{where} must be a JSON object of option names to values, "
            f"got a JSON {type(parsed).__name__}"
        )
    return parsed


def normalize_options(
    options: Mapping[str, StorageOptionValue | None] | None,
) -> dict[str, str] | None:
    """Storage options as Lance takes them: every value text (None if there are none).
    Booleans become ``"true"``/``"false"``, numbers their text (seconds, ``"30s"``, for a
    duration option), None leaves an option unset; anything else is refused naming it."""
    if not options:
        return None
    if not isinstance(options, Mapping):
        raise InvalidArgumentError(
            "storage options must be a mapping of option names to values (e.g. "
            f'{{"aws_region": "eu-west-1"}}), got {type(options).__name__}'
        )
    out = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"storage option names must be strings, got {key!r}")
        if value is not None:
            out[key] = option_text(key, value)
    return out or None


def option_text(key: str, value: object) -> str:
    """One option's value as Lance takes it (see :func:`normalize_options`)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Real) and math.isfinite(seconds := float(value)):
        name = key.lower()
        name = next((name[len(p) :] for p in _STORE_PREFIXES if name.startswith(p)), name)
        if name not in _DURATION_OPTIONS:
            return str(value)
        if seconds < 0:
            raise InvalidArgumentError(f"storage option {key!r} is a duration: {value} < 0")
        return f"{int(seconds)}s" if seconds.is_integer() else f"{round(seconds * 1000)}ms"
    raise InvalidArgumentError(  # the value is not shown: it may be a secret
        f"storage option {key!r} must be a string, a boolean or a number, got a "
        f'{type(value).__name__}; Lance takes every option as text (e.g. "true", "30s")'
    )
