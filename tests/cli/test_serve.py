"""`scripts/serve.py` (`tscratch.cli.serve`) and `scripts/load_test.py` against a real server.

One server per module: the real script in a subprocess on a free localhost port, serving a tiny
untrained exported folder with one worker, spoken to over HTTP with `urllib`. Starting it takes
10-20 s on a busy machine, so those tests are slow. The request checks (`texts_of`) and the
command-line errors run in-process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers import REPO, script_env
from tests.test_export import LABELS, TEXTS, checkpoint  # noqa: F401 - `checkpoint` is a fixture
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.serve import HOSTS, bind_address, main
from tscratch.cli.serve_requests import BadRequest, Limits, RefuseBadRequests, texts_of
from tscratch.errors import UserError
from tscratch.export import export

STARTUP_S = 180
GOOD = [text for text in TEXTS if text.strip()]  # the server refuses an empty text
EXTRA = 'error: serving needs the serve extra: pip install "tscratch[serve]"\n'


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory) -> str:  # noqa: F811
    return str(export(checkpoint, tmp_path_factory.mktemp("serve") / "toy"))


@pytest.fixture(scope="module")
def expected(folder) -> dict[str, dict]:
    """What `open_classifier(folder).predict` says of each good text."""
    return {r["text"]: r for r in open_classifier(folder).predict(GOOD)}


SERVE = REPO / "scripts" / "serve.py"


def start(
    folder: str, logs: Path, *flags: str, script: Path = SERVE
) -> tuple[subprocess.Popen, str]:
    """Starts `script --model folder` (batches of 4 requests within 0.05 s, unless `flags` say
    otherwise) in its own session, with its output in `logs`; returns it and its URL once
    healthy."""
    pytest.importorskip("litserve")
    port = free_port()
    command = [sys.executable, str(script), "--model", folder, "--port", str(port),
               "--max_batch_size", "4", "--batch_timeout", "0.05", *flags]  # fmt: skip
    env = script_env(logs / "cache", logs / "home")
    with (logs / "out").open("w") as out, (logs / "err").open("w") as err:
        proc = subprocess.Popen(
            command, cwd=logs, env=env, stdout=out, stderr=err, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, logs)
    except BaseException:
        stop(proc)
        raise
    return proc, url


@contextlib.contextmanager
def serving(folder: str, logs: Path, *flags: str, script: Path = SERVE):
    """Runs `start(folder, logs, *flags, script=script)`; yields its URL and stops it (its whole
    group) on exit."""
    proc, url = start(folder, logs, *flags, script=script)
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    """The URL of `scripts/serve.py` serving `folder` on `--host localhost` (a name, resolved to
    127.0.0.1: issue 40); stopped at the end."""
    logs = tmp_path_factory.mktemp("server_logs")
    with serving(folder, logs, "--host", "localhost") as url:
        port = url.rsplit(":", 1)[1]
        assert f" at http://localhost:{port}/predict; " in (logs / "out").read_text()
        yield url
    assert not (logs / "client.py").exists()  # LitServe's client file is not written


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, logs: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited ({proc.returncode}): {(logs / 'err').read_text()}")
        try:
            if get(url + "/health") == (200, "ok"):
                return
        except OSError:
            pass
        time.sleep(0.25)
    pytest.fail(f"no /health after {STARTUP_S} s: {(logs / 'err').read_text()[-2000:]}")


def stop(proc: subprocess.Popen) -> None:
    """Ctrl+C for a clean shutdown; then SIGKILL to what is left of the server's own group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=20)
    with contextlib.suppress(ProcessLookupError):  # the group the server leads (new session)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def post(url: str, body: object, raw: bool = False) -> tuple[int, dict]:
    """POSTs `body` as JSON (or as the bytes given, `raw`); the status and the decoded answer."""
    data = body if raw else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    request = urllib.request.Request(url + "/predict", data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def assert_answer(answer: dict, want: dict) -> None:
    assert set(answer) == {"label", "probabilities"}
    assert answer["label"] == want["label"]
    assert answer["probabilities"] == pytest.approx(want["probabilities"], abs=1e-5)


# --- the running server -----------------------------------------------------------------------


@pytest.mark.slow
def test_health_and_info(server):
    assert get(server + "/health") == (200, "ok")
    status, body = get(server + "/info")
    model = json.loads(body)["model"]
    assert status == 200
    assert model["labels"] == LABELS and model["max_length"] == 24
    assert model["max_texts"] == 256 and model["max_text_chars"] == 100_000


@pytest.mark.slow
def test_one_text_gets_a_label_and_probabilities(server, expected):
    status, answer = post(server, {"text": GOOD[0]})
    assert status == 200
    assert_answer(answer, expected[GOOD[0]])


@pytest.mark.slow
def test_several_texts_get_predictions_in_order(server, expected):
    status, answer = post(server, {"texts": GOOD})
    assert status == 200 and set(answer) == {"predictions"}
    assert len(answer["predictions"]) == len(GOOD)
    for got, text in zip(answer["predictions"], GOOD, strict=True):
        assert_answer(got, expected[text])


@pytest.mark.slow
def test_concurrent_requests_are_batched_and_all_answered(server, expected):
    bodies = [{"text": t} for t in GOOD] * 6 + [{"texts": GOOD[i:]} for i in range(len(GOOD))] * 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda body: post(server, body), bodies))
    for body, (status, answer) in zip(bodies, answers, strict=True):
        assert status == 200
        if "text" in body:
            assert_answer(answer, expected[body["text"]])
        else:
            for got, text in zip(answer["predictions"], body["texts"], strict=True):
                assert_answer(got, expected[text])


