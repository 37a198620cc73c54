"""Small JSON documents at a local path or an object-store URI (job results, reports),
through :class:`~.storage.Storage`: each written whole in one PUT."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_lance.namespace.errors import StorageAccessError

from .storage import Storage


def _locate(uri: str, storage_options: Mapping[str, str] | None) -> tuple[Storage, str]:
    """The storage of the directory holding the document at ``uri``, and its file name."""
    base, _, name = uri.removeprefix("file://").rstrip("/").rpartition("/")
    if not name:
        raise StorageAccessError(f"{uri!r} does not name a file: give the URI of a document")
    return Storage(base or ".", storage_options), name


def write_json(uri: str, obj: Any, storage_options: Mapping[str, str] | None = None) -> None:
    """Write ``obj`` as JSON to ``uri`` (a local path, ``file://`` or an object-store URI)."""
    storage, name = _locate(uri, storage_options)
    storage.put_json(name, obj, indent=2)


def read_json(uri: str, storage_options: Mapping[str, str] | None = None) -> Any:
    """Read the JSON document at ``uri``; :class:`FileNotFoundError` if there is none."""
    storage, name = _locate(uri, storage_options)
    try:
        return storage.get_json(name)
    except KeyError:
        raise FileNotFoundError(uri) from None


def remove_json(uri: str, storage_options: Mapping[str, str] | None = None) -> None:
    """Delete the document at ``uri`` if there is one (e.g. a stale result before a rerun)."""
    storage, name = _locate(uri, storage_options)
    storage.delete(name)
