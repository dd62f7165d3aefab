"""Load test of a running `scripts/serve.py`: throughput and latency at 1, 8 and 32 clients.

Each client is a thread with one kept-alive HTTP connection that sends its next request as soon
as the previous answer arrives. The texts are BBC News test texts (the split fit.py holds out by
default: validation and test fractions 0.1, seed 42), taken in turn, `--texts_per_request` per
request. For each number of clients it prints the requests answered, the errors (any status
but 200, or a failed connection), requests/s, texts/s and the p50 and p99 latency in ms.

`--bad_fraction F` makes that share of the requests, spread evenly among the good ones, bad:
texts that are not valid Unicode (a lone surrogate), empty or blank texts, and bodies that are
not a valid request (invalid JSON, wrong types, nested arrays, missing fields). Then `errors`
counts the good requests that failed, which must be none, `bad` the bad requests sent and
`bad_not_refused` those that got anything but a 4xx; the rates and latencies are of the good
requests.

Bounded on purpose: at most `--requests` requests and `--seconds` seconds per level, and only a
server on this machine (localhost, 127.0.0.1 or ::1).

Usage:
    python scripts/serve.py --model exports/bbc &          # the server, in another shell
    python scripts/load_test.py                             # 1, 8, 32 clients; 500 requests each
    python scripts/load_test.py --concurrency 1 4 --requests 50 --texts_per_request 8 --json
    python scripts/load_test.py --bad_fraction 0.2          # one request in five is bad
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import itertools
import json
import math
import sys
import threading
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from tscratch.data.splits import load_labeled_splits
from tscratch.errors import UserError, report

JSON_HEADERS = {"Content-Type": "application/json"}
MAX_CLIENTS = 256
BAD_BODIES = [  # what `--bad_fraction` sends, in turn: each must get a 4xx
    b'{"text": "caf\\u00e9 \\ud800 bar"}',  # a lone surrogate: not valid Unicode
    b'{"text": ""}',
    b'{"texts": ["a fine text", " \\n\\t\\u200b"]}',  # blank once stripped
    b'{"text": "unterminated',
    b'{"text": 7}',
    b'{"texts": [["nested"]]}',
    b'{"txt": "a misspelt field"}',
    b"{}",
    b'["not", "an", "object"]',
    b'{"text": 1' + b"0" * 5000 + b"}",  # over Python's 4,300 digits
    b"[" * 10_000 + b"]" * 10_000,
]


def local_address(url: str) -> tuple[str, int]:
    """The (host, port) of an http `url` on this machine, or a `UserError`."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name other than localhost
        local = False
    if parts.scheme != "http" or not local:
        raise UserError(
            f"--url {url}: the load test only targets a server on this machine; "
            "use http://127.0.0.1:PORT or http://localhost:PORT"
        )
    return host, parts.port or 80


def check_flags(args: argparse.Namespace) -> None:
    """Raise a `UserError` for a bound that is not positive, or too many clients."""
    bounds = {"requests": args.requests, "seconds": args.seconds}
    bounds |= {"texts_per_request": args.texts_per_request, "concurrency": min(args.concurrency)}
    for flag, value in bounds.items():
        if value <= 0:
            raise UserError(f"--{flag} ({value}) must be positive")
    if not 0 <= args.bad_fraction < 1:
        raise UserError(f"--bad_fraction ({args.bad_fraction}) must be in [0, 1)")
    if max(args.concurrency) > MAX_CLIENTS:
        raise UserError(f"--concurrency ({max(args.concurrency)}) must be at most {MAX_CLIENTS}")


def check_health(host: str, port: int) -> None:
    """Raise a `UserError` unless the server's /health answers 200."""
    try:
        conn = http.client.HTTPConnection(host, port, timeout=5)
        conn.request("GET", "/health")
        status = conn.getresponse().status
        conn.close()
    except OSError:
        status = None
    if status != 200:
        raise UserError(
            f"no ready server at {host}:{port} (GET /health: {status}); start scripts/serve.py"
        )


