"""Leaf tables: staging data files into them, and committing those files as leaf versions.

Staging writes data files only; a leaf commit (``Append`` or ``Overwrite``) makes them a
version, and a ``__manifest`` swap publishes it: three steps, so that one transaction can
span many partitions and many processes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import lance
import pyarrow as pa
from lance import LanceOperation, Transaction
from lance.fragment import DataFile, FragmentMetadata
from lance.optimize import Compaction, CompactionOptions, RewriteResult
from lance.schema import LanceSchema

from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    LanceNamespaceError,
    StagedFilesMissing,
    StorageError,
    TransactionAborted,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.format.leaf_version import committed_by, owner_properties
from airflow_provider_lance.namespace.io.storage import Storage
from airflow_provider_lance.namespace.retry import Budget, Outcome, retry_until

log = logging.getLogger(__name__)

#: Commit attempts on one leaf before giving up (each lost only to a concurrent zombie).
LEAF_ATTEMPTS = 16


def stage_fragments(
    storage: Storage, target: str | lance.LanceDataset, data: pa.Table, *, overwrite: bool = False
) -> list[FragmentMetadata]:
    """Write ``data`` as new data files of the leaf ``target``; nothing becomes visible.
    Files for an overwrite take the field ids of ``data``'s schema, for an append those of
    ``target`` (pass the leaf opened at its published version)."""
    return storage.write_fragments(data, target, overwrite=overwrite)


#: The fields of pylance's ``DataFile`` and ``FragmentMetadata`` :func:`fragment_text`
#: writes by hand (pylance fact: test_pylance_facts.py::
#: test_fact_data_file_and_fragment_metadata_fields); with others it calls ``to_json``.
_DATA_FILE_FIELDS = tuple(
    "_path fields column_indices file_major_version file_minor_version file_size_bytes "  # noqa: SIM905
    "base_id".split()
)
_FRAGMENT_FIELDS = tuple(
    "id files physical_rows deletion_file row_id_meta created_at_version_meta "  # noqa: SIM905
    "last_updated_at_version_meta overlays".split()
)
_PLAIN_TEXT = (
    tuple(f.name for f in dataclasses.fields(DataFile)) == _DATA_FILE_FIELDS
    and tuple(f.name for f in dataclasses.fields(FragmentMetadata)) == _FRAGMENT_FIELDS
)


def fragment_text(meta: FragmentMetadata) -> str:
    """``json.dumps(meta.to_json())`` (the form a stage records a fragment in), character
    for character, built directly for a fragment of data files alone."""
    if (
        not _PLAIN_TEXT
        or meta.overlays
        or meta.deletion_file is not None
        or meta.row_id_meta is not None
        or meta.created_at_version_meta is not None
        or meta.last_updated_at_version_meta is not None
    ):
        return json.dumps(meta.to_json())
    files = [
        {**{k: getattr(f, k) for k in _DATA_FILE_FIELDS[1:]}, "path": f._path} for f in meta.files
    ]
    plain = {"id": meta.id, "files": files, "overlays": [], "physical_rows": meta.physical_rows}
    return json.dumps(plain | dict.fromkeys(_FRAGMENT_FIELDS[3:7]))


class StagedFiles(Protocol):
    """What :func:`check_staged_files` needs of a staged partition (``StagedPartition``)."""

    @property
    def directory(self) -> str: ...

    def data_files(self) -> list[str]: ...


#: Missing files named in the message of :func:`check_staged_files`, at most.
MISSING_SHOWN = 10


def check_staged_files(
    storage: Storage,
    parts: Mapping[str, StagedFiles],
    owner: str,
    anonymous: bool = False,
    still_live: Callable[[], bool] | None = None,
) -> None:
    """Check that every file staged in ``parts`` still exists, before any is committed.

    Raises :class:`StagedFilesMissing` naming the missing files (for ``anonymous``: a
    retryable :class:`CommitConflict`), or :class:`TransactionAborted` if ``still_live()``,
    asked once files are missing, says the transaction (``owner``: ``txn#k``) was aborted.
    """
    ids = list(parts)

    def missing(oid: str) -> Sequence[str]:
        part = parts[oid]
        gone = storage.missing_files(part.directory, part.data_files())
        return [f"{part.directory}/{path}" for path in gone]

    checked = [missing(oid) for oid in ids] if storage.local else storage.map(missing, ids)
    found = {oid: files for oid, files in zip(ids, checked, strict=True) if files}
    if not found:
        return
    if still_live is not None and not still_live():
        raise TransactionAborted(
            f"transaction {owner} was aborted while it committed (its abort deleted its "
            "staged files); nothing of it was published"
        )
    files = [f for oid in sorted(found) for f in found[oid]]
    shown = ", ".join(files[:MISSING_SHOWN])
    more = f" and {len(files) - MISSING_SHOWN} more" if len(files) > MISSING_SHOWN else ""
    what = (
        f"{len(files)} data file(s) staged by {owner} are gone ({shown}{more}): removed by "
        "retention (maintain), the orphan sweep or by hand before they were committed; "
        "nothing was published"
    )
    if anonymous:
        raise CommitConflict(f"{what}; write the rows again", found)
    txn_id = owner.rpartition("#")[0] or owner
    raise StagedFilesMissing(
        f"{what}. Committing again cannot succeed: abort the transaction "
        f"(PartitionedNamespace.abort({txn_id!r})) and stage its rows again",
        found,
    )


def schema_digest(schema: LanceSchema | pa.Schema) -> str:
    """Identifies what the columns of data files written against ``schema`` mean: the id,
    name, type, nullability and metadata of every field. A ``pa.Schema`` stands for a table
    created from it. Pylance facts:
    test_pylance_facts.py::test_fact_schema_from_pyarrow_equals_the_schema_of_a_table_created_from_it,
    test_fact_write_fragments_take_the_field_ids_of_the_version_they_target.
    """
    lance_schema = schema if isinstance(schema, LanceSchema) else LanceSchema.from_pyarrow(schema)
    # Lance's rendering shows all of that: equal renderings are equal schemas.
    key = repr(lance_schema)
    digest = _DIGESTS.get(key)
    if digest is None:
        digest = _digest(lance_schema)
        if len(_DIGESTS) >= 256:
            _DIGESTS.clear()
        _DIGESTS[key] = digest
    return digest


_DIGESTS: dict[str, str] = {}


def _digest(lance_schema: LanceSchema) -> str:
    def canonical(f: Any) -> list[Any]:
        arrow = f.to_arrow()
        metadata = sorted((str(k), str(v)) for k, v in (f.metadata or {}).items())
        children = [canonical(c) for c in f.children()]
        return [f.id(), f.name(), str(arrow.type), arrow.nullable, metadata, children]

    text = json.dumps([canonical(f) for f in lance_schema.fields()], separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def check_append_schema(
    storage: Storage, uri: str, base: int, staged_on: int | None, staged_schema: str | None
) -> None:
    """Refuse (:class:`CommitConflict`) to append files onto version ``base`` unless its
    schema gives their field ids the meaning they were staged with."""
    if staged_schema is None or base == staged_on:  # unknown (older record), or the same
        return
    if schema_digest(storage.table(uri, base).lance_schema) != staged_schema:
        raise CommitConflict(
            f"partition table {uri} was rewritten under another schema after these rows were "
            "staged (a concurrent write after a schema change); nothing was published: "
            "stage them again"
        )


def _signature(fragment: FragmentMetadata | dict[str, Any]) -> str:
    """What identifies a fragment's content across commits: its data files and deletions
    (an append may renumber fragments, never files)."""
    if isinstance(fragment, dict):
        files = sorted(f["path"] for f in fragment.get("files", []))
        deletion = fragment.get("deletion_file")
        removed = deletion and [deletion.get("id"), deletion.get("read_version")]
    else:  # the same fields, without to_json()'s deep copy
        files = sorted(str(f.path) for f in fragment.files)
        found = fragment.deletion_file
        removed = None if found is None else [found.id, found.read_version]
    return json.dumps([files, removed])


def content_at(ds: lance.LanceDataset, version: int) -> list[str]:
    """The content of ``ds`` at ``version``: its fragments' signatures, sorted."""
    at = ds if int(ds.version) == version else ds.checkout_version(version)
    return sorted(_signature(f.metadata) for f in at.get_fragments())


def base_version(ds: lance.LanceDataset, published: int | None) -> int | None:
    """The version a commit builds on: the published ``read_version``, or for NULL ("read
    the latest", as foreign writers leave it) the newest version none of ours made."""
    if published is not None:
        return published
    for version in range(int(ds.version), 0, -1):
        if committed_by(ds, version) is None:
            return version
    return None


def _created(
    storage: Storage,
    uri: str,
    fragments: Sequence[FragmentMetadata],
    schema: pa.Schema,
    properties: dict[str, str],
) -> bool:
    """Create the leaf as version 1 holding exactly ``fragments``; False if one is there."""
    failpoint("leaf.before_commit")
    operation = LanceOperation.Overwrite(schema, list(fragments))
    created = Transaction(0, operation, transaction_properties=properties)
    try:
        storage.commit(uri, created, conflict=f"{uri} was created concurrently")
    except LanceNamespaceError:
        return False
    return True


def commit_leaf(
    storage: Storage,
    uri: str,
    fragments: Sequence[FragmentMetadata],
    *,
    replace: bool,
    schema: pa.Schema,
    published: int | None,
    exists: bool,
    owner: str,
    staged_schema: str | None = None,
    staged_on: int | None = None,
    operation_kind: str | None = None,
    may_roll_back: Callable[[int], bool] | None = None,
) -> int:
    """Commit staged fragments as a leaf version holding exactly base + ``fragments``,
    tagged ``owner`` (``txn#k``); returns the version.

    ``published``: the partition's read_version (None: new, or "read the latest", see
    :func:`base_version`). A commit counts only if it became ``base + 1`` (pylance fact:
    test_fact_commit_through_a_stale_handle_is_rebased_like_a_commit_by_uri), else it is
    rolled back and made again; a latest version ``owner`` made earlier is reused only if
    it holds exactly base + ours. ``exists`` False: the leaf is replaced whole.
    ``staged_schema`` (the :func:`schema_digest` of version ``staged_on`` for an append, of
    ``schema`` for a replacement) must match, else :class:`CommitConflict`, nothing
    committed. ``may_roll_back(base)`` False refuses a roll-back with :class:`LeafMoved`.
    """

    def check_replacement() -> None:  # an Overwrite gives the files ``schema``'s field ids
        if staged_schema is not None and schema_digest(schema) != staged_schema:
            raise CommitConflict(
                f"the namespace schema changed after the rows for {uri} were staged; "
                "nothing was published: stage them again"
            )

    properties = owner_properties(owner, operation_kind)
    if not exists:
        check_replacement()
        if _created(storage, uri, fragments, schema, properties):
            return 1
    mine = sorted(_signature(f) for f in fragments)

    def attempt(_: int) -> int | Outcome:
        ds = storage.table_or_none(uri)
        if ds is None:
            if exists and published is not None:
                raise LanceNamespaceError(f"partition table {uri} (version {published}) is missing")
            base, overwrite = 0, True
        else:
            base_v = base_version(ds, published)
            overwrite = replace or base_v is None or not exists
            latest = int(ds.version)
            if overwrite:  # replaces whatever is there: nothing to roll back
                ours = latest != base_v and committed_by(ds, latest) == owner
                if ours and content_at(ds, latest) == mine:  # an earlier attempt's: reused
                    return latest
                base = latest
            else:
                assert base_v is not None
                check_append_schema(storage, uri, base_v, staged_on, staged_schema)
                on = base_v

                def expected() -> list[str]:
                    return sorted(content_at(ds, on) + mine)

                settled = _settle(storage, uri, ds, on, owner, expected, may_roll_back)
                if not isinstance(settled, _Base):
                    return settled
                base = settled.version
        operation: LanceOperation.BaseOperation = LanceOperation.Append(list(fragments))
        if overwrite:
            check_replacement()
            operation = LanceOperation.Overwrite(schema, list(fragments))
        version = _commit_on(storage, uri, base, operation, properties)
        return Outcome.AGAIN if version is None else version

    return _until_committed(uri, attempt)


def commit_change(
    storage: Storage,
    uri: str,
    operation: LanceOperation.BaseOperation,
    *,
    base: int,
    owner: str,
    may_roll_back: Callable[[int], bool] | None = None,
    operation_kind: str | None = None,
    opened: lance.LanceDataset | None = None,
    latest_is_read: bool = True,
) -> int:
    """Commit ``operation`` (a ``Delete``, ``Update`` or ``Rewrite`` computed on the
    published leaf version ``base``) as version ``base + 1`` of exactly the content it was
    computed for, with :func:`commit_leaf`'s discipline (pylance facts:
    test_fact_stale_delete_and_rewrite_are_rebased_over_an_append,
    test_fact_restore_keeps_fragment_ids_so_a_change_computed_before_applies_after).

    ``operation_kind`` is recorded in the commit's properties. ``may_roll_back(base)``
    False raises :class:`LeafMoved` instead of a roll-back, or of the error of a ``base``
    that cannot be read. ``opened``: the leaf at ``base``, for the first commit.
    ``latest_is_read``: ``base`` is first checked to be the latest.
    """
    properties = owner_properties(owner, operation_kind)

    def reusable() -> lance.LanceDataset | None:
        """``opened``, if the first commit may be made on it."""
        if opened is None or int(opened.version) != base:
            return None
        if latest_is_read and not _still_latest(storage, opened, base):
            return None
        return opened

    def commit_once(attempt: int) -> int | Outcome:
        try:
            reused = reusable() if attempt == 0 else None
            ds = storage.table(uri) if reused is None else reused

            def expected() -> list[str]:
                with storage.failures(f"read version {base} of", uri):
                    return content_after(ds, base, operation)

            settled = _settle(storage, uri, ds, base, owner, expected, may_roll_back, operation)
            if not isinstance(settled, _Base):
                return settled
            on = ds if settled.version == int(ds.version) else None
            version = _commit_on(storage, uri, settled.version, operation, properties, on=on)
        except CommitConflict:
            raise
        except LanceNamespaceError as exc:  # base removed (published over, then cleaned)?
            if may_roll_back is not None and not may_roll_back(base):
                raise _moved(uri) from exc
            raise
        return Outcome.AGAIN if version is None else version

    return _until_committed(uri, commit_once)


@dataclasses.dataclass(frozen=True)
class _Base:
    """The version a leaf commit is made on (the base, or the base restored above)."""

    version: int


def _settle(
    storage: Storage,
    uri: str,
    ds: lance.LanceDataset,
    base: int,
    owner: str,
    expected: Callable[[], list[str]],
    may_roll_back: Callable[[int], bool] | None,
    operation: LanceOperation.BaseOperation | None = None,
) -> _Base | int | Outcome:
    """What a leaf commit on ``base`` finds at the latest version of ``ds``: the version to
    commit on (the base, or the base restored), a latest version ``owner`` made holding
    exactly ``expected()`` and, for an index commit, ``operation``'s segments (reused,
    unless Lance rebased it onto another namespace writer's unpublished version, which it
    would publish), or AGAIN (a commit landed on the restore)."""
    latest = int(ds.version)
    if latest == base:
        return _Base(base)
    if committed_by(ds, latest) == owner and content_at(ds, latest) == expected():
        with storage.failures("read the versions of", uri):
            between = [committed_by(ds, v) for v in range(base + 1, latest)]
            same = _made_segments(ds, latest, operation)
        if same and all(b is None for b in between):
            return latest
    kept = kept_above(ds, base)
    if kept == latest:
        log.info(
            "publishing versions %d-%d of %s with this commit: %s", base + 1, latest, uri, KEPT
        )
        return _Base(latest)
    if may_roll_back is not None and not may_roll_back(base):
        raise _moved(uri)
    restored = _roll_back(storage, uri, ds, kept)
    return Outcome.AGAIN if restored is None else _Base(restored)


#: Why a leaf version made outside the namespace is kept rather than rolled back.
KEPT = "made outside the namespace, they change no rows (an index built with pylance)"


def kept_above(ds: lance.LanceDataset, base: int) -> int:
    """The newest version ``v`` such that every version in ``(base, v]`` was made outside
    the namespace and holds the fragments and schema of ``base`` (an index, a config key):
    the next commit keeps those and publishes them, where it rolls back the others."""
    at_base = ds if int(ds.version) == base else ds.checkout_version(base)
    shape = (content_at(at_base, base), repr(at_base.lance_schema))
    kept = base
    for version in range(base + 1, int(ds.version) + 1):
        if committed_by(ds, version) is not None:
            break
        at = ds.checkout_version(version)
        if (content_at(at, version), repr(at.lance_schema)) != shape:
            break
        kept = version
    return kept


def published_and_kept(
    storage: Storage, location: str, base: int
) -> tuple[lance.LanceDataset, lance.LanceDataset]:
    """The leaf at ``location`` at its published version ``base``, and at the newest version
    kept above it (:func:`kept_above`; ``base`` itself when there is none), what a commit
    on it builds on: the indices it keeps. One open when ``base`` is the latest."""
    latest = storage.table(location)
    if int(latest.version) == base:
        return latest, latest
    leaf = storage.table(location, base)
    kept = kept_above(latest, base)
    return leaf, leaf if kept == base else latest.checkout_version(kept)


#: The namespace call that does what a Lance operation made outside it did.
_THROUGH = {
    "Append": "write(data)",
    "Overwrite": "write(data, mode='overwrite')",
    "Delete": "delete(filter)",
    "Update": "merge(data, on=...)",
    "Rewrite": "optimize()",
    "CreateIndex": "create_index() or create_scalar_index()",
    "Merge": "add_column()",
    "Project": "drop_column() or rename_column()",
}


def warn_rolled_back(ds: lance.LanceDataset, uri: str, kept: int) -> None:
    """Name each version above ``kept`` a roll-back discards that was made outside the
    namespace, and how to make it through the namespace (versions below one of ours are
    the Lance commits of an :class:`IndexedRewrite`, not foreign)."""
    ours = [v for v in range(kept + 1, int(ds.version) + 1) if committed_by(ds, v) is not None]
    for version in range(max(ours, default=kept) + 1, int(ds.version) + 1):
        try:
            txn = ds.read_transaction(version)
        except TypeError:  # a Rewrite that remapped indices (pylance cannot read it back)
            txn = None
        what = type(txn.operation).__name__ if txn is not None else "commit"
        how = _THROUGH.get(what, "the namespace's own methods")
        log.warning(
            "rolling back version %d of %s: a %s committed to the leaf outside the namespace "
            "changes its rows, and readers see only what a namespace commit publishes; do it "
            "through PartitionedNamespace.%s",
            version,
            uri,
            what,
            how,
        )


def _until_committed(uri: str, attempt: Callable[[int], int | Outcome]) -> int:
    """``attempt`` until it commits (AGAIN: look again), at most :data:`LEAF_ATTEMPTS` times."""
    changing = Budget(
        lambda: CommitConflict(
            f"partition table {uri} kept changing under the commit (concurrent writers of the "
            "same partition, or committers of an aborted or taken-over transaction?); "
            "nothing was published, try again"
        ),
        attempts=LEAF_ATTEMPTS,
    )
    return retry_until(attempt, {Outcome.AGAIN: changing})


def _still_latest(storage: Storage, ds: lance.LanceDataset, base: int) -> bool:
    """Whether ``base`` (the version ``ds`` is open at) is its table's latest version now."""
    with storage.failures("read the versions of", ds.uri):
        return int(ds.latest_version) == base


class LeafMoved(CommitConflict):
    """A leaf commit refused to roll back the versions above its base (the partition was
    published or claimed anew meanwhile): nothing was committed, the attempt lost a race."""


def _moved(uri: str) -> LeafMoved:
    return LeafMoved(
        f"partition table {uri} was published or claimed anew while this change was "
        "computed; nothing was published"
    )


def _made_segments(
    ds: lance.LanceDataset, version: int, operation: LanceOperation.BaseOperation | None
) -> bool:
    """Whether ``version`` holds the index segments of the version below it as a
    ``CreateIndex`` ``operation`` leaves them (True for other operations): an index commit
    changes no fragment, so only its segments tell an earlier attempt's commit of other
    segments from it."""
    if not isinstance(operation, LanceOperation.CreateIndex):
        return True
    removed = {str(i.uuid) for i in operation.removed_indices}
    below = {u for u in _segment_ids(ds, version - 1) if u not in removed}
    return _segment_ids(ds, version) == below | {str(i.uuid) for i in operation.new_indices}


def _segment_ids(ds: lance.LanceDataset, version: int) -> set[str]:
    at = ds if int(ds.version) == version else ds.checkout_version(version)
    return {str(s.uuid) for i in at.describe_indices() for s in i.segments}


def content_after(
    ds: lance.LanceDataset, base: int, operation: LanceOperation.BaseOperation
) -> list[str]:
    """The content (fragment signatures) ``operation`` makes of version ``base``."""
    at = ds if int(ds.version) == base else ds.checkout_version(base)
    fragments = {f.fragment_id: _signature(f.metadata) for f in at.get_fragments()}

    def replaced(updated: Any) -> None:
        for f in updated:
            fragments[int(f.id)] = _signature(f)

    added: list[Any] = []
    if isinstance(operation, LanceOperation.Overwrite):
        fragments, added = {}, list(operation.fragments)
    elif isinstance(operation, LanceOperation.Append):
        added = list(operation.fragments)
    elif isinstance(operation, LanceOperation.Delete):
        for i in operation.deleted_fragment_ids:
            fragments.pop(int(i), None)
        replaced(operation.updated_fragments)
    elif isinstance(operation, LanceOperation.Update):
        for i in operation.removed_fragment_ids:
            fragments.pop(int(i), None)
        replaced(operation.updated_fragments)
        added = list(operation.new_fragments)
    elif isinstance(operation, LanceOperation.CreateIndex):
        pass  # an index changes no fragment
    elif isinstance(operation, LanceOperation.Rewrite):
        for group in operation.groups:
            for old in group.old_fragments:
                fragments.pop(int(old.id), None)
            added += list(group.new_fragments)
    else:
        raise TypeError(f"no content rule for {type(operation).__name__}")
    return sorted([*fragments.values(), *(_signature(f) for f in added)])


def _roll_back(storage: Storage, uri: str, ds: lance.LanceDataset, base: int) -> int | None:
    """Restore version ``base`` above the (unpublished) versions after it; the restored
    version, or None if another commit landed on the restore before it was read."""
    n = int(ds.version) - base
    log.warning("rolling back %d unpublished version(s) of %s to version %d", n, uri, base)
    warn_rolled_back(ds, uri, base)
    with storage.failures("roll back", uri):
        storage.table(uri, base).restore()  # type: ignore[no-untyped-call]
    failpoint("leaf.rolled_back")
    restored = storage.table(uri)
    if content_at(restored, int(restored.version)) != content_at(ds, base):
        return None
    return int(restored.version)


@dataclasses.dataclass
class IndexedRewrite(LanceOperation.Rewrite):
    """The compaction of a leaf with indices: ``rewrites`` (its executed tasks) committed
    by Lance's own compaction commit, which reserves the new fragments' ids and remaps
    every index onto them (two versions, untagged), then tagged by an empty
    ``CreateIndex`` of the owner's. ``groups`` say what it does to the content."""

    rewrites: list[RewriteResult] = dataclasses.field(default_factory=list)
    options: CompactionOptions = dataclasses.field(default_factory=CompactionOptions)


#: Versions Lance's compaction commit makes: ``ReserveFragments`` and the ``Rewrite``.
_COMPACTION_VERSIONS = 2


def _compact_on(
    storage: Storage,
    uri: str,
    base: int,
    operation: IndexedRewrite,
    properties: dict[str, str],
    on: lance.LanceDataset | None,
) -> int | None:
    """:func:`_commit_on` for an :class:`IndexedRewrite`: its tag version if Lance's commits
    and the tag lie right above ``base`` with nothing of anyone else's between, else None."""
    at = on if on is not None and int(on.version) == base else storage.table(uri, base)
    if not _still_latest(storage, at, base):  # Lance would rebase it, not refuse it
        return None
    expected = content_after(at, base, operation)
    conflict = f"a concurrent commit to {uri} won"
    try:
        with storage.failures("compact", uri, conflict=conflict):
            Compaction.commit(at, list(operation.rewrites), operation.options)
        made = int(at.version)
        tag = Transaction(
            made, LanceOperation.CreateIndex([], []), transaction_properties=properties
        )
        committed = storage.commit(uri, tag, conflict=conflict, on=at)
    except CommitConflict:
        return None
    version = int(committed.version)
    lance_made = range(base + 1, made + 1)
    if (
        version == made + 1
        and len(lance_made) <= _COMPACTION_VERSIONS
        and all(committed_by(committed, v) is None for v in lance_made)
        and content_at(committed, version) == expected
    ):
        return version
    log.warning("the compaction of %s was rebased onto a concurrent commit; again", uri)
    return None


def _commit_on(
    storage: Storage,
    uri: str,
    base: int,
    operation: LanceOperation.BaseOperation,
    properties: dict[str, str],
    *,
    on: lance.LanceDataset | None = None,
) -> int | None:
    """Commit ``operation`` on version ``base``: the new version if it is ``base + 1``, None
    if a concurrent commit won or Lance rebased it. ``on``: the table opened at ``base``."""
    failpoint("leaf.before_commit")
    if isinstance(operation, IndexedRewrite):
        return _compact_on(storage, uri, base, operation, properties, on)
    transaction = Transaction(base, operation, transaction_properties=properties)
    try:
        committed = storage.commit(
            uri, transaction, conflict=f"a concurrent commit to {uri} won", on=on
        )
    except CommitConflict:
        return None  # a concurrent commit won: look again
    except StorageError:
        if base == 0 and storage.table_or_none(uri) is not None:
            return None  # a concurrent creation of the table won: look again
        raise
    version = int(committed.version)
    if version == base + 1:  # nothing landed in between: exactly base + the operation
        return version
    log.warning(
        "leaf %s version %d was rebased onto a concurrent commit; committing again", uri, version
    )
    return None
