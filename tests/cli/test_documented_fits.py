"""Every `tscratch fit` example in README.md and docs/*.md runs end to end (issue 37): each command
line tests/test_docs.py finds there, its inputs replaced by tiny local ones and its budget by one
batch a pass, exits 0 and leaves a best checkpoint (`--plan`: a plan, and nothing trained).

What a run changes in an example, and why:
- data: the dataset, in whatever form the line names it (`my.csv`, `DATA`, `--data.data_files`),
  becomes a small folder of the task the line asks for: long English articles in five topics
  (what BBC News, the docs' dataset, is: so `recipe auto` pretrains, as it does there) written
  with the line's column names; same-topic pairs for `--data.text_pair_column`; two-topic mixes
  for a multi-label dataset; Chinese snippets for a Chinese one.
- pretrained weights: MiniLM, e5, a teacher or a checkpoint (`--model.init_from`,
  `--model.teacher`, `--teacher_init`, the start a packaged config names) become one untrained
  tiny checkpoint of the task's labels, with MiniLM's 512 positions. A packaged encoder costs
  15-50 s a run on a CPU; tests/test_pretrained*.py test loading them.
- budget: the line's `max_epochs`, `max_steps`, `limit_*_batches` and `--pretrain_tokens` give
  way to one batch a pass and the pretraining stage's minimum of 3 passes; a teacher reads one
  copy of each text; a model the line neither sizes nor starts from elsewhere gets d_model 32.
- stages run in this process (`stage_process.start` replaced: ~6 s of imports a stage), attention
  maps are not drawn (~1.5 s a validation) and the plan times a teacher of the tiny start's shape
  (~2 s for MiniLM's): tests/cli/test_stage_signals.py runs stages as processes,
  tests/training/test_pictures.py draws the maps and tests/recipe/test_plan.py times steps.

Grouped, to fit the suite's time: alone, the ~48 runnable examples take ~2 min on 2 cores.
Examples of one model/recipe combination (config, recipe, where the model starts, task, device)
run as one command holding every option of each (~15 runs, ~25 s); an example that gives an
option another already set to another value (a second class-weight list, a second EarlyStopping)
opens a second command of that combination. A failing run names every doc line it holds.
Examples that cannot run here are skipped with the reason their own line gives (a GPU, several
machines or processes, a file another command writes, an option named in prose), and most
examples must run.
"""

from __future__ import annotations

import csv
import functools
import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset

from tests.cli.test_chinese import _rows as chinese_rows
from tests.cli.test_distill import FILLER
from tests.helpers import call_main
from tests.test_docs import aliases, all_doc_commands, invocations
from tscratch.cli import run as run_command
from tscratch.cli import stage_process
from tscratch.config import EncoderConfig
from tscratch.configs import CONFIGS
from tscratch.data.bbc_multilabel import write_topic_mixes
from tscratch.data.bbc_pairs import write_same_topic_pairs
from tscratch.data.tokenizer import train_tokenizer
from tscratch.model import TransformerClassifier
from tscratch.recipe import sizing
from tscratch.recipe.commands import packaged_values
from tscratch.training.pictures import ValidationPictures

