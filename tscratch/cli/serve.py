"""Serve a classifier over HTTP with LitServe: `tscratch serve --model DIR|CKPT`.

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

A small ASGI middleware (`tscratch.cli.serve_requests`) answers bad requests in the HTTP
process, with `{"detail": "<one line>"}`: 400 for invalid JSON, a missing, empty or non-string
text or an unknown field (pairs sent to a single-text model and single texts sent to a pair
model included); 413 for a text over `--max_text_chars` or more than `--max_texts` texts (or
pairs). Not `HTTPException` in `decode_request`: in LitServe's batched loop that fails every
request of the batch, good ones too. The body is read as JSON whatever its Content-Type says
(`curl -d` sends form-urlencoded). A body over 1 MiB is not parsed in the HTTP process, whose
event loop answers `/health` too: it goes to the worker through a spool file, and the worker
parses and checks it and answers a bad one with the same status and detail (a `Failure`).

The last line of defence: when the model raises on a batch anyway, each request of it is run
alone, so the good ones get their answers and a failing one its own error: `encode_response`
returns a `JSONResponse` with the status and `{"detail": "<one line>"}` (400 for a `UserError`,
500 for any other error, logged with its traceback by the worker), which LitServe hands to the
client as it is. SIGTERM and SIGINT stop every process the server started
(`tscratch.cli.serve_stop`); a SIGKILL of the server's process ends them too, each bound to its
parent by Linux's parent-death signal (`tscratch.cli.serve_processes`).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import socket
import sys
from typing import Any

from tscratch.cli.parsing import ArgumentParser
from tscratch.cli.serve_processes import bind_forked_children, bind_worker, spool_folder
from tscratch.cli.serve_requests import (
    API_PATH,
    PAIR_USAGE,
    USAGE,
    BadRequest,
    Limits,
    RefuseBadRequests,
    Spool,
    read_request,
    read_spooled,
)
from tscratch.cli.serve_stop import ignore_interrupts, stopped_by_signals
from tscratch.errors import UserError, one_line, run_command

try:  # the serve extra; `require_serve_extra` turns its absence into one line
    from fastapi.responses import JSONResponse
    from litserve import LitAPI as _LitAPI
except ImportError:  # pragma: no cover - the class is then never instantiated
    _LitAPI = object  # type: ignore[assignment,misc]

HOSTS = ("127.0.0.1", "0.0.0.0", "::")  # the hosts LitServe binds to
REQUEST_TIMEOUT = 30.0  # seconds a request may wait for the model before a 504
Request = tuple[list[str], list[str] | None, bool]  # texts, their pairs or None, single form
Answer = tuple[list[dict[str, Any]], bool]  # one prediction per text, single form
log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Failure:
    """What a request gets in place of its answer: an HTTP status and a one-line detail."""

    status: int
    detail: str

    @classmethod
    def of(cls, error: Exception, texts: int) -> Failure:
        """400 for a request the model refuses (`BadRequest`, `UserError`); 500, logged with
        its traceback, for any other error."""
        if isinstance(error, BadRequest):
            return cls(error.status, error.reason)
        if isinstance(error, UserError):
            return cls(400, one_line(error))
        log.error("the model failed on a request (%d texts)", texts, exc_info=error)
        return cls(500, f"the model failed on this request ({type(error).__name__}: "
                   f"{one_line(error)}); the server goes on")  # fmt: skip


def require_serve_extra() -> None:
    """Raise a `UserError` naming the extra to install when LitServe is missing."""
    try:
        import litserve  # noqa: F401
    except ImportError:
        raise UserError('serving needs the serve extra: pip install "tscratch[serve]"') from None


class ClassifierAPI(_LitAPI):
    """The LitServe API of one classifier: a request is `(texts, pairs or None, single)` once
    decoded.

    Args:
        source: what `open_classifier` opens, in each worker.
        limits: what one request may hold.
        max_batch_size: requests per LitServe batch, and texts per forward pass.
        batch_timeout: seconds LitServe waits for a batch to fill.
        pairs: the model reads text pairs.
        spool: where the HTTP processes leave large bodies, which the worker reads and checks.
        parent: the server's process, which the worker dies with (`serve_processes`).
    """

    min_confidence: float | None = None
    """Below this top probability a text's label is None (JSON null); set by `serve`."""

    def __init__(
        self,
        source: str,
        limits: Limits,
        max_batch_size: int,
        batch_timeout: float,
        pairs: bool = False,
        spool: Spool | None = None,
        parent: int | None = None,
    ) -> None:
        super().__init__(
            max_batch_size=max_batch_size, batch_timeout=batch_timeout, api_path=API_PATH
        )
        self.source, self.limits, self.pairs = source, limits, pairs
        self.spool, self.parent = spool, parent

    def setup(self, device: str) -> None:
        bind_worker(self.parent)  # a SIGKILL of the server's process ends this one too
        ignore_interrupts()  # in a worker: the server's process stops it (`serve_stop`)
        from tscratch.cli.classifiers import open_classifier  # torch: after the flags parse

        self.classifier = open_classifier(self.source, device=device)

    # Unannotated on purpose: LitServe reads the annotation as the request type (JSON by default).
    def decode_request(self, request) -> Request | Failure:
        # Checked by the middleware already, or spooled (a large body) for this worker to parse
        # and check; an error here must not fail the batch either.
        try:
            if self.spool is not None:
                request = read_spooled(self.spool, request, PAIR_USAGE if self.pairs else USAGE)
            return read_request(request, self.limits, self.pairs)
        except Exception as error:
            return Failure.of(error, 0)

    def predict(self, x: Any) -> Any:
        # Batched (max_batch_size > 1), LitServe hands over a list of decoded requests.
        requests = x if self.max_batch_size > 1 else [x]
        answers = self.answer_all(requests)
        return answers if self.max_batch_size > 1 else answers[0]

    def answer_all(self, requests: list[Request | Failure]) -> list[Answer | Failure]:
        """Each request's answer: the good ones in one go, or, when that raises, each alone."""
        good = [r for r in requests if not isinstance(r, Failure)]
        answers: list[Answer | Failure] | None
        try:
            answers = list(self.answer(good))
        except Exception:  # one bad request must not fail the others: each is run on its own
            answers = None
        if answers is None:  # outside the except, so that each log shows its own error
            answers = [self.answer_alone(request) for request in good]
        answered = iter(answers)
        return [r if isinstance(r, Failure) else next(answered) for r in requests]

    def answer_alone(self, request: Request) -> Answer | Failure:
        try:
            return self.answer([request])[0]
        except Exception as error:
            return Failure.of(error, len(request[0]))

    def answer(self, requests: list[Request]) -> list[Answer]:
        """The answers of `requests`, their texts run together in chunks of `max_batch_size`."""
        texts = [text for texts, _, _ in requests for text in texts]
        pairs = [pair for _, pairs, _ in requests for pair in pairs] if self.pairs else None
        results = [  # {"label", "probabilities"}; multi-label: {"labels", "probabilities"}
            {k: v for k, v in r.items() if k not in ("text", "text_pair")}
            for r in self.classifier.predict(
                texts, pairs, batch_size=self.max_batch_size, min_confidence=self.min_confidence
            )
        ] if texts else []  # fmt: skip
        answers, start = [], 0
        for texts, _, single in requests:
            answers.append((results[start : start + len(texts)], single))
            start += len(texts)
        return answers

    # A `JSONResponse` passes through LitServe and FastAPI to the client as it is.
    def encode_response(self, output: Answer | Failure) -> dict[str, Any]:
        if isinstance(output, Failure):
            return JSONResponse({"detail": output.detail}, status_code=output.status)
        predictions, single = output
        return predictions[0] if single else {"predictions": predictions}