BAD = {
    "invalid JSON": (b'{"text": "eggs"', 400, "the body is not valid JSON"),
    "missing text": ({}, 400, "expected one field, text or texts, got []"),
    "unknown field": ({"text": "eggs", "lang": "en"}, 400, 'got ["lang", "text"]'),
    "not an object": (["eggs"], 400, "got an array"),
    "empty text": ({"text": ""}, 400, "text is empty"),
    "blank text": ({"texts": ["eggs", " \n"]}, 400, "texts[1] is empty"),
    "no texts": ({"texts": []}, 400, "texts must be a non-empty array of strings"),
    "non-string": ({"text": 7}, 400, "text must be a string, not a number"),
    "non-string in texts": ({"texts": ["eggs", None]}, 400, "texts[1] must be a string, not null"),
    "10 MB text": ({"text": "spam " * 2_000_000}, 413, "over --max_text_chars (100000)"),
    "too many texts": ({"texts": ["eggs"] * 257}, 413, "257 texts is over --max_texts (256)"),
    "lone surrogate": (b'{"text": "eggs \\ud800"}', 400, "text is not valid Unicode"),
    "control characters only": ({"text": "\u200b\x00\t"}, 400, "text is empty"),
    "a JSON string": ("eggs", 400, "expected one field, text or texts, got a string"),
    "null": (None, 400, "expected one field, text or texts, got null"),
    "empty body": (b"", 400, "the body is not valid JSON"),
    "texts not an array": ({"texts": "eggs"}, 400, "texts must be a non-empty array of strings"),
    "texts an object": ({"texts": {"a": "eggs"}}, 400, "texts must be a non-empty array"),
    "nested list": ({"texts": [["eggs"]]}, 400, "texts[0] must be a string, not an array"),
    "text a list": ({"text": ["eggs"]}, 400, "text must be a string, not an array"),
    "text an object": ({"text": {"en": "eggs"}}, 400, "text must be a string, not an object"),
    "text a boolean": ({"text": True}, 400, "text must be a string, not a boolean"),
    "huge integer": (b'{"text": 1' + b"0" * 5000 + b"}", 400, "the body is not valid JSON"),
    "huge float": (b'{"text": 1e999}', 400, "text must be a string, not a number"),
    "NaN": (b'{"text": NaN}', 400, "text must be a string, not a number"),
    "deeply nested": (b"[" * 100_000 + b"]" * 100_000, 400, "nests arrays or objects too deeply"),
    "nested in a field": (b'{"texts": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "too deeply"),
    "text and texts": ({"text": "eggs", "texts": ["ham"]}, 400, 'got ["text", "texts"]'),
    "not UTF-8": (b'{"text": "caf\xe9"}', 400, "the body is not valid JSON"),
}


@pytest.mark.slow
@pytest.mark.parametrize("body, status, reason", BAD.values(), ids=list(BAD))
def test_bad_request_gets_a_4xx_and_the_server_goes_on(server, expected, body, status, reason):
    got, answer = post(server, body, raw=isinstance(body, bytes))
    assert got == status
    assert set(answer) == {"detail"} and reason in answer["detail"]
    assert "\n" not in answer["detail"]
    assert_answer(post(server, {"text": GOOD[1]})[1], expected[GOOD[1]])


@pytest.mark.slow
def test_a_form_content_type_is_read_as_json(server, expected):
    data = json.dumps({"text": GOOD[2]}).encode()
    request = urllib.request.Request(server + "/predict", data=data)  # form-urlencoded, as curl -d
    with urllib.request.urlopen(request, timeout=30) as response:
        assert_answer(json.loads(response.read()), expected[GOOD[2]])


@pytest.mark.slow
def test_load_test_reports_each_level(server, tmp_path):
    env = script_env(tmp_path / "cache", tmp_path)
    flags = ["--requests", "6", "--concurrency", "1", "3", "--seconds", "30", "--json"]
    command = [sys.executable, str(REPO / "scripts" / "load_test.py"), "--url", server, *flags]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    levels = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(s["clients"], s["requests"], s["errors"]) for s in levels] == [(1, 6, 0), (3, 6, 0)]
    assert all(0 < s["p50_ms"] <= s["p99_ms"] for s in levels)
    assert all("bad" not in s for s in levels)  # as before --bad_fraction


