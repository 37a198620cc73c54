"""On S3, side by side: requests, sequential round trips and time of each operation for
this project, delta-rs, pyiceberg and the bare Lance calls (the floor).

    python benchmarks/bench_s3.py                       # 1,000 and 3,000 dates x 1,000 rows
    python benchmarks/bench_s3.py --sizes 50 150 --rows 100 --rounds 1   # a quick check
    python benchmarks/bench_s3.py --trace               # also every request of our ops

An in-process S3 server (moto) sits behind a small TCP proxy on loopback that delays every
HTTP request by ``--latency-ms`` before forwarding it, as a remote object store would, and
counts the requests. Every system writes to its own bucket on the same server through the
same proxy (moto answers a LIST by scanning the bucket's keys, so a shared bucket would
make each system's LISTs pay for the others' objects). Each operation runs without and with
the delay, so

* **requests** is what the operation sent to the store,
* **sequential round trips** = (time with delay - time without) / delay: how many requests
  stood one after another on the operation's critical path (requests sent in parallel
  overlap and count once), and
* **ms** is the time with the delay.

Systems: ours (a fresh ``PartitionedNamespace.open`` per operation), delta-rs (a fresh
``DeltaTable``; commits by conditional put, S3's ``If-None-Match``), pyiceberg (a fresh
SQLite catalog per operation; its catalog statements run outside S3, are not delayed, and
are counted apart: ``22 (+4)``), and the floor, the bare Lance calls the operation needs on
a layout of one Lance table per date plus a reduced ``__manifest`` (``bench_floor.py``), in
parts: for a write, the lookup (opening ``__manifest`` and one filtered scan for the
touched dates' rows: whether each exists and at which version, which a writer must know
before it writes a leaf), the leaf calls (a ``write_dataset`` per touched date, in
parallel; for a read, opening one leaf at its known version and ``to_table()``) and the
``__manifest`` call (one ``merge_insert`` of the touched rows, on the handle the lookup
opened; for a plan or read, one filtered scan). The floor's ``__manifest`` carries a BTREE on
``object_id``, which a correct publish cannot (``merge_insert`` then misses concurrent
inserts of a key: tests/namespace/test_pylance_facts.py): its ``merge_insert`` reads only the
fragments the index does not cover, where ours reads every fragment's ``object_id``.

Operations, at each size (the namespace grows between sizes): a daily append of one new
date; an overwrite of 100 existing dates; planning one date and reading one date on a fresh
handle; at ``--wide-at`` dates (goal 5 of issue 26) a delete of 1% of the rows
(``id % 100 = k``) and a merge of 1% updates, both across every partition (not pyiceberg:
its row filters cannot say ``id % 100``). Samples interleave across systems (the order
rotates per round); medians of ``--rounds``; after each phase every system that took part
holds exactly the same rows (checked). Then ``--appends`` daily appends in a row on ours
and delta-rs, requests per append (do they grow with commits since the last ``__manifest``
compaction?).

For our operations the requests are broken down by what sent them (method and path
pattern: ``__manifest/_versions`` LIST, ``__manifest/data/*.lance`` GET, a leaf's
``_versions`` ...), with the GETs of ``__manifest`` data fragments (and how many distinct
fragments) and the LISTs of leaf ``_versions`` per touched leaf.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

os.environ.setdefault("LANCE_LOG", "error")  # before pylance reads it
import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_environment, print_table, write_results
from _peers import Delta, Floor, Iceberg, Ours, canonical, updates
from bench_floor import EPOCH, dates, rows

#: The first bytes of an HTTP request; anything else the client sends after an answer is
#: the body that follows a ``100 Continue`` (pyarrow's S3 client asks for one on uploads).
METHODS = (b"GET ", b"PUT ", b"POST ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ")
#: The floor's parts, in the order a write runs them (measured apart, run together).
FLOOR_PARTS = ("floor: lookup", "floor: leaves", "floor: __manifest")
SYSTEMS = ("ours", "delta", "iceberg", *FLOOR_PARTS)
LABELS = {"delta": "delta-rs", "iceberg": "pyiceberg"}


class LatencyProxy:
    """A TCP proxy that holds every HTTP request for ``delay`` seconds and counts them.

    A request starts when the client sends a request line after the server answered (or on
    a new connection); the delay is applied before its first bytes are forwarded. A body
    sent after a ``100 Continue`` is held too (a real client waits a round trip for that
    answer) but is not a request: it is counted in ``continuations``.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0
        self.requests = 0
        self.continuations = 0
        #: When a list: each request's first line (method and path), in arrival order.
        self.trace: list[str] | None = None
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        answered = threading.Event()
        answered.set()  # the first bytes from the client start a request

        def downstream() -> None:
            try:
                while data := server.recv(1 << 16):
                    answered.set()
                    client.sendall(data)
            except OSError:
                pass
            finally:
                client.close()

        threading.Thread(target=downstream, daemon=True).start()
        try:
            while data := client.recv(1 << 16):
                if answered.is_set():
                    answered.clear()
                    self._count(data)
                    if self.delay:
                        time.sleep(self.delay)
                server.sendall(data)
        except OSError:
            pass
        finally:
            server.close()

    def _count(self, data: bytes) -> None:
        with self._lock:
            if not data.startswith(METHODS):
                self.continuations += 1
                return
            self.requests += 1
            if self.trace is not None:
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                self.trace.append(line.rsplit(" ", 1)[0])


