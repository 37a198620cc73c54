"""Storage I/O of one namespace: every table it opens, writes or commits, every file.

One :class:`Storage` per namespace holds the root and the storage options and turns storage
failures into project errors (no other module reads Lance's error strings). Small documents
are one PUT each: atomic on object stores, a temporary file then a rename on local disks.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import logging
import os
import re
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from concurrent.futures import Future, ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeVar

import lance
import pyarrow as pa
import pyarrow.fs as pafs
from lance import LanceDataset, LanceOperation, Transaction
from lance.commit import CommitConflictError
from lance.dataset import Session  # type: ignore[attr-defined]
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata, write_fragments

from airflow_provider_lance.namespace import progress
from airflow_provider_lance.namespace.errors import (
    CommitConflict,
    InvalidArgumentError,
    LanceNamespaceError,
    StorageAccessError,
    StorageError,
    TableNotFoundError,
)
from airflow_provider_lance.namespace.failpoints import failpoint
from airflow_provider_lance.namespace.retry import Budget, Outcome, retry_until

from .storage_options import StorageOptionValue, normalize_options
from .uri import child_uri, local_path

log = logging.getLogger(__name__)

#: Reads of a file that exists but could not be read (being written) before giving up.
READ_ATTEMPTS = 4
#: Rows per data file written to a table.
MAX_ROWS_PER_FILE = 1_048_576
#: Leaf tables worked on at once (a local disk is saturated by a few threads).
LOCAL_CONCURRENCY = 8
REMOTE_CONCURRENCY = 32
#: How often a thread waiting for a fan-out wakes up, so that Ctrl-C's handler runs.
POLL_SECONDS = 0.1

T = TypeVar("T")
R = TypeVar("R")

_worker = threading.local()
_pools_lock = threading.Lock()
_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_writing_sessions: dict[tuple[int, int], Session] = {}


def _per_process(cache: dict[tuple[int, int], R], key: int, make: Callable[[], R]) -> R:
    """``cache``'s value for ``key`` in this process (a forked child makes its own)."""
    with _pools_lock:
        at = (os.getpid(), key)
        if at not in cache:
            cache[at] = make()
        return cache[at]


def _writing_session() -> Session:
    return _per_process(
        _writing_sessions, 0, lambda: Session(index_cache_size_bytes=0, metadata_cache_size_bytes=0)
    )


def _in_worker(fn: Callable[[T], R], item: T) -> R:
    _worker.active = True
    try:
        return fn(item)
    finally:
        _worker.active = False


def _shared_pool(concurrency: int) -> ThreadPoolExecutor:
    """The process's threads for this concurrency, shared by every namespace opened."""
    prefix = f"lance-leaves-{concurrency}"  # the threads' names
    return _per_process(_pools, concurrency, lambda: ThreadPoolExecutor(concurrency, prefix))


def beside(fn: Callable[[], R], concurrency: int = LOCAL_CONCURRENCY) -> Future[R]:
    """``fn`` started on a storage thread, to run while the caller works; run inline when
    called from one of those threads (which may all be waiting for it)."""
    if getattr(_worker, "active", False):
        done: Future[R] = Future()
        try:
            done.set_result(fn())
        except BaseException as exc:
            done.set_exception(exc)
        return done
    return _shared_pool(concurrency).submit(_in_worker, lambda _: fn(), None)


def _inline(fn: Callable[[T], R], items: Sequence[T], ticker: progress.Ticker) -> list[R]:
    out = []
    for item in items:
        out.append(fn(item))
        ticker.tick(len(out))
    ticker.finish(len(out))
    return out


def _result(future: Future[R]) -> R:
    while True:
        try:
            return future.result(timeout=POLL_SECONDS)
        except FutureTimeout:
            continue


def default_concurrency(root: str) -> int:
    """How many leaf tables to work on at once under ``root`` (see the constants)."""
    scheme = root.split("://", 1)[0] if "://" in root else "file"
    return LOCAL_CONCURRENCY if scheme in ("file", "memory") else REMOTE_CONCURRENCY