def server_info(args: argparse.Namespace, classifier: Any, limits: Limits) -> dict[str, Any]:
    """What `GET /info` shows: the model's labels and length, the server's limits, and what
    changes an answer (a temperature, long texts read in windows, ``--min_confidence``,
    multi-label thresholds, pairs)."""
    info = {"source": args.model, "labels": classifier.labels, "max_length": classifier.max_length}
    info |= {"max_batch_size": args.max_batch_size, "batch_timeout": args.batch_timeout}
    info |= dataclasses.asdict(limits)
    if classifier.reads_pairs:  # single-text models' info stays as it was
        info["text_pair_column"] = classifier.text_pair_column
    if classifier.temperature != 1.0:  # temperature scaling (models fitted before: none)
        info["temperature"] = classifier.temperature
    if classifier.long_text == "chunk":  # trained on windows: long texts read whole
        info |= {"long_text": classifier.long_text, "stride": classifier.stride}
    if args.min_confidence is not None:
        info["min_confidence"] = args.min_confidence
    if classifier.thresholds is not None:  # multi-label
        info["thresholds"] = dict(zip(classifier.labels, classifier.thresholds, strict=True))
    return info


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
    shown, args.host = args.host, bind_address(args.host)
    check_port_free(args.host, args.port)
    from tscratch.cli.classifiers import open_classifier  # torch: after the flags parse
    from tscratch.export.classifier import check_min_confidence

    check_min_confidence(args.min_confidence, "--min_confidence")
    classifier = open_classifier(args.model)  # one clear line for a bad --model, before forking
    if args.min_confidence is not None and classifier.multi_label:
        raise UserError(
            "--min_confidence applies to single-label models; this multi-label model's labels "
            "are decided by its per-label thresholds (tuned on validation)"
        )
    limits = Limits(args.max_texts, args.max_text_chars)
    pairs = classifier.reads_pairs
    info = server_info(args, classifier, limits)
    del classifier
    with spool_folder() as folder:
        serve(args, info, limits, pairs, Spool(folder), shown)


