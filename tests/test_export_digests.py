"""The sha256 of an exported folder's weight files (`tscratch.export.digests`): recorded by
export, checked by everything that reads the folder (`tscratch.load`, predict, serve, test,
`--model.init_from`), one line when a file was changed after export; a folder exported before
the record loads with a warning; a garbage or foreign `model.onnx` is one line, never an
onnxruntime traceback.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers import call_main
from tests.test_export import checkpoint  # noqa: F401 - a fixture
from tscratch.errors import UserError
from tscratch.export import export, load
from tscratch.training.init_from import resolve_init_source

TEXT = "cheap prizes for the lazy dog"
CHANGED = (
    r"{file} was changed after export: its sha256 is [0-9a-f]{{16}}\.\.\., config\.json's "
    r"weights_sha256 records [0-9a-f]{{16}}\.\.\.; put back the file exported with the model, or "
    r"export the checkpoint again"
)


@pytest.fixture(scope="module")
def folder(checkpoint, tmp_path_factory) -> Path:  # noqa: F811 - the imported fixture
    """tests/test_export.py's tiny classifier exported with model.onnx and model.int8.onnx."""
    pytest.importorskip("onnxruntime")
    return export(checkpoint, tmp_path_factory.mktemp("digests") / "toy", onnx=True, quantize=True)


@pytest.fixture(autouse=True)
def _one_thread(single_thread):
    """Tiny models on a busy machine: one intra-op thread (see conftest)."""


def copy(folder: Path, to: Path) -> Path:
    return Path(shutil.copytree(folder, to))


def config_of(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text(encoding="utf-8"))


def write_config(folder: Path, config: dict) -> None:
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")


def nudge_weights(folder: Path) -> None:
    """model.safetensors with one weight changed to another finite value: every other check
    passes, and the predictions differ."""
    file = str(folder / "model.safetensors")
    state = load_file(file)
    state["head.proj.weight"][0, 0] += 0.5
    save_file(state, file, metadata={"format": "pt"})


def changed(file: Path) -> str:
    return "^" + CHANGED.format(file=re.escape(str(file)))


def test_export_records_the_sha256_of_every_weight_file(folder):
    recorded = config_of(folder)["weights_sha256"]
    assert recorded == {
        name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for name in ("model.safetensors", "model.onnx", "model.int8.onnx")
    }


def test_weights_changed_to_other_finite_values_are_refused_in_one_line(folder, tmp_path):
    edited = copy(folder, tmp_path / "edited")
    nudge_weights(edited)
    with pytest.raises(UserError, match=changed(edited / "model.safetensors")):
        load(edited)
    with pytest.raises(UserError, match=changed(edited / "model.safetensors")):
        resolve_init_source(str(edited))  # --model.init_from FOLDER reads it as load does


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("command", ["predict", "test", "serve"])
def test_every_command_refuses_a_changed_folder_in_one_line(folder, tmp_path, command):
    edited = copy(folder, tmp_path / "edited")
    nudge_weights(edited)
    data = tmp_path / "data.csv"
    data.write_text("text,label\ncheap prizes,spam\nham and eggs,ham\n", encoding="utf-8")
    args = {
        "predict": ["--model", edited, TEXT],
        "test": ["--model", edited, "--data.dataset", data],
        "serve": ["--model", edited, "--port", _free_port()],
    }[command]
    if command == "serve":
        pytest.importorskip("litserve")
    proc = call_main(f"{command}.py", *args, cwd=tmp_path, env={"TSCRATCH_DEBUG": None})
    assert proc.returncode == 2
    assert re.fullmatch("error: " + changed(edited / "model.safetensors")[1:] + "\n", proc.stderr)
    assert proc.stdout == ""


