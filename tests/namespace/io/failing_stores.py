"""Stores that refuse writes, for the tests of permanent storage failures (not a test module).

Three real ways a store refuses, each with its own words from Lance, object_store and pyarrow:

* a **read-only mount**: the namespace's directory bound read-only over itself in a private
  mount namespace (``unshare -m``), for a child process only (the test runs as root, which
  file permissions do not stop);
* a **denied directory**: directories ``0555`` and a child without the capabilities that
  let root ignore them (``setpriv``): ``Permission denied``;
* **read-only S3 credentials**: a loopback proxy in front of a moto server that forwards
  reads and answers every PUT, POST and DELETE with ``403 AccessDenied``, as S3 answers
  credentials whose policy allows only reads.

:func:`prepare` leaves a namespace where every operation of :data:`OPERATIONS` has to write
(a partition with two fragments to compact, an idle staged transaction to recover, a tag to
delete, old versions to clean up, an orphaned data file to sweep);
``python -m tests.namespace.io.failing_stores URI [OP ...]`` runs operations in a child and
prints what each raised, as JSON.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import http.server
import json
import logging
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.errors import is_retryable

REPO = Path(__file__).resolve().parents[3]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
    ]
)
BY_DAY = [PartitionField("event_date", "event_date")]
DAY = dt.date(2025, 12, 10)
#: The namespace :func:`prepare` makes, and the clobbered one ``repair`` needs to mend.
NAMESPACE, CLOBBERED = "ns", "clobbered"


def rows(first_id: int, day: dt.date = DAY, n: int = 2) -> pa.Table:
    return pa.table(
        {
            "id": list(range(first_id, first_id + n)),
            "event_date": [day] * n,
            "country": ["DE"] * n,
        },
        schema=SCHEMA,
    )


def prepare(root: str, options: Mapping[str, str] | None = None) -> None:
    """``root/ns``, on which every operation has to write, and ``root/clobbered``, whose
    ``__manifest`` a foreign tool rewrote without our columns (``repair`` has to write)."""
    base = root.rstrip("/")
    ns = PartitionedNamespace.create(f"{base}/{NAMESPACE}", SCHEMA, BY_DAY, options)
    ns.write(rows(0))
    ns.write(rows(10))  # a second fragment: optimize has work
    ns.write(rows(20, DAY + dt.timedelta(days=1)))
    ns.tag("kept")
    leaf = ns.partitions()[0].location
    ns.storage.write_fragments(rows(50), leaf, overwrite=False)  # never committed: an orphan
    ns.begin("append", txn_id="idle").stage(rows(30, DAY + dt.timedelta(days=5)), stage_id="s")
    clobbered = PartitionedNamespace.create(f"{base}/{CLOBBERED}", SCHEMA, BY_DAY, options)
    clobbered.write(rows(0))
    uri = f"{base}/{CLOBBERED}/__manifest"
    table = lance.dataset(uri, storage_options=options).to_table()
    lance.write_dataset(
        table.drop_columns(["read_version"]), uri, mode="overwrite", storage_options=options
    )


#: Every operation that writes, on a namespace :func:`prepare` made.
OPERATIONS: dict[str, Callable[[PartitionedNamespace], object]] = {
    "write": lambda ns: ns.write(rows(100)),
    "write_new_partition": lambda ns: ns.write(rows(100, DAY + dt.timedelta(days=30))),
    "overwrite": lambda ns: ns.write(rows(100), mode="overwrite"),
    "create_partition": lambda ns: ns.create_partition({"event_date": DAY + dt.timedelta(days=40)}),
    "begin": lambda ns: ns.begin("append", txn_id="new"),
    "stage": lambda ns: ns.transaction("idle").stage(rows(40), stage_id="s2"),
    "commit": lambda ns: ns.commit("idle"),
    "abort": lambda ns: ns.abort("idle"),
    "delete": lambda ns: ns.delete("id = 1"),
    "delete_partition": lambda ns: ns.delete(f"event_date = DATE '{DAY}'"),
    "drop_partitions": lambda ns: ns.drop_partitions(f"event_date = DATE '{DAY}'"),
    "merge": lambda ns: ns.merge(rows(0, n=1), ["id", "event_date"]),
    "optimize": lambda ns: ns.optimize(),
    "maintain": lambda ns: ns.maintain(),
    "maintain_cleanup": lambda ns: ns.maintain(compact=False, older_than=dt.timedelta(0)),
    "sweep": lambda ns: ns.maintain(
        compact=False,
        sweep_orphans=True,
        orphan_min_age=dt.timedelta(0),
        enforce_min_age=False,
    ),
    "recover": lambda ns: ns.recover(0),
    "tag": lambda ns: ns.tag("new"),
    "untag": lambda ns: ns.untag("kept"),
    "add_column": lambda ns: ns.add_column(pa.field("extra", pa.int64())),
    "drop_column": lambda ns: ns.drop_column("country"),
    "rename_column": lambda ns: ns.rename_column("country", "land"),
    "evolve_partition_spec": lambda ns: ns.evolve_partition_spec(
        [*BY_DAY, PartitionField("country", "country")]
    ),
}


def attempt(root: str, names: Sequence[str], options: Mapping[str, str] | None = None) -> dict:
    """What each operation (and ``repair`` of the clobbered namespace) raised:
    {name: {"class", "retryable", "message"}}, or {"class": None} when it raised nothing."""
    out: dict[str, dict[str, Any]] = {}
    base = root.rstrip("/")
    for name in names:
        try:
            if name == "repair":
                PartitionedNamespace.open(f"{base}/{CLOBBERED}", options).repair()
            else:
                OPERATIONS[name](PartitionedNamespace.open(f"{base}/{NAMESPACE}", options))
            out[name] = {"class": None}
        except Exception as exc:  # every class is reported, project error or not
            out[name] = {
                "class": type(exc).__name__,
                "retryable": is_retryable(exc),
                "message": str(exc),
            }
    return out


ALL = [*OPERATIONS, "repair"]


# -- a read-only mount, a denied directory -------------------------------------------------------
def read_only_mount(path: Path) -> list[str]:
    """A command prefix running its command with ``path`` mounted read-only (skips the test
    where mount namespaces are not allowed)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: a read-only mount cannot be made")
    script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
    prefix = ["unshare", "-m", "sh", "-c", script, str(path)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"a read-only mount cannot be made here: {probe.stderr.strip()}")
    return prefix


