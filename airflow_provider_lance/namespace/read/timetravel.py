"""Naming a past state of a namespace: a ``__manifest`` version, a moment, or a tag.

Every ``__manifest`` version is a complete, immutable state, so reading the past is reading
an older version; a name that resolves to none (never existed, or removed by ``maintain``)
gets an error saying which. Tags are Lance's own tags on ``__manifest``. A moment resolves
to the latest version committed at or before it; one that may fall into a gap retention
left (commit times unknown) is refused rather than answered with a neighbouring state.
"""

from __future__ import annotations

import datetime as dt
import operator
import re

import lance

from airflow_provider_lance.namespace.errors import (
    InvalidArgumentError,
    ManifestError,
    TagExistsError,
    VersionBeforeCreationError,
    VersionNotFoundError,
)
from airflow_provider_lance.namespace.format.manifest import Manifest
from airflow_provider_lance.namespace.format.spec import spec_versions
from airflow_provider_lance.namespace.format.state import ReadAt, removed_by_retention
from airflow_provider_lance.namespace.io.storage import first_line, storage_error
from airflow_provider_lance.namespace.results import TagInfo

#: A past state: a ``__manifest`` version, a moment (naive = UTC) or a tag name.
AsOf = int | dt.datetime | str

#: Tag names: a letter or digit, then letters, digits and ``._-`` (what Lance accepts, and
#: safe as a file name); never only digits (see :func:`check_tag_name`).
TAG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def as_utc(moment: dt.datetime) -> dt.datetime:
    """``moment`` as an aware UTC datetime (a naive one is taken to be UTC)."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


def pick(as_of: AsOf | None, version: int | None) -> AsOf | None:
    """The one of ``as_of`` and its older alias ``version`` that was given."""
    if as_of is not None and version is not None:
        raise InvalidArgumentError("give as_of or version (its alias), not both")
    return as_of if as_of is not None else version


def resolve_as_of(manifest: Manifest, as_of: object) -> int:
    """The ``__manifest`` version ``as_of`` names (it is not opened: see :func:`open_version`)."""
    if isinstance(as_of, bool):
        raise InvalidArgumentError(f"as_of must be a version, a datetime or a tag, not {as_of!r}")
    if isinstance(as_of, int):
        return as_of
    if isinstance(as_of, dt.datetime):
        return version_at(manifest, as_of)
    if isinstance(as_of, str):
        return tagged_version(manifest, as_of)
    try:
        return operator.index(as_of)  # type: ignore[arg-type]  # e.g. a numpy integer
    except TypeError:
        raise InvalidArgumentError(
            "as_of must be a __manifest version (int), a datetime (naive = UTC) or a tag name "
            f"(str), not {type(as_of).__name__}"
        ) from None


def open_version(manifest: Manifest, version: int) -> lance.LanceDataset:
    """``__manifest`` at ``version``; :class:`VersionNotFoundError` if it is not committed
    yet, :class:`~.errors.VersionCleanedUp` (not retryable) if retention removed it."""
    if version < 1:
        raise InvalidArgumentError(f"__manifest versions start at 1, got {version}")
    try:
        return manifest.open(version)
    except ManifestError as exc:
        latest = int(manifest.open().version)
        if version > latest:
            raise VersionNotFoundError(
                f"{manifest.root} has no __manifest version {version}: the latest is {latest}"
            ) from None
        raise removed_by_retention(
            f"__manifest version {version} of {manifest.root}",
            (v for v, _ in version_times(manifest)),
            "__manifest versions (older ones only if tagged)",
            ReadAt(version, pinned=True),
        ) from exc


def version_times(manifest: Manifest) -> list[tuple[int, dt.datetime]]:
    """Every retained ``__manifest`` version and its commit time (UTC), ascending."""
    with manifest.storage.failures("list the versions of", manifest.uri):
        versions = manifest.open().versions()
    return sorted((int(v["version"]), _utc(v["timestamp"])) for v in versions)


def _utc(timestamp: int | dt.datetime) -> dt.datetime:
    """A version's commit time, from pylance's naive local time (pylance fact:
    test_fact_version_timestamps_are_naive_local_times)."""
    if isinstance(timestamp, dt.datetime):
        return timestamp.astimezone(dt.timezone.utc)
    return dt.datetime.fromtimestamp(timestamp / 1e9, dt.timezone.utc)  # nanoseconds


def version_at(manifest: Manifest, moment: dt.datetime) -> int:
    """The latest version committed at or before ``moment``."""
    when = as_utc(moment)
    times = version_times(manifest)
    earlier = [i for i, (_, ts) in enumerate(times) if ts <= when]
    if not earlier:
        first, first_ts = times[0]
        if first == 1:
            raise VersionNotFoundError(
                f"{when.isoformat()} is before {manifest.root} was created ({first_ts.isoformat()})"
            )
        raise VersionNotFoundError(
            f"the state of {manifest.root} as of {when.isoformat()} was cleaned up: the oldest "
            f"retained __manifest version is {first} ({first_ts.isoformat()})"
        )
    i = max(earlier, key=lambda k: times[k][0])
    version, ts = times[i]
    if i + 1 < len(times) and times[i + 1][0] != version + 1:
        after, after_ts = times[i + 1]
        raise VersionNotFoundError(
            f"the state of {manifest.root} as of {when.isoformat()} may be one of the __manifest "
            f"versions {version + 1}-{after - 1}, which were cleaned up; the nearest retained are "
            f"{version} ({ts.isoformat()}) and {after} ({after_ts.isoformat()})"
        )
    return version


def check_tag_name(name: object) -> str:
    """``name`` if it is a valid tag name, else :class:`InvalidArgumentError` saying why."""
    if not isinstance(name, str) or not TAG_PATTERN.fullmatch(name):
        raise InvalidArgumentError(
            f"tag name {name!r} must be 1-100 characters of letters, digits and ._- starting "
            "with a letter or digit"
        )
    if name.isdigit() or ".." in name or name.endswith((".", ".lock")):
        raise InvalidArgumentError(
            f"tag name {name!r} may not be only digits (it would read as a version), contain "
            "'..' or end with '.' or '.lock'"
        )
    return name


def tagged_version(manifest: Manifest, name: str) -> int:
    """The version the tag ``name`` points at."""
    for tag in list_tags(manifest):
        if tag.name == name:
            return tag.version
    known = ", ".join(t.name for t in list_tags(manifest)) or "none"
    raise VersionNotFoundError(f"{manifest.root} has no tag {name!r} (tags: {known})")


def list_tags(manifest: Manifest) -> list[TagInfo]:
    """Every tag, oldest version first."""
    with manifest.storage.failures("list the tags of", manifest.uri):
        raw = manifest.open().tags.list()
    tags = [TagInfo(name, int(t["version"]), t.get("created_at")) for name, t in raw.items()]
    return sorted(tags, key=lambda t: (t.version, t.name))


def create_tag(manifest: Manifest, name: str, version: int) -> TagInfo:
    """Tag ``version`` (it must exist and hold a namespace); :class:`TagExistsError` if taken."""
    check_tag_name(name)
    at = open_version(manifest, version)
    if not spec_versions(at.metadata):
        raise VersionBeforeCreationError(
            f"__manifest version {version} of {manifest.root} predates the namespace (its "
            "creation was not finished at that version); tag a later one"
        )
    taken = {t.name: t for t in list_tags(manifest)}
    if name in taken:
        raise TagExistsError(
            f"tag {name!r} already exists (on __manifest version {taken[name].version}); "
            "untag it first to move it"
        )
    try:
        manifest.open().tags.create(name, version)
    except (ValueError, OSError) as exc:
        text = first_line(exc)
        if "already exists" in text:
            raise TagExistsError(f"tag {name!r} was created concurrently: {text}") from exc
        if "not exist" in text or "not found" in text.lower():
            raise VersionNotFoundError(
                f"__manifest version {version} of {manifest.root} was cleaned up while it "
                f"was being tagged: {text}"
            ) from exc
        raise storage_error(f"tag version {version} of", manifest.uri, exc) from exc
    try:  # a cleanup that listed the tags before this one may have removed it meanwhile
        open_version(manifest, version)
    except VersionNotFoundError:
        delete_tag(manifest, name)
        raise
    return next(t for t in list_tags(manifest) if t.name == name)


def delete_tag(manifest: Manifest, name: str) -> None:
    """Remove the tag ``name``; the version it pinned is left to the next ``maintain``."""
    tagged_version(manifest, check_tag_name(name))  # a clear error for an unknown tag
    try:
        manifest.open().tags.delete(name)
    except (ValueError, OSError) as exc:
        text = first_line(exc)
        if "not exist" in text or "not found" in text.lower():
            message = f"tag {name!r} of {manifest.root} was deleted concurrently"
            raise VersionNotFoundError(message) from exc
        raise storage_error(f"delete the tag {name!r} of", manifest.uri, exc) from exc