def is_conflict(exc: BaseException) -> bool:
    """Whether a Lance commit failed because a concurrent commit won (pylance facts: the
    conflict facts of tests/namespace/test_pylance_facts.py)."""
    if isinstance(exc, CommitConflictError):
        return True
    text = str(exc).lower()
    return any(word in text for word in ("concurrent", "conflict", "incompatible transaction"))


def is_not_found(exc: BaseException) -> bool:
    """Whether a Lance error says the dataset does not exist (rather than cannot be read).
    pylance fact: test_fact_missing_table_error_is_recognised_as_not_found."""
    text = str(exc)
    return isinstance(exc, FileNotFoundError) or ("was not found" in text and "Dataset" in text)


#: Where in Lance's Rust sources an error was raised (``, /home/.../object_store.rs:1576:42``).
_RUST_LOCATION = re.compile(r",?\s*/[^\s,;]*\.rs:\d+:\d+")


def first_line(exc: BaseException) -> str:
    """A library error's first line, without Rust source locations, bounded."""
    text = _RUST_LOCATION.sub("", str(exc)).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


#: Lance's words for the failures no retry changes (see :func:`storage_error`).
_UNKNOWN_SCHEME = re.compile(r"No object store provider found for scheme")
_NOT_A_DIRECTORY = re.compile(r"Not a directory|os error 20\b")
_DENIED = re.compile(r"Permission denied|Operation not permitted|os error 13\b")
_READ_ONLY = re.compile(r"Read-only file system|os error 30\b")
#: A store's refusal: an HTTP status, an S3/Azure/GCS error code, object_store's words.
_REFUSED = re.compile(
    r"status code: (40[13])\b|\b(AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|"
    r"AuthorizationFailure|AuthorizationPermissionMismatch|AuthenticationFailed|"
    r"ACCESS_DENIED|INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH)\b|"
    r"lacked (the necessary privileges|valid authentication credentials)"
)
_NO_BUCKET = re.compile(r"\bNoSuchBucket\b|NO_SUCH_BUCKET|bucket does not exist", re.IGNORECASE)
_CONFIG = re.compile(r"\bConfig error: (.*)")


def _user() -> str:
    try:
        return f" ({getpass.getuser()})"
    except (KeyError, OSError):  # no name for this uid (e.g. in a container)
        return ""


def storage_error(action: str, uri: str, exc: BaseException, hint: str = "") -> StorageError:
    """The project error for a storage call that failed with ``exc``:
    :class:`StorageAccessError`, saying what to fix, when the store's answer cannot change;
    else a retryable :class:`StorageError` with ``hint``. The caller chains ``exc``."""
    where = f"cannot {action} {uri}"
    reason = _permanent(exc, uri)
    if reason is not None:
        return StorageAccessError(f"{where}: {reason}")
    return StorageError(f"{where}: {first_line(exc)}{hint}")


def permanent_failure(exc: BaseException) -> StorageAccessError | None:
    """The :class:`StorageAccessError` a library ``OSError`` amounts to when it is permanent
    (read-only, denied, ...); None otherwise."""
    if isinstance(exc, LanceNamespaceError) or not isinstance(exc, OSError):
        return None
    reason = _permanent(exc, "")
    if reason is None:
        return None
    return StorageAccessError(f"{first_line(exc)}: {reason}")


