"""How long `GET /health` of a running `scripts/serve.py` takes while the largest requests are in
flight: a body of one text just under the body cap (refused with 413, `--refused_mb` MB) and a
maximal valid request (`max_texts` texts of `max_text_chars` characters, as `/info` states them),
sent at once on their own connections while a third one asks `/health` every `--every_ms` ms.

It prints one line of JSON: the `/health` latencies (count, p50, p99 and max, in ms, and how many
were not 200), each big request's status and seconds, and the wall time. A real HTTP client
(`http.client`, one connection per sender) and only a server on this machine.

Usage:
    python scripts/serve.py --model exports/bbc &        # the server, in another shell
    python scripts/health_under_load.py                  # http://127.0.0.1:8000
    python scripts/health_under_load.py --url http://127.0.0.1:8123 --refused_mb 100
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlsplit

JSON_HEADERS = {"Content-Type": "application/json"}
SENT = ("refused", "maximal")  # the big requests, as `bodies` names them


def connect(url: str, timeout: float) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"error: --url {url}: only a server on this machine")
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)


def get(url: str, path: str, timeout: float = 10.0) -> tuple[int, bytes]:
    connection = connect(url, timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def post(url: str, body: bytes, result: dict, timeout: float) -> None:
    """POST `body` to /predict; `result` gets its status (or the error) and seconds."""
    start = time.perf_counter()
    connection = connect(url, timeout)
    try:
        connection.request("POST", "/predict", body=body, headers=JSON_HEADERS)
        response = connection.getresponse()
        response.read()
        result["status"] = response.status
    except OSError as error:  # the server may close a refused upload before it is all sent
        result["status"] = f"{type(error).__name__}: {error}"
    finally:
        connection.close()
        result["seconds"] = round(time.perf_counter() - start, 3)


def bodies(info: dict, refused_mb: float) -> dict[str, bytes]:
    """The two big requests: one text of `refused_mb` MB (over max_text_chars: a 413), and the
    largest valid request."""
    texts, chars = info["max_texts"], info["max_text_chars"]
    size = int(refused_mb * 1_000_000)
    refused = b'{"text": "' + b"a" * (size - 12) + b'"}'
    word = "valid words "
    text = (word * (chars // len(word) + 1))[:chars]
    valid = json.dumps({"texts": [text] * texts}).encode()
    return {"refused": refused, "maximal": valid}


def measure(
    url: str, refused_mb: float, every_ms: float, timeout: float, send: tuple[str, ...]
) -> dict:
    status, data = get(url, "/info")
    if status != 200:
        raise SystemExit(f"error: {url}/info answered {status}")
    info = json.loads(data)["model"]
    big = {name: body for name, body in bodies(info, refused_mb).items() if name in send}
    results: dict[str, dict] = {name: {} for name in big}
    senders = [
        threading.Thread(target=post, args=(url, body, results[name], timeout))
        for name, body in big.items()
    ]
    health = connect(url, 10.0)  # one kept-alive connection, as a load balancer's probe
    latencies, failures = [], 0
    start = time.perf_counter()
    for sender in senders:
        sender.start()
    while any(sender.is_alive() for sender in senders):
        asked = time.perf_counter()
        try:
            health.request("GET", "/health")
            response = health.getresponse()
            response.read()
            failures += response.status != 200
        except OSError:
            failures += 1
            health.close()
            health = connect(url, 10.0)
        latencies.append((time.perf_counter() - asked) * 1000)
        time.sleep(max(0.0, every_ms / 1000 - (time.perf_counter() - asked)))
    wall = time.perf_counter() - start
    health.close()
    ordered = sorted(latencies)

    def quantile(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0

    return {
        "health": {
            "count": len(latencies),
            "p50_ms": quantile(0.5),
            "p99_ms": quantile(0.99),
            "max_ms": round(max(ordered), 1) if ordered else 0,
            "failed": failures,
        },
        **{f"{name}_body_bytes": len(body) for name, body in big.items()},
        **results,
        "wall_s": round(wall, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--refused_mb", type=float, default=100.0, help="the refused body's MB")
    parser.add_argument("--every_ms", type=float, default=10.0, help="ms between /health asks")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per big request")
    parser.add_argument(
        "--send", nargs="+", choices=SENT, default=list(SENT), help="the big requests to send"
    )
    args = parser.parse_args(argv)
    found = measure(args.url, args.refused_mb, args.every_ms, args.timeout, tuple(args.send))
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
