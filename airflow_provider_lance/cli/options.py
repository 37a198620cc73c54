"""What operators pass besides a command: storage options and the past state to read.

Storage options reach an object store the way the Spark write job's do: a JSON object in
``LANCE_STORAGE_OPTIONS`` (the same variable, the same format), and per call
``--storage-option KEY=VALUE``, which wins over the variable key by key. Without them the CLI
could reach S3-compatible stores only through ``AWS_*`` variables, which also reach every
other AWS tool of the shell; a secret is better kept in the variable than on a command line
(``ps`` shows command lines).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from airflow_provider_lance.namespace import (
    AsOf,
    StorageOptionValue,
    option_text,
    options_from_json,
)
from airflow_provider_lance.spark.jobs import STORAGE_OPTIONS_ENV

__all__ = [
    "STORAGE_OPTIONS_ENV",
    "as_of",
    "duration",
    "index_param",
    "local_directory",
    "moment",
    "not_utf8",
    "storage_option",
    "storage_options",
]

_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")


def storage_option(text: str) -> tuple[str, str]:
    """``--storage-option KEY=VALUE``, split (argparse refuses anything else, exit 2)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE (e.g. aws_endpoint=http://localhost:9000)"
        )
    return key.strip(), value


#: What ``--param`` cannot set: ``create-index``'s own arguments (their flag), or what the
#: namespace sets for every leaf (None).
_INDEX_FLAGS = {
    "column": "COLUMN",
    "index_type": "TYPE",
    "name": "--name",
    "filter": "--filter",
    "replace": "--replace",
    "shared_model": "--no-shared-model",
    "txn_id": "--txn-id",
    "claim_timeout": None,
    "progress": None,
    "fragment_ids": None,
    "index_uuid": None,
    "storage_options": "--storage-option",
    "train": None,
}


def index_param(text: str) -> tuple[str, Any]:
    """``--param KEY=VALUE`` of ``create-index``: the value read as JSON (``4``, ``true``,
    ``[1, 2]``), else taken as text (``metric=cosine``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r} is not KEY=VALUE (e.g. metric=cosine or num_partitions=4)"
        )
    key = key.strip()
    if key in _INDEX_FLAGS:
        flag = _INDEX_FLAGS[key]
        raise argparse.ArgumentTypeError(
            f"{key} is not an index parameter: "
            + (f"give {flag}" if flag else "set by the namespace")
        )
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def flag_value(key: str, value: str) -> StorageOptionValue:
    """A flag's value as the core takes it: text, except a bare number for a duration
    option, which the core turns into seconds (``timeout=30`` is ``30s``, as in Python)."""
    if not _NUMBER.fullmatch(value):
        return value
    number = float(value)
    return number if option_text(key, number) != str(number) else value


def storage_options(
    flags: Sequence[tuple[str, str]], environ: Mapping[str, str] = os.environ
) -> dict[str, StorageOptionValue | None] | None:
    """The storage options of a command: :data:`STORAGE_OPTIONS_ENV` (a JSON object whose
    values are text, booleans, numbers or null: unset), then each ``--storage-option`` over
    it. The core checks and normalises the values (``namespace/io/storage_options.py``); errors
    name the option, never its value (it may be a secret)."""
    options: dict[str, StorageOptionValue | None] = {}
    raw = environ.get(STORAGE_OPTIONS_ENV, "").strip()
    if raw:
        options.update(options_from_json(raw, STORAGE_OPTIONS_ENV))
    for key, value in flags:
        options[key] = flag_value(key, value)
    return options or None


def as_of(text: str) -> AsOf:
    """``--as-of``: a ``__manifest`` version (digits), an ISO 8601 date or time (without an
    offset: UTC; ``Z`` accepted) or else a tag name; the core resolves it and says when
    that state does not exist."""
    text = text.strip()
    if not text:
        raise argparse.ArgumentTypeError(
            "is empty: give a __manifest version, an ISO 8601 date or time, or a tag name"
        )
    if text.isdigit():
        return int(text)
    try:
        return _iso(text)
    except ValueError:
        return text


def moment(text: str) -> dt.datetime:
    """An ISO 8601 moment for ``--at`` (without an offset: UTC)."""
    try:
        return _iso(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO 8601 date and time (e.g. 2025-12-01T06:00:00+00:00)"
        ) from None


def _iso(text: str) -> dt.datetime:
    """``fromisoformat`` that also takes a ``Z`` suffix (Python 3.10's does not)."""
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    return dt.datetime.fromisoformat(text)


def duration(text: str) -> float:
    """A number of hours or seconds (``--lease-seconds``, ``--older-than-hours``): finite
    and not negative (a negative lease would abort every transaction, running ones too)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of at least 0")
    return value


def not_utf8(argv: Sequence[str]) -> str | None:
    """What the first argument that is not UTF-8 text holds (the shell passed bytes that
    Python could only keep as surrogates), for a message; None when all are text."""
    for arg in argv:
        for i, char in enumerate(arg):
            if "\udc80" <= char <= "\udcff":
                raw = arg.encode("utf-8", "surrogateescape")
                return (
                    f"the argument {raw!r} is not UTF-8 text (byte 0x{ord(char) - 0xDC00:02x} "
                    f"at character {i}); give paths, filters and names in UTF-8"
                )
    return None


def local_directory(text: str) -> Path:
    """The demo's directory: a local path (a ``file://`` URI is taken as its path, not as a
    directory named ``file:``)."""
    if text.startswith("file://"):
        return Path(unquote(urlsplit(text).path))
    scheme = urlsplit(text).scheme
    if len(scheme) > 1:  # (a Windows drive letter is not a scheme)
        raise argparse.ArgumentTypeError(
            f"the demo makes a local directory, not one on {scheme}:// ({text!r})"
        )
    return Path(text)
