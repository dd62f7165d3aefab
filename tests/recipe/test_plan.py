"""The plan: one value that says what fit will do, built before any work, applied in one place,
and the command line's own options kept."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
import torch
import yaml
from jsonargparse import Namespace
from lightning.pytorch.callbacks import EarlyStopping

from tests.cli.test_distill import _args, _write
from tests.helpers import fit_in_process
from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli.fit_plan import save_plan
from tscratch.cli.fit_quick import given_options
from tscratch.config import EncoderConfig
from tscratch.configs import CONFIGS
from tscratch.data.encoding import pad_width
from tscratch.errors import UserError
from tscratch.nn.positions import POSITIONS, position_is_learned, position_scheme
from tscratch.recipe import commands, estimate
from tscratch.recipe.estimate import AdamUpdate, clock, step_seconds
from tscratch.recipe.plan import Plan, Stage
from tscratch.recipe.planner import check_recipe_options
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.settings import Choice
from tscratch.recipe.sizing import LOOP_SECONDS, SETUP_SECONDS, Sizing, schedule, vectors_seconds
from tscratch.recipe.stages import main_stage, padded_width, window_rows
from tscratch.recipe.stopping import early_stopping_given, stopping_settings, validations


def test_given_options_are_the_flags_and_the_keys_of_config_files(tmp_path):
    config = tmp_path / "mine.yaml"
    config.write_text("model:\n  position: rope\ndata:\n  batch_size: 16\nseed_everything: 3\n")
    args = ["--config", str(config), "--data.batch_size=32", "--trainer.callbacks+=X",
            "--model.ffn", "swiglu", "--plan", "--recipe", "auto"]  # fmt: skip
    assert given_options(args) == {
        "model.position", "data.batch_size", "trainer.callbacks", "model.ffn"
    }  # fmt: skip
    assert given_options(["--config", str(tmp_path / "missing.yaml")]) == frozenset()
    # default.yaml, named or not, holds defaults the plan may change (the quality suite names it)
    default = str(CONFIGS / "default.yaml")
    assert given_options(["--config", default]) == given_options([f"--config={default}"]) == set()
    assert given_options(["--config", default, "--data.batch_size", "32"]) == {"data.batch_size"}


@pytest.mark.parametrize(
    ("rows", "copies"), [(150, 20), (4905, 20), (6920, 16), (40_000, 2), (67_000, 0), (10**6, 0)]
)
def test_the_teacher_reads_at_most_a_fixed_number_of_texts(rows, copies):
    assert commands.teacher_copies(rows) == copies
    assert rows * (1 + copies) <= max(commands.TEACHER_READINGS, rows)


def test_the_teachers_fine_tuning_is_cut_on_large_data_only():
    _config = Namespace(
        data=Namespace(dataset="x", seed=42), model=Namespace(), trainer=Namespace(),
        seed_everything=0,
    )  # fmt: skip
    small, large = DataProfile(4905, 6, 13, 26, 4905 * 13), DataProfile(67_000, 2, 13, 26, 871_000)
    assert commands.teacher_schedule(4905) == (16, 2, None)  # 614 steps: the config's passes
    # Passes cut short, not a step cap: each pass still ends in a validation and a checkpoint.
    assert commands.teacher_schedule(67_000) == (16, 2, commands.TEACHER_STEPS // 2)
    assert "--trainer.limit_train_batches" not in commands.teacher_command(_config, small, "minilm")
    capped = commands.teacher_command(_config, large, "minilm")
    assert capped[capped.index("--trainer.limit_train_batches") + 1] == "500"
    assert "--trainer.max_steps" not in capped
    _config.trainer.limit_train_batches = 3  # a smoke run's own limit is kept
    smoke = commands.teacher_command(_config, large, "minilm")
    assert smoke.count("--trainer.limit_train_batches") == 1
    assert smoke[smoke.index("--trainer.limit_train_batches") + 1] == "3"


def test_a_position_scheme_says_whether_it_learns():
    learned = {name for name in POSITIONS if position_is_learned(name)}
    assert learned == {"learned", "t5"} and not position_is_learned(None)
    for name in POSITIONS:  # the flag agrees with what the built scheme holds
        config = EncoderConfig(vocab_size=10, d_model=16, num_heads=2, d_ff=32, position=name)
        has = any(True for _ in position_scheme(config).parameters())
        assert has == position_is_learned(name), name


def test_a_measured_step_leaves_the_random_generators_as_they_were():
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert step_seconds(config, 4, 8) > 0 and step_seconds(config, 4, 8, train=False) > 0
    assert step_seconds(config, 4, 8, masked_lm=True) > 0
    assert torch.equal(torch.rand(3), expected)


def test_the_timed_update_is_the_fused_adamw_runs_make():
    # Gradients with a norm below 1 (clipping leaves them as they are): two steps of the
    # estimate's update and of torch's fused AdamW at the same settings agree bit for bit.
    torch.manual_seed(0)
    ours = [torch.randn(7, 5), torch.randn(5)]
    theirs = [p.clone().requires_grad_() for p in ours]
    update = AdamUpdate(ours)
    optimizer = torch.optim.AdamW(theirs, lr=1e-4, weight_decay=0.01, fused=True)
    for _ in range(2):
        grads = [0.01 * torch.randn_like(p) for p in ours]
        for p, t, g in zip(ours, theirs, grads, strict=True):
            p.grad, t.grad = g.clone(), g.clone()
        update.step()
        optimizer.step()
    assert all(torch.equal(p, t.detach()) for p, t in zip(ours, theirs, strict=True))


def test_a_measured_step_takes_the_parsers_numeric_precisions():
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1)
    assert step_seconds(config, 2, 4, 32) > 0 and step_seconds(config, 2, 4, "bf16-mixed") > 0


@pytest.mark.parametrize(
    ("epochs", "max_steps", "expected"),
    [(3, -1, (3, 30)), (3, 25, (3, 25)), (None, 25, (3, 25)), (-1, 25, (3, 25)),
     (None, -1, (1000, 10_000)), (3, None, (3, 30))],
)  # fmt: skip
def test_passes_and_steps_follow_whichever_limit_ends_the_run(epochs, max_steps, expected):
    trainer = Namespace(max_epochs=epochs, max_steps=max_steps)
    assert schedule(10, trainer) == expected


@pytest.mark.parametrize(
    ("interval", "every", "expected"),
    [(None, 1, 6), (1.0, 1, 6), (0.25, 1, 30), (0.3, 1, 18), (4, 1, 12), (50, 1, 6), (25, None, 2),
     (None, 2, 3), (0.5, 3, 4)],
)  # fmt: skip
def test_validations_count_the_trainers_interval_and_epochs_between(interval, every, expected):
    trainer = Namespace(val_check_interval=interval, check_val_every_n_epoch=every)
    assert validations(6, 10, trainer) == expected  # 6 passes of 10 batches


def test_an_early_stopping_callback_of_the_command_is_found():
    named = Namespace(class_path="lightning.pytorch.callbacks.EarlyStopping")
    assert early_stopping_given(Namespace(callbacks=[named]))
    assert early_stopping_given(Namespace(callbacks=[EarlyStopping(monitor="val/acc")]))
    other = Namespace(class_path="lightning.pytorch.callbacks.LearningRateMonitor")
    assert not early_stopping_given(Namespace(callbacks=[other]))
    assert not early_stopping_given(Namespace(callbacks=None))


def test_texts_read_as_windows_are_planned_as_their_windows():
    profile = DataProfile(rows=3, classes=2, median_tokens=600, p95_tokens=1200,
                          total_tokens=1810, lengths=(10, 600, 1200))  # fmt: skip
    # 512-token windows sharing 128: 1, 2 and 3 windows; a short text's own tokens, else full.
    assert window_rows(profile, 512, 128) == (6, 10 + 5 * 512)
    assert window_rows(profile, 512, None) == window_rows(profile, 512, 128)  # a quarter
    assert window_rows(profile, 2048, 0) == (3, 1810)


@pytest.mark.parametrize(
    ("long_text", "steps", "step_rows", "budget"),
    [  # 6 windows of 3 texts; batches of 2 texts (4 windows), evaluation 4 texts (8 windows)
        ("windows", 3, 2, "1 pass over 6 windows of 3 texts"),
        ("pooled", 2, 4, "1 pass over 3 texts (6 windows, each text scored as one)"),
    ],
)
def test_texts_read_in_windows_are_timed_as_the_windows_a_step_reads(
    monkeypatch, long_text, steps, step_rows, budget
):
    profile = DataProfile(rows=3, classes=2, median_tokens=600, p95_tokens=1200,
                          total_tokens=1810, lengths=(10, 600, 1200))  # fmt: skip
    view = Namespace(
        data=Namespace(augment_copies=0, pad_widths=None, max_length=512, long_text=long_text,
                       stride=128, batch_size=2, eval_batch_size=None, vocab_size=600),
        trainer=Namespace(max_epochs=1, max_steps=-1),
        model=Namespace(d_model=32, num_heads=2, d_ff=64, num_layers=1, embed_init=None),
    )  # fmt: skip
    sizing = Sizing(view, Namespace(validation=[0] * 4, test=[0] * 4), profile, "32-true")
    timed = {}

    def time(key: str, config: EncoderConfig, rows: int, length: int, **kw) -> float:
        timed[key] = (rows, length)
        return 1.0

    monkeypatch.setattr(sizing, "time", time)

    stage = main_stage(sizing, "fit", "")

    assert (stage.steps, stage.budget) == (steps, budget)
    width = pad_width(math.ceil((10 + 5 * 512) / 6), ())
    assert timed == {"fit step": (step_rows, width), "fit eval batch": (8, width)}


def test_steps_are_timed_at_the_width_batches_pad_rows_to():
    profile = DataProfile(rows=4, classes=2, median_tokens=13, p95_tokens=40,
                          total_tokens=70, lengths=(5, 13, 12, 40))  # fmt: skip
    # multiples of 8: 8, 16, 16, 40 (cut at 32: 32); fixed widths pad to the next of them
    assert padded_width(profile, 64, ()) == round((8 + 16 + 16 + 40) / 4)
    assert padded_width(profile, 32, ()) == round((8 + 16 + 16 + 32) / 4)
    assert padded_width(profile, 64, (16, 32, 64)) == round((16 + 16 + 16 + 64) / 4)
    # 20 copies, a quarter cut to n-grams of at most 6 tokens (8 wide): 15 full-length copies
    # and 5 short per text, so the mean is what 16 full rows and 5 of width 8 average to
    assert padded_width(profile, 64, (), copies=20, ngram=0.25) == round(
        (16 * (8 + 16 + 16 + 40) + 5 * 4 * 8) / (4 * 21)
    )
    # the planned student is timed at that width, not its texts' tokens spread over the copies
    assert padded_width(profile, 64, (), copies=20, ngram=0.25) > 70 / (4 * 21)


def test_clock_reads_as_a_person_would_say_it():
    assert [clock(s) for s in (0.2, 45, 89.6, 600, 7_300)] == [
        "1 s", "45 s", "90 s", "10 min", "2 h 02 min"
    ]  # fmt: skip


def _plan() -> Plan:
    stages = (
        Stage("pretrain", "masked-LM", "10 tokens", 30, 120.0, ("pretrain", "--x"), "a rule"),
        Stage("fine-tune", "on the labels", "3 passes over 9 texts", 9, 60.0),
    )
    settings = (
        Choice("data.max_length", 64, "covers 95%"),
        Choice("model.class_weights", [0.5, 1.5], "inverse frequency"),
    )
    profile, notes = DataProfile(9, 2, 5, 8, 45), ("the model starts from the stage",)
    return Plan("pretrain", "asked for", profile, "en", stages, settings, notes,
                "32-true, 1 thread", {"x step": 0.1})  # fmt: skip


def test_the_plan_renders_applies_and_saves_what_it_holds(tmp_path):
    plan = _plan()
    shown = plan.render()
    assert shown.splitlines()[0] == "plan: recipe pretrain (asked for)"
    assert re.search(r"pretrain\s+masked-LM\s+10 tokens\s+30\s+2 min", shown)
    assert re.search(r"total\s+3 min \(32-true, 1 thread\)", shown)
    assert "  pretrain: a rule" in shown and "model.class_weights  [0.50, 1.50]" in shown
    assert "then: the model starts from the stage" in shown
    config = Namespace(data=Namespace(max_length="auto"), model=Namespace(class_weights="auto"))
    plan.apply(config)
    assert config.data.max_length == 64 and config.model.class_weights == [0.5, 1.5]
    saved = yaml.safe_load(save_plan(plan, tmp_path, {"pretrain": 150.0}).read_text())
    assert saved["stages"][0]["command"] == ["tscratch", "pretrain", "--x"]
    assert saved["stages"][1]["estimated_seconds"] == 60.0 and saved["took_seconds"] == {
        "pretrain": 150.0
    }
    assert plan.compare({"pretrain": 150.0}).splitlines() == [
        "time: estimated / took", "  pretrain      2 min / 2 min    (1.25x)"
    ]  # fmt: skip
    assert plan.compare({}) == ""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("plan")
    return {"base": base, "data": _write(base / "topics"), "cache": base / "cache"}


def test_plan_prints_the_plan_and_trains_nothing(data):
    root = data["base"] / "planned"
    code, log = fit_in_process(_args(data["data"], root, "--recipe", "pretrain", "--plan"),
                               data["cache"])  # fmt: skip
    assert code == 0, log
    assert "plan: recipe pretrain (asked for with --recipe)" in log
    assert re.search(r"  pretrain\s+masked-LM on the training texts", log)
    assert re.search(r"  fine-tune\s+on the labels\s+1 pass over 128 of 150 texts", log)
    assert re.search(r"  model.position\s+alibi\s+the stage's and the model's scheme", log)
    assert not re.search(r"  patience\s", log)  # _args' tiny config: no `patience: auto`
    assert not root.exists()  # no run folder, no stage folder


def test_patience_auto_is_planned_from_the_validation_split_and_stated(data):
    args = _args(data["data"], data["base"] / "patient", "--trainer.max_epochs", "20",
                 "--patience", "auto", "--plan")  # fmt: skip
    code, log = fit_in_process(args, data["cache"])
    assert code == 0, log
    assert re.search(r"  fit\s+on the labels\s+20 passes over 128 of 150 texts", log), log
    # 20 validations of a small split: no stopper (`settings.patience` states the values it
    # plans for larger splits)
    assert re.search(
        r"  patience\s+None\s+\d+ validation texts \(fewer than 1,000\): one text moves "
        r"accuracy by [\d.]+ points, so validations without a better val/acc are as likely "
        r"noise as a plateau; the whole budget runs, the best checkpoint kept",
        log,
    ), log
    assert "at most 20 passes" not in log  # no stopper: the budget is the run
    own = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor", "val/loss"]
    code, log = fit_in_process([*args, *own], data["cache"])
    assert code == 0, log
    assert re.search(r"  patience\s+None\s+the command's own EarlyStopping callback", log), log


def test_a_refusal_the_main_run_would_make_comes_before_the_stage(data, capsys):
    root = data["base"] / "tokenizer"
    args = _args(data["data"], root, "--recipe", "pretrain", "--data.tokenizer", "bert.json")
    code, _ = fit_in_process(args, data["cache"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [
        "error: --recipe pretrain trains a tokenizer in its stage; drop --data.tokenizer "
        "bert.json or pass --recipe plain"
    ]
    assert not (root / "lightning_logs" / "stages").exists()


def test_windows_are_not_distilled_and_an_asked_teacher_is_refused_first(data, capsys):
    if not commands.teacher_installed("minilm"):
        pytest.skip("auto distils short English texts only when MiniLM is installed")
    root = data["base"] / "windows"
    args = _args(data["data"], root, "--data.long_text", "windows", "--plan")
    code, log = fit_in_process([*args, "--recipe", "auto"], data["cache"])
    assert code == 0, log
    assert re.search(r"plan: recipe pretrain \(.*: texts read in windows, and a teacher gives", log)
    assert "data.long_text" not in log  # the command chose: nothing to state
    code, _ = fit_in_process([*args, "--recipe", "distil"], data["cache"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [
        "error: --recipe distil cannot be used with --data.long_text windows (a teacher gives "
        "one set of logits per text, and a student reads no windows); drop one of them"
    ]
    assert not root.exists()


def test_the_plan_states_that_texts_longer_than_the_rows_are_cut(data):
    args = _args(data["data"], data["base"] / "cut", "--recipe", "plain", "--plan")
    code, log = fit_in_process([*args, "--data.max_length", "12"], data["cache"])
    assert code == 0, log
    stated = (r"  data.long_text\s+truncate\s+\d+% of training texts \(\d+\) are longer than 12 "
              r"tokens: only the first 12 are read \(--data.long_text windows")  # fmt: skip
    assert re.search(stated, log), log
    code, log = fit_in_process([*args, "--data.max_length", "64"], data["cache"])
    assert code == 0 and "data.long_text" not in log  # no text is cut: no line


def _long_texts(folder: Path, source: Path) -> Path:
    """``source``'s CSVs with each text said 12 times: a median of ~130 tokens, long texts."""
    folder.mkdir()
    for split in ("train", "validation", "test"):
        rows = list(csv.reader((source / f"{split}.csv").read_text().splitlines()))
        rows[1:] = [[" ".join([text] * 12), label] for text, label in rows[1:]]
        with (folder / f"{split}.csv").open("w", newline="") as file:
            csv.writer(file).writerows(rows)
    return folder


