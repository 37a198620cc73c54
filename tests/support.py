"""Helpers shared by the test files (fixtures are in conftest.py): the events and tagged
tables they write, the storage options of an unreachable store, file listings, row checks
none of which a duplicated row can pass (a dict or set keyed by ``id`` keeps one of two rows
with the same id: comparing one hides a publish that kept a row twice; these keep every row
and fail on a repeated key), threads parked at failpoints, and the chaos tests' supervisor.
Nothing here imports Airflow or PySpark.
"""

from __future__ import annotations

import datetime as dt
import http.server
import logging
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import settings
from hypothesis import strategies as st

from airflow_provider_lance.example_data import regional_sales
from airflow_provider_lance.namespace import CommitResult, PartitionedNamespace, PartitionField
from airflow_provider_lance.namespace.errors import LanceNamespaceError
from airflow_provider_lance.namespace.format.manifest import CLAIM
from airflow_provider_lance.namespace.format.swap import Swap
from airflow_provider_lance.namespace.testing import ENV, hold

EVENTS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("amount", pa.float64()),
    ]
)


def events(
    n: int, start: dt.date = dt.date(2025, 12, 10), days: int = 3, first_id: int = 0
) -> pa.Table:
    """``n`` deterministic event rows spread over ``days`` days and four countries."""
    countries = ["US", "DE", "FR", None]
    return pa.table(
        {
            "id": pa.array(range(first_id, first_id + n), pa.int64()),
            "event_date": pa.array([start + dt.timedelta(days=i % days) for i in range(n)]),
            "country": pa.array([countries[i % 4] for i in range(n)], pa.utf8()),
            "amount": pa.array([float(i) * 1.5 for i in range(n)]),
        },
        schema=EVENTS_SCHEMA,
    )


#: Storage options of an S3 store on a closed loopback port: every request is refused at once
#: and nothing leaves the machine (region and keys given: no lookups, no credential chain).
UNREACHABLE_OPTIONS = {
    "aws_endpoint": "http://127.0.0.1:9",
    "allow_http": "true",
    "aws_region": "us-east-1",
    "aws_access_key_id": "unreachable",
    "aws_secret_access_key": "unreachable",
    "client_max_retries": "0",
    "client_retry_timeout": "1",
    "connect_timeout": "2s",
    "timeout": "5s",
}


def sort_rows(table: pa.Table, key: str = "id") -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def tree(path: Path) -> list[str]:
    """Every file below ``path`` (relative), to prove an operation changed nothing on disk."""
    return sorted(
        os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files
    )


def leaf_files(path: Path) -> list[str]:
    """Files of the leaf tables only: not ``__manifest`` (whose history grows with every
    transaction step) and not the transaction records."""
    return [f for f in tree(path) if not f.startswith(("_transactions/", "__manifest/"))]


#: Partitioned by the identity of ``part``.
BY_PART = [PartitionField("part", "part")]

TAGGED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.int32()),
        pa.field("tag", pa.utf8()),
    ]
)


def seeded_namespace(path: object) -> PartitionedNamespace:
    """A namespace of :data:`TAGGED` partitioned by ``part``, seeded with two rows tagged
    ``seed`` in each of partitions 1 and 2."""
    ns = PartitionedNamespace.create(str(path), schema=TAGGED, partition_fields=BY_PART)
    ns.write(tagged_rows("seed", [1, 2], 2, first_id=0))
    return ns


def tagged_rows(tag: str, parts: list[int], per_part: int, first_id: int) -> pa.Table:
    """Rows of one transaction: ``per_part`` rows in each of ``parts``, all tagged ``tag``."""
    ids, part_col = [], []
    for k, part in enumerate(parts):
        for j in range(per_part):
            ids.append(first_id + k * per_part + j)
            part_col.append(part)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(part_col, pa.int32()),
            "tag": [tag] * len(ids),
        },
        schema=TAGGED,
    )


def repeated(keys: list[Any]) -> dict[Any, int]:
    """The keys that occur more than once, with their counts."""
    return {k: n for k, n in Counter(keys).items() if n > 1}


def no_duplicates(
    ns: PartitionedNamespace, version: int | None = None, key: str = "id"
) -> list[int]:
    """The sorted ids the namespace reads (at the manifest ``version``, default latest),
    asserting that no id is read twice."""
    found = sorted(ns.to_table(columns=[key], version=version).column(key).to_pylist())
    assert not repeated(found), f"duplicated rows: {repeated(found)}"
    return found


