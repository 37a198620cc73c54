"""Leaf tables: creating them, staging data files into them, and committing those files.

Writers only produce data files (``lance.fragment.write_fragments``); the commit of each leaf
is a separate step (``Append`` or ``Overwrite``), and publishing the new versions is a third
one, in ``__manifest``. Keeping the steps apart is what lets a transaction span many
partitions and many processes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation, Transaction
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata, write_fragments

from .errors import CommitConflict, LanceNamespaceError
from .failpoints import failpoint
from .manifest import is_conflict

log = logging.getLogger(__name__)

#: Leaf-commit properties naming the transaction (and its incarnation) that made a version.
TXN_PROPERTY = "partitioned-namespace.txn_id"
INCARNATION_PROPERTY = "partitioned-namespace.incarnation"
#: Commit attempts on one leaf before giving up (each lost only to a concurrent zombie).
LEAF_ATTEMPTS = 16
#: Rows per data file written to a leaf table.
MAX_ROWS_PER_FILE = 1_048_576


def _opts(storage_options: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(storage_options) if storage_options else None


def stage_fragments(
    uri: str,
    data: pa.Table,
    storage_options: Mapping[str, str] | None,
    *,
    overwrite: bool = False,
    version: int | None = None,
) -> list[FragmentMetadata]:
    """Write ``data`` as new data files of the leaf at ``uri``; nothing becomes visible.

    Files staged for an overwrite carry field ids of ``data``'s own schema (the leaf is
    replaced whole), files for an append those of the leaf's schema at ``version`` (its
    published version: a newer, unpublished version left by a crashed writer may have
    another schema and must not decide the field ids).
    """
    target: str | lance.LanceDataset = uri
    if not overwrite and version is not None:
        target = lance.dataset(uri, version=version, storage_options=_opts(storage_options))
    return list(
        write_fragments(
            data,
            target,
            mode="overwrite" if overwrite else "append",
            max_rows_per_file=MAX_ROWS_PER_FILE,
            storage_options=_opts(storage_options),
        )
    )


def leaf_schema(
    uri: str, storage_options: Mapping[str, str] | None, version: int | None = None
) -> pa.Schema:
    """The schema of the leaf table at ``uri`` (at ``version``, default latest)."""
    return lance.dataset(uri, version=version, storage_options=_opts(storage_options)).schema


def committed_by(ds: lance.LanceDataset, version: int) -> str | None:
    """The tag (``txn_id#incarnation``) recorded on a leaf version (None: not ours)."""
    txn = ds.read_transaction(version)
    props = (txn.transaction_properties or {}) if txn is not None else {}
    txn_id = props.get(TXN_PROPERTY)
    if txn_id is None:
        return None
    return f"{txn_id}#{props.get(INCARNATION_PROPERTY, '0')}"


def _signature(fragment: FragmentMetadata | dict[str, Any]) -> str:
    """What identifies a fragment's content across commits: its data files and deletions
    (fragment ids may be renumbered by an append, files never are)."""
    raw = fragment if isinstance(fragment, dict) else fragment.to_json()
    files = sorted(f["path"] for f in raw.get("files", []))
    deletion = raw.get("deletion_file")
    return json.dumps([files, deletion and [deletion.get("id"), deletion.get("read_version")]])


def _content(ds: lance.LanceDataset, version: int) -> list[str]:
    at = ds if int(ds.version) == version else ds.checkout_version(version)
    return sorted(_signature(f.metadata) for f in at.get_fragments())


def _exists(uri: str, opts: dict[str, str] | None) -> bool:
    try:
        lance.dataset(uri, storage_options=opts)
    except (ValueError, OSError):
        return False
    return True


def base_version(ds: lance.LanceDataset, published: int | None) -> int | None:
    """The version a commit builds on: the published ``read_version``, or for a partition
    published with NULL ("read the latest", as foreign writers leave it) the newest
    version none of our transactions made (ours would have set a read_version)."""
    if published is not None:
        return published
    for version in range(int(ds.version), 0, -1):
        if committed_by(ds, version) is None:
            return version
    return None


def commit_leaf(
    uri: str,
    fragments: Sequence[FragmentMetadata],
    *,
    replace: bool,
    schema: pa.Schema,
    published: int | None,
    exists: bool,
    owner: str,
    storage_options: Mapping[str, str] | None,
) -> int:
    """Commit staged fragments as a leaf version holding exactly base + ``fragments``.

    ``published`` is the partition's read_version when claimed (None for a new partition
    or one published as "read the latest", see :func:`base_version`). Runs while ``owner``
    (a ``txn#k`` tag) holds the partition's claim, but zombies (a committer that lost its
    claim, a stale retry) may still commit or restore concurrently, and Lance silently
    rebases a stale ``Append`` onto whatever is latest. So a commit is used only if it
    became version ``base + 1`` (nothing landed in between: it holds exactly the base's
    fragments plus ours), else it is rolled back and made again; a latest version that
    ``owner`` itself committed (an earlier attempt) is reused only if its fragments are
    exactly the base's plus ours. The commit records ``owner`` in its properties.
    """
    opts = _opts(storage_options)
    txn_id, _, incarnation = owner.rpartition("#")
    properties = {TXN_PROPERTY: txn_id, INCARNATION_PROPERTY: incarnation}
    mine = sorted(_signature(f) for f in fragments)
    for _attempt in range(LEAF_ATTEMPTS):
        try:
            ds: lance.LanceDataset | None = lance.dataset(uri, storage_options=opts)
        except ValueError as exc:
            if "was not found" not in str(exc):
                raise
            ds = None
        if ds is None:
            if exists and published is not None:
                raise LanceNamespaceError(f"partition table {uri} (version {published}) is missing")
            base, overwrite, expected = 0, True, mine
        else:
            base_v = base_version(ds, published)
            overwrite = replace or base_v is None
            latest = int(ds.version)
            if latest != base_v and committed_by(ds, latest) == owner:
                # An earlier attempt (or a concurrent one of ours) made it: reuse it only if
                # it holds exactly the base plus our files.
                expected = mine if overwrite else sorted(_content(ds, base_v or 0) + mine)
                if _content(ds, latest) == expected:
                    return latest
            if base_v is not None and not overwrite and latest != base_v:
                log.warning(
                    "rolling back %d unpublished version(s) of %s to version %d",
                    latest - base_v,
                    uri,
                    base_v,
                )
                lance.dataset(uri, version=base_v, storage_options=opts).restore()  # type: ignore[no-untyped-call]
                latest = int(lance.dataset(uri, storage_options=opts).version)
            base = latest
        operation: LanceOperation.BaseOperation = (
            LanceOperation.Overwrite(schema, list(fragments))
            if overwrite
            else LanceOperation.Append(list(fragments))
        )
        failpoint("leaf.before_commit")
        try:
            committed = lance.LanceDataset.commit(
                uri,
                Transaction(base, operation, transaction_properties=properties),
                storage_options=opts,
                max_retries=0,
            )
        except OSError as exc:
            if not is_conflict(exc) and not (base == 0 and _exists(uri, opts)):
                raise
            continue  # a concurrent commit (or creation of the table) won: look again
        version = int(committed.version)
        if version == base + 1:  # nothing landed in between: exactly base + our files
            return version
        log.warning(
            "leaf %s version %d was rebased onto a concurrent commit; committing again",
            uri,
            version,
        )
    raise CommitConflict(
        f"partition table {uri} kept changing under the commit (concurrent committers of "
        "an aborted or taken-over transaction?); retry the commit"
    )


def discard_fragments(
    uri: str, fragments: Sequence[FragmentMetadata], storage_options: Mapping[str, str] | None
) -> None:
    """Delete the data files of staged fragments that will never be committed."""
    if not fragments:
        return
    session = LanceFileSession(uri, storage_options=_opts(storage_options))
    for fragment in fragments:
        for data_file in fragment.to_json().get("files", []):
            try:
                session.delete_file(f"data/{data_file['path']}")
            except (OSError, ValueError) as exc:
                log.warning(
                    "could not delete staged file %s of %s: %s", data_file["path"], uri, exc
                )
