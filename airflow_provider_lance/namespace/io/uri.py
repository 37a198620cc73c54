"""Namespace roots and the URIs inside them: local paths, object stores, and the rule that
no location a `__manifest` row names may escape its root."""

from __future__ import annotations

import os
from urllib.parse import quote, unquote, urlparse

from airflow_provider_lance.namespace.errors import InvalidArgumentError, LanceNamespaceError


def has_scheme(uri: str) -> bool:
    return len(urlparse(uri).scheme) > 1  # a Windows drive letter is not a scheme


#: ASCII characters of a local path kept as they are in its ``file://`` URI (besides
#: letters, digits and ``_.-~``); every other one (``%``, ``#``, ``?``, a space, a
#: backslash) is percent-encoded. Non-ASCII letters stay readable.
_PATH_SAFE = "/!$&'()*+,;=:@"


def normalize_root(uri: str | os.PathLike[str]) -> str:
    """A canonical root URI: no trailing slash; a local path becomes an absolute
    ``file://`` URI, percent-encoded (``pct%41dir`` is ``file:///.../pct%2541dir``, which
    Lance and :func:`local_path` decode back). A URI with a scheme is taken as written."""
    text = os.fspath(uri)
    if not text:
        raise LanceNamespaceError("the namespace URI must not be empty")
    control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if control is not None:
        raise InvalidArgumentError(
            f"the namespace URI {text!r} holds the control character {control!r}, which Lance "
            "does not take in a path; choose another name"
        )
    if not has_scheme(text):
        path = os.path.abspath(os.path.expanduser(text))
        text = "file://" + "".join(c if ord(c) > 127 else quote(c, safe=_PATH_SAFE) for c in path)
    return text.rstrip("/") if not text.endswith(":///") else text


def local_path(uri: str) -> str | None:
    """The filesystem path of a ``file://`` URI (percent-decoded), else None."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else None


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