@pytest.mark.slow
def test_load_test_with_bad_requests_fails_no_good_one(server, tmp_path):
    env = script_env(tmp_path / "cache", tmp_path)
    flags = ["--requests", "44", "--concurrency", "4", "--bad_fraction", "0.25", "--json"]
    command = [sys.executable, str(REPO / "scripts" / "load_test.py"), "--url", server, *flags]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (level,) = [json.loads(line) for line in proc.stdout.splitlines()]
    # 11 bad requests: each of the 11 kinds once, each refused with a 4xx; 33 good, all answered.
    assert (level["requests"], level["errors"], level["bad"], level["bad_not_refused"]) == (
        33, 0, 11, 0
    )  # fmt: skip


def test_load_test_bad_fraction_is_a_share():
    spec = importlib.util.spec_from_file_location("load_test", REPO / "scripts" / "load_test.py")
    load_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load_test)
    assert [load_test.is_bad(i, 0.25) for i in range(8)] == [False, False, False, True] * 2
    flags = {"requests": 1, "seconds": 1.0, "texts_per_request": 1, "concurrency": [1]}
    for fraction in (-0.1, 1.0):
        args = argparse.Namespace(**flags, bad_fraction=fraction)
        with pytest.raises(
            UserError, match=rf"^--bad_fraction \({fraction}\) must be in \[0, 1\)$"
        ):
            load_test.check_flags(args)


# --- in-process: request checks and command-line errors -----------------------------------------


def test_texts_of_reads_both_forms():
    limits = Limits(max_texts=2, max_text_chars=5)
    assert texts_of({"text": "eggs"}, limits) == (["eggs"], True)
    assert texts_of({"texts": ["ham", "eggs"]}, limits) == (["ham", "eggs"], False)
    with pytest.raises(BadRequest, match=r"texts\[0\] has 6 characters, over --max_text_chars"):
        texts_of({"texts": ["bacon!"]}, limits)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ab\ud800c", r"^texts\[1\] is not valid Unicode \(a lone surrogate U\+D800 at "
                      r"character 2\); send UTF-8 text$"),
        ("\udfff", r"^texts\[1\] is not valid Unicode \(a lone surrogate U\+DFFF at character 0\)"),
        (" \u200b\x00\t", r"^texts\[1\] is empty \(nothing but spaces or control characters\); "
                           r"send some words$"),
    ],
)  # fmt: skip
def test_texts_a_model_cannot_take_are_refused_where_the_request_is_read(text, message):
    # Refused here, a bad text never reaches a batch, where it would fail the good texts in it.
    limits = Limits(max_texts=4, max_text_chars=50)
    with pytest.raises(BadRequest, match=message):
        texts_of({"texts": ["fine", text]}, limits)
    paired = json.loads('{"text": "caf\\u00e9 \\ud83d\\ude00"}')  # a surrogate pair is fine
    assert texts_of(paired, limits) == (["café 😀"], True)