def start_store(buckets: list[str]) -> tuple[Any, LatencyProxy]:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    )
    for bucket in buckets:
        client.create_bucket(Bucket=bucket)
    return moto, LatencyProxy((host, port))


def options(proxy: LatencyProxy) -> dict[str, str]:
    """Storage options for Lance (``object_store``)."""
    return {
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
        "aws_endpoint": f"http://127.0.0.1:{proxy.port}",
        "allow_http": "true",
    }


def delta_options(proxy: LatencyProxy) -> dict[str, str]:
    """delta-rs 1.x on S3 commits by conditional put: no locking provider."""
    return {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
        "AWS_ALLOW_HTTP": "true",
    }


def iceberg_properties(proxy: LatencyProxy) -> dict[str, str]:
    return {
        "s3.endpoint": f"http://127.0.0.1:{proxy.port}",
        "s3.access-key-id": "bench",
        "s3.secret-access-key": "bench",
        "s3.region": "us-east-1",
    }


class CatalogStatements:
    """Counts the SQL statements every SQLAlchemy engine runs (pyiceberg's SQL catalog):
    the catalog requests, which do not go through the proxy."""

    def __init__(self) -> None:
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        self.count = 0
        event.listen(Engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any, **__: Any) -> None:
        self.count += 1


# -- measuring ------------------------------------------------------------------------------
class Bench:
    """Runs each operation on every system through the proxy, interleaved, and keeps the
    figures (and our requests, for the breakdown)."""

    def __init__(self, proxy: LatencyProxy, latency: float, rounds: int, names: list[str]):
        self.proxy, self.latency, self.rounds, self.names = proxy, latency, rounds, names
        self.catalog = CatalogStatements()
        self.results: dict[str, dict[str, dict[str, Any]]] = {}
        self.turn = 0

    def run(self, call: Callable[[int], Any], i: int, delay: float) -> dict[str, Any]:
        proxy = self.proxy
        proxy.delay, proxy.trace = delay, []
        requests, continuations, statements = (
            proxy.requests,
            proxy.continuations,
            self.catalog.count,
        )
        t0 = time.perf_counter()
        output = call(i)
        seconds = time.perf_counter() - t0
        figures = {
            "seconds": seconds,
            "requests": proxy.requests - requests,
            "continuations": proxy.continuations - continuations,
            "catalog": self.catalog.count - statements,
            "trace": proxy.trace,
            "output": output,
        }
        proxy.delay, proxy.trace = 0.0, None
        return figures

    def slots(self) -> list[list[str]]:
        """The systems in this round's order; the floor's parts stay together, in order."""
        slots = [[n] for n in self.names if n not in FLOOR_PARTS]
        floor = [n for n in FLOOR_PARTS if n in self.names]
        if floor:
            slots.append(floor)
        shift = self.turn % len(slots)
        self.turn += 1
        return slots[shift:] + slots[:shift]

    def operation(
        self,
        key: str,
        calls: dict[str, Callable[[int], Any]],
        *,
        warm: bool = True,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """``calls[system](i)`` without and with the delay, ``rounds`` times, interleaved
        (``i`` differs per call so that each write writes other rows, the same across
        systems); medians. The parts of a slot (the floor's leaf and ``__manifest`` calls)
        run in order for each ``i``."""
        if warm:
            for slot in self.slots():
                for name in slot:
                    if name in calls:
                        self.run(calls[name], 0, 0.0)
        runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
        for r in range(self.rounds):
            outputs = {}
            for slot in self.slots():
                members = [n for n in slot if n in calls]
                plain = {n: self.run(calls[n], 1 + 2 * r, 0.0) for n in members}
                slow = {n: self.run(calls[n], 2 + 2 * r, self.latency) for n in members}
                for name in members:
                    runs.setdefault(name, []).append((plain[name], slow[name]))
                    outputs[name] = slow[name]["output"]
            if check is not None:
                check(outputs)
        self.results[key] = {name: self.summary(pairs) for name, pairs in runs.items()}
        print(
            f"  {key}: "
            + ", ".join(
                f"{n} {f['requests']:g} req / {f['round_trips']:.1f} RT / {f['ms']:,.0f} ms"
                for n, f in self.results[key].items()
            ),
            flush=True,
        )

    def summary(self, pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
        plain = statistics.median(p["seconds"] for p, _ in pairs)
        slow = statistics.median(s["seconds"] for _, s in pairs)
        return {
            "requests": statistics.median(p["requests"] for p, _ in pairs),
            "continuations": statistics.median(p["continuations"] for p, _ in pairs),
            "catalog": statistics.median(p["catalog"] for p, _ in pairs),
            "round_trips": max(0.0, (slow - plain) / self.latency),
            "ms_without_delay": plain * 1000,
            "ms": slow * 1000,
            "trace": pairs[-1][0]["trace"],
        }


# -- what sent each request ----------------------------------------------------------------
LANCE_DIRS = {"_versions", "data", "_transactions", "_deletions", "_indices", "_refs"}
ID_LIKE = re.compile(r"[0-9a-fA-F_-]{6,}")


def request_kind(line: str) -> str:
    """``GET /bucket/ns/__manifest/data/0101...lance`` -> ``GET __manifest/data/*.lance``;
    a leaf table's directory becomes ``<leaf>``, a LIST names its prefix."""
    method, target = line.split(" ", 1)
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    path = unquote(parts.path).lstrip("/")
    if "list-type" in query:
        method = "LIST"
        path = path.split("/", 1)[0] + "/" + query.get("prefix", [""])[0]
    elif "uploads" in query or "uploadId" in query:
        method += " (multipart)"
    components = path.split("/")[2:]  # bucket, root
    shown = []
    for k, part in enumerate(components):
        stem, dot, ext = part.partition(".")
        inner = components[k + 1] if k + 1 < len(components) else ""
        if part != "__manifest" and (inner in LANCE_DIRS or part.endswith("$dataset")):
            shown.append("<leaf>")
        elif ID_LIKE.fullmatch(stem):
            shown.append("*" + dot + ext)
        else:
            shown.append(part)
    return f"{method} {'/'.join(shown)}"


def breakdown(trace: list[str]) -> dict[str, Any]:
    """Our requests by kind, and the counts issue 26 asks about."""
    kinds = Counter(request_kind(line) for line in trace)
    fragments = [line for line in trace if re.match(r"GET /[^/]+/[^?]*__manifest/data/", line)]
    leaf_lists = kinds["LIST <leaf>/_versions/"]
    return {
        "kinds": dict(kinds.most_common()),
        "manifest_fragment_gets": len(fragments),
        "manifest_fragments_read": len(set(fragments)),
        "leaf_version_lists": leaf_lists,
    }


def print_breakdown(key: str, figures: dict[str, Any], leaves: int, full: bool) -> None:
    trace = figures["trace"]
    b = breakdown(trace)
    print(
        f"  ours, {key}: {len(trace)} requests; __manifest data fragments: "
        f"{b['manifest_fragment_gets']} GETs of {b['manifest_fragments_read']} distinct; "
        f"leaf _versions LISTs: {b['leaf_version_lists']} for {leaves} leaves touched",
        flush=True,
    )
    for kind, n in b["kinds"].items():
        print(f"    {n:5d}  {kind}", flush=True)
    if full:
        print("".join(f"      {line}\n" for line in trace), end="", flush=True)
    figures["breakdown"] = b


# -- the scenario ---------------------------------------------------------------------------
class Systems:
    """The four systems on their buckets, and the rows each must hold."""

    def __init__(self, proxy: LatencyProxy, catalog_dir: Path, names: list[str]) -> None:
        self.ours = Ours("s3://ours/ns", storage_options=options(proxy))
        self.delta = Delta("s3://delta/t", storage_options=delta_options(proxy))
        self.iceberg = Iceberg(
            catalog_dir, warehouse="s3://iceberg/wh", properties=iceberg_properties(proxy)
        )
        self.floor = Floor("s3://floor/f", storage_options=options(proxy))
        self.names = names
        #: Systems whose rows are compared (pyiceberg leaves after the wide operations).
        self.checked = {n for n in names if not n.startswith("floor")}
        if "floor: leaves" in names:
            self.checked.add("floor")
        self.pending: list[dt.date] = []

    def grow(self, first: int, count: int, per: int) -> None:
        """Add ``count`` dates (the first load creates each table), not measured."""
        data = rows(first, count, per, first_id=first * per)
        t0 = time.perf_counter()
        for name, system in self.by_name().items():
            if first == 0:
                system.load(data)
            else:
                system.append(data) if name != "floor" else system.load(data)
        print(f"  grew to {first + count:,} dates ({time.perf_counter() - t0:.0f} s)", flush=True)

    def by_name(self) -> dict[str, Any]:
        systems = {"ours": self.ours, "delta": self.delta, "iceberg": self.iceberg}
        systems["floor"] = self.floor
        return {n: s for n, s in systems.items() if any(m.split(":")[0] == n for m in self.names)}

    def same_rows(self, what: str) -> None:
        """Every checked system holds exactly the same rows (read back whole)."""
        tables = {n: canonical(s.rows()) for n, s in self.by_name().items() if n in self.checked}
        first_name, first = next(iter(tables.items()))
        for name, table in tables.items():
            if not table.equals(first):
                raise AssertionError(
                    f"after {what}: {name} holds {table.num_rows} rows, {first_name} "
                    f"{first.num_rows}, and they differ"
                )
        print(f"  checked: {', '.join(tables)} hold the same {first.num_rows:,} rows", flush=True)

    def calls(
        self,
        write: Callable[[Any, int], Any],
        floor_leaves: Callable[[int], Any] | None,
        floor_days: Callable[[int], list[dt.date]] | None = None,
    ):
        """``write(system, i)`` for ours, delta-rs, pyiceberg; the floor's lookup of the
        dates ``floor_days(i)`` in ``__manifest`` (if given), its leaf call, then its
        ``__manifest`` call publishing what the leaf call wrote."""
        calls: dict[str, Callable[[int], Any]] = {
            "ours": lambda i: write(self.ours, i),
            "delta": lambda i: write(self.delta, i),
            "iceberg": lambda i: write(self.iceberg, i),
        }
        if floor_days is not None:
            calls["floor: lookup"] = lambda i: self.floor.look_up(floor_days(i))
        if floor_leaves is not None:

            def leaves(i: int) -> None:
                self.pending = floor_leaves(i)

            calls["floor: leaves"] = leaves
            calls["floor: __manifest"] = lambda _: self.floor.publish(self.pending)
        return {n: c for n, c in calls.items() if n in self.names}

    def agree(self, outputs: dict[str, Any]) -> None:
        """The systems whose rows are checked read the same rows."""
        tables = {
            n: canonical(t)
            for n, t in outputs.items()
            if isinstance(t, pa.Table) and n.split(":")[0] in self.checked
        }
        first = next(iter(tables.values()))
        for name, table in tables.items():
            if not table.equals(first):
                raise AssertionError(f"{name} read other rows than the others")


def scenario(args: argparse.Namespace, bench: Bench, systems: Systems) -> None:
    size = 0
    for k, target in enumerate(sorted(args.sizes)):
        systems.grow(size, target - size, args.rows)
        size = target
        systems.same_rows(f"growing to {size:,} dates")
        at_size(args, bench, systems, size, k)
        if size == args.wide_at:
            wide(args, bench, systems, size)


def at_size(args: argparse.Namespace, bench: Bench, systems: Systems, size: int, k: int) -> None:
    """The daily append, the overwrite, planning and reading at ``size`` dates (the
    ``k``-th size: its new dates and ids differ from the other sizes')."""
    per, new = args.rows, 10**5 * (k + 1)  # 274 years apart: dates stay < 9999

    def daily(i: int) -> pa.Table:
        return rows(new + i, 1, per, first_id=10**10 * (k + 1) + i * per, seed=i)

    def hundred(i: int) -> pa.Table:
        return rows(0, 100, per, first_id=2 * 10**10 + k * 10**9 + i * 100 * per, seed=i)

    ops = {
        "daily append, 1 new date": (
            systems.calls(
                lambda s, i: s.append(daily(i)),
                lambda i: systems.floor.write_leaves(daily(i), "append"),
                lambda i: dates(new + i, 1),
            ),
            1,
        ),
        "overwrite of 100 existing dates": (
            systems.calls(
                lambda s, i: s.overwrite(hundred(i)),
                lambda i: systems.floor.write_leaves(hundred(i), "overwrite"),
                lambda i: dates(0, 100),
            ),
            100,
        ),
    }
    for name, (calls, leaves) in ops.items():
        key = f"{size:,} dates: {name}"
        bench.operation(key, calls)
        if "ours" in calls:
            print_breakdown(key, bench.results[key]["ours"], leaves, args.trace)
    systems.same_rows(f"appends and overwrites at {size:,} dates")

    day = dates(size // 2, 1)[0]
    plan = systems.calls(lambda s, _: s.plan(day), None)
    plan["floor: __manifest"] = lambda _: systems.floor.plan(day)
    read = systems.calls(lambda s, _: s.read(day, day), None)
    read["floor: leaves"] = lambda _: systems.floor.read_leaf(day)
    read["floor: __manifest"] = lambda _: systems.floor.plan(day)
    for name, calls in (("plan one date", plan), ("read one date", read)):
        key = f"{size:,} dates: {name}"
        calls = {n: c for n, c in calls.items() if n in systems.names}
        bench.operation(key, calls, check=systems.agree if name == "read one date" else None)
        if "ours" in calls:
            print_breakdown(key, bench.results[key]["ours"], 1, args.trace)


def wide(args: argparse.Namespace, bench: Bench, systems: Systems, size: int) -> None:
    """Delete and merge touching 1% of the rows across every partition (not pyiceberg)."""
    source = rows(0, size, args.rows)
    systems.checked.discard("iceberg")  # it does not take part: its rows differ from now on
    ops = {
        f"delete 1% of rows across {size:,} partitions": systems.calls(
            lambda s, i: s.delete(f"id % 100 = {i}"),
            lambda i: systems.floor.delete_leaves(f"id % 100 = {i}"),
        ),
        f"merge 1% updates across {size:,} partitions": systems.calls(
            lambda s, i: s.merge(updates(source, 50 + i)),
            lambda i: systems.floor.merge_leaves(updates(source, 50 + i)),
        ),
    }
    rounds, bench.rounds = bench.rounds, args.wide_rounds
    for name, calls in ops.items():
        calls.pop("iceberg", None)
        key = f"{size:,} dates: {name}"
        bench.operation(key, calls, warm=False)
        if "ours" in calls:
            print_breakdown(key, bench.results[key]["ours"], size, args.trace)
        systems.same_rows(name)
    bench.rounds = rounds


def appends_in_a_row(args: argparse.Namespace, bench: Bench, systems: Systems) -> list[Any]:
    """``--appends`` daily appends in a row on ours and delta-rs, no delay: requests each,
    and the number of ``__manifest`` fragments before it (does it grow with commits since
    the last compaction?)."""
    proxy, per = bench.proxy, args.rows
    first = 10**5 * (len(args.sizes) + 1)
    table = []
    for j in range(args.appends):
        data = rows(first + j, 1, per, first_id=5 * 10**10 + j * per, seed=j)
        manifest = lance.dataset(f"{systems.ours.uri}/__manifest", storage_options=options(proxy))
        fragments = len(manifest.get_fragments())
        ours = bench.run(lambda _, d=data: systems.ours.append(d), 0, 0.0)
        delta = bench.run(lambda _, d=data: systems.delta.append(d), 0, 0.0)
        b = breakdown(ours["trace"])
        table.append(
            [
                j + 1,
                fragments,
                ours["requests"],
                b["manifest_fragment_gets"],
                f"{ours['seconds'] * 1000:,.0f}",
                delta["requests"],
                f"{delta['seconds'] * 1000:,.0f}",
            ]
        )
        print(f"  append {j + 1}: {table[-1]}", flush=True)
    print_table(
        [
            "append",
            "__manifest fragments before",
            "ours requests",
            "of which __manifest data GETs",
            "ours ms (no delay)",
            "delta-rs requests",
            "delta-rs ms (no delay)",
        ],
        table,
        title=f"{args.appends} daily appends in a row at {max(args.sizes):,} dates",
    )
    if {"ours", "delta"} <= systems.checked:
        systems.checked &= {"ours", "delta"}
        systems.same_rows("appends in a row")
    return table


def cell(figures: dict[str, Any] | None) -> str:
    if figures is None:
        return "-"
    requests = f"{figures['requests']:g}"
    if figures["catalog"]:
        requests += f" (+{figures['catalog']:g})"
    return f"{requests} / {figures['round_trips']:.0f} / {figures['ms']:,.0f}"


def report(bench: Bench, latency_ms: float) -> None:
    names = [n for n in SYSTEMS if any(n in r for r in bench.results.values())]
    table = []
    for key, by in bench.results.items():
        table.append([key, *[cell(by.get(n)) for n in names]])
    print_table(
        ["operation", *[LABELS.get(n, n) for n in names]],
        table,
        title=f"requests / sequential round trips / ms at {latency_ms:g} ms per request "
        "(medians; pyiceberg's catalog statements in brackets)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000])
    parser.add_argument("--rows", type=int, default=1000, help="rows per date")
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (medians)")
    parser.add_argument(
        "--wide-at", type=int, default=1000, help="size for the delete and merge (0: none)"
    )
    parser.add_argument(
        "--wide-rounds", type=int, default=1, help="runs of the delete and merge (slow on S3)"
    )
    parser.add_argument("--appends", type=int, default=20, help="appends in a row at the end")
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument("--trace", action="store_true", help="also list each of our requests")
    args = parser.parse_args()
    os.environ.setdefault("LANCE_LOG", "error")
    env = print_environment()
    moto, proxy = start_store(["ours", "delta", "iceberg", "floor"])
    bench = Bench(proxy, args.latency_ms / 1000, args.rounds, list(args.systems))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-s3-") as tmp:
            systems = Systems(proxy, Path(tmp) / "iceberg", list(args.systems))
            scenario(args, bench, systems)
            in_a_row = appends_in_a_row(args, bench, systems) if args.appends else []
    finally:
        moto.stop()
    report(bench, args.latency_ms)
    for by in bench.results.values():
        for figures in by.values():
            figures.pop("trace")
    write_results(
        "s3",
        {
            "environment_summary": env,
            "latency_ms": args.latency_ms,
            "results": bench.results,
            "appends_in_a_row": in_a_row,
            "epoch": str(EPOCH),
        },
    )


if __name__ == "__main__":
    main()
