"""`tscratch fit --model.teacher`: a tiny teacher trained in process on a three-topic CSV set,
then a tiny student distilled from it (2 copies per text), resumed from the cached logits
without running the teacher again; the teacher's key and its label check."""

from __future__ import annotations

import csv
import random
import re
import shutil
from pathlib import Path

import pytest
import torch
from jsonargparse import Namespace

from tests.helpers import TINY_YAML, fit_in_process
from tscratch.cli import fit_teacher as teacher_module
from tscratch.cli.classifiers import open_classifier
from tscratch.cli.fit_teacher import TeacherModel, label_order, teacher_key
from tscratch.data.encoding import encode_ids, pad_batch
from tscratch.errors import MissingFile, UserError
from tscratch.export import CONFIG, export
from tscratch.recipe.distil import distil_settings, distillation_epochs
from tscratch.recipe.profile import DataProfile

TOPICS = {
    "money": ["bank", "price", "market", "stock", "trade"],
    "sport": ["goal", "match", "team", "coach", "league"],
    "tech": ["phone", "chip", "software", "data", "robot"],
}
FILLER = [
    "the", "a", "today", "news", "said", "people", "about", "some", "report", "new", "big",
    "small", "other", "week",
]  # fmt: skip
SIZES = {"train": 150, "validation": 30, "test": 30}


def _write(folder: Path, names: dict[str, str] | None = None) -> Path:
    """train/validation/test CSVs of 8 filler words and 3 topic words; labels renamed by
    ``names``."""
    rng, names = random.Random(0), names or {}
    folder.mkdir()
    for split, n in SIZES.items():
        rows = []
        for _ in range(n):
            label = rng.choice(list(TOPICS))
            words = rng.choices(FILLER, k=8) + rng.choices(TOPICS[label], k=3)
            rng.shuffle(words)
            rows.append((" ".join(words), names.get(label, label)))
        with (folder / f"{split}.csv").open("w", newline="") as file:
            csv.writer(file).writerows([("text", "label"), *rows])
    return folder


