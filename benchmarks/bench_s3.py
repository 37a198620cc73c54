"""Object-store round trips: requests and sequential round trips per operation, on S3.

    python benchmarks/bench_s3.py             # 20 ms per request, 100 / 1,000 / 3,000 partitions
    python benchmarks/bench_s3.py --latency-ms 50 --sizes 100 1000 5000 --publish 1000
    python benchmarks/bench_s3.py --sizes 300 --rounds 1 --trace   # every request listed

An in-process S3 server (moto) sits behind a small TCP proxy on loopback that delays every
HTTP request by ``--latency-ms`` before forwarding it, as a remote object store would, and
counts the requests. Each operation runs twice, once through the proxy without delay and
once with it, so

* **requests** is what the operation sent to the store, and
* **sequential round trips** = (time with delay - time without) / delay: how many requests
  stood one after another on the operation's critical path. Requests sent in parallel
  overlap and count once; this is the figure that makes an operation slow on S3.

The namespace grows between the sizes, so a figure that does not change with the size is
independent of it. Operations: a daily append (one new partition), an append to
``--publish`` existing partitions (the many-partition publish: the same partitions at every
size), planning one date and reading one date, each on a fresh handle
(``PartitionedNamespace.open``), as a scheduled task would.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_environment, print_table, write_results
from bench_floor import EPOCH, SCHEMA, dates, rows

from airflow_provider_lance.namespace import PartitionedNamespace, PartitionField

BUCKET = "bench"


class LatencyProxy:
    """A TCP proxy that holds every HTTP request for ``delay`` seconds and counts them.

    A request starts when the client sends after the server answered (or on a new
    connection); the delay is applied once, before its first bytes are forwarded.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0
        self.requests = 0
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
                    with self._lock:
                        self.requests += 1
                        if self.trace is not None:
                            line = data.split(b"\r\n", 1)[0].decode("latin-1")
                            self.trace.append(line.rsplit(" ", 1)[0])
                    if self.delay:
                        time.sleep(self.delay)
                server.sendall(data)
        except OSError:
            pass
        finally:
            server.close()


def start_store() -> tuple[Any, LatencyProxy]:
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    ).create_bucket(Bucket=BUCKET)
    return moto, LatencyProxy((host, port))


def options(proxy: LatencyProxy) -> dict[str, str]:
    return {
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
        "aws_endpoint": f"http://127.0.0.1:{proxy.port}",
        "allow_http": "true",
    }


def measure(
    proxy: LatencyProxy, latency: float, call: Callable[[int], Any], rounds: int
) -> dict[str, float]:
    """Requests and sequential round trips of ``call(i)`` (``i`` lets each run write
    other rows): ``rounds`` runs without and with the delay, interleaved, medians.
    A run's CPU time varies with the machine's load; interleaving and medians keep that
    noise out of the difference."""
    proxy.delay = 0.0
    call(0)  # warm: connections, caches
    plain, slow, requests = [], [], []
    for r in range(rounds):
        proxy.delay = 0.0
        before = proxy.requests
        t0 = time.perf_counter()
        call(1 + 2 * r)
        plain.append(time.perf_counter() - t0)
        requests.append(proxy.requests - before)
        proxy.delay = latency
        t0 = time.perf_counter()
        call(2 + 2 * r)
        slow.append(time.perf_counter() - t0)
    proxy.delay = 0.0
    plain_s, slow_s = statistics.median(plain), statistics.median(slow)
    return {
        "requests": statistics.median(requests),
        "sequential_round_trips": max(0.0, (slow_s - plain_s) / latency),
        "ms_without_delay": plain_s * 1000,
        "ms_with_delay": slow_s * 1000,
    }


def operations(
    uri: str, opts: dict[str, str], size: int, per: int, publish: int, *, first_new: int
) -> dict[str, Callable[[int], Any]]:
    """The measured operations on a namespace of ``size`` partitions (``per`` rows each);
    the publish touches the same ``publish`` partitions whatever the namespace's size."""
    day = dates(size // 2, 1)[0]

    def fresh() -> PartitionedNamespace:
        return PartitionedNamespace.open(uri, storage_options=opts)

    return {
        "daily append, 1 new partition": lambda i: fresh().write(rows(first_new + i, 1, per)),
        f"append to {publish:,} partitions": lambda i: fresh().write(
            rows(0, publish, 1, first_id=10**9 + i * publish + first_new * 10**3)
        ),
        "plan one date": lambda i: fresh().prune(f"event_date = DATE '{day}'"),
        "read one date": lambda i: fresh().to_table(filter=f"event_date = DATE '{day}'"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument(
        "--publish", type=int, default=100, help="partitions a many-partition publish touches"
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs per figure (medians)")
    parser.add_argument(
        "--trace", action="store_true", help="print each operation's requests (method, path)"
    )
    parser.add_argument("--rows", type=int, default=100, help="rows per partition")
    args = parser.parse_args()
    os.environ.setdefault("LANCE_LOG", "error")
    env = print_environment()
    moto, proxy = start_store()
    latency = args.latency_ms / 1000
    uri = f"s3://{BUCKET}/ns"
    opts = options(proxy)
    ns = PartitionedNamespace.create(
        uri,
        schema=SCHEMA,
        partition_fields=[PartitionField("event_date", "event_date")],
        storage_options=opts,
    )
    results: dict[str, dict[str, dict[str, float]]] = {}
    size = 0
    table = []
    try:
        for target in sorted(args.sizes):
            ns.write(rows(size, target - size, args.rows))
            size = target
            ops = operations(
                uri,
                opts,
                size,
                args.rows,
                min(args.publish, size),
                first_new=10**5 * (1 + len(results)),  # 274 years apart: dates stay < 9999
            )
            results[str(size)] = {}
            for name, call in ops.items():
                if args.trace:
                    proxy.trace = []
                    call(10**4)
                    print(f"  {size:,} {name}: {len(proxy.trace)} requests", flush=True)
                    print("".join(f"    {line}\n" for line in proxy.trace), end="", flush=True)
                    proxy.trace = None
                figures = measure(proxy, latency, call, args.rounds)
                results[str(size)][name] = figures
                table.append(
                    [
                        f"{size:,}",
                        name,
                        f"{figures['requests']:,}",
                        f"{figures['sequential_round_trips']:.1f}",
                        f"{figures['ms_without_delay']:,.0f}",
                        f"{figures['ms_with_delay']:,.0f}",
                    ]
                )
                print(f"  {size:,} {name}: {figures}", flush=True)
    finally:
        moto.stop()
    print_table(
        [
            "partitions",
            "operation",
            "requests",
            "sequential RTs",
            "ms",
            f"ms at {args.latency_ms:g} ms/request",
        ],
        table,
        title=f"S3 (moto behind a {args.latency_ms:g} ms/request proxy), {EPOCH} onwards",
    )
    write_results(
        "s3", {"environment_summary": env, "latency_ms": args.latency_ms, "results": results}
    )


if __name__ == "__main__":
    main()
