"""Exported folders as untrusted input: `tscratch.load` (so predict, serve and test) checks
config.json, the weights and the tokenizer before it builds anything (`tscratch.export.schema`,
`weights`, `fingerprint`).

Each refusal is pinned by a test of its line. A property test then makes random single-field
edits of an exported folder and runs `tscratch predict --model FOLDER TEXT` on each (its `main`
in process; two edits in real subprocesses): never a traceback, a hang, or exit 0 with output
that is not JSON; each edit either predicts or ends with one `error:` line and exit 2.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

from tests.helpers import REPO, call_main, script_env
from tests.test_export import CORPUS, checkpoint  # noqa: F401 - a fixture
from tscratch.data.tokenizer import train_tokenizer
from tscratch.errors import UserError
from tscratch.export import export, load

TEXT = "cheap prizes for the lazy dog"
OTHER_CORPUS = [
    "completely different words here about cats and their owners",
    "dogs running fast across wet fields in the early rain",
] * 5
MISSING = object()  # `set_field`'s value that deletes the key


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory) -> Path:  # noqa: F811 - the imported fixture
    """tests/test_export.py's untrained d_model 16 classifier (sinusoidal positions, max_len 32,
    max_length 24, vocabulary 80), exported without ONNX."""
    return export(checkpoint, tmp_path_factory.mktemp("exports") / "toy")


@pytest.fixture(scope="module")
def tokenizers() -> dict[str, bytes]:
    """tokenizer.json files of other models: of another size, of the same size, with another
    special token."""
    found = {
        "smaller": train_tokenizer(OTHER_CORPUS, "wordpiece", vocab_size=60, max_chars=1000),
        "same_size": train_tokenizer(OTHER_CORPUS, "wordpiece", vocab_size=80, max_chars=1000),
        "masked": train_tokenizer(CORPUS, "wordpiece", 80, 1000, extra_special_tokens=["[MASK]"]),
    }
    sizes = {name: t.get_vocab_size(with_added_tokens=True) for name, t in found.items()}
    assert sizes == {"smaller": 60, "same_size": 80, "masked": 80}
    return Files({name: t.to_str().encode() for name, t in found.items()})


class Files(dict):
    """Name -> file contents, shown by name only (in hypothesis' falsifying examples)."""

    def __repr__(self) -> str:
        return f"Files({', '.join(self)})"


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def copy(folder: Path, to: Path) -> Path:
    return Path(shutil.copytree(folder, to))


def config_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def set_field(folder: Path, path: tuple, value: Any) -> None:
    """config.json with the field at `path` (keys and list indices) set to `value`, or deleted
    (`MISSING`)."""
    config = config_of(folder)
    parent = config
    for key in path[:-1]:
        parent = parent[key]
    if value is MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def edit_weights(folder: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    """model.safetensors rewritten after `change` edited its tensors in place."""
    file = str(folder / "model.safetensors")
    state = load_file(file)
    change(state)
    save_file(state, file, metadata={"format": "pt"})


def record_weights(folder: Path) -> None:
    """config.json recording the sha256 of model.safetensors as it is now, as export would."""
    digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    set_field(folder, ("weights_sha256", "model.safetensors"), digest)


def leaf_paths(value: Any, path: tuple = ()) -> Iterator[tuple]:
    """Every field of a parsed config.json: containers, then what is inside them."""
    if path:
        yield path
    if isinstance(value, dict | list):
        for key, inner in value.items() if isinstance(value, dict) else enumerate(value):
            yield from leaf_paths(inner, (*path, key))


# --- What export records, and what still loads.


def test_export_records_the_tokenizers_fingerprint(folder):
    data = (folder / "tokenizer.json").read_bytes()
    assert config_of(folder)["tokenizer"] == {
        "sha256": hashlib.sha256(data).hexdigest(),
        "vocab_size": 80,
        "special_tokens": {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3},
    }


def test_a_folder_exported_before_fingerprints_still_loads(folder, tmp_path):
    old = copy(folder, tmp_path / "old")
    set_field(old, ("tokenizer",), MISSING)
    set_field(old, ("encoder", "attention_impl"), MISSING)  # older folders lack newer fields
    set_field(old, ("encoder", "bigram_buckets"), MISSING)
    assert load(old).predict([TEXT]) == load(folder).predict([TEXT])


# --- config.json: one line naming the file, the field and what was expected.

CONFIG_ERRORS = [
    (("encoder", "d_model"), 10**12, r"encoder\.d_model \(1,000,000,000,000\) is more than "
     r"model\.safetensors holds \(5,811 numbers in 29 tensors\)"),
    (("encoder", "num_layers"), 10**9, r"encoder\.num_layers \(1,000,000,000\) is more than"),
    (("encoder", "max_len"), 10**9, r"encoder\.max_len \(1,000,000,000\) makes a position table "
     r"of 16,000,000,000 numbers, more than model\.safetensors holds"),
    (("encoder", "vocab_size"), 0, r"encoder\.vocab_size \(0\) must be a positive integer"),
    (("encoder", "d_ff"), -4, r"encoder\.d_ff \(-4\) must be a positive integer"),
    (("encoder", "bigram_buckets"), -1, r"encoder\.bigram_buckets \(-1\) must be an integer >= 0"),
    (("encoder", "bigram_buckets"), 10**12, r"encoder\.bigram_buckets \(1,000,000,000,000\) is "
     r"more than model\.safetensors holds"),
    (("encoder", "num_heads"), 3, r"encoder\.d_model \(16\) must be divisible by num_heads \(3\)"),
    (("encoder", "d_model"), 16.0, r"encoder\.d_model \(16\.0\) must be an integer"),
    (("encoder", "dropout"), "0.1", r"encoder\.dropout \('0\.1'\) must be a finite number"),
    (("encoder", "norm_eps"), math.inf, r"encoder\.norm_eps \(inf\) must be a finite number"),
    (("encoder", "rope_base"), math.nan, r"encoder\.rope_base \(nan\) must be a finite number"),
    (("encoder", "norm_first"), 1, r"encoder\.norm_first \(1\) must be true or false"),
    (("encoder", "ffn"), "tanh", r"encoder\.ffn \('tanh'\) must be one of \('relu', 'gelu'"),
    (("encoder", "position"), "sine", r"encoder\.position \('sine'\) must be one of "
     r"\('sinusoidal', 'learned'"),
    (("encoder", "pad_id"), 80, r"encoder\.pad_id \(80\) must be in \[0, vocab_size=80\)"),
    (("encoder", "norm_first"), MISSING, r"encoder\.norm_first is missing; export the model "
     r"again"),
    (("encoder", "flash"), True, r"encoder\.flash is not a field of this tscratch's encoder"),
    (("encoder",), [16], r"encoder \(\[16\]\) must be an object of the encoder's fields"),
    (("num_classes",), 1, r"num_classes \(1\) must be an integer of at least 2"),
    (("label_names",), ["ham", "ham", "spam"], r"label_names \(\['ham', 'ham', 'spam'\]\) must "
     r"be 3 distinct names \(num_classes\)"),
    (("label_names", 1), 7, r"label_names \(\['ham', 7, 'spam'\]\) must be a list of strings"),
    (("pooling",), "max", r"pooling \('max'\) must be 'cls' or 'mean'"),
    (("max_length",), 0, r"max_length \(0\) must be a positive integer"),
    (("max_length",), 33, r"max_length \(33\) must be at most encoder\.max_len \(32\), the "
     r"length of its sinusoidal position table"),
    (("max_length",), MISSING, r"max_length is missing; export the model again"),
    (("tscratch_version",), 1, r"tscratch_version \(1\) must be a string"),
    (("format",), "onnx", r"format \('onnx'\) must be 'tscratch-classifier'"),
    (("format_version",), True, r"format_version \(True\) must be a positive integer"),
    (("format_version",), 0, r"format_version \(0\) must be a positive integer"),
    (("thresholds",), [0.5] * 3, r"multi_label \(None\) must be true beside thresholds"),
    (("multi_label",), True, r"thresholds \(None\) must be 3 numbers in \[0, 1\], one per label"),
    (("text_pair_column",), 5, r"text_pair_column \(5\) must be a column name"),
    (("text_pair_column",), "answer", r"encoder\.type_vocab_size \(0\) must be at least 2 for a "
     r"model of text pairs"),
    (("tokenizer",), "sha", r"tokenizer \('sha'\) must be an object"),
    (("tokenizer", "sha256"), "0" * 63, r"tokenizer\.sha256 \('0{56}\.\.\.\) must be 64 "
     r"lowercase hex digits"),
    (("tokenizer", "vocab_size"), -80, r"tokenizer\.vocab_size \(-80\) must be a positive "
     r"integer"),
    (("tokenizer", "special_tokens"), {"[PAD]": 80}, r"tokenizer\.special_tokens \(\{'\[PAD\]': "
     r"80\}\) must be an object of token -> id, each id in \[0, 80\)"),
    (("weights_sha256",), "sha", r"weights_sha256 \('sha'\) must be an object of weight file -> "
     r"sha256"),
    (("weights_sha256", "model.safetensors"), "0" * 63, r"weights_sha256\.model\.safetensors "
     r"\('0{56}\.\.\.\) must be 64 lowercase hex digits"),
    (("weights_sha256", "weights.bin"), "0" * 64, r"weights_sha256\.weights\.bin \('0{56}\.\.\.\) "
     r"must be one of the files \('model\.safetensors', 'model\.onnx', 'model\.int8\.onnx'\)"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "message"), CONFIG_ERRORS)
def test_a_bad_config_field_is_one_line(folder, tmp_path, path, value, message):
    edited = copy(folder, tmp_path / "edited")
    set_field(edited, path, value)
    with pytest.raises(UserError, match=rf"^{re.escape(str(edited))}/config\.json: {message}"):
        load(edited)


def test_a_scheme_that_cannot_work_with_the_config_is_one_line(folder, tmp_path):
    edited = copy(folder, tmp_path / "edited")
    set_field(edited, ("encoder", "position"), "rope")
    set_field(edited, ("encoder", "num_heads"), 16)  # head size 1: rope needs an even one
    with pytest.raises(UserError, match=r"config\.json: encoder\.position 'rope' needs an even "
                       r"head size, got d_model \(16\) / num_heads \(16\) = 1"):  # fmt: skip
        load(edited)


def test_a_config_json_nested_too_deep_is_one_line(folder, tmp_path):
    edited = copy(folder, tmp_path / "edited")
    (edited / "config.json").write_text("[" * 100_000)
    with pytest.raises(UserError, match=r"config\.json is not a tscratch export config"):
        load(edited)


# --- model.safetensors: its header against config.json, then its values.


def _nan(state):
    state["encoder.layers.1.ff.fc1.weight"][3, 5] = math.nan


def _inf(state):
    state["encoder.tok_emb.weight"][7, 0] = -math.inf


def _narrow(state):
    state["head.proj.weight"] = state["head.proj.weight"][:2].clone()


def _drop(state):
    del state["head.proj.bias"]


def _extra(state):
    state["head.extra"] = torch.zeros(3)


def _integers(state):
    state["head.proj.bias"] = state["head.proj.bias"].long()


WEIGHT_ERRORS = [
    (_nan, r"tensor encoder\.layers\.1\.ff\.fc1\.weight holds 1 NaN or infinite values \(of 512\)"),
    (_inf, r"tensor encoder\.tok_emb\.weight holds 1 NaN or infinite values \(of 1,280\)"),
    (_narrow, r"tensor head\.proj\.weight has shape \(2, 16\), config\.json implies \(3, 16\)"),
    (_drop, r"no tensor head\.proj\.bias \(shape \(3,\)\), which config\.json implies"),
    (_extra, r"tensor head\.extra is not one of the model config\.json describes \(1 such\)"),
    (_integers, r"tensor head\.proj\.bias is I64, expected one of \('F16', 'BF16', 'F32'"),
]


@pytest.mark.parametrize(("change", "message"), WEIGHT_ERRORS)
def test_weights_that_are_not_the_configs_model_are_one_line(folder, tmp_path, change, message):
    edited = copy(folder, tmp_path / "edited")
    edit_weights(edited, change)
    with pytest.raises(
        UserError, match=rf"^{re.escape(str(edited))}/model\.safetensors: {message}"
    ):
        load(edited)


@pytest.mark.parametrize("keep", [0, 7, 100, -1])
def test_a_truncated_weights_file_is_one_line(folder, tmp_path, keep):
    edited = copy(folder, tmp_path / "edited")
    data = (edited / "model.safetensors").read_bytes()
    (edited / "model.safetensors").write_bytes(data[:keep])
    with pytest.raises(UserError, match=rf"^{re.escape(str(edited))}/model\.safetensors is "
                       r"truncated or not a "
                       r"safetensors file \(Error while deserializing header"):  # fmt: skip
        load(edited)


def test_weights_that_overflow_on_an_input_are_one_line(folder, tmp_path):
    edited = copy(folder, tmp_path / "edited")

    def overflow(state: dict[str, torch.Tensor]) -> None:
        # Finite weights, too big: the final norm's bias makes every pooled feature about 1
        # (a norm's output alone sums to about 0 over the features, and how close to 0 depends
        # on the tokenizer, whose training breaks ties differently from one process to another).
        state["encoder.final_norm.bias"].fill_(1.0)
        state["head.proj.weight"].fill_(3e38)

    edit_weights(edited, overflow)
    record_weights(edited)  # weights that overflow as exported, not changed since
    with pytest.raises(UserError, match=r"^the model gives NaN or infinite logits for text 1: "
                       r"its weights overflow on this input"):  # fmt: skip
        load(edited).predict([TEXT])
    logits = torch.tensor([[0.0, 1.0, 2.0], [0.0, math.inf, 0.0]])
    with pytest.raises(UserError, match=r"NaN or infinite logits for text 2: "):
        load(folder).results(["a", "b"], logits)


# --- tokenizer.json: the fingerprint, then the model's vocabulary and padding.


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("smaller", r"has 60 tokens but config\.json's tokenizer\.vocab_size records 80: it is "
         r"another model's tokenizer; put back the tokenizer\.json exported with the model"),
        ("masked", r"has special tokens \{'\[PAD\]': 0, '\[UNK\]': 1, '\[CLS\]': 2, '\[SEP\]': 3, "
         r"'\[MASK\]': 4\}, config\.json's tokenizer\.special_tokens records"),
        ("same_size", r"is not the tokenizer this model was exported with \(its sha256 is "
         r"[0-9a-f]{16}\.\.\., config\.json's tokenizer\.sha256 records [0-9a-f]{16}\.\.\.\)"),
    ],
)  # fmt: skip
def test_another_models_tokenizer_is_refused(folder, tmp_path, tokenizers, name, message):
    edited = copy(folder, tmp_path / "edited")
    (edited / "tokenizer.json").write_bytes(tokenizers[name])
    with pytest.raises(UserError, match=rf"^{re.escape(str(edited))}/tokenizer\.json {message}"):
        load(edited)