def without_privileges() -> list[str]:
    """A command prefix without the capabilities that let root ignore file permissions."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file permissions cannot be provoked")
    return ["setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--"]


@contextlib.contextmanager
def denied(path: Path) -> Iterator[None]:
    """Every directory below ``path`` (itself included) ``0555`` meanwhile."""
    dirs = [path, *(p for p in path.rglob("*") if p.is_dir())]
    for d in dirs:
        d.chmod(0o555)
    try:
        yield
    finally:
        for d in dirs:
            d.chmod(0o755)


def run(prefix: Sequence[str], *args: str, env: Mapping[str, str] | None = None) -> Any:
    """``python *args`` under ``prefix`` in the repository, output captured."""
    return subprocess.run(
        [*prefix, sys.executable, *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "LANCE_LOG": "error", **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )


def attempt_in_child(prefix: Sequence[str], root: Path, names: Sequence[str]) -> dict:
    done = run(prefix, "-m", "tests.namespace.io.failing_stores", str(root), *names)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


# -- read-only S3 credentials ----------------------------------------------------------------------
class ReadOnlyS3(http.server.ThreadingHTTPServer):
    """A loopback proxy to an S3 server that forwards reads and refuses writes with 403
    AccessDenied (the answer to credentials whose policy allows reads only)."""

    daemon_threads = True

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _ReadOnlyHandler)
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.refused: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> ReadOnlyS3:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class _ReadOnlyHandler(http.server.BaseHTTPRequestHandler):
    server: ReadOnlyS3
    protocol_version = "HTTP/1.1"
    DENIED = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
        b"<Message>Access Denied</Message></Error>"
    )

    def _body(self) -> bytes | None:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else None

    def _forward(self) -> None:
        body = self._body()
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=dict(self.headers))
            answer = upstream.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            length = answer.getheader("Content-Length") if self.command == "HEAD" else None
            self.send_header("Content-Length", length or str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            upstream.close()

    def _refuse(self) -> None:
        self._body()
        self.server.refused.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(self.DENIED)))
        self.end_headers()
        self.wfile.write(self.DENIED)

    do_GET = do_HEAD = _forward
    do_PUT = do_POST = do_DELETE = _refuse

    def log_message(self, format: str, *args: Any) -> None:
        pass


if __name__ == "__main__":
    logging.disable(logging.WARNING)
    print(json.dumps(attempt(sys.argv[1], sys.argv[2:] or ALL)))
