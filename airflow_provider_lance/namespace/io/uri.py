"""Namespace roots and the URIs inside them: local paths, object stores, and the rule that
no location a `__manifest` row names may escape its root."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from airflow_provider_lance.namespace.errors import LanceNamespaceError


def has_scheme(uri: str) -> bool:
    parsed = urlparse(uri)
    return len(parsed.scheme) > 1  # a Windows drive letter is not a scheme


def normalize_root(uri: str | os.PathLike[str]) -> str:
    """A canonical root URI: local paths become absolute ``file://`` URIs; no trailing slash."""
    text = os.fspath(uri)
    if not text:
        raise LanceNamespaceError("the namespace URI must not be empty")
    if not has_scheme(text):
        text = "file://" + os.path.abspath(os.path.expanduser(text))
    return text.rstrip("/") if not text.endswith(":///") else text


def local_path(uri: str) -> str | None:
    """The filesystem path of a ``file://`` URI, else None (object stores)."""
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else None


def child_uri(root: str, relative: str) -> str:
    """``root/relative``, refusing locations that would escape the root."""
    if relative and "/" not in relative and ":" not in relative and relative not in (".", ".."):
        return f"{root}/{relative}"  # a plain child name, as every leaf directory is
    if (
        not relative
        or relative.startswith("/")
        or has_scheme(relative)
        or any(part in ("..", ".") for part in relative.split("/"))
    ):
        raise LanceNamespaceError(
            f"table location {relative!r} does not resolve inside the namespace root {root!r}"
        )
    return f"{root}/{relative}"