@pytest.mark.parametrize("data", [b"\xff\xfe\x00garbage", b"{}", b'{"model": 3}', b""])
def test_a_garbage_tokenizer_is_one_line(folder, tmp_path, data):
    edited = copy(folder, tmp_path / "edited")
    (edited / "tokenizer.json").write_bytes(data)
    pattern = rf"^{re.escape(str(edited))}/tokenizer\.json is not a tokenizer file"
    with pytest.raises(UserError, match=pattern):
        load(edited)


def _word_level(unk_id: int | None) -> bytes:
    """A tokenizer of 80 words, `[PAD]` 0, whose `[UNK]` has id `unk_id` or is missing."""
    vocab = {"[PAD]": 0, **{f"w{i}": i for i in range(1, 80)}}
    if unk_id is not None:
        vocab = {**{k: v for k, v in vocab.items() if v != 79}, "[UNK]": unk_id}
    model = {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}
    return json.dumps(
        {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
         "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
         "decoder": None, "model": model}
    ).encode()  # fmt: skip


def test_a_folder_without_fingerprint_checks_the_vocabulary_and_padding(
    folder, tmp_path, tokenizers
):
    old = copy(folder, tmp_path / "old")
    set_field(old, ("tokenizer",), MISSING)
    (old / "tokenizer.json").write_bytes(tokenizers["smaller"])
    with pytest.raises(UserError, match=r"tokenizer\.json has 60 tokens but the model's embedding "
                       r"has 80 \(encoder\.vocab_size in config\.json\): it is another model's "
                       r"tokenizer"):  # fmt: skip
        load(old)
    (old / "tokenizer.json").write_bytes(_word_level(unk_id=None))
    with pytest.raises(UserError, match=r"tokenizer\.json cannot encode text \(WordLevel error: "
                       r"Missing \[UNK\] token from the vocabulary\)"):  # fmt: skip
        load(old)
    (old / "tokenizer.json").write_bytes(_word_level(unk_id=1000))
    with pytest.raises(UserError, match=r"tokenizer\.json gives token ids beyond its 80 tokens"):
        load(old)
    shutil.copyfile(folder / "tokenizer.json", old / "tokenizer.json")
    set_field(old, ("encoder", "pad_id"), 1)
    with pytest.raises(UserError, match=r"tokenizer\.json: \[PAD\] has id 0, but the model pads "
                       r"with encoder\.pad_id 1 \(config\.json\)"):  # fmt: skip
        load(old)


