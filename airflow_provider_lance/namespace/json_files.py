"""Small JSON documents at a local path or an object-store URI (job results, reports).

Written and read through Lance's own object-store client, so the namespace's storage options
(credentials, endpoint) are all it takes; each document is written whole in one PUT.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lance.file import LanceFileSession

from .errors import StorageError


def _is_remote(uri: str) -> bool:
    return "://" in uri and not uri.startswith("file://")


def _split(uri: str) -> tuple[str, str]:
    base, _, name = uri.rstrip("/").rpartition("/")
    if not name:
        raise StorageError(f"{uri!r} does not name a file")
    return base, name


def write_json(uri: str, obj: Any, storage_options: Mapping[str, str] | None = None) -> None:
    """Write ``obj`` as JSON to ``uri`` (a local path, ``file://`` or an object-store URI)."""
    text = json.dumps(obj, indent=2, sort_keys=True, default=str)
    if not _is_remote(uri):
        path = Path(uri.removeprefix("file://"))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        return
    base, name = _split(uri)
    fd, local = tempfile.mkstemp(suffix=".json")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        LanceFileSession(base, storage_options=dict(storage_options or {}) or None).upload_file(
            local, name
        )
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot write {uri}: {exc}") from exc
    finally:
        os.unlink(local)


def read_json(uri: str, storage_options: Mapping[str, str] | None = None) -> Any:
    """Read the JSON document at ``uri``; :class:`FileNotFoundError` if there is none."""
    if not _is_remote(uri):
        return json.loads(Path(uri.removeprefix("file://")).read_text())
    base, name = _split(uri)
    session = LanceFileSession(base, storage_options=dict(storage_options or {}) or None)
    if not session.contains(name):
        raise FileNotFoundError(uri)
    fd, local = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        session.download_file(name, local)
        return json.loads(Path(local).read_text())
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot read {uri}: {exc}") from exc
    finally:
        os.unlink(local)


def remove_json(uri: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Delete the document at ``uri`` if there is one (e.g. a stale result before a rerun)."""
    if not _is_remote(uri):
        Path(uri.removeprefix("file://")).unlink(missing_ok=True)
        return
    base, name = _split(uri)
    session = LanceFileSession(base, storage_options=dict(storage_options or {}) or None)
    try:
        if session.contains(name):
            session.delete_file(name)
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot delete {uri}: {exc}") from exc
