"""What a `POST /predict` to `tscratch serve` may hold, and where it is checked.

`read_request` turns a JSON payload into texts (and pairs, for a model of text pairs) or raises
`BadRequest` with an HTTP status and a one-line reason, cheaply: the counts and lengths of all
texts before any character is looked at, and the characters in C, not a Python loop.

`RefuseBadRequests`, an ASGI middleware in each HTTP process, reads the body as it arrives
(refusing one over the body cap, `Limits.max_body_bytes`, unread or as soon as it passes it). A
body of up to `INLINE_BYTES` is parsed and checked there, a few milliseconds at most, and a bad
one answered with `{"detail": reason}` before it reaches LitServe's batched loop, where an error
in `decode_request` would fail every request of the batch (see `tscratch.cli.serve`). A larger
body is never parsed in the HTTP process, whose event loop also answers `/health`: a JSON parse
holds the interpreter for its whole length (longer the larger the body), and LitServe would
parse it a second time and copy it through its queues. It is written, chunk by chunk as it
arrives, to a file of the server's private spool folder (`Spool`), and LitServe gets only its
name; the model worker reads, parses and checks it (`read_spooled`), and a bad one gets its 4xx
from there, in its own `Failure`. So whatever a client sends, the HTTP process spends
microseconds per chunk.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import secrets
import sys
import time
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

API_PATH = "/predict"
USAGE = 'send {"text": "..."} or {"texts": ["...", ...]}'
PAIR_USAGE = 'send {"text": "...", "text_pair": "..."} or {"texts": [...], "text_pairs": [...]}'
PAIR_FIELDS = ({"text", "text_pair"}, {"texts", "text_pairs"})
_JSON_TYPES = {bool: "a boolean", int: "a number", float: "a number", type(None): "null"}
_JSON_TYPES |= {str: "a string", dict: "an object", list: "an array"}


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
    except ValueError:  # JSONDecodeError, UnicodeDecodeError and over-long integers alike
        raise BadRequest(400, f"the body is not valid JSON; {usage}") from None
    except RecursionError:  # arrays or objects nested thousands deep
        raise BadRequest(400, f"the body nests arrays or objects too deeply; {usage}") from None


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
    _check_texts([(text, "text" if single else f"texts[{i}]") for i, text in enumerate(texts)],
                 limits)  # fmt: skip
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
    named = []
    for i, (text, pair) in enumerate(zip(texts, pairs, strict=True)):
        named += [(text, "text" if single else f"texts[{i}]")]
        named += [(pair, "text_pair" if single else f"text_pairs[{i}]")]
    _check_texts(named, limits)
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


def _check_texts(named: list[tuple[Any, str]], limits: Limits) -> None:
    """Refuse the first bad text of `named` ((text, where) pairs): types and lengths of all of
    them first, so that no character of an over-long request is looked at; then each text's
    characters, in C (a regex and a table lookup), never a Python loop over them."""
    for text, where in named:
        if not isinstance(text, str):
            raise BadRequest(400, f"{where} must be a string, not {_json_type(text)}")
        if len(text) > limits.max_text_chars:
            raise BadRequest(
                413,
                f"{where} has {len(text)} characters, over --max_text_chars "
                f"({limits.max_text_chars}); send a shorter text",
            )
    for text, where in named:
        _check_characters(text, where)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # JSON may escape one; no tokenizer takes it
_PLAIN_VISIBLE = re.compile(r"[!-~]")  # an ASCII letter, digit or sign: the text is not empty


def _check_characters(text: str, where: str) -> None:
    if lone := _LONE_SURROGATE.search(text):
        raise BadRequest(
            400, f"{where} is not valid Unicode (a lone surrogate U+{ord(lone[0]):04X} at "
            f"character {lone.start()}); send UTF-8 text",
        )  # fmt: skip
    if _PLAIN_VISIBLE.search(text):  # nearly every text, at its first few characters
        return
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    if not _visible_table()[codes].any():
        raise BadRequest(400, f"{where} is empty (nothing but spaces or control characters); "
                         "send some words")  # fmt: skip


@functools.cache
def _visible_table() -> np.ndarray:
    """`table[code]`: the character is neither whitespace nor of Unicode category C (control,
    format, surrogate, private use, unassigned), which tokenizers drop. Built once (0.15 s)."""
    visible = (  # the text is empty when the tokenizer keeps none of its characters
        unicodedata.category(c)[0] != "C" and not c.isspace()
        for c in map(chr, range(sys.maxunicode + 1))
    )
    return np.fromiter(visible, dtype=bool, count=sys.maxunicode + 1)


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


Message = dict[str, Any]  # an ASGI scope or event


INLINE_BYTES = 1 << 20
"""The largest body checked in the HTTP process (its parse and checks take a few ms); a larger
one goes to the model worker through the spool (see the module doc)."""
SPOOLED = "tscratch_spooled"
"""The one field of the body LitServe gets for a spooled request: the file's name. A client
cannot send it: every body is checked (which refuses the field) or spooled."""
_SPOOL_NAME = re.compile(r"[0-9a-f]{32}\.json")
SWEEP_AFTER_S = 300.0
"""A spool file this old belongs to a request that timed out in LitServe's queue (after 30 s),
which the worker never decodes: the next spooled read removes it."""


@dataclasses.dataclass(frozen=True)
class Spool:
    """The server's private folder (mode 0700) where the HTTP processes leave large request
    bodies for the model worker, one file each, read and removed by the worker."""

    folder: str

    def create(self) -> tuple[str, int]:
        """A new file's name and its descriptor, open for writing (owner only)."""
        name = f"{secrets.token_hex(16)}.json"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        return name, os.open(os.path.join(self.folder, name), flags, 0o600)

    def remove(self, name: str) -> None:
        Path(self.folder, name).unlink(missing_ok=True)

    def sweep(self, older_than: float) -> None:
        """Remove the files left more than ``older_than`` seconds ago: those of requests that
        timed out in LitServe's queue, which the worker never decodes."""
        now = time.time()
        for file in Path(self.folder).iterdir():
            with contextlib.suppress(OSError):  # another worker's sweep was first
                if now - file.stat().st_mtime > older_than:
                    file.unlink()