def by_id(rows: pa.Table | list[dict], column: str | None = None, key: str = "id") -> dict:
    """``{row[key]: row}`` (or ``row[column]``), asserting that no key occurs twice (a
    plain dict comprehension keeps the last of two rows with one key, silently)."""
    listed = rows.to_pylist() if isinstance(rows, pa.Table) else rows
    keys = [r[key] for r in listed]
    assert not repeated(keys), f"duplicated rows: {repeated(keys)}"
    return {r[key]: (r if column is None else r[column]) for r in listed}


#: The comparisons :func:`sql_filters` draws by default.
COMPARISONS = ("=", "<>", "<", "IN", "NOT IN", "IS NULL", "IS NOT NULL")


def sql_filters(
    literals: Mapping[str, Sequence[str]],
    *,
    columns: Sequence[str] | None = None,
    comparisons: Sequence[str] = COMPARISONS,
    wrappers: Sequence[str] = (),
    max_leaves: int = 4,
) -> st.SearchStrategy[str]:
    """Random SQL filters for property tests: comparisons of ``columns`` (default: the keys
    of ``literals``; repeat one to draw it more often) with their ``literals`` (IN lists of 1
    to 3, ``BETWEEN`` if asked), under NOT, joined by AND and OR, and put inside each of
    ``wrappers`` (a format string, ``{}`` for the inner filter), parenthesised throughout."""

    @st.composite
    def comparison(draw: st.DrawFn) -> str:
        column = draw(st.sampled_from(list(columns or literals)))
        literal = st.sampled_from(literals[column])
        kind = draw(st.sampled_from(comparisons))
        if kind.startswith("IS"):
            return f"{column} {kind}"
        if kind.endswith("IN"):
            return f"{column} {kind} ({', '.join(draw(st.lists(literal, min_size=1, max_size=3)))})"
        if kind == "BETWEEN":
            return f"{column} BETWEEN {draw(literal)} AND {draw(literal)}"
        return f"{column} {kind} {draw(literal)}"

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        joined = st.tuples(inner, st.sampled_from(["AND", "OR"]), inner)
        return st.one_of(
            inner.map(lambda f: f"NOT ({f})"),
            joined.map(lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
            *(inner.map(wrapper.format) for wrapper in wrappers),
        )

    return st.recursive(comparison(), extend, max_leaves=max_leaves)


def examples(full: int) -> int:
    """A property test's example count: ``full`` under the full hypothesis profile
    (scripts/test.sh), a quarter of it (at least 5) under the everyday one (bare pytest)."""
    return max(5, full * settings().max_examples // 100)


class _Records(logging.Handler):
    def __init__(self, records: list[logging.LogRecord], level: int) -> None:
        super().__init__(level)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def logged(name: str, level: int = logging.WARNING) -> Iterator[list[logging.LogRecord]]:
    """The records logger ``name`` emits at ``level`` or above meanwhile, caught by a
    handler on that logger itself, which is enabled at ``level`` meanwhile: whatever an
    earlier test's logging setup (Airflow's reconfigures the root logger and its handlers)
    did to the root logger, a parent's propagation, or the logger's level or disabled flag,
    all of which pytest's ``caplog`` relies on."""
    logger = logging.getLogger(name)
    records: list[logging.LogRecord] = []
    handler = _Records(records, level)
    saved = (logger.level, logger.disabled, logging.root.manager.disable)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.disabled = False
    logging.disable(logging.NOTSET)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled = saved[1]
        logging.disable(saved[2])


# -- threads and failpoints ----------------------------------------------------------------------
class Worker(threading.Thread):
    """Runs one call in a thread and keeps its result or exception."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(daemon=True)
        self._call = (fn, args, kwargs)
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        fn, args, kwargs = self._call
        try:
            self.result = fn(*args, **kwargs)
        except BaseException as exc:
            self.error = exc

    def outcome(self, timeout: float = 120) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "the worker never finished"
        if self.error is not None:
            raise self.error
        return self.result


def settle(worker: Worker) -> tuple[Any, LanceNamespaceError | None]:
    """A worker's result and None, or None and the project error it raised."""
    try:
        return worker.outcome(), None
    except LanceNamespaceError as exc:
        return None, exc


@contextmanager
def crashing(monkeypatch: pytest.MonkeyPatch, point: str, action: str = "raise") -> Iterator[None]:
    """Make the next call die at ``point`` (``raise``: a crash, ``error``: a transient
    failure)."""
    monkeypatch.setenv(ENV, f"{point}={action}")
    try:
        yield
    finally:
        monkeypatch.delenv(ENV)


def other(ns: PartitionedNamespace) -> PartitionedNamespace:
    """A second handle, as another process would have."""
    return PartitionedNamespace.open(ns.uri)


def ids(ns: PartitionedNamespace) -> list[int]:
    return sorted(ns.to_table().column("id").to_pylist())


def state_of(ns: PartitionedNamespace, txn_id: str) -> str:
    return {t.txn_id: t.state for t in ns.transactions()}[txn_id]


def claims(ns: PartitionedNamespace) -> list[str]:
    table = lance.dataset(ns.uri + "/__manifest").to_table(columns=[CLAIM])
    return [c for c in table.column(CLAIM).to_pylist() if c is not None]


def leaf_of(ns: PartitionedNamespace, part: int) -> tuple[str, int]:
    """The location and published version of partition ``part``'s leaf table."""
    (p,) = [p for p in ns.partitions() if p.values["part"] == part]
    assert p.read_version is not None
    return p.location, p.read_version


def all_readable(ns: PartitionedNamespace) -> None:
    for p in ns.partitions():
        lance.dataset(p.location, version=p.read_version).to_table()


def read_latest(ns: PartitionedNamespace, part: int) -> str:
    """Publish partition ``part`` with a NULL read_version, as a foreign Directory Namespace
    writer leaves it (readers read its leaf's latest version); its leaf location."""
    state = ns.state()
    p = ns.partition({"part": part})
    row = state.full_rows([p.object_id]).to_pylist()[0]
    row["read_version"] = None
    ns._manifest.commit(Swap(state.view, [row]))
    return p.location


def tags_by_part(ns: PartitionedNamespace) -> dict[int, list[str]]:
    table = other(ns).to_table()
    out: dict[int, list[str]] = {}
    parts, tags = table.column("part").to_pylist(), table.column("tag").to_pylist()
    for part, tag in zip(parts, tags, strict=True):
        out.setdefault(part, []).append(tag)
    return {k: sorted(v) for k, v in sorted(out.items())}


# -- files ---------------------------------------------------------------------------------------
def local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def referenced_files(ns: PartitionedNamespace) -> set[str]:
    """Data files any version of any leaf references."""
    out: set[str] = set()
    for p in ns.partitions():
        ds = lance.dataset(p.location)
        for v in ds.versions():
            for fragment in ds.checkout_version(v["version"]).get_fragments():
                out.update(f.path for f in fragment.data_files())
    return out


def data_files(ns: PartitionedNamespace) -> set[str]:
    """Data files of the leaves on disk (not of ``__manifest``)."""
    files = tree(Path(ns.uri.removeprefix("file://")))
    return {Path(f).name for f in files if "/data/" in f and not f.startswith("__manifest/")}


def published_files_exist(ns: PartitionedNamespace, version: int | None = None) -> None:
    """Every data file that a published leaf version references is on disk (at the
    manifest ``version``, default latest), and every published leaf reads whole."""
    for p in ns.state(version).partitions():
        leaf = lance.dataset(p.location, version=p.read_version)
        for fragment in leaf.get_fragments():
            for f in fragment.data_files():
                path = local(p.location) / "data" / f.path
                assert path.exists(), (
                    f"partition {p.values} v{p.read_version} references a deleted file {f.path}"
                )
    all_readable(ns)


# -- folds of __manifest -------------------------------------------------------------------------
def manifest_fragments(ns: PartitionedNamespace) -> int:
    return len(lance.dataset(ns.uri + "/__manifest").get_fragments())


def fill_to_15_fragments(ns: PartitionedNamespace) -> list[int]:
    """New partitions written until ``__manifest`` holds 15 fragments (the next publish
    compacts); the ids written, with the seed's. Partition 1's row, written by the seed,
    lies in a fragment no index covers (create indexed only its own rows)."""
    written = [0, 1, 2, 3]
    for i in range(40):
        if manifest_fragments(ns) >= 15:
            break
        ns.write(tagged_rows(f"f{i}", [100 + i], 1, first_id=1000 + i))
        written.append(1000 + i)
    assert manifest_fragments(ns) == 15
    return written


FOLD_X = tagged_rows("x", [77], 1, first_id=400)  # a new partition: the 16th fragment


def while_a_fold_is_parked(ns: PartitionedNamespace, action: Callable[[], object]) -> None:
    """X (``FOLD_X``) publishes the 16th ``__manifest`` fragment and parks its fold before
    the fold commits; ``action`` runs then, and the fold goes on. X's write succeeds
    whatever becomes of its fold."""
    with hold("manifest.before_fold") as parked:
        folder = Worker(other(ns).write, FOLD_X)
        folder.start()
        parked.wait_reached()  # X is published; its fold is next
        action()
    folder.outcome()


# -- chaos: processes killed at random moments and restarted -------------------------------------
def chaos_seed(namespace: Path) -> int:
    """The seed of a chaos run, for every random choice in it: ``LANCE_CHAOS_SEED`` if set,
    else a new one each run. Printed with the namespace (pytest shows it with a failure),
    so that ``LANCE_CHAOS_SEED=<seed>`` replays the run."""
    given = os.environ.get("LANCE_CHAOS_SEED", "").strip()
    seed = int(given) if given else random.SystemRandom().randrange(2**32)
    print(f"\nLANCE_CHAOS_SEED={seed} namespace={namespace}", flush=True)
    return seed


def chaos_seconds(default: float) -> float:
    """How long a chaos test kills and restarts its processes: ``LANCE_CHAOS_SECONDS`` if
    set (a longer soak than the suite's), else ``default``."""
    given = os.environ.get("LANCE_CHAOS_SECONDS", "").strip()
    return float(given) if given else default


#: How long the spawned processes may take to start (imports) before the chaos begins.
STARTUP_TIMEOUT = 120.0


#: How long stopping processes may take before the test gives up on them: a process may be
#: waiting out the lease (60 s) of a write killed while it held partitions, then finishing
#: its own operation on a loaded machine (one that does not stop prints its stacks).
STOP_TIMEOUT = 150.0


@dataclass
class Slot:
    """One role played by a sequence of processes (a new one after each kill)."""

    name: str
    target: Any
    kwargs: dict[str, Any]
    kill_delay: tuple[float, float] | None = None
    restart: bool = True
    life: int = 0
    proc: Any = None
    kill_at: float | None = None
    kills: int = 0
    exits: list[str] = field(default_factory=list)

    def spawn(self, ctx: Any) -> None:
        self.life += 1
        self.kill_at = None
        self.proc = ctx.Process(
            target=self.target,
            kwargs={**self.kwargs, "name": self.name, "life": self.life},
            name=f"{self.name}-{self.life}",
            daemon=True,
        )
        self.proc.start()


def supervise(
    slots: list[Slot],
    ctx: Any,
    run: Path,
    rng: random.Random,
    until: float,
    enough: Callable[[], bool] | None = None,
    cap: float | None = None,
) -> None:
    """Kill killable processes at random moments after they are up, restart them; until
    ``until``, and then on while ``enough()`` is false, up to ``cap`` (on a loaded machine
    the processes need longer for the operations a test counts on)."""
    while time.time() < until or (
        enough is not None and cap is not None and time.time() < cap and not enough()
    ):
        now = time.time()
        for slot in slots:
            if slot.proc is None:
                continue
            if not slot.proc.is_alive():
                slot.proc.join()
                if slot.restart or slot.proc.exitcode != 0:
                    slot.exits.append(f"life {slot.life} exited with {slot.proc.exitcode}")
                if slot.restart:
                    slot.spawn(ctx)
                else:
                    slot.proc = None
                continue
            if slot.kill_delay is None:
                continue
            if slot.kill_at is None:
                if (run / f"ready-{slot.name}-{slot.life}").exists():
                    slot.kill_at = now + rng.uniform(*slot.kill_delay)
            elif now >= slot.kill_at:
                slot.proc.kill()
                slot.proc.join()
                slot.kills += 1
                slot.spawn(ctx)
        time.sleep(0.01)


def wait_until_up(slots: list[Slot], run: Path) -> None:
    """Wait until every first process is up (spawned interpreters import pyarrow and lance)."""
    deadline = time.time() + STARTUP_TIMEOUT
    while not all((run / f"ready-{s.name}-{s.life}").exists() for s in slots):
        dead = [s.name for s in slots if not s.proc.is_alive()]
        assert not dead, f"processes died while starting: {dead}"
        assert time.time() < deadline, "processes did not start in time"
        time.sleep(0.05)


def report_stacks(slot: Slot, run: Path) -> None:
    """Print where a process that did not stop is (its threads' stacks), or that it never
    got past its imports."""
    stacks = run / f"stacks-{slot.name}-{slot.life}.txt"
    if not stacks.exists():
        print(f"{slot.name} life {slot.life} did not stop: still starting (no stacks file)")
        return
    os.kill(slot.proc.pid, signal.SIGUSR1)
    time.sleep(1.0)
    print(f"{slot.name} life {slot.life} did not stop; its stacks:\n{stacks.read_text()}")


def stop_slots(slots: list[Slot], run: Path, flag: str) -> list[str]:
    """Ask the slots' processes to stop; kill (and name) those that do not in time."""
    (run / flag).touch()
    deadline = time.time() + STOP_TIMEOUT
    stuck = []
    for slot in slots:
        if slot.proc is None:
            continue
        slot.proc.join(max(0.1, deadline - time.time()))
        if slot.proc.is_alive():
            stuck.append(slot.name)
            report_stacks(slot, run)
            slot.proc.kill()
            slot.proc.join()
        elif slot.proc.exitcode != 0:
            slot.exits.append(f"life {slot.life} exited with {slot.proc.exitcode} at stop")
    return stuck


# -- the regional sales example (the Airflow watcher tests) --------------------------------------
def publish(ns: PartitionedNamespace, n: int) -> CommitResult:
    """One region's orders of one day (and late ones of the day before): two partitions."""
    from airflow_provider_lance.example_data import REGIONS

    day = dt.date(2025, 12, 1) + dt.timedelta(days=n)
    return ns.write(regional_sales(REGIONS[n % len(REGIONS)], day, batch_id=f"watch-{n}", rows=50))


def reported(events: list[dict[str, Any]]) -> list[int]:
    """The manifest versions of the publishes ``events`` report, in the order reported (an
    event without ``publishes`` is one publish, as the trigger fired them before)."""
    return [p["manifest_version"] for e in events for p in e.get("publishes", [e])]


def batch_totals(ns: PartitionedNamespace, batches: list[int]) -> dict[str, dict[str, Any]]:
    """What the example totals for the partitions ``publish(ns, n)`` wrote for ``batches``
    (no two batches share a partition)."""
    import pyarrow as pa

    rows = pa.concat_tables([ns.to_table(filter=f"batch_id = 'watch-{n}'") for n in batches])
    out: dict[str, dict[str, Any]] = {}
    for region in sorted(set(rows["region"].to_pylist())):
        mine = rows.filter(pc.equal(rows["region"], region))
        out[region] = {"rows": mine.num_rows, "amount": round(pc.sum(mine["amount"]).as_py(), 2)}
    return out


# -- S3: a trap for requests made without storage options ---------------------------------------
BUCKET = "lance-ns-test"


REGION = "us-east-1"


@contextmanager
def moto_s3(bucket: str = BUCKET) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with ``bucket``; yields Lance's storage options for it.
    The caller cleans the AWS environment (see :func:`env_without_aws`)."""
    import boto3
    from moto.server import ThreadedMotoServer

    werkzeug = logging.getLogger("werkzeug")
    level = werkzeug.level
    werkzeug.setLevel(logging.WARNING)  # moto logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name=REGION,
        ).create_bucket(Bucket=bucket)
        yield {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": REGION,
            "aws_endpoint": endpoint,
            "allow_http": "true",
        }
    finally:
        server.stop()
        werkzeug.setLevel(level)


class TrapServer(http.server.ThreadingHTTPServer):
    """Records every request and denies it (403 is not retried by Lance's S3 client)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), DenyAll)
        self.requests: list[str] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def count(self) -> int:
        with self.lock:
            return len(self.requests)


class DenyAll(http.server.BaseHTTPRequestHandler):
    server: TrapServer
    BODY = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
        b"<Message>request made without storage options</Message></Error>"
    )

    def _deny(self) -> None:
        with self.server.lock:
            self.server.requests.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(self.BODY)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(self.BODY)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _deny

    def log_message(self, format: str, *args: Any) -> None:
        pass


def env_without_aws() -> list[str]:
    proxies = ("http_proxy", "https_proxy", "all_proxy")
    return [k for k in os.environ if k.upper().startswith("AWS_") or k.lower() in proxies]