@pytest.mark.slow
def test_the_stage_trains_the_model_the_command_asks_for(data):
    # one run for both of the examples: RoPE (a scheme the stage would not choose) and
    # SwiGLU (a feed-forward the stage's config does not name)
    asked = {"position": "rope", "ffn": "swiglu"}
    long = data["base"] / "long-asked"
    texts = _long_texts(long, data["data"])
    root = data["base"] / "asked"
    flags = [part for flag, value in asked.items() for part in (f"--model.{flag}", value)]
    # --pretrain_tokens 1: the stage's fewest passes (3), all this test needs of it
    args = _args(texts, root, "--recipe", "auto", *flags, "--data.max_length", "auto",
                 "--trainer.limit_train_batches", "2", "--pretrain_tokens", "1")  # fmt: skip
    code, log = fit_in_process(args, data["cache"])
    assert code == 0, log
    assert "plan: recipe pretrain (150 training texts, English, median 1" in log
    settings = log.split("\nsettings the plan chooses (")[1].split("then:")[0]
    # named by the command: the plan leaves it alone
    assert "data.max_length" in settings and "model.position" not in settings
    done = json.loads(
        next((root / "lightning_logs/stages").glob("pretrain-*/done.json")).read_text()
    )
    last = read_checkpoint(root / "lightning_logs/version_0/checkpoints/last.ckpt")
    for flag, value in asked.items():
        assert done["command"][done["command"].index(f"--model.{flag}") + 1] == value
        assert last["hyper_parameters"][flag] == value
    plan = yaml.safe_load((root / "lightning_logs/version_0/plan.yaml").read_text())
    assert [s["name"] for s in plan["stages"]] == ["pretrain", "fine-tune"]
    assert set(plan["took_seconds"]) == {"pretrain", "fine-tune"}
    assert re.search(r"time: estimated / took\n  pretrain .*\n  fine-tune ", log)