def _permanent(exc: BaseException, uri: str) -> str | None:
    """What to fix when the store's answer cannot change; None when it may."""
    text = str(exc)
    if isinstance(exc, UnicodeError):  # a path from bytes that are not UTF-8
        return "the path is not UTF-8 text; object stores and Lance take UTF-8 paths only"
    if _UNKNOWN_SCHEME.search(text):
        scheme = uri.split("://", 1)[0] if "://" in uri else "that"
        return (
            f"no object store serves {scheme}:// URIs; give a local path or a URI of a store "
            "Lance supports (e.g. s3://, gs://, az://, file://)"
        )
    if _NOT_A_DIRECTORY.search(text):
        return (
            "a part of that path is a plain file, not a directory; a namespace is a "
            "directory: give a path that does not run through a file"
        )
    if _DENIED.search(text):
        return (
            f"permission denied; give the user this runs as{_user()} read and write access "
            "to it, or choose another path"
        )
    if _READ_ONLY.search(text):
        return "the file system is read-only; choose a path on a writable one"
    refused = _REFUSED.search(text)
    if refused:
        no_rights = "privileges" in (refused.group(3) or "")
        lacked = "no permission" if no_rights else "not authenticated"
        answer = refused.group(1) or refused.group(2) or lacked
        return (
            f"the store refused access ({answer}); check the credentials in the storage "
            "options and that they may read and write this location"
        )
    if _NO_BUCKET.search(text):
        return (
            "the bucket does not exist; create it or fix the URI (and the endpoint and "
            "region in the storage options)"
        )
    config = _CONFIG.search(_RUST_LOCATION.sub("", text))
    if config:
        return (
            f"the store cannot use its storage options ({config.group(1).strip()}); fix "
            "them (durations are written like '30s')"
        )
    return None


@dataclass(frozen=True)
class FileEntry:
    """A file under the root: path relative to the root, size, mtime (epoch seconds)."""

    path: str
    size: int
    mtime: float


