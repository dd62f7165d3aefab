"""`scripts/serve.py` when things go wrong: a request the model fails on inside a batch, and the
signals that stop the server.

The slow tests each start their own real server on the tiny exported folder of
`tests/cli/test_serve.py` and speak to it over HTTP. Nothing valid fails the model on its own,
so the batch test serves through `FAULTY`, a copy of `scripts/serve.py` whose model raises on
texts that name a fault: multiprocessing's spawn runs the main script again in the inference
worker, so the patch is there too. The fallback and the signal handling also run in process.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.test_serve import (  # noqa: F401 - `checkpoint`, `folder` and `expected` are fixtures
    GOOD,
    assert_answer,
    checkpoint,
    expected,
    folder,
    post,
    serving,
    start,
    stop,
)
from tscratch.cli.serve import ClassifierAPI
from tscratch.cli.serve_requests import Limits
from tscratch.cli.serve_stop import stopped_by_signals
from tscratch.errors import UserError

STOP_S = 10  # a stopped server's processes are gone and its port is free within this

FAULTY = '''"""scripts/serve.py with a model that raises on a text holding BUG or REFUSED."""

import sys

from tscratch.cli import run
from tscratch.errors import UserError
from tscratch.export.classifier import ExportedClassifier

logits = ExportedClassifier.logits


def faulty_logits(self, texts, *args, **kwargs):
    if any("BUG" in text for text in texts):
        raise RuntimeError("a bug in the model\\non two lines")
    if any("REFUSED" in text for text in texts):
        raise UserError("the model refuses this text")
    return logits(self, texts, *args, **kwargs)


ExportedClassifier.logits = faulty_logits

if __name__ == "__main__":
    sys.exit(run("serve", sys.argv[1:]))
'''
FAILURES = {  # a request the model fails on: its status and detail
    "BUG": (500, "the model failed on this request (RuntimeError: a bug in the model on two "
                 "lines); the server goes on"),
    "REFUSED": (400, "the model refuses this text"),
}  # fmt: skip


@pytest.mark.slow
def test_a_request_the_model_fails_on_fails_alone_in_its_batch(
    folder,  # noqa: F811
    expected,  # noqa: F811
    tmp_path,
):
    script = tmp_path / "faulty_serve.py"
    script.write_text(FAULTY)
    # Every batch holds 4 requests: 3 good ones and one the model fails on, sent at once.
    rounds = [
        [{"text": GOOD[0]}, {"texts": GOOD}, {"text": f"{GOOD[2]} BUG"}, {"text": GOOD[3]}],
        [{"text": "REFUSED"}, {"text": GOOD[1]}, {"texts": GOOD[2:]}, {"text": GOOD[0]}],
        [{"texts": GOOD[:2]}, {"text": GOOD[3]}, {"text": GOOD[1]}, {"texts": [GOOD[0], "BUG"]}],
    ]  # fmt: skip
    with (
        serving(folder, tmp_path, "--batch_timeout", "1.0", script=script) as url,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        answers = [list(pool.map(lambda body: post(url, body), bodies)) for bodies in rounds]
    for bodies, got in zip(rounds, answers, strict=True):
        for body, (status, answer) in zip(bodies, got, strict=True):
            texts = [body["text"]] if "text" in body else body["texts"]
            fault = next((f for f in FAILURES if any(f in text for text in texts)), None)
            if fault:
                assert (status, answer) == (FAILURES[fault][0], {"detail": FAILURES[fault][1]})
            elif "text" in body:
                assert status == 200
                assert_answer(answer, expected[body["text"]])
            else:
                assert status == 200 and len(answer["predictions"]) == len(texts)
                for prediction, text in zip(answer["predictions"], texts, strict=True):
                    assert_answer(prediction, expected[text])
    err = (tmp_path / "err").read_text()
    assert "RuntimeError: a bug in the model" in err  # the worker logs the bug's traceback


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group `pgid`, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
        except (OSError, ValueError):  # not a process, or gone
            continue
        state, _, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def port_is_free(port: int) -> bool:
    """No one accepts a connection on 127.0.0.1:`port`, and it can be listened on again."""
    with socket.socket() as client:
        if client.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize(
    "signum, whole_group",
    [(signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["SIGTERM to the server", "Ctrl-C: SIGINT to its group"],
)
def test_a_stop_signal_ends_every_process_and_frees_the_port(
    folder,  # noqa: F811
    tmp_path,
    signum,
    whole_group,
):
    proc, url = start(folder, tmp_path)
    port = int(url.rsplit(":", 1)[1])
    try:
        # The workers it started: the multiprocessing manager, the inference worker, uvicorn.
        assert len(set(group_members(proc.pid)) - {proc.pid}) >= 3
        if whole_group:  # what a terminal does on Ctrl-C
            os.killpg(proc.pid, signum)
        else:  # what systemd, Docker and Kubernetes do
            proc.send_signal(signum)
        proc.wait(timeout=STOP_S)
        deadline = time.monotonic() + STOP_S
        while (group_members(proc.pid) or not port_is_free(port)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left, free = group_members(proc.pid), port_is_free(port)
    finally:
        stop(proc)
    assert left == [] and free
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert "Traceback" not in err and "Traceback" not in out
    assert proc.returncode == 0
    assert out.endswith(f"stopped on {signal.Signals(signum).name}\n")


# --- in-process: the fallback and the stop, without a server ------------------------------------


class FlakyClassifier:
    """Answers each text with its length as label; raises on a text holding BUG or REFUSED."""

    def predict(self, texts, pairs=None, batch_size=32, min_confidence=None):
        if any("BUG" in text for text in texts):
            raise RuntimeError("a bug in the model\non two lines")
        if any("REFUSED" in text for text in texts):
            raise UserError("the model refuses this text")
        return [{"text": t, "label": str(len(t)), "probabilities": {"a": 1.0}} for t in texts]


def test_a_failing_batch_is_answered_request_by_request(caplog):
    pytest.importorskip("litserve")
    api = ClassifierAPI("unused", Limits(max_texts=4, max_text_chars=50), 8, 0.01)
    api.classifier = FlakyClassifier()
    bodies = [{"text": "ham"}, {"texts": ["BUG", "eggs"]}, {"text": ""}, {"texts": ["spam", "a"]},
              {"text": "REFUSED"}]  # fmt: skip
    answers = api.predict([api.decode_request(body) for body in bodies])
    responses = [api.encode_response(answer) for answer in answers]
    sure = {"a": 1.0}
    assert responses[0] == {"label": "3", "probabilities": sure}
    assert responses[3] == {"predictions": [{"label": "4", "probabilities": sure},
                                            {"label": "1", "probabilities": sure}]}  # fmt: skip
    failed = {i: (responses[i].status_code, json.loads(responses[i].body)) for i in (1, 2, 4)}
    assert failed == {
        1: (500, {"detail": FAILURES["BUG"][1]}),
        2: (400, {"detail": "text is empty (nothing but spaces or control characters); send "
                            "some words"}),
        4: (400, {"detail": FAILURES["REFUSED"][1]}),
    }  # fmt: skip
    assert [r.message for r in caplog.records] == ["the model failed on a request (2 texts)"]


def test_sigterm_ends_the_block_and_its_children_quietly(capsys):
    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    before, litserve = signal.getsignal(signal.SIGTERM), logging.getLogger("litserve")
    level = litserve.level
    try:
        with stopped_by_signals():
            child.start()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal ends the block here
            pytest.fail("SIGTERM did not end the block")
        assert litserve.level > logging.CRITICAL  # its monitor's reports of the stop are off
    finally:
        litserve.setLevel(level)
    assert not child.is_alive() and child.exitcode == -signal.SIGTERM
    assert capsys.readouterr().out == "stopped on SIGTERM\n"
    assert signal.getsignal(signal.SIGTERM) is before