def read_spooled(spool: Spool, payload: Any, usage: str = USAGE) -> Any:
    """In the model worker: the body a spooled request's `payload` names, read from the spool
    (the file removed) and parsed (`BadRequest` when it is not JSON); a payload of another shape
    is returned as it is."""
    if not (isinstance(payload, dict) and set(payload) == {SPOOLED}):
        return payload
    name = payload[SPOOLED]
    if not (isinstance(name, str) and _SPOOL_NAME.fullmatch(name)):
        raise ValueError(f"a spooled request names no spool file ({name!r})")
    path = Path(spool.folder, name)
    try:
        body = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
        spool.sweep(older_than=SWEEP_AFTER_S)
    return parse_body(body, usage)


class RefuseBadRequests:
    """ASGI middleware: answers a bad `POST /predict` with its 4xx itself; passes a good one on
    with its body replayed and its Content-Type set to JSON, or a large one as the name of the
    file it was spooled to (see the module doc). `pairs`: the model reads pairs; `spool`: where
    large bodies go (None: every body is checked here)."""

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        *,
        limits: Limits,
        pairs: bool = False,
        spool: Spool | None = None,
    ) -> None:
        self.app, self.limits, self.pairs, self.spool = app, limits, pairs, spool
        _visible_table()  # built at start-up, not in the first request that needs it

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
        spooled: tuple[str, int] | None = None  # (name, descriptor) once the body is large
        read = False
        try:
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > cap:  # a body without (or lying about) its length: stop reading it
                    return await refuse(send, too_big)
                try:
                    if spooled is None and self.spool is not None and size > INLINE_BYTES:
                        spooled = self.spool.create()
                        _write_all(spooled[1], b"".join(chunks))
                        chunks = []
                    if spooled is not None:
                        _write_all(spooled[1], chunk)  # page cache: microseconds per chunk
                    else:
                        chunks.append(chunk)
                except OSError as error:  # the spool's disk is full
                    return await refuse(send, no_room(error))
                more = message.get("more_body", False)
            read = True
        finally:
            if spooled is not None and not read:  # refused, gone or failed: nobody will read it
                with contextlib.suppress(OSError):
                    os.close(spooled[1])
                self.spool.remove(spooled[0])  # type: ignore[union-attr]
        if spooled is not None:
            os.close(spooled[1])
            body = json.dumps({SPOOLED: spooled[0]}).encode()  # parsed by the model worker
        else:
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


def no_room(error: OSError) -> BadRequest:
    """507 for a body the server has no room to hold (its spool folder's disk is full)."""
    return BadRequest(
        507, f"the server has no room for a body this large now ({error.strerror}); send a "
        "smaller request, or retry later",
    )  # fmt: skip


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


async def refuse(send: Callable[[Message], Awaitable[None]], error: BadRequest) -> None:
    """Answer with the error's status and `{"detail": reason}`."""
    data = json.dumps({"detail": error.reason}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(data))]
    await send({"type": "http.response.start", "status": error.status, "headers": head})
    await send({"type": "http.response.body", "body": data})