def test_ids_outside_the_vocabulary_are_one_line(folder):
    classifier = load(folder)
    with pytest.raises(UserError, match=r"token ids must be in \[0, 80\), the model's "
                       r"vocabulary; got 0\.\.80"):  # fmt: skip
        classifier.logits_of_ids([[2, 5], [2, 80]])
    with pytest.raises(UserError, match=r"got -1\.\.5"):
        classifier.logits_of_ids([[-1, 5]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_folder_runs_on_the_device_asked(folder):
    on_gpu = load(folder, device="cuda")
    expected = load(folder).logits([TEXT, "eggs"])
    torch.testing.assert_close(on_gpu.logits([TEXT, "eggs"]), expected, atol=1e-5, rtol=0)


def test_init_from_checks_an_exported_folder_as_load_does(folder, tmp_path):
    from tscratch.training.init_from import resolve_init_source

    edited = copy(folder, tmp_path / "edited")
    edit_weights(edited, _nan)
    with pytest.raises(UserError, match=r"fc1\.weight holds 1 NaN or infinite values"):
        resolve_init_source(str(edited))


# --- The property: random single-field edits, run through `tscratch predict`.

TIMEOUT_S = 10
COUNTER = itertools.count()  # names the edited copies


@pytest.fixture(scope="module")
def baseline(folder) -> list[dict]:
    """What `tscratch predict` prints for TEXT on the folder as exported."""
    proc = predict(folder)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in this (the main) thread if the block runs past `seconds`."""

    def expire(signum, frame):
        raise TimeoutError(f"ran past {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def predict(folder: Path) -> subprocess.CompletedProcess:
    """`tscratch predict --model FOLDER TEXT` as its `main` in this process (`call_main`)."""
    with deadline(TIMEOUT_S):
        return call_main(
            "predict.py", "--model", folder, TEXT, cwd=folder.parent, env={"TSCRATCH_DEBUG": None}
        )


def check_outcome(
    proc: subprocess.CompletedProcess, labels: list[str], *, refused: bool, same: list | None
) -> None:
    """Exit 2 with one `error:` line, or exit 0 with valid JSON: one object for TEXT whose
    probabilities are finite and sum to 1 (and, given `same`, equal those)."""
    assert proc.returncode in (0, 2), proc.stderr
    if proc.returncode == 2:
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
        assert proc.stdout == ""
        return
    assert not refused, f"accepted with exit 0: {proc.stdout}"
    # In process, log lines land on stdout (`call_main`); the real command prints them on
    # stderr: a folder without weights_sha256 loads with a warning.
    lines = [line for line in proc.stdout.splitlines() if not line.startswith("warning: ")]
    rows = [json.loads(line, parse_constant=_refuse_constant) for line in lines]
    assert len(rows) == 1 and rows[0]["text"] == TEXT
    probabilities = rows[0]["probabilities"]
    assert list(probabilities) == labels and rows[0]["label"] in labels
    assert all(math.isfinite(p) for p in probabilities.values())
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-5)
    if same is not None:
        assert rows == same


def _category(value: Any) -> str:
    """JSON kinds as config.json's schema tells them apart (a float field takes ints too)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


OTHER_TYPES = [None, True, False, "text", "", [1], [], {"a": 1}, 1.5, 7]
SIZES = [-1, -(10**9), 0, 0.0, 10**6, 10**12, 2**63, 10**30, 1e308, math.inf, -math.inf, math.nan]


@st.composite
def config_edit(draw, paths: list[tuple], config: dict) -> tuple[tuple, Any, str]:
    """(path, value, kind): a field of config.json given another type, a size, or deleted."""
    path = draw(st.sampled_from(paths))
    old = config
    for key in path:
        old = old[key]
    kind = draw(st.sampled_from(["other_type", "size", "missing"]))
    if kind == "missing":
        return path, MISSING, kind
    if kind == "size":
        return path, draw(st.sampled_from(SIZES)), kind
    others = [v for v in OTHER_TYPES if _category(v) != _category(old)]
    if isinstance(old, int) and not isinstance(old, bool):
        others.append(float(old) + 0.5)  # a number, but not an integer
    return path, draw(st.sampled_from(others)), kind


def weight_edit(names: list[str], size: int) -> st.SearchStrategy:
    """(kind, target) for `apply_weight_edit`: a byte count to keep, or a tensor to damage."""
    kinds = st.sampled_from(["nan", "inf", "narrow", "widen", "drop"])
    truncate = st.tuples(st.just("truncate"), st.integers(0, size - 1))
    return truncate | st.tuples(kinds, st.sampled_from(names))


def apply_weight_edit(folder: Path, kind: str, target: Any) -> None:
    """model.safetensors cut to `target` bytes, or its tensor `target` given a NaN or an
    infinity, one number fewer or one row more, or dropped."""
    file = folder / "model.safetensors"
    if kind == "truncate":
        file.write_bytes(file.read_bytes()[:target])
        return

    def change(state: dict[str, torch.Tensor]) -> None:
        tensor = state[target]
        if kind in ("nan", "inf"):
            tensor.view(-1)[tensor.numel() // 2] = math.nan if kind == "nan" else math.inf
        elif kind == "narrow":
            state[target] = tensor.view(-1)[:-1].clone()
        elif kind == "widen":
            state[target] = torch.cat([tensor, tensor[:1]])
        else:
            del state[target]

    edit_weights(folder, change)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same edits on every run: a failure reproduces
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_edit_of_a_folder_crashes_hangs_or_prints_invalid_json(
    folder, tokenizers, baseline, data
):
    config = config_of(folder)
    names = sorted(load_file(str(folder / "model.safetensors")))
    size = (folder / "model.safetensors").stat().st_size
    garbage = st.binary(max_size=300) | st.sampled_from([b"{}", b"[]", b"null", b'{"model": {}}'])
    part = data.draw(st.sampled_from(["config", "tokenizer", "weights"]))
    edited = copy(folder, folder.parent / f"edit-{next(COUNTER)}")
    try:
        same = None
        if part == "config":
            path, value, kind = data.draw(config_edit(list(leaf_paths(config)), config))
            set_field(edited, path, value)
            refused = kind == "other_type"
            same = baseline if kind == "missing" else None  # defaults or refused
        elif part == "tokenizer":
            name = data.draw(st.sampled_from([*tokenizers, "garbage"]))
            replacement = data.draw(garbage) if name == "garbage" else tokenizers[name]
            (edited / "tokenizer.json").write_bytes(replacement)
            refused = True
        else:
            apply_weight_edit(edited, *data.draw(weight_edit(names, size)))
            refused = True
        proc = predict(edited)
        event(f"{part} edit: exit {proc.returncode}")  # --hypothesis-show-statistics
        check_outcome(proc, config["label_names"], refused=refused, same=same)
    finally:
        shutil.rmtree(edited)


@pytest.mark.slow
def test_the_real_command_refuses_nan_and_misshapen_weights_in_one_line(
    folder, shared_cache, tmp_path
):
    """Two edits that once ended in a traceback or `NaN` in the JSON, in real subprocesses."""
    runs = {}
    for kind, target in [("nan", "head.proj.weight"), ("narrow", "encoder.tok_emb.weight")]:
        edited = copy(folder, tmp_path / kind)
        apply_weight_edit(edited, kind, target)
        command = [sys.executable, "-m", "tscratch", "predict", "--model", str(edited), TEXT]
        env = script_env(shared_cache, tmp_path)
        runs[kind, target] = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # both at once: most of each run is importing torch
    for (kind, target), run in runs.items():
        out, err = run.communicate(timeout=120)
        assert (run.returncode, out) == (2, ""), err
        assert err.splitlines() == [err.strip()] and err.startswith("error: "), err
        assert target in err and ("NaN" in err if kind == "nan" else "has shape" in err)