def _through_middleware(chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> tuple:
    """Run one POST /predict through `RefuseBadRequests` in process: (status, body, bytes read,
    whether the app behind it was reached)."""
    limits = Limits(max_texts=1, max_text_chars=5)  # a cap of 65,572 bytes
    reached, sent, read = [], [], []

    async def app(scope, receive, send):
        reached.append(True)

    async def receive():
        read.append(chunks[len(read)])
        return {"type": "http.request", "body": read[-1], "more_body": len(read) < len(chunks)}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/predict", "headers": headers}
    asyncio.run(RefuseBadRequests(app, limits=limits)(scope, receive, send))
    status = sent[0]["status"] if sent else None
    body = json.loads(sent[1]["body"]) if sent else None
    return status, body, len(read), bool(reached)


def test_an_oversized_body_is_refused_without_reading_it_all():
    assert Limits(max_texts=1, max_text_chars=5).max_body_bytes == 65_572
    # Declared too long: refused before any byte is read.
    status, body, read, reached = _through_middleware([b"x"], [(b"content-length", b"70000")])
    assert (status, read, reached) == (413, 0, False)
    assert body["detail"].startswith("the request body is over 65,572 bytes;")
    # No length given: reading stops at the chunk that passes the cap.
    status, _, read, reached = _through_middleware([b"x" * 40_000] * 5, [])
    assert (status, read, reached) == (413, 2, False)
    # A good body under the cap reaches the app.
    status, _, _, reached = _through_middleware([b'{"text": "eggs"}'], [])
    assert (status, reached) == (None, True)


@pytest.mark.slow  # the script's imports take a few seconds
def test_load_test_refuses_a_remote_host(tmp_path):
    command = [sys.executable, str(REPO / "scripts" / "load_test.py"), "--url", "http://10.1.2.3"]
    env = script_env(tmp_path / "cache", tmp_path)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --url http://10.1.2.3: the load test only targets")


def test_a_host_name_is_resolved_to_an_address_litserve_takes():
    assert bind_address("localhost") == "127.0.0.1"
    assert [bind_address(host) for host in HOSTS] == list(HOSTS)


def test_missing_litserve_is_one_line(monkeypatch, capsys, folder):
    monkeypatch.setitem(sys.modules, "litserve", None)  # `import litserve` raises ImportError
    assert main(["--model", folder]) == 2
    assert capsys.readouterr().err == EXTRA


@pytest.mark.parametrize(
    "flags, line",
    [
        (["--max_batch_size", "0"], "--max_batch_size (0) must be at least 1"),
        (["--max_texts", "0"], "--max_texts (0) must be at least 1"),
        (["--batch_timeout", "-1"], "--batch_timeout (-1.0) must be in [0, 30.0)"),
        (["--port", "80"], "--port (80) must be from 1024 to 65535"),
        (["--host", "no-such-host.invalid"], "--host no-such-host.invalid: cannot resolve it ("),
        (
            ["--host", "::1"],
            "--host ::1: LitServe listens only on 127.0.0.1 (localhost: this "
            "machine), 0.0.0.0 or :: (every interface, to serve other machines): "
            "pass one of those",
        ),
    ],
)
def test_bad_flags_are_one_line(capsys, folder, flags, line):
    pytest.importorskip("litserve")
    assert main(["--model", folder, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {line}") and err.count("\n") == 1, err


def test_a_busy_port_is_one_line(capsys, folder):
    pytest.importorskip("litserve")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["--model", folder, "--port", str(port)]) == 2
    line = f"error: --port {port}: cannot listen on 127.0.0.1 (Address already in use); pick"
    assert capsys.readouterr().err.startswith(line)


def test_missing_model_is_one_line(capsys, tmp_path):
    pytest.importorskip("litserve")
    missing = tmp_path / "nope.ckpt"
    assert main(["--model", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {missing}: no such file") and err.count("\n") == 1
