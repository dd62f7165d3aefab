"""Serve a classifier over HTTP with LitServe: `python scripts/serve.py --model DIR|CKPT`.

`POST /predict` takes `{"text": "..."}` and answers `{"label", "probabilities"}`, or takes
`{"texts": [...]}` and answers `{"predictions": [{"label", "probabilities"}, ...]}`. A model
trained on text pairs takes `{"text": "...", "text_pair": "..."}` or `{"texts": [...],
"text_pairs": [...]}` (one pair per text) instead, and answers alike. `GET /health` says "ok"
once the model is loaded; `GET /info` shows the labels, `max_length`, the limits and, for a pair
model, its `text_pair_column`. A multi-label model answers `{"labels": {label: p}, "probabilities"}`
(the labels at or above their tuned thresholds) in place of `label`, and `/info` shows its
`thresholds`.

Batching: LitServe gathers up to `--max_batch_size` *requests* that arrive within
`--batch_timeout` seconds; the worker then joins their texts and runs the model on them in
chunks of at most `--max_batch_size` texts. So a request of many texts is one item of LitServe's
batch, answered whole, and no forward pass ever holds more than `--max_batch_size` texts.

A small ASGI middleware answers bad requests in the HTTP process, with `{"detail": "<one line>"}`:
400 for invalid JSON, a missing, empty or non-string text or an unknown field (pairs sent to a
single-text model and single texts sent to a pair model included); 413 for a text over
`--max_text_chars` or more than `--max_texts` texts (or pairs). Not `HTTPException` in
`decode_request`: in LitServe's batched loop that fails every request of the batch, good ones
too. The body is read as JSON whatever its Content-Type says (`curl -d` sends form-urlencoded).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from tscratch.cli.classifiers import open_classifier
from tscratch.errors import UserError, report

try:  # the serve extra; `require_serve_extra` turns its absence into one line
    from litserve import LitAPI as _LitAPI
except ImportError:  # pragma: no cover - the class is then never instantiated
    _LitAPI = object  # type: ignore[assignment,misc]

API_PATH = "/predict"
HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # the hosts LitServe binds to
REQUEST_TIMEOUT = 30.0  # seconds a request may wait for the model before a 504
USAGE = 'send {"text": "..."} or {"texts": ["...", ...]}'
PAIR_USAGE = 'send {"text": "...", "text_pair": "..."} or {"texts": [...], "text_pairs": [...]}'
PAIR_FIELDS = ({"text", "text_pair"}, {"texts", "text_pairs"})
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
_JSON_TYPES |= {dict: "an object", list: "an array"}


def require_serve_extra() -> None:
    """Raise a `UserError` naming the extra to install when LitServe is missing."""
    try:
        import litserve  # noqa: F401
    except ImportError:
        raise UserError('serving needs the serve extra: pip install "tscratch[serve]"') from None


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may hold."""

    max_texts: int
    max_text_chars: int

    @property
    def max_body_bytes(self) -> int:
        """The largest body a valid request can need (4 UTF-8 bytes a character, JSON
        escaping aside, plus room for the keys): a larger one is refused unread."""
        return self.max_texts * (4 * self.max_text_chars + 16) + 65536