def test_vectors_from_an_encoder_are_priced_where_a_table_starts_from_them():
    profile = DataProfile(rows=100, classes=2, median_tokens=10, p95_tokens=12,
                          total_tokens=1000, lengths=(10,) * 100)  # fmt: skip
    splits = Namespace(validation=[0] * 10, test=[0] * 10)
    view = Namespace(
        data=Namespace(augment_copies=0, pad_widths=None, max_length=16, long_text=None,
                       batch_size=10, eval_batch_size=None, vocab_size=600),
        trainer=Namespace(max_epochs=2, max_steps=-1),
        model=Namespace(d_model=32, num_heads=2, d_ff=64, num_layers=1, embed_init=None),
    )  # fmt: skip
    sizing = Sizing(view, splits, profile, "32-true")
    sizing.measured |= {"fit step": 1.0, "fit eval batch": 0.5, "student step": 1.0,
                        "student eval batch": 0.5, "minilm vectors batch": 7.0}  # fmt: skip
    # 20 steps, 2 validations and a test of one batch each, the loop's work around each of
    # those 23 batches, the setup allowance
    loops = SETUP_SECONDS + 20 * 1.0 + 3 * 0.5 + 23 * LOOP_SECONDS
    assert main_stage(sizing, "fit", "").seconds == pytest.approx(loops)
    # 600 entries: three passes of 256 through the encoder
    assert vectors_seconds(sizing, "minilm", 600) == 3 * 7.0
    student = main_stage(sizing, "student", "", vectors="minilm", frozen=True)
    assert student.seconds == pytest.approx(loops + 3 * 7.0)
    view.model.embed_init = "minilm"  # the command's own --model.embed_init
    assert main_stage(sizing, "fit", "").seconds == student.seconds
    assert set(sizing.measured) == {"fit step", "fit eval batch", "student step",
                                    "student eval batch", "minilm vectors batch"}  # fmt: skip