class Storage:
    """Reads and writes one namespace's tables and files (see the module docstring)."""

    def __init__(
        self,
        root: str,
        options: Mapping[str, StorageOptionValue | None] | None = None,
        *,
        concurrency: int | None = None,
        session: Session | None = None,
    ) -> None:
        self.root = root
        self._local_root = local_path(root)
        #: The storage options as Lance takes them (None: none given).
        self.options: dict[str, str] | None = normalize_options(options)
        if concurrency is not None and concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency or default_concurrency(root)
        if session is not None and not isinstance(session, Session):
            raise InvalidArgumentError(
                "session must be a lance.Session, e.g. lance.Session(index_cache_size_bytes="
                f"4 << 30), got {type(session).__name__}"
            )
        #: The Lance session searches open leaves in (None: one of their own).
        self.session = session
        self._sessions: dict[str, LanceFileSession] = {}

    def __repr__(self) -> str:  # never the options: they may hold credentials
        return f"Storage({self.root!r})"

    @property
    def local(self) -> bool:
        """Whether the root is a local directory (``file://``), not an object store."""
        return self._local_root is not None

    def uri(self, relative: str) -> str:
        """The URI of a path relative to the root."""
        return child_uri(self.root, relative)

    def map(self, fn: Callable[[T], R], items: Sequence[T], *, step: str | None = None) -> list[R]:
        """``fn`` over ``items``, at most :attr:`concurrency` at once, results in order.

        Every call runs even after one failed: the first error is raised once all finished.
        An interrupt (Ctrl-C) starts nothing more, lets the running calls finish and is
        raised. Progress is reported as ``step``; a call from a storage thread runs inline.
        """
        items = items if isinstance(items, Sequence) else list(items)  # (a set, dict keys)
        if len(items) <= 1:  # nothing to report or to overlap
            return [fn(item) for item in items]
        reporter = progress.current()
        if self.concurrency == 1 or getattr(_worker, "active", False):
            return _inline(fn, items, progress.Ticker(reporter, len(items), step))
        results: list[Any] = [None] * len(items)
        errors: dict[int, BaseException] = {}
        taken = iter(range(len(items)))
        lock = threading.Lock()
        stopped = False
        finished = 0

        def drain(_: object) -> None:
            nonlocal finished
            while True:
                with lock:
                    i = None if stopped else next(taken, None)
                if i is None:
                    return
                try:
                    results[i] = fn(items[i])
                except BaseException as exc:  # every call runs; the first error is raised
                    errors[i] = exc
                with lock:
                    finished += 1

        threads = [
            _shared_pool(self.concurrency).submit(_in_worker, drain, None)
            for _ in range(min(self.concurrency, len(items)))
        ]
        ticker = progress.Ticker(reporter, len(items), step)
        try:
            while wait(threads, timeout=POLL_SECONDS).not_done:
                ticker.tick(finished)
        except BaseException:  # interrupted: nothing more starts, what runs finishes
            with lock:
                stopped = True
            wait(threads)
            raise
        for thread in threads:
            thread.result()
        if errors:
            raise errors[min(errors)]
        ticker.finish(finished)
        return results

    def ahead(
        self, fn: Callable[[T], R], items: Iterable[T], *, step: str | None = None
    ) -> Iterator[R]:
        """``fn`` over ``items`` in order, up to :attr:`concurrency` calls running ahead of
        the one consumed (a streaming :meth:`map`; progress counts the results consumed)."""
        total = len(items) if isinstance(items, Sized) else 0
        ticker = progress.Ticker(progress.current() if total > 1 else None, total, step)
        if self.concurrency == 1 or getattr(_worker, "active", False):
            for done, item in enumerate(items, 1):
                yield fn(item)
                ticker.tick(done)
            ticker.finish(total)
            return
        window: deque[Future[R]] = deque()
        done = 0
        try:
            for item in items:
                window.append(_shared_pool(self.concurrency).submit(_in_worker, fn, item))
                if len(window) >= self.concurrency:
                    yield _result(window.popleft())
                    done += 1
                    ticker.tick(done)
            while window:
                yield _result(window.popleft())
                done += 1
                ticker.tick(done)
            ticker.finish(done)
        finally:  # the consumer stopped early: what runs finishes, the rest never starts
            for future in window:
                future.cancel()

    def beside(self, fn: Callable[[], R]) -> Future[R]:
        """The module's :func:`beside` with this storage's concurrency."""
        return beside(fn, self.concurrency)

    def table(
        self,
        uri: str,
        version: int | None = None,
        *,
        session: Session | None = None,
        block_size: int | None = None,
    ) -> LanceDataset:
        """The table at ``uri`` (at ``version``, default latest); ``block_size``: Lance's
        I/O block size (None: its default). :class:`TableNotFoundError` if there is no such
        table or version, :class:`StorageError` if it cannot be read."""
        try:
            return lance.dataset(
                uri, version, storage_options=self.options, session=session, block_size=block_size
            )
        except (ValueError, FileNotFoundError, OSError) as exc:
            if is_not_found(exc):
                at = "" if version is None else f" version {version}"
                raise TableNotFoundError(f"no Lance table at {uri}{at}: {first_line(exc)}") from exc
            raise storage_error(
                "read", uri, exc, "; check the URI, credentials and endpoint in the storage options"
            ) from exc

    def table_to_write(self, uri: str, version: int | None = None) -> LanceDataset:
        """:meth:`table`, opened to write, through a cacheless session (pylance fact:
        test_fact_a_cacheless_session_opens_tables_to_write)."""
        return self.table(uri, version, session=_writing_session())

    def table_or_none(self, uri: str) -> LanceDataset | None:
        """The latest version of the table at ``uri``, or None if there is none."""
        try:
            return self.table(uri)
        except TableNotFoundError:
            return None

    def create_table(
        self, data: pa.Table, uri: str, properties: Mapping[str, str] | None = None
    ) -> bool:
        """Create the table at ``uri`` as version 1 holding exactly ``data``; False if a
        table is there already (a concurrent creator won; its files are deleted). Exclusive,
        unlike ``mode="create"`` (pylance facts: test_fact_create_is_not_exclusive_*,
        test_fact_overwrite_at_read_version_0_without_retries_is_exclusive)."""
        fragments = self.write_fragments(data, uri, overwrite=True)
        failpoint("storage.before_create")
        operation = LanceOperation.Overwrite(data.schema, fragments)
        txn = Transaction(0, operation, transaction_properties=dict(properties or {}) or None)
        try:
            self.commit(uri, txn, conflict=f"{uri} was created concurrently")
        except LanceNamespaceError:
            existing = self.table_or_none(uri)
            if existing is not None and set(_data_paths(fragments)) <= set(
                _data_paths([f.metadata for f in existing.checkout_version(1).get_fragments()])
            ):
                return True  # the commit went through although it reported an error
            self.delete_data_files(uri, fragments)
            if existing is None:
                raise
            return False
        return True

    def create_leaf(
        self, data: pa.Table, uri: str, properties: Mapping[str, str]
    ) -> tuple[int, LanceDataset] | None:
        """A new table at ``uri`` holding ``data`` in one Lance call: the version made and
        the table at it; None if a table was there (nothing written) or the commit lost.
        Not exclusive: only version 1 is known to be nobody else's (pylance fact:
        test_fact_create_is_not_exclusive_a_losing_creator_lands_as_a_later_version)."""
        try:
            made = self._write_table(data, uri, "create", properties)
        except StorageError:  # Lance's refusal names no error kind: look for the table
            if self.table_or_none(uri) is not None:
                return None
            raise
        return None if made is None else (int(made.version), made)

    def write_onto(
        self, data: pa.Table, on: LanceDataset, *, overwrite: bool, properties: Mapping[str, str]
    ) -> LanceDataset | None:
        """Append ``data`` to (or replace with it) the table ``on`` is open on, in one Lance
        call; the table at the version made, or None if a concurrent commit won. Lance
        rebases onto later versions, so only version ``on.version + 1`` holds exactly
        ``on``'s rows plus ``data`` (pylance facts: test_fact_stale_append_is_rebased_*,
        test_fact_stale_overwrite_silently_wins_over_a_concurrent_append)."""
        return self._write_table(data, on, "overwrite" if overwrite else "append", properties)

    def _write_table(
        self, data: pa.Table, target: str | LanceDataset, mode: str, properties: Mapping[str, str]
    ) -> LanceDataset | None:
        uri = target if isinstance(target, str) else target.uri
        try:
            with self.failures("write", uri, conflict=f"{uri} was committed concurrently"):
                return lance.write_dataset(
                    data,
                    target,
                    mode=mode,
                    max_rows_per_file=MAX_ROWS_PER_FILE,
                    storage_options=self.options,
                    transaction_properties=dict(properties),
                )
        except CommitConflict:  # lost to a concurrent commit (its files: orphans)
            return None

    def replace_table(self, data: pa.Table, uri: str) -> LanceDataset:
        """A new version of the table at ``uri`` holding exactly ``data``."""
        with self.failures("write", uri):
            return lance.write_dataset(data, uri, mode="overwrite", storage_options=self.options)

    def write_fragments(
        self, data: pa.Table, target: str | LanceDataset, *, overwrite: bool
    ) -> list[FragmentMetadata]:
        """Write ``data`` as new data files of a table (nothing commits them)."""
        uri = target if isinstance(target, str) else target.uri
        with self.failures("write data files to", uri):
            return list(
                write_fragments(
                    data,
                    target,
                    mode="overwrite" if overwrite else "append",
                    max_rows_per_file=MAX_ROWS_PER_FILE,
                    storage_options=self.options,
                )
            )

    def commit(
        self, uri: str, transaction: Transaction, *, conflict: str, on: LanceDataset | None = None
    ) -> LanceDataset:
        """Commit ``transaction`` to the table at ``uri`` without retries;
        :class:`CommitConflict` (saying ``conflict``) if another commit won. ``on``: the table
        already opened (pylance fact: test_fact_commit_through_a_stale_handle_is_rebased_*)."""
        with self.failures("commit to", uri, conflict=conflict):
            return LanceDataset.commit(
                uri if on is None else on, transaction, storage_options=self.options, max_retries=0
            )

    def clean_up(self, table: LanceDataset, **options: Any) -> Any:
        """Lance's ``cleanup_old_versions(**options)`` of ``table``; its statistics. Files it
        could not delete: a probe file written and deleted beside them raises a store's
        refusal; otherwise they are logged, for the next cleanup."""
        with self.failures("clean up", table.uri):
            stats = table.cleanup_old_versions(**options)
        failed = int(getattr(stats, "failed_deletes", 0) or 0)
        if failed:
            session, prefix = self._table_files(table.uri)
            probe = f"{prefix}_cleanup_probe_{uuid.uuid4().hex}"
            with self.failures(f"delete {failed} files of old versions of", table.uri):
                fd, local = tempfile.mkstemp()
                os.close(fd)
                try:
                    session.upload_file(local, probe)
                finally:
                    os.unlink(local)
                session.delete_file(probe)
            log.warning(
                "version cleanup of %s could not delete %d old files; the next cleanup deletes "
                "them",
                table.uri,
                failed,
            )
        return stats

    @contextlib.contextmanager
    def failures(
        self, action: str, uri: str, *, conflict: str | None = None, partitions: Sequence[str] = ()
    ) -> Iterator[None]:
        """Translate a storage failure of the enclosed call into :class:`CommitConflict`
        (when ``conflict`` says what lost) or what :func:`storage_error` makes of it."""
        try:
            yield
        except LanceNamespaceError:
            raise
        except (OSError, ValueError) as exc:
            if conflict is not None and is_conflict(exc):
                raise CommitConflict(conflict, partitions) from exc
            raise storage_error(action, uri, exc) from exc

    def _session(self, base: str | None = None) -> LanceFileSession:
        base = base or self.root
        session = self._sessions.get(base)
        if session is None:
            session = self._sessions[base] = LanceFileSession(base, storage_options=self.options)
        return session

    def _table_files(self, table_uri: str) -> tuple[LanceFileSession, str]:
        """A file session and the prefix of ``table_uri``'s files in it (the root's inside)."""
        inside = self.root.rstrip("/") + "/"
        if table_uri.startswith(inside):
            return self._session(), table_uri[len(inside) :].rstrip("/") + "/"
        return self._session(table_uri), ""

    def put_json(self, path: str, obj: Any, *, indent: int | None = None) -> None:
        """Write ``obj`` as the JSON document at ``path`` (relative to the root), whole."""
        separators = None if indent else (",", ":")
        text = json.dumps(
            obj, indent=indent, separators=separators, sort_keys=indent is not None, default=str
        )
        fd, local = tempfile.mkstemp(suffix=".json")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(text)
            with self.failures("write", self.uri(path)):
                self._session().upload_file(local, path)
        finally:
            os.unlink(local)

    def get_json(self, path: str) -> Any:
        """The JSON document at ``path``; :class:`KeyError` if there is none. One being
        written meanwhile is read again before it is called unreadable."""
        session = self._session()
        fd, local = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        failed: list[Exception] = []

        def read(_: int) -> Any:
            try:
                session.download_file(path, local)
                with open(local) as f:
                    return json.load(f)
            except (OSError, ValueError) as exc:
                failpoint("txnstore.read_failed")
                if not self.contains(path):
                    raise KeyError(path) from exc
                failed.append(exc)
                return Outcome.LOST  # written meanwhile: read it again

        def unreadable() -> StorageError:
            error = storage_error("read", self.uri(path), failed[-1])
            error.__cause__ = failed[-1]
            return error

        try:
            return retry_until(
                read,
                {Outcome.LOST: Budget(unreadable, attempts=READ_ATTEMPTS)},
                sleep=lambda n: time.sleep(0.05 * (n + 1)),
            )
        finally:
            os.unlink(local)

    def contains(self, path: str) -> bool:
        with self.failures("read", self.uri(path)):
            return bool(self._session().contains(path))

    def list(self, prefix: str) -> list[str]:
        """The paths (relative to the root) of every file under ``prefix``."""
        with self.failures("list", self.uri(prefix)):
            return list(self._session().list(prefix))

    def list_files(self, prefix: str = "") -> Sequence[FileEntry]:
        """Every file under ``prefix`` with its size and mtime, on local disks and S3 (other
        stores: :class:`InvalidArgumentError`)."""
        filesystem, base = self._filesystem()
        start = f"{base}/{prefix}".rstrip("/") if prefix else base
        with self.failures("list", self.uri(prefix) if prefix else self.root):
            try:
                infos = filesystem.get_file_info(pafs.FileSelector(start, recursive=True))
            except FileNotFoundError:
                return []
        out = []
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
            out.append(FileEntry(info.path[len(base) + 1 :], int(info.size or 0), mtime))
        return out

    def _filesystem(self) -> tuple[pafs.FileSystem, str]:
        scheme = self.root.split("://", 1)[0] if "://" in self.root else "file"
        if scheme == "file":
            path = self._local_root or self.root.removeprefix("file://")
            return pafs.LocalFileSystem(), path.rstrip("/")
        if scheme in ("s3", "s3a"):
            options = {k.lower(): v for k, v in (self.options or {}).items()}

            def get(*names: str) -> str | None:
                return next((options[n] for n in names if options.get(n)), None)

            endpoint = get("aws_endpoint", "endpoint", "aws_endpoint_url", "endpoint_url")
            allow_http = (get("allow_http", "aws_allow_http") or "").lower() == "true"
            scheme_override = None
            if endpoint is not None and "://" in endpoint:
                scheme_override, endpoint = endpoint.split("://", 1)
            filesystem = pafs.S3FileSystem(
                access_key=get("aws_access_key_id", "access_key_id"),
                secret_key=get("aws_secret_access_key", "secret_access_key"),
                session_token=get("aws_session_token", "session_token"),
                region=get("aws_region", "region"),
                endpoint_override=endpoint,
                scheme=scheme_override or ("http" if allow_http else "https"),
            )
            return filesystem, self.root.split("://", 1)[1].rstrip("/")
        raise InvalidArgumentError(
            f"listing files with their ages is supported on local disks and S3, not on "
            f"{scheme}:// (the orphan sweep needs it)"
        )

    def delete(self, path: str) -> None:
        """Delete the file at ``path``; nothing if it is already gone."""
        try:
            self._session().delete_file(path)
        except (OSError, ValueError) as exc:
            if self.contains(path):
                raise storage_error("delete", self.uri(path), exc) from exc

    def missing_files(self, directory: str, paths: Sequence[str]) -> Sequence[str]:
        """The ``paths`` (relative to ``directory``, relative to the root) that do not exist."""
        if self._local_root is not None:
            base = os.path.join(self._local_root, directory)
            return [p for p in paths if not os.path.exists(os.path.join(base, p))]
        session = self._session()
        with self.failures("read", self.uri(directory)):
            return [p for p in paths if not session.contains(f"{directory}/{p}")]

    def delete_data_files(self, table_uri: str, fragments: Sequence[FragmentMetadata]) -> int:
        """Delete the data files of fragments no version references; how many went (the
        others are logged, for the orphan sweep)."""
        if not fragments:
            return 0
        session, prefix = self._table_files(table_uri)
        deleted = 0
        for path in _data_paths(fragments):
            try:
                session.delete_file(prefix + path)
                deleted += 1
            except (OSError, ValueError) as exc:
                log.warning(
                    "could not delete staged file %s of %s: %s", path, table_uri, first_line(exc)
                )
        return deleted


def _data_paths(fragments: Sequence[FragmentMetadata]) -> list[str]:
    return [f"data/{d['path']}" for f in fragments for d in f.to_json().get("files", [])]