@pytest.mark.parametrize("name", ["model.onnx", "model.int8.onnx"])
def test_a_changed_onnx_file_is_refused_before_onnxruntime_reads_it(folder, tmp_path, name):
    edited = copy(folder, tmp_path / "edited")
    (edited / name).write_bytes(b"\x08\x07garbage, not a protobuf")
    runtime = "onnx" if name == "model.onnx" else "onnx-int8"
    with pytest.raises(UserError, match=changed(edited / name)):
        load(edited, runtime=runtime)
    proc = call_main("predict.py", "--model", edited / name, TEXT, cwd=tmp_path, env={})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and " was changed after export" in proc.stderr


def test_a_weight_file_export_did_not_write_is_refused(folder, tmp_path):
    edited = copy(folder, tmp_path / "edited")
    config = config_of(edited)
    del config["weights_sha256"]["model.onnx"]  # as if model.onnx had been added by hand
    write_config(edited, config)
    with pytest.raises(
        UserError,
        match=rf"^{re.escape(str(edited))}/model\.onnx was not written by export \(config\.json's "
        r"weights_sha256 records no sha256 of it\): the folder was changed after export; export "
        r"the checkpoint again$",
    ):
        load(edited, runtime="onnx")
    assert load(edited).predict([TEXT]) == load(folder).predict([TEXT])  # its safetensors: fine


def old_folder(folder: Path, to: Path) -> Path:
    """The folder as tscratch exported it before it recorded the weights' sha256."""
    old = copy(folder, to)
    config = config_of(old)
    del config["weights_sha256"]
    write_config(old, config)
    return old


def test_a_folder_exported_before_the_record_loads_with_a_warning(folder, tmp_path, caplog):
    old = old_folder(folder, tmp_path / "old")
    with caplog.at_level(logging.WARNING, logger="tscratch"):
        assert load(old).predict([TEXT]) == load(folder).predict([TEXT])
    assert [r.getMessage() for r in caplog.records if r.name == "tscratch"] == [
        f"warning: {old}/config.json records no sha256 of model.safetensors (exported before "
        "tscratch recorded them), so a change to that file since export would go unnoticed; "
        "export the checkpoint again to record it"
    ]
    nudge_weights(old)  # unnoticed, as the warning says
    assert load(old).predict([TEXT]) != load(folder).predict([TEXT])


def test_a_garbage_onnx_file_without_a_record_is_one_line(folder, tmp_path):
    old = old_folder(folder, tmp_path / "old")
    (old / "model.onnx").write_bytes(b"\x08\x07garbage, not a protobuf")
    with pytest.raises(
        UserError,
        match=rf"^{re.escape(str(old))}/model\.onnx is not an ONNX model onnxruntime can run "
        r"\(.*\); export the checkpoint again with --onnx$",
    ):
        load(old, runtime="onnx")
    proc = call_main("predict.py", "--model", old / "model.onnx", TEXT, cwd=tmp_path, env={})
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "is not an ONNX model onnxruntime can run" in errors[0]
    assert "Traceback" not in proc.stderr


def test_an_onnx_graph_of_another_model_is_one_line(folder, tmp_path):
    onnx = pytest.importorskip("onnx")
    old = old_folder(folder, tmp_path / "old")
    helper, types = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "identity",
        [helper.make_tensor_value_info("x", types.FLOAT, [1])],
        [helper.make_tensor_value_info("y", types.FLOAT, [1])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph), str(old / "model.onnx"))
    with pytest.raises(
        UserError,
        match=rf"^{re.escape(str(old))}/model\.onnx is not a tscratch classifier's graph \(inputs "
        r"\['x'\], outputs \['y'\]; expected input_ids and attention_mask in, logits out\)",
    ):
        load(old, runtime="onnx")


def test_the_folder_as_exported_predicts_on_every_runtime(folder):
    expected = load(folder).logits([TEXT])
    torch.testing.assert_close(load(folder, runtime="onnx").logits([TEXT]), expected, atol=1e-5,
                               rtol=0)  # fmt: skip
    assert load(folder, runtime="onnx-int8").logits([TEXT]).shape == expected.shape