class BadRequest(ValueError):
    """A request the server refuses: an HTTP status and a one-line reason for the client."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def parse_body(body: bytes, usage: str = USAGE) -> Any:
    """The request body as JSON, or `BadRequest` (400)."""
    try:
        return json.loads(body)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        raise BadRequest(400, f"the body is not valid JSON; {usage}") from None


def texts_of(payload: Any, limits: Limits) -> tuple[list[str], bool]:
    """The texts of a parsed request and whether it was the single-text form.

    Raises:
        BadRequest: 400 for a malformed request, 413 for one over `limits`.
    """
    if not isinstance(payload, dict) or set(payload) not in ({"text"}, {"texts"}):
        fields = json.dumps(sorted(payload)) if isinstance(payload, dict) else _json_type(payload)
        raise BadRequest(400, f"expected one field, text or texts, got {fields}; {USAGE}")
    single = "text" in payload
    texts = [payload["text"]] if single else payload["texts"]
    if not isinstance(texts, list) or not texts:
        raise BadRequest(400, f"texts must be a non-empty array of strings; {USAGE}")
    if len(texts) > limits.max_texts:
        raise BadRequest(
            413, f"{len(texts)} texts is over --max_texts ({limits.max_texts}); send fewer"
        )
    for i, text in enumerate(texts):
        _check_text(text, "text" if single else f"texts[{i}]", limits)
    return texts, single


def pairs_of(payload: Any, limits: Limits) -> tuple[list[str], list[str], bool]:
    """The texts and text pairs of a parsed request to a pair model, and whether it was the
    single-pair form.

    Raises:
        BadRequest: 400 for a malformed request (single texts included), 413 for one over
            `limits` (`max_texts` counts pairs).
    """
    if not isinstance(payload, dict) or set(payload) not in PAIR_FIELDS:
        if isinstance(payload, dict) and set(payload) in ({"text"}, {"texts"}):
            missing = "text_pair" if "text" in payload else "text_pairs"
            raise BadRequest(400, f"this model reads text pairs: add {missing}; {PAIR_USAGE}")
        fields = json.dumps(sorted(payload)) if isinstance(payload, dict) else _json_type(payload)
        raise BadRequest(
            400, f"expected text and text_pair, or texts and text_pairs, got {fields}; {PAIR_USAGE}"
        )
    single = "text" in payload
    if single:
        texts, pairs = [payload["text"]], [payload["text_pair"]]
    else:
        texts, pairs = payload["texts"], payload["text_pairs"]
        for name, items in (("texts", texts), ("text_pairs", pairs)):
            if not isinstance(items, list) or not items:
                raise BadRequest(400, f"{name} must be a non-empty array of strings; {PAIR_USAGE}")
        if len(texts) != len(pairs):
            raise BadRequest(
                400,
                f"texts has {len(texts)} items but text_pairs has {len(pairs)}; send one "
                "text_pair per text",
            )
    if len(texts) > limits.max_texts:
        raise BadRequest(
            413, f"{len(texts)} pairs is over --max_texts ({limits.max_texts}); send fewer"
        )
    for i, (text, pair) in enumerate(zip(texts, pairs, strict=True)):
        _check_text(text, "text" if single else f"texts[{i}]", limits)
        _check_text(pair, "text_pair" if single else f"text_pairs[{i}]", limits)
    return texts, pairs, single


def read_request(payload: Any, limits: Limits, pairs: bool) -> tuple[list[str], list | None, bool]:
    """(texts, their pairs or None, single form) of a parsed request to a model that reads
    pairs or single texts; `BadRequest` when it does not fit the model."""
    if pairs:
        return pairs_of(payload, limits)
    if isinstance(payload, dict) and (sent := sorted({"text_pair", "text_pairs"} & set(payload))):
        raise BadRequest(400, f"this model reads single texts, not pairs: drop {sent[0]}; {USAGE}")
    texts, single = texts_of(payload, limits)
    return texts, None, single


def _check_text(text: Any, where: str, limits: Limits) -> None:
    if not isinstance(text, str):
        raise BadRequest(400, f"{where} must be a string, not {_json_type(text)}")
    if not text.strip():
        raise BadRequest(400, f"{where} is empty; send some words")
    if len(text) > limits.max_text_chars:
        raise BadRequest(
            413,
            f"{where} has {len(text)} characters, over --max_text_chars "
            f"({limits.max_text_chars}); send a shorter text",
        )


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


Message = dict[str, Any]  # an ASGI scope or event


class RefuseBadRequests:
    """ASGI middleware: answers a bad `POST /predict` with its 4xx itself; passes a good one on
    with its body replayed and its Content-Type set to JSON. `pairs`: the model reads pairs."""

    def __init__(
        self, app: Callable[..., Awaitable[None]], *, limits: Limits, pairs: bool = False
    ) -> None:
        self.app, self.limits, self.pairs = app, limits, pairs

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != API_PATH:
            return await self.app(scope, receive, send)
        cap = self.limits.max_body_bytes * (2 if self.pairs else 1)  # two texts per pair
        usage = PAIR_USAGE if self.pairs else USAGE
        too_big = BadRequest(413, f"the request body is over {cap:,} bytes; {usage}")
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > cap:  # refused before reading a byte
            return await refuse(send, too_big)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > cap:  # a body without (or lying about) its length: stop reading it
                return await refuse(send, too_big)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            read_request(parse_body(body, usage), self.limits, self.pairs)
        except BadRequest as error:
            return await refuse(send, error)
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
        headers.append((b"content-type", b"application/json"))
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:  # after the body, wait for the client to go away, as the server would
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app({**scope, "headers": headers}, replay, send)


async def refuse(send: Callable[[Message], Awaitable[None]], error: BadRequest) -> None:
    """Answer with the error's status and `{"detail": reason}`."""
    data = json.dumps({"detail": error.reason}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": error.status, "headers": head})
    await send({"type": "http.response.body", "body": data})


class ClassifierAPI(_LitAPI):
    """The LitServe API of one classifier: a request is `(texts, pairs or None, single)` once
    decoded.

    Args:
        source: what `open_classifier` opens, in each worker.
        limits: what one request may hold.
        max_batch_size: requests per LitServe batch, and texts per forward pass.
        batch_timeout: seconds LitServe waits for a batch to fill.
        pairs: the model reads text pairs.
    """

    def __init__(
        self,
        source: str,
        limits: Limits,
        max_batch_size: int,
        batch_timeout: float,
        pairs: bool = False,
    ) -> None:
        super().__init__(
            max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path=API_PATH
        )
        self.source, self.limits, self.pairs = source, limits, pairs

    def setup(self, device: str) -> None:
        self.classifier = open_classifier(self.source, device=device)

    # Unannotated on purpose: LitServe reads the annotation as the request type (JSON by default).
    def decode_request(self, request) -> tuple[list[str], list[str] | None, bool]:
        # Checked by the middleware: never raises here.
        return read_request(request, self.limits, self.pairs)

    def predict(self, x: Any) -> Any:
        # Batched (max_batch_size > 1), LitServe hands over a list of decoded requests.
        requests = x if self.max_batch_size > 1 else [x]
        texts = [text for texts, _, _ in requests for text in texts]
        pairs = [pair for _, pairs, _ in requests for pair in pairs] if self.pairs else None
        results = [  # {"label", "probabilities"}; multi-label: {"labels", "probabilities"}
            {k: v for k, v in r.items() if k not in ("text", "text_pair")}
            for r in self.classifier.predict(texts, pairs, batch_size=self.max_batch_size)
        ]
        answers, start = [], 0
        for texts, _, single in requests:
            answers.append((results[start : start + len(texts)], single))
            start += len(texts)
        return answers if self.max_batch_size > 1 else answers[0]

    def encode_response(self, output: tuple[list[dict[str, Any]], bool]) -> dict[str, Any]:
        predictions, single = output
        return predictions[0] if single else {"predictions": predictions}


def run(args: argparse.Namespace) -> None:
    """Check the flags and the model, then serve until interrupted."""
    require_serve_extra()
    for flag in ("max_batch_size", "workers", "max_texts", "max_text_chars"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag} ({getattr(args, flag)}) must be at least 1")
    if not 0 <= args.batch_timeout < REQUEST_TIMEOUT:
        raise UserError(f"--batch_timeout ({args.batch_timeout}) must be in [0, {REQUEST_TIMEOUT})")
    if not 1024 <= args.port <= 65535:
        raise UserError(f"--port ({args.port}) must be from 1024 to 65535")
    check_port_free(args.host, args.port)
    classifier = open_classifier(args.model)  # one clear line for a bad --model, before forking
    limits = Limits(args.max_texts, args.max_text_chars)
    pairs = classifier.reads_pairs
    info = {"source": args.model, "labels": classifier.labels, "max_length": classifier.max_length}
    info |= {"max_batch_size": args.max_batch_size, "batch_timeout": args.batch_timeout}
    info |= dataclasses.asdict(limits)
    if pairs:  # single-text models' info stays as it was
        info["text_pair_column"] = classifier.text_pair_column
    if classifier.thresholds is not None:  # multi-label
        info["thresholds"] = dict(zip(classifier.labels, classifier.thresholds, strict=True))
    del classifier
    import litserve

    api = ClassifierAPI(args.model, limits, args.max_batch_size, args.batch_timeout, pairs)
    server = litserve.LitServer(
        api,
        accelerator=args.accelerator,
        workers_per_device=args.workers,
        timeout=REQUEST_TIMEOUT,
        model_metadata=info,
        middlewares=[(RefuseBadRequests, {"limits": limits, "pairs": pairs})],
    )
    url = f"http://{'[::1]' if args.host == '::' else args.host}:{args.port}"
    labels = ", ".join(info["labels"])
    reads = "; reads text pairs" if pairs else ""
    sys.stdout.write(
        f"serving {args.model} (labels: {labels}{reads}) at {url}{API_PATH}; ready when "
        f"{url}/health says ok; details at {url}/info\n"
    )
    sys.stdout.flush()
    server.run(host=args.host, port=args.port, log_level="warning", generate_client_file=False)


def check_port_free(host: str, port: int) -> None:
    """Raise a `UserError` when `host:port` cannot be listened on (uvicorn would exit 3)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as error:
            raise UserError(
                f"--port {port}: cannot listen on {host} ({error.strerror}); pick another --port"
            ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--model", required=True, help="a .ckpt, an exported folder or its model(.int8).onnx")
    add("--host", default="127.0.0.1", choices=HOSTS, help="0.0.0.0 or :: to serve other machines")
    add("--port", type=int, default=8000, help="TCP port (1024-65535)")
    add("--max_batch_size", type=int, default=32, help="requests per batch, texts per forward")
    add("--batch_timeout", type=float, default=0.01, help="seconds to wait for a batch to fill")
    add("--workers", type=int, default=1, help="model worker processes per device")
    add("--accelerator", default="auto", choices=("auto", "cpu", "cuda", "mps"), help="device")
    add("--max_texts", type=int, default=256, help="most texts in one request")
    add("--max_text_chars", type=int, default=100_000, help="most characters in one text")
    args = parser.parse_args(argv)
    try:
        run(args)
    except UserError as error:  # bad input: one line, exit 2; anything else is a bug
        return report(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