BUDGET = (
    "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
    "--trainer.limit_val_batches", "1", "--trainer.limit_test_batches", "1",
    "--pretrain_tokens", "1", "--trainer.enable_progress_bar", "false",
)  # fmt: skip
REPLACED = {*BUDGET[::2], "--trainer.max_steps", "--data.dataset", "--data.data_files"}
"""Options of an example that the run sets itself: the budget and the data."""
STARTS = ("--model.init_from", "--model.teacher", "--teacher_init")
"""Options naming weights to start or learn from: the run gives its tiny checkpoint instead."""
PRINTS = ("-h", "--help", "--help-all", "--print_config")
BARE = ("--plan",)
"""The one fit option that takes no value: any other one without a value is prose."""
TOPICS = {  # BBC News's five
    "business": ["bank", "price", "market", "stock", "trade"],
    "entertainment": ["film", "music", "actor", "show", "award"],
    "politics": ["vote", "party", "minister", "election", "law"],
    "sport": ["goal", "match", "team", "coach", "league"],
    "tech": ["phone", "chip", "software", "data", "robot"],
}
SIZES = {"train": 100, "validation": 20, "test": 20}
START = {"d_model": 32, "num_heads": 2, "d_ff": 64, "num_layers": 1, "max_len": 512}
"""The encoder examples start from: MiniLM's 512 positions (examples read rows of 128 tokens)
and a tiny body. The plan times a teacher of this shape for its estimates."""
ALIASES = aliases()
Options = dict[str, str | None]  # flag -> value (None: a flag without one), in order


@dataclass
class Example:
    """One distinct documented `tscratch fit` command line."""

    where: list[str]  # every doc line that shows it ("README.md:12")
    text: str  # the shell line, launchers included
    options: list[tuple[str, str | None]]  # (flag, value), quotes removed

    def value(self, flag: str) -> str | None:
        return next((v for f, v in self.options if f == flag), None)

    def has(self, flag: str) -> bool:
        return any(f == flag for f, _ in self.options)


def parse_options(arguments: list[str]) -> list[tuple[str, str | None]]:
    """`--a 1 --b="x y" --c` -> [("--a", "1"), ("--b", "x y"), ("--c", None)]."""
    options: list[tuple[str, str | None]] = []
    for argument in arguments:
        if argument.startswith("--") or argument == "-h":
            flag, equals, value = argument.partition("=")
            options.append((flag, " ".join(shlex.split(value)) if equals else None))
        elif options and options[-1][1] is None:
            options[-1] = (options[-1][0], " ".join(shlex.split(argument)))
    return options


def fits_in(text: str, where: str, found: dict[tuple, Example]) -> None:
    """Add the `tscratch fit` invocations of shell line ``text`` to ``found`` (by arguments)."""
    for command, arguments in invocations(text, ALIASES):
        if command == "fit":
            example = found.setdefault(tuple(arguments), Example([], text, []))
            example.options = parse_options(arguments)
            if where not in example.where:
                example.where.append(where)


def documented_fits() -> list[Example]:
    """The distinct `tscratch fit` command lines of the docs, in doc order."""
    found: dict[tuple, Example] = {}
    for doc in all_doc_commands():
        fits_in(doc.text, doc.where, found)
    return list(found.values())


def skip_reason(example: Example) -> str | None:
    """Why ``example`` cannot run in a test on this machine, read from its line; None: it can."""
    for flag, value in example.options:
        if flag in PRINTS:
            return "prints and trains nothing (tests/test_docs.py reads every --help)"
        if value is None and flag not in BARE:
            return "names an option without its value: prose, not a command"
    nodes = example.value("--trainer.num_nodes")
    if nodes not in (None, "1") or example.text.split()[0] in ("torchrun", "srun"):
        return "needs several machines (--trainer.num_nodes, a launcher)"
    gpu = example.value("--trainer.accelerator") in ("gpu", "cuda")
    devices = example.value("--trainer.devices") or ""
    if (gpu or devices == "-1") and not torch.cuda.is_available():
        return "needs a GPU (--trainer.accelerator gpu, or --trainer.devices -1: every GPU)"
    if devices.isdigit() and int(devices) > 1:
        return (
            "starts a process per device (DDP reruns the command line, which a test cannot do "
            "in its own process); tests/training/test_ddp.py runs the CLI on 2 CPU processes"
        )
    config = example.value("--config")
    if config is not None and not (CONFIGS / f"{config}.yaml").is_file():
        return "--config names a file another command writes, not a packaged config"
    return None


