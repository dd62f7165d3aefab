"""A hub id when the hub cannot be reached: `tscratch.data.loading.hub_reachable` dials the hub's
host once, within a deadline, and an unreachable hub loads in offline mode (a cached copy still
loads; anything else fails after the probe's seconds, not after the hub client's retries)."""

from __future__ import annotations

import logging
import socket
import threading
import time

import datasets
import pytest
from huggingface_hub import constants

from tscratch.data import loading
from tscratch.errors import UserError


@pytest.fixture
def listener():
    """A local port that takes connections, and one that refuses them."""
    server = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()
    yield server.getsockname()[1], refused
    server.close()


@pytest.fixture
def no_proxy(monkeypatch):
    """No proxy, and offline mode off (conftest turns it on for every test)."""
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def test_the_probe_dials_the_hubs_host(monkeypatch, listener, no_proxy):
    open_port, refused = listener
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{open_port}")
    assert loading.hub_reachable(timeout=1)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{refused}")
    start = time.monotonic()
    assert not loading.hub_reachable(timeout=30)
    assert time.monotonic() - start < 10  # a refusal answers at once, not at the deadline
    monkeypatch.setattr(constants, "ENDPOINT", "https://no-such-host.invalid")
    assert not loading.hub_reachable(timeout=1)


def test_a_proxy_is_trusted_and_offline_mode_is_obeyed(monkeypatch, listener, no_proxy):
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{listener[1]}")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert loading.hub_reachable(timeout=1)  # the host is reached through the proxy, not dialled
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert not loading.hub_reachable(timeout=1)


def test_an_unreachable_hub_is_read_in_offline_mode_and_fails_in_one_line(monkeypatch, no_proxy):
    seen = []

    def load_dataset(*args, **kwargs):
        seen.append((datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE))
        raise ConnectionError("Couldn't reach 'some_user/nonexistent_ds' on the Hub")

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    unreachable = "ConnectionError: the hub is not reachable from here and it could not be read"
    unreachable += " from the cache"
    for reachable, why in ((False, unreachable), (True, "ConnectionError")):
        monkeypatch.setattr(loading, "hub_reachable", lambda r=reachable: r)
        with pytest.raises(UserError) as caught:
            loading.load_source("some_user/nonexistent_ds")
        assert str(caught.value) == (
            f"could not load dataset 'some_user/nonexistent_ds' from the Hugging Face hub ({why}; "
            "no local file or folder of that name either); pass a local .csv/.json/.parquet path "
            "or dataset='bbc_news'"
        )
    # offline mode while unreachable (a cached copy would load), and only for that call
    assert seen == [(True, True), (False, False)]
    assert (datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE) == (False, False)
    # the user's own HF_HUB_OFFLINE=1 is named as the reason
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(loading, "hub_reachable", lambda: False)
    with pytest.raises(
        UserError, match=r"\(ConnectionError: HF_HUB_OFFLINE is set and it could not be read from"
    ):
        loading.load_source("some_user/nonexistent_ds")


def test_a_cached_copy_loads_offline_with_a_warning(monkeypatch, no_proxy, caplog):
    cached = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"]})})
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: cached)
    monkeypatch.setattr(loading, "hub_reachable", lambda: False)
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        assert loading.load_source("some_user/cached_ds") is cached
    assert (
        "the Hugging Face hub is not reachable from here: dataset 'some_user/cached_ds' was read "
        "from the copy an earlier download cached"
    ) in caplog.text


def test_the_probe_gives_up_at_its_deadline(monkeypatch, no_proxy):
    def hang(*args, **kwargs):  # a lookup or a dropped packet that never answers
        threading.Event().wait(30)

    monkeypatch.setattr(socket, "create_connection", hang)
    monkeypatch.setattr(constants, "ENDPOINT", "https://huggingface.co")
    assert loading.hub_reachable(timeout=0.2) is False
