"""All storage I/O of one namespace, owned by one object (cf. pyiceberg's ``FileIO``).

The root URI and the Lance storage options (credentials, endpoint, region ...) live here
and nowhere else: every Lance dataset, data file and JSON record of the namespace is
reached through a :class:`Storage`, and storage failures are translated into the
project's errors in one place. A ``Storage`` is small, immutable and picklable, so Spark
task closures carry it to executors as it is.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance import LanceOperation, Transaction
from lance.file import LanceFileSession
from lance.fragment import FragmentMetadata, write_fragments

from .errors import LanceNamespaceError, StorageError
from .naming import child_uri

#: Rows per data file written to a leaf table.
MAX_ROWS_PER_FILE = 1_048_576


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def is_not_found(exc: BaseException) -> bool:
    """Whether a Lance error says the dataset does not exist (rather than cannot be read)."""
    text = str(exc)
    return isinstance(exc, FileNotFoundError) or ("was not found" in text and "Dataset" in text)


@functools.lru_cache(maxsize=64)
def _session(base: str, options: tuple[tuple[str, str], ...]) -> LanceFileSession:
    return LanceFileSession(base, storage_options=dict(options) or None)


@dataclass(frozen=True)
class Storage:
    """Where a namespace lives and how to reach it."""

    root: str
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, root: str, storage_options: Mapping[str, str] | None = None) -> Storage:
        return cls(
            root, tuple(sorted((str(k), str(v)) for k, v in (storage_options or {}).items()))
        )

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The options as Lance takes them (None when there are none)."""
        return dict(self.options) or None

    def uri(self, relative: str) -> str:
        """The URI of ``relative`` below the root (never outside it)."""
        return child_uri(self.root, relative)

    # -- datasets ------------------------------------------------------------------------
    def dataset(self, uri: str, version: int | None = None) -> lance.LanceDataset:
        """A Lance dataset (at ``version``); Lance's own errors pass through, since callers
        tell "not found" from "unreachable" in their own terms."""
        return lance.dataset(uri, version=version, storage_options=self.storage_options)

    def exists(self, uri: str) -> bool:
        try:
            self.dataset(uri)
        except (ValueError, OSError):
            return False
        return True

    def open_leaf(self, uri: str, version: int | None, what: str) -> lance.LanceDataset:
        """A leaf table at its published version, or a project error naming ``what``."""
        try:
            return self.dataset(uri, version)
        except (ValueError, OSError) as exc:
            if is_not_found(exc):
                raise LanceNamespaceError(
                    f"{what} cannot be read at {uri} version {version}: {first_line(exc)}"
                ) from exc
            raise StorageError(
                f"{what} cannot be read at {uri}: {first_line(exc)}; check the URI, "
                "credentials and endpoint in the storage options"
            ) from exc

    def write_dataset(self, data: pa.Table, uri: str, mode: str) -> lance.LanceDataset:
        return lance.write_dataset(data, uri, mode=mode, storage_options=self.storage_options)

    def commit(self, uri: str, base: int, operation: Any, properties: Mapping[str, str]) -> Any:
        """One Lance commit on ``uri`` at ``base``, never retried by Lance itself."""
        return lance.LanceDataset.commit(
            uri,
            Transaction(base, operation, transaction_properties=dict(properties)),
            storage_options=self.storage_options,
            max_retries=0,
        )

    def commit_metadata(self, uri: str, base: int, values: Mapping[str, str]) -> int:
        """Set table metadata keys at ``base`` (a same-key race raises, see manifest)."""
        operation = LanceOperation.UpdateConfig(
            table_metadata_updates=LanceOperation.UpdateMap(dict(values))
        )
        committed = lance.LanceDataset.commit(
            uri, Transaction(base, operation), storage_options=self.storage_options, max_retries=0
        )
        return int(committed.version)

    def restore(self, uri: str, version: int) -> int:
        """Make ``version`` the latest again (a new version with its content)."""
        self.dataset(uri, version).restore()  # type: ignore[no-untyped-call]
        return int(self.dataset(uri).version)

    # -- data files ----------------------------------------------------------------------
    def write_fragments(
        self, data: pa.Table, uri: str, *, overwrite: bool, version: int | None = None
    ) -> list[FragmentMetadata]:
        """New data files for the table at ``uri``, committed by nobody yet. Appended files
        take their field ids from the table at ``version`` (default: latest)."""
        target: str | lance.LanceDataset = uri
        if not overwrite and version is not None:
            target = self.dataset(uri, version)
        return list(
            write_fragments(
                data,
                target,
                mode="overwrite" if overwrite else "append",
                max_rows_per_file=MAX_ROWS_PER_FILE,
                storage_options=self.storage_options,
            )
        )

    def files(self, base: str | None = None) -> LanceFileSession:
        """Lance's object-store client for plain files below ``base`` (default: the root)."""
        return _session(base or self.root, self.options)

    def delete_data_files(
        self, uri: str, fragments: Sequence[FragmentMetadata]
    ) -> list[tuple[str, str]]:
        """Delete the data files of fragments nobody will commit; the (path, error) of any
        that could not be deleted (an orphan for maintenance, never a failure here)."""
        failed: list[tuple[str, str]] = []
        if not fragments:
            return failed
        session = self.files(uri)
        for fragment in fragments:
            for data_file in fragment.to_json().get("files", []):
                try:
                    session.delete_file(f"data/{data_file['path']}")
                except (OSError, ValueError) as exc:
                    failed.append((data_file["path"], first_line(exc)))
        return failed