def task_of(example: Example) -> str:
    """The kind of data the line asks for: single English texts, pairs, multi-label, Chinese."""
    dataset = (example.value("--data.dataset") or "").lower()
    if example.has("--data.text_pair_column"):
        return "pairs"
    if example.has("--data.label_delimiter") or "multilabel" in dataset:
        return "multilabel"
    return "zh" if any(name in dataset for name in ("chn", "chinese", "zh")) else "en"


@functools.cache
def config_values(config: str | None) -> dict:
    """The values of packaged config ``config`` (default.yaml where the line names none)."""
    return packaged_values(config or "default")


def config_start(config: str | None) -> str | None:
    """The weights packaged config ``config`` starts from (minilm's: MiniLM), if any."""
    return config_values(config).get("model", {}).get("init_from")


def combination(example: Example) -> tuple:
    """What examples are grouped by: config, recipe, where the model starts, task, device."""
    config = example.value("--config")
    recipe = example.value("--recipe") or config_values(config).get("recipe") or "plain"
    start = "init_from" if config_start(config) or example.has("--model.init_from") else ""
    start += " teacher" * example.has("--model.teacher")
    return config, recipe, start, task_of(example), example.value("--trainer.accelerator")


def own_options(example: Example) -> list[tuple[str, str | None]]:
    """The example's options but those its run sets itself; the weights it names, whatever
    they are, are one tiny checkpoint."""
    return [
        (flag, "START" if flag in STARTS else value)
        for flag, value in example.options
        if flag not in REPLACED
    ]


@dataclass
class Run:
    """One command that runs a group of examples of one combination."""

    key: tuple
    examples: list[Example] = field(default_factory=list)
    options: Options = field(default_factory=dict)

    def takes(self, example: Example) -> bool:
        """Whether ``example``'s options join this run's without changing one of them (a
        second `+=` would add a second callback); `--plan` runs hold `--plan` examples only."""
        if example.has("--plan") != ("--plan" in self.options):
            return False
        return not any(
            flag in self.options and (flag.endswith("+") or self.options[flag] != value)
            for flag, value in own_options(example)
        )

    def add(self, example: Example) -> None:
        self.examples.append(example)
        for flag, value in own_options(example):
            self.options.setdefault(flag, value)

    @property
    def name(self) -> str:
        more = len(self.examples) - 1
        return self.examples[0].where[0] + (f"+{more}" if more else "")


def group(examples: list[Example]) -> list[Run]:
    """The runs that hold ``examples`` (see the module docstring), in doc order."""
    runs: list[Run] = []
    for example in examples:
        key = combination(example)
        run = next((r for r in runs if r.key == key and r.takes(example)), None)
        if run is None:
            runs.append(run := Run(key))
        run.add(example)
    return runs


EXAMPLES = documented_fits()
SKIPPED = [(example, reason) for example in EXAMPLES if (reason := skip_reason(example))]
RUNS = group([example for example in EXAMPLES if skip_reason(example) is None])


# --- the tiny inputs and the runs ------------------------------------------------------------


def write_data(folder: Path, task: str, options: Options) -> Path:
    """The tiny data of ``task`` in ``folder``, with the columns ``options`` read."""
    folder.mkdir(parents=True)
    if task == "pairs":
        write_same_topic_pairs(folder, train_pairs=48, eval_pairs=8, words=24, seed=0)
    elif task == "multilabel":
        form = "csv" if options.get("--data.label_delimiter") else "jsonl"
        write_topic_mixes(folder, train_rows=48, eval_rows=8, words=24, seed=0, fmt=form)
    elif task == "zh":
        for split, n in SIZES.items():
            rows = chinese_rows(n, random.Random(split))
            Dataset.from_dict(rows).to_csv(str(folder / f"{split}.csv"), index=False)
    else:
        for split, n in SIZES.items():
            write_articles(folder / f"{split}.csv", n, options)
    return folder