def _args(data: Path, root: Path, *extra: object) -> list:
    return [
        "--config", TINY_YAML, "--data.dataset", data, "--data.vocab_size", "200",
        "--data.batch_size", "16", "--trainer.default_root_dir", root, "--baseline", "false",
        "--trainer.enable_progress_bar", "false", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """The data, a cache of this module's own and a teacher trained on the data (~10 s)."""
    base = tmp_path_factory.mktemp("distill")
    data, cache = _write(base / "topics"), base / "cache"
    code, log = fit_in_process(
        _args(data, base / "teacher", "--trainer.max_epochs", "3", "--test", "false"), cache
    )
    assert code == 0, log
    best = next((base / "teacher" / "lightning_logs" / "version_0" / "checkpoints").glob("best-*"))
    return {"base": base, "data": data, "cache": cache, "teacher": best}


@pytest.mark.slow
def test_a_student_distils_reports_test_accuracy_and_resumes_from_the_cached_logits(
    world, monkeypatch
):
    root, teacher = world["base"] / "student", world["teacher"]
    args = _args(world["data"], root, "--model.teacher", teacher, "--data.augment_copies", "2")
    code, log = fit_in_process(args, world["cache"])
    assert code == 0, log
    line = re.search(r"distilling from (.+): (\d+) training texts \+ (\d+) augmented copies, "
                     r"teacher logits cached at (\S+)", log)  # fmt: skip
    assert line and line[1] == str(teacher) and line.group(2, 3) == ("150", "300"), log
    cached = Path(line[4])
    assert cached.parent == world["cache"] / "teacher_logits" and cached.is_file()
    saved = torch.load(cached, weights_only=True)
    assert saved["logits"].shape == (450, 3) and saved["features"].shape == (450, 32)
    assert saved["features"].dtype == torch.float16  # the pooled vectors, half the disk
    assert "teacher logits: running" in log
    assert re.search(r"test accuracy \d\.\d{4}", log), log

    # The second run (a resume) reads the logits back: the teacher is never opened.
    def refuse(*args, **kwargs):
        raise AssertionError("the teacher ran again")

    monkeypatch.setattr(teacher_module, "open_classifier", refuse)
    code, again = fit_in_process([*args, "--ckpt_path", "last", "--trainer.max_epochs", "2"],
                                 world["cache"])  # fmt: skip
    assert code == 0, again
    assert "resuming from" in again and line[0] in again and "teacher logits: running" not in again
    hparams = torch.load(root / "lightning_logs/version_0/checkpoints/last.ckpt",
                         weights_only=True)["hyper_parameters"]  # fmt: skip
    assert hparams["teacher"] == str(teacher) and hparams["distill_weight"] == 1.0


@pytest.mark.slow
def test_a_student_learns_the_teachers_similarities_from_the_cached_vectors(world):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = world["base"] / "similar"
    args = _args(world["data"], root, "--model.teacher", world["teacher"],
                 "--data.augment_copies", "2", "--model.similarity_weight", "2.5")  # fmt: skip
    code, log = fit_in_process(args, world["cache"])
    assert code == 0, log
    events = EventAccumulator(str(root / "lightning_logs" / "version_0"))
    events.Reload()
    similar = [e.value for e in events.Scalars("train/similarity_mse")]
    assert similar and all(0 <= v <= 4 for v in similar)  # cosines differ by at most 2
    hparams = torch.load(root / "lightning_logs/version_0/checkpoints/last.ckpt",
                         weights_only=True)["hyper_parameters"]  # fmt: skip
    assert hparams["similarity_weight"] == 2.5


@pytest.mark.slow
def test_a_teacher_of_other_labels_stops_the_run_with_one_line(world, capsys):
    other = _write(world["base"] / "renamed", {"money": "finance"})
    args = _args(other, world["base"] / "mismatch", "--model.teacher", world["teacher"])
    code, _ = fit_in_process(args, world["cache"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1, errors
    assert not (world["base"] / "mismatch").exists()  # the claimed run folder handed back
    assert (
        "predicts labels ['money', 'sport', 'tech'] but the data has labels ['finance', "
        in errors[0]
    )


def test_teacher_labels_map_by_name_and_other_labels_are_refused(world, monkeypatch):
    monkeypatch.setattr(teacher_module, "native_bf16", lambda: False)  # fp32 on every CPU
    teacher = TeacherModel(str(world["teacher"]))
    texts = ["bank price today", "goal match news", "chip robot week"]
    own = open_classifier(world["teacher"]).logits(texts)
    reordered, pooled = teacher.outputs(lambda mask: texts, ["tech", "money", "sport"])
    assert torch.allclose(reordered, own[:, [2, 0, 1]], atol=1e-6)
    classifier = open_classifier(world["teacher"])  # the vectors its head reads
    module = classifier.module
    ids = encode_ids(classifier.tokenizer, texts, classifier.max_length)
    with torch.no_grad():
        expected, logits = module.pooled_logits(*pad_batch(ids, module.config.pad_id))
    assert pooled.shape == (3, module.config.d_model)
    assert torch.allclose(pooled, expected, atol=1e-5) and torch.allclose(logits, own, atol=1e-5)
    assert label_order(["a", "b"], ["b", "a"], "t") == [1, 0]
    with pytest.raises(UserError, match=r"predicts labels \['money', 'sport', 'tech'\] but the "
                       r"data has labels \['money', 'sport'\]; distil from a teacher"):  # fmt: skip
        teacher.outputs(lambda mask: texts, ["money", "sport"])


def test_the_teachers_progress_bar_goes_to_a_terminal_not_to_a_log(world, monkeypatch, capsys):
    monkeypatch.setattr(teacher_module, "native_bf16", lambda: False)
    texts, labels = ["bank price today", "goal match news", "chip robot week"], ["money", "sport"]
    labels = [*labels, "tech"]
    TeacherModel(str(world["teacher"]), batch_size=1).outputs(lambda mask: texts, labels)
    assert "teacher:" not in capsys.readouterr().err  # stderr is no terminal here
    monkeypatch.setattr(teacher_module, "_shown", lambda: True)
    TeacherModel(str(world["teacher"]), batch_size=1).outputs(lambda mask: texts, labels)
    assert "teacher: 100%" in capsys.readouterr().err


def test_the_teacher_runs_on_the_device_it_is_given_even_beside_a_gpu(world, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU the run does not use
    monkeypatch.setattr(teacher_module, "native_bf16", lambda: False)
    devices = []

    def opened(source, device="cpu"):
        devices.append(device)
        return open_classifier(source, device="cpu")

    monkeypatch.setattr(teacher_module, "open_classifier", opened)
    TeacherModel(str(world["teacher"])).outputs(lambda mask: ["bank"], ["money", "sport", "tech"])
    assert devices == ["cpu"]
    assert teacher_module.autocast_dtype("mps") is None
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert teacher_module.autocast_dtype("cuda:1") is torch.float16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert teacher_module.autocast_dtype("cuda") is torch.bfloat16
    assert teacher_module.autocast_dtype("cpu") is None  # no native bf16 (patched above)


def test_the_teacher_key_follows_the_files_bytes(world, tmp_path):
    ckpt = tmp_path / "teacher.ckpt"
    shutil.copy(world["teacher"], ckpt)
    key = teacher_key(ckpt)
    assert key == teacher_key(world["teacher"])  # the bytes, not the path
    with ckpt.open("ab") as file:
        file.write(b"\0")
    assert teacher_key(ckpt) != key
    folder = export(world["teacher"], tmp_path / "exported")
    folder_key = teacher_key(folder)
    (folder / CONFIG).write_text((folder / CONFIG).read_text().replace("}", " }", 1))
    assert teacher_key(folder) != folder_key
    with pytest.raises(MissingFile, match=r"--model\.teacher .*nowhere: no such file or folder"):
        teacher_key(tmp_path / "nowhere")


def test_an_onnx_teacher_gives_the_same_logits_and_no_pooled_vectors(world, tmp_path, monkeypatch):
    pytest.importorskip("onnxruntime")
    monkeypatch.setattr(teacher_module, "native_bf16", lambda: False)  # fp32 on every CPU
    folder = export(world["teacher"], tmp_path / "exported", onnx=True)
    long = "bank price today " * 40 + "goal match news " * 40  # cut to its first 64 tokens
    texts = ["bank price today", "goal match news", "chip robot week"] * 3 + [long]
    labels = ["money", "sport", "tech"]
    onnx = TeacherModel(str(folder / "model.onnx")).outputs(lambda mask: texts, labels)
    torch_ = TeacherModel(str(world["teacher"])).outputs(lambda mask: texts, labels)
    assert onnx.features is None and torch_.features.shape == (10, 32)
    assert torch.allclose(onnx.logits, torch_.logits, atol=1e-4)


def test_copies_without_a_teacher_and_a_missing_teacher_are_refused_first(world, capsys):
    for extra, message in (
        (("--data.augment_copies", "2"), "data.augment_copies (2) makes copies for distillation"),
        (("--model.teacher", "missing.ckpt"), "--model.teacher missing.ckpt: no such file"),
    ):
        code, _ = fit_in_process(_args(world["data"], world["base"] / "refused", *extra),
                                 world["cache"])  # fmt: skip
        assert code == 2 and message in capsys.readouterr().err
        assert not (world["base"] / "refused").exists()  # refused before anything is written


def test_epochs_left_to_the_data_count_the_copies(world):
    lines = (world["data"] / "train.csv").read_text().splitlines()
    texts = [row["text"] for row in csv.DictReader(lines)]
    profile = DataProfile.of(texts, 3)
    data = Namespace(augment_copies=None, augment_ngram=0.25, max_length=64, batch_size=32)
    view = Namespace(data=data, trainer=Namespace(max_epochs=None, max_steps=-1))
    chosen = {c.option: c for c in distil_settings(view, profile, "plain", ())}
    assert chosen["data.augment_copies"].value == 20  # 150 texts: far below the teacher's cap
    # 150 texts of ~12 tokens and 15 full-length copies of each: ~29k tokens a pass, so the
    # token budget would give 240 passes; a text and its 20 copies are read at most ~120 times.
    assert chosen["trainer.max_epochs"].value == 6  # round(120 / 21)
    assert (
        "so a text and its copies are read at most ~120 times"
        in chosen["trainer.max_epochs"].reason
    )
    assert "data.batch_size" not in chosen  # --model.teacher alone keeps the batch
    assert distillation_epochs(profile, 64, 10, 0.25).value == 11  # round(120 / 11)
    data.augment_copies, view.trainer.max_epochs = 0, 3
    assert distil_settings(view, profile, "plain", ()) == []
    recipe = {c.option: c.value for c in distil_settings(view, profile, "distil", ())}
    assert recipe == {"data.batch_size": 64, "model.dropout": 0.1}
    given = {c.option for c in distil_settings(view, profile, "distil", {"data.batch_size"})}
    assert given == {"model.dropout"}  # the command's batch stays; its dropout likewise below
    assert distil_settings(view, profile, "distil", {"data.batch_size", "model.dropout"}) == []


def test_the_teacher_runs_in_bf16_where_the_cpu_has_it_and_fp32_elsewhere(
    world, monkeypatch, caplog
):
    texts = ["bank price today", "goal match news", "chip robot week"] * 4
    teacher, labels = TeacherModel(str(world["teacher"])), ["money", "sport", "tech"]
    with caplog.at_level("INFO", logger="tscratch"):
        monkeypatch.setattr(teacher_module, "native_bf16", lambda: False)
        fp32 = teacher.outputs(lambda mask: texts, labels).logits
        monkeypatch.setattr(teacher_module, "native_bf16", lambda: True)
        bf16 = teacher.outputs(lambda mask: texts, labels).logits
    assert "over 12 texts (fp32)" in caplog.text and "(bfloat16 autocast)" in caplog.text
    assert fp32.dtype == bf16.dtype == torch.float32
    assert torch.allclose(bf16, fp32, atol=0.1) and not torch.equal(bf16, fp32)