def serve(
    args: argparse.Namespace, info: dict, limits: Limits, pairs: bool, spool: Spool, shown: str
) -> None:
    """Start LitServe's processes, each bound to die with this one (`serve_processes`), and
    serve until interrupted."""
    import litserve

    bind_forked_children()
    api = ClassifierAPI(
        args.model, limits, args.max_batch_size, args.batch_timeout, pairs, spool, os.getpid()
    )
    api.min_confidence = args.min_confidence
    server = litserve.LitServer(
        api,
        accelerator=args.accelerator,
        workers_per_device=args.workers,
        timeout=REQUEST_TIMEOUT,
        model_metadata=info,
        middlewares=[(RefuseBadRequests, {"limits": limits, "pairs": pairs, "spool": spool})],
    )
    url = f"http://{'[::1]' if args.host == '::' else shown}:{args.port}"  # as --host names it
    labels = ", ".join(info["labels"])
    reads = "; reads text pairs" if pairs else ""
    sys.stdout.write(
        f"serving {args.model} (labels: {labels}{reads}) at {url}{API_PATH}; ready when "
        f"{url}/health says ok; details at {url}/info\n"
    )
    sys.stdout.flush()
    server.run(host=args.host, port=args.port, log_level="warning", generate_client_file=False)


def bind_address(host: str) -> str:
    """The address of `HOSTS` that `--host` names: one of them, or a name that resolves to
    one (`localhost`: 127.0.0.1); one line for a name that does not resolve, or that names
    an address LitServe cannot listen on alone (it takes only these three)."""
    if host in HOSTS:
        return host
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:  # socket.gaierror is an OSError
        reason = getattr(error, "strerror", None) or str(error)
        raise UserError(
            f"--host {host}: cannot resolve it ({reason}); pass localhost or 127.0.0.1 (this "
            "machine), or 0.0.0.0 or :: (every interface, to serve other machines)"
        ) from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    for address in HOSTS:
        if address in addresses:
            return address
    named = f"--host {host}" if addresses == [host] else f"--host {host} ({', '.join(addresses)})"
    raise UserError(
        f"{named}: LitServe listens only on 127.0.0.1 "
        "(localhost: this machine), 0.0.0.0 or :: (every interface, to serve other machines): "
        "pass one of those"
    )


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
    parser = ArgumentParser(
        description=__doc__.splitlines()[0],
        renamed={"--ckpt_path": "--model", "--accelerator": "--trainer.accelerator",
                 "--device": "--trainer.accelerator"},
    )  # fmt: skip
    add = parser.add_argument
    add("--model", required=True, help="a .ckpt, an exported folder or its model(.int8).onnx")
    add("--host", default="127.0.0.1", help="a name or address: 127.0.0.1 or localhost (this "
        "machine), 0.0.0.0 or :: (every interface, to serve other machines)")  # fmt: skip
    add("--port", type=int, default=8000, help="TCP port (1024-65535)")
    add("--max_batch_size", type=int, default=32, help="requests per batch, texts per forward")
    add("--batch_timeout", type=float, default=0.01, help="seconds to wait for a batch to fill")
    add("--workers", type=int, default=1, help="model worker processes per device")
    add("--trainer.accelerator", dest="accelerator", default="auto",
        choices=("auto", "cpu", "cuda", "mps"), help="where the model runs")  # fmt: skip
    add("--max_texts", type=int, default=256, help="most texts in one request")
    add("--max_text_chars", type=int, default=100_000, help="most characters in one text")
    add("--min_confidence", type=float, metavar="P", help="a probability in [0, 1): a text whose "
        "top probability is below P gets label null, its probabilities still given")  # fmt: skip
    return run_command(run_until_stopped, parser.parse_args(argv))


def run_until_stopped(args: argparse.Namespace) -> None:
    """`run`, ended quietly by SIGTERM or Ctrl-C (`stopped_by_signals`)."""
    with stopped_by_signals():
        run(args)


if __name__ == "__main__":
    sys.exit(main())