def write_articles(file: Path, n: int, options: Options) -> None:
    """``n`` articles of 140 words, 10 of them their topic's, in the columns ``options`` read."""
    rng = random.Random(file.name)
    rows = [[options.get(f"--data.{name}_column") or name for name in ("text", "label")]]
    for i in range(n):
        topic = list(TOPICS)[i % len(TOPICS)]
        words = rng.choices(FILLER, k=130) + rng.choices(TOPICS[topic], k=10)
        rng.shuffle(words)
        rows.append([" ".join(words), topic])
    with file.open("w", newline="") as out:
        csv.writer(out).writerows(rows)


def untrained(texts: list[str], labels: list[str], task: str) -> dict:
    """A fit.py-shaped checkpoint of an untrained classifier (as tests/test_export.py makes)."""
    torch.manual_seed(0)
    tokenizer = train_tokenizer(texts, "wordpiece", vocab_size=300, max_chars=100_000)
    config = EncoderConfig(
        **START, vocab_size=tokenizer.get_vocab_size(), pad_id=tokenizer.token_to_id("[PAD]"),
        type_vocab_size=2 * (task == "pairs"),
    )  # fmt: skip
    model = TransformerClassifier(config, len(labels), pooling="mean")
    hparams = {**config.to_dict(), "num_classes": len(labels), "label_names": labels}
    return {
        "hyper_parameters": {**hparams, "pooling": "mean", "lr": 1e-3},
        "state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
        "tokenizer_json": tokenizer.to_str(),
        "max_length": 128,
        "label_names": labels,
    }


def stage_in_process(argv: list[str]) -> SimpleNamespace:
    """`stage_process.start` that runs the stage here: a process that has already ended."""
    code = run_command(argv[0], list(argv[1:]))
    return SimpleNamespace(wait=lambda: code, send_signal=lambda signum: None)


@dataclass
class World:
    """The module's folder: the runs, their data and cache, and the tiny checkpoints."""

    base: Path
    starts: dict[str, Path] = field(default_factory=dict)  # task -> its tiny checkpoint

    def start(self, task: str) -> Path:
        """The weights examples of ``task`` start and distil from: `untrained`, with a
        tokenizer of the task's texts and its labels."""
        if task not in self.starts:
            folder = write_data(self.base / f"start-{task}", task, {})
            with (folder / "train.csv").open(newline="") as file:
                rows = list(csv.DictReader(file))
            texts = [row[name] for row in rows for name in ("text", "text_pair") if name in row]
            labels = sorted({row["label"] for row in rows})
            torch.save(untrained(texts, labels, task), folder / "start.ckpt")
            self.starts[task] = folder / "start.ckpt"
        return self.starts[task]

    def command(self, run: Run) -> list[str]:
        """The run's options, its starts given as the tiny checkpoint and its model small."""
        options = dict(run.options)
        config, recipe, _, task, _ = run.key
        for flag in STARTS:
            if flag in options:
                options[flag] = str(self.start(task))
        if config_start(config) and "--model.init_from" not in options:
            options["--model.init_from"] = str(self.start(task))
        if recipe == "distil":
            options.setdefault("--teacher_init", str(self.start(task)))
        if recipe == "distil" or "--model.teacher" in options:  # copies the teacher reads
            options.setdefault("--data.augment_copies", "1")
        if "--model.init_from" not in options:  # else the start's architecture is adopted
            options.setdefault("--model.d_model", "32")
            options.setdefault("--model.d_ff", "64")
        return [flag if value is None else f"{flag}={value}" for flag, value in options.items()]

    def fit(self, name: str, run: Run):
        """`tscratch fit` of ``run`` on its tiny data, in process: the result, the run's root."""
        root = self.base / name
        root.mkdir()
        data = write_data(self.base / f"{name}-data", run.key[3], run.options)
        # the data after the options: a --config among them would set it again
        args = [*self.command(run), "--data.dataset", data, "--trainer.default_root_dir", root]
        env = {"TSCRATCH_CACHE": str(self.base / "cache"), "TSCRATCH_DEBUG": None}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(stage_process, "start", stage_in_process)
            patch.setattr(ValidationPictures, "_draw_attention", lambda *args: None)
            teacher = EncoderConfig(**START, vocab_size=300)
            patch.setattr(sizing, "teacher_estimate", lambda *args: teacher)
            return call_main("fit.py", *args, *BUDGET, cwd=root, env=env), root


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("documented"))