def run_level(
    host: str,
    port: int,
    bodies: Sequence[bytes],
    clients: int,
    requests: int,
    seconds: float,
    bad_fraction: float = 0.0,
) -> dict[str, float]:
    """Send up to `requests` bodies from `clients` threads for at most `seconds`, a
    `bad_fraction` share of them from `BAD_BODIES`; the stats."""
    order, deadline = itertools.count(), time.monotonic() + seconds
    latencies: list[float] = []
    counts = {"errors": 0, "bad": 0, "bad_not_refused": 0}
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        while (i := next(order)) < requests and time.monotonic() < deadline:
            bad = is_bad(i, bad_fraction)
            if bad:  # the bad requests take BAD_BODIES in turn
                body = BAD_BODIES[math.floor(i * bad_fraction) % len(BAD_BODIES)]
            else:
                body = bodies[i % len(bodies)]
            start = time.perf_counter()
            try:
                conn.request("POST", "/predict", body, JSON_HEADERS)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()  # reconnects on the next request
                status = None
            elapsed = time.perf_counter() - start
            with lock:
                if bad:
                    counts["bad"] += 1
                    counts["bad_not_refused"] += not (status and 400 <= status < 500)
                elif status == 200:
                    latencies.append(elapsed)
                else:
                    counts["errors"] += 1
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    stats = {"clients": clients, "requests": len(latencies), "errors": counts["errors"]}
    if bad_fraction:
        stats |= {"bad": counts["bad"], "bad_not_refused": counts["bad_not_refused"]}
    return stats | {
        "requests_per_s": len(latencies) / wall,
        "p50_ms": 1000 * percentile(latencies, 0.50),
        "p99_ms": 1000 * percentile(latencies, 0.99),
    }


def is_bad(i: int, bad_fraction: float) -> bool:
    """Whether request `i` is bad: `bad_fraction` of them, spread evenly."""
    return math.floor((i + 1) * bad_fraction) > math.floor(i * bad_fraction)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank `q` quantile of `values` (NaN when empty)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def request_bodies(texts: Sequence[str], per_request: int) -> list[bytes]:
    """The test texts cut into request bodies of `per_request` texts, in turn."""
    if per_request == 1:
        return [json.dumps({"text": text}).encode() for text in texts]
    cycled = itertools.cycle(texts)
    count = max(1, len(texts) // per_request)
    return [
        json.dumps({"texts": list(itertools.islice(cycled, per_request))}).encode()
        for _ in range(count)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the local server")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=500, help="most requests per level")
    parser.add_argument("--seconds", type=float, default=60.0, help="most seconds per level")
    parser.add_argument("--texts_per_request", type=int, default=1)
    parser.add_argument(
        "--bad_fraction", type=float, default=0.0, help="share of bad requests, in [0, 1)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line per level")
    args = parser.parse_args(argv)
    try:
        host, port = local_address(args.url)
        check_flags(args)
        check_health(host, port)
        splits = load_labeled_splits("bbc_news", None, None, None, None, 0.1, 0.1, 42, None)
        bodies = request_bodies(splits.test["text"], args.texts_per_request)
    except UserError as error:
        return report(error)
    bad = args.bad_fraction > 0
    if not args.json:
        bad_columns = f" {'bad':>6} {'not 4xx':>7}" if bad else ""
        print(f"{'clients':>7} {'requests':>8} {'errors':>6} {'req/s':>8} {'texts/s':>8} "
              f"{'p50 ms':>8} {'p99 ms':>8}{bad_columns}")  # fmt: skip
    for clients in args.concurrency:
        stats = run_level(
            host, port, bodies, clients, args.requests, args.seconds, args.bad_fraction
        )
        stats["texts_per_s"] = stats["requests_per_s"] * args.texts_per_request
        if args.json:
            print(json.dumps({k: round(v, 3) for k, v in stats.items()}), flush=True)
        else:
            bad_columns = f" {stats['bad']:>6} {stats['bad_not_refused']:>7}" if bad else ""
            print(f"{clients:>7} {stats['requests']:>8} {stats['errors']:>6} "
                  f"{stats['requests_per_s']:>8.1f} {stats['texts_per_s']:>8.1f} "
                  f"{stats['p50_ms']:>8.1f} {stats['p99_ms']:>8.1f}{bad_columns}",
                  flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