@pytest.mark.parametrize(("long_text", "planned"), [("windows", 6), ("pooled", 4), (None, 4)])
def test_patience_counts_the_batches_a_pass_of_windows_makes(long_text, planned):
    """6 windows of 3 texts in batches of 2, a validation every batch, 2 passes: a row per
    window makes 3 batches a pass, texts (whole or pooled) 2."""
    profile = DataProfile(rows=3, classes=2, median_tokens=600, p95_tokens=1200,
                          total_tokens=1810, lengths=(10, 600, 1200))  # fmt: skip
    view = Namespace(
        patience="auto",
        data=Namespace(augment_copies=0, max_length=512, long_text=long_text, stride=128,
                       batch_size=2),
        trainer=Namespace(max_epochs=2, max_steps=-1, val_check_interval=1,
                          check_val_every_n_epoch=None, callbacks=None),
    )  # fmt: skip
    sizing = Sizing(view, Namespace(validation=[0] * 1000, test=[]), profile, "32-true")

    (choice,) = stopping_settings(sizing, "val/acc")

    assert f"of the {planned} validations planned" in choice.reason, choice.reason


def test_the_plan_refuses_pooled_batches_sized_by_tokens_before_any_stage():
    config = Namespace(
        recipe="auto", patience=None, trainer=Namespace(callbacks=None),
        model=Namespace(init_from=None, teacher=None, embed_init=None),
        data=Namespace(long_text="pooled", max_tokens=4096, text_pair_column=None,
                       label_delimiter=None),
    )  # fmt: skip
    with pytest.raises(UserError, match=r"^data.max_tokens \(4096\) sizes batches of rows; "):
        check_recipe_options(config)
    config.data.max_tokens = None
    assert check_recipe_options(config) == (None, None)


@pytest.mark.parametrize(
    ("shares", "note"),
    [
        ([], ""),  # nothing measured
        ([1.0, 0.97, 0.99], ""),  # a machine to itself
        ([0.51, 0.5, 0.95], "; timed while other work shared the cores (its timing thread had a "
                            "core 51% of the time), so likely high"),
    ],
)  # fmt: skip
def test_the_plan_says_when_its_steps_were_timed_on_a_busy_machine(monkeypatch, shares, note):
    monkeypatch.setattr(estimate, "SHARES", list(shares))
    assert estimate.busy_note() == note
    assert estimate.SHARES == []  # read once: the next plan measures afresh


def test_each_measurement_records_how_much_of_a_core_its_thread_had(monkeypatch):
    monkeypatch.setattr(estimate, "SHARES", [])
    config = EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=1,
                           max_len=16)  # fmt: skip
    step_seconds(config, 2, 8)
    assert len(estimate.SHARES) == 1 and 0 < estimate.SHARES[0] <= 1.05