@pytest.mark.slow
@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_the_documented_fit_runs(world, run):
    done, root = world.fit(f"run-{RUNS.index(run)}", run)
    shown = "\n".join(f"  {e.where[0]}: {e.text}" for e in run.examples)
    assert done.returncode == 0, f"the run of\n{shown}\nfailed:\n{done.stderr[-4000:]}"
    if "--plan" in run.options:
        assert not list(root.glob("lightning_logs/version_*")), f"--plan trained:\n{shown}"
    else:
        assert list(root.glob("lightning_logs/version_*/checkpoints/best-*.ckpt")), shown


@pytest.mark.parametrize("reason", sorted({reason for _, reason in SKIPPED}))
def test_an_example_that_cannot_run_here_says_why(reason):
    lines = [example.where[0] for example, why in SKIPPED if why == reason]
    pytest.skip(f"{', '.join(lines)}: {reason}")


def test_most_documented_fits_run():
    # If the extractor or the skip rules broke, the runs above would pass on nothing.
    ran = [example for run in RUNS for example in run.examples]
    assert len(EXAMPLES) > 30
    assert len(ran) >= 2 * len(SKIPPED), [example.where[0] for example in ran]


def made_up(*lines: str) -> list[Example]:
    """The examples of made-up doc lines."""
    found: dict[tuple, Example] = {}
    for number, line in enumerate(lines, 1):
        fits_in(line, f"made-up.md:{number}", found)
    return list(found.values())


def test_examples_share_a_run_unless_one_changes_an_option_of_another():
    focal, weights, auto, plain, stopping, tiny = made_up(
        "tscratch fit --model.loss focal --data.dataset my.csv --trainer.max_epochs 5",
        'tscratch fit --data.dataset DATA --model.class_weights "[1, 4]" '
        "--trainer.callbacks+=EarlyStopping",
        "tscratch fit --model.class_weights auto",
        "tscratch fit --recipe plain",
        "tscratch fit --trainer.callbacks+=EarlyStopping --trainer.callbacks.patience 3",
        "tscratch fit --config tiny --model.loss focal",
    )
    runs = group([focal, weights, auto, plain, stopping, tiny])
    assert [run.examples for run in runs] == [[focal, weights], [auto, stopping], [plain], [tiny]]
    assert runs[0].options == {  # the data and the budget are the run's own
        "--model.loss": "focal", "--model.class_weights": "[1, 4]",
        "--trainer.callbacks+": "EarlyStopping",
    }  # fmt: skip


def test_an_example_that_cannot_run_here_is_known_by_its_line():
    gpu, machines, ddp, prose, written, fine = made_up(
        "tscratch fit --trainer.accelerator gpu --model.compile true",
        "srun tscratch fit --trainer.strategy ddp --trainer.num_nodes 2",
        "tscratch fit --trainer.strategy ddp --trainer.devices 2 --trainer.accelerator cpu",
        "tscratch fit --model.init_from",
        "tscratch fit --config lightning_logs/sweeps/default/best.yaml",
        "tscratch fit --plan --model.init_from e5 --config minilm",
    )
    assert (skip_reason(gpu) or "").startswith("needs a GPU") != torch.cuda.is_available()
    assert "several machines" in skip_reason(machines)
    assert "process per device" in skip_reason(ddp)
    assert "prose" in skip_reason(prose)
    assert "another command writes" in skip_reason(written)
    assert skip_reason(fine) is None
