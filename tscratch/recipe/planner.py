"""`make_plan`: one profile of the training split in, one frozen `Plan` out.

Everything `tscratch fit` decides from the data is decided here, once, before any work: the recipe
(`tscratch.recipe.rule`), its stages and their budgets (`tscratch.recipe.commands`), the `auto`
settings (`tscratch.recipe.settings`), the class weights, what distillation changes
(`tscratch.recipe.distil`: copies per text, the student's batch, dropout and passes) and the
time each part will take (`tscratch.recipe.stages`). The command line's own values always win:
an option the user gave (`given`) is never chosen for them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Sequence

import torch
from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.language import language
from tscratch.data.sources import LabeledSplits, column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.tokenizer import load_tokenizer, reads_words
from tscratch.data.windows import check_pooled_batches, reads_windows
from tscratch.data.words import cut_words, jieba_installed
from tscratch.errors import UserError
from tscratch.nn.positions import position_length_limit
from tscratch.pretrained.m3e import LICENCE as M3E_LICENCE
from tscratch.pretrained.m3e import M3E
from tscratch.recipe import commands, settings
from tscratch.recipe.distil import distil_settings
from tscratch.recipe.estimate import busy_note
from tscratch.recipe.plan import Plan, write_settings
from tscratch.recipe.profile import DataProfile, estimate_counts
from tscratch.recipe.rule import Decision, choose
from tscratch.recipe.settings import AUTO, Choice, wanted_options
from tscratch.recipe.sizing import TEACHERS, Sizing
from tscratch.recipe.stages import plan_stages
from tscratch.recipe.stopping import check_patience, stopping_settings
from tscratch.training.losses import inverse_frequency
from tscratch.training.precision import default_precision

log = logging.getLogger("tscratch")

TEACHER_VOCABULARY = 50_000
"""Largest teacher vocabulary the distilled student reads as its own (`tscratch.cli.fit_stages`):
BERT-sized ones; multilingual-e5's 250,002 would make the student's table larger than the whole
teacher's encoder, so an e5 student trains its own tokenizer."""


def make_plan(config: Namespace, given: Collection[str] = (), metric: str = "val/acc") -> Plan:
    """The plan for ``config`` (parsed, `--model.init_from`'s architecture already adopted).

    Args:
        given: the options the command line or a `--config` file set ("group.name"): the plan
            never changes those.
        metric: what the best checkpoint is chosen by (early stopping watches it).
    """
    data, model = config.data, config.model
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=data.cache_dir)
    lang = language(column(splits.train, "text"))
    chosen: list[Choice] = segmenter_choice(data, lang)
    words_cut = reads_words_from(data, chosen)
    profile = training_profile(splits, data.get("text_pair_column") is not None, words_cut)
    decision, teacher_init = decide(config, profile, lang)
    distilling = decision.recipe == "distil" or model.get("teacher") is not None
    notes: list[str] = []
    if decision.recipe == "pretrain" and "model.position" not in given:
        chosen.append(Choice("model.position", commands.STAGE_POSITION, POSITION_REASON))
    own_vocabulary = decision.recipe == "distil" and reads_teacher_vocabulary(config, teacher_init)
    if own_vocabulary and words_cut:  # the student reads the teacher's tokenizer, not words
        chosen = [c for c in chosen if c.option != "data.segmenter"]
        chosen.append(Choice("data.segmenter", None, "the student reads the teacher's tokenizer"))
        profile = training_profile(splits, data.get("text_pair_column") is not None)
    view = config.clone()  # each step reads the choices before it, written in here
    write_settings(chosen, view)  # the position scheme decides the length limit
    teacher_size = TEACHERS.get(teacher_init, {}).get("vocab_size") if own_vocabulary else None
    automatic = auto_settings(view, splits, profile, distilling, teacher_size)
    write_settings(automatic, view)  # the length the texts are cut at, among them
    if (cut := long_text_choice(view, profile, given, distilling)) is not None:
        after = [i for i, c in enumerate(automatic) if c.option == "data.max_length"]
        automatic.insert(after[0] + 1 if after else len(automatic), cut)  # beside the length
    chosen += automatic
    if distilling:
        distilled = distil_settings(view, profile, decision.recipe, given)
        write_settings(distilled, view)
        chosen += distilled
    trainer = config.trainer
    precision = trainer.get("precision") or default_precision(trainer.get("accelerator"))
    sizing = Sizing(view, splits, profile, precision)
    stopping = stopping_settings(sizing, metric)
    write_settings(stopping, view)
    chosen += stopping
    stages = plan_stages(sizing, decision.recipe, lang, teacher_init, frozen=own_vocabulary)
    if decision.recipe == "pretrain":
        notes.append("the model starts from the stage's encoder and tokenizer (--model.init_from)")
    elif decision.recipe == "distil":
        notes.append("the student learns the teacher stage's logits (--model.teacher)")
        if own_vocabulary:
            notes.append(
                f"the student reads the teacher's vocabulary, its vectors from {teacher_init}'s "
                f"view of each entry, kept fixed (pass --data.tokenizer to choose another)"
            )
    starts = [model.get("init_from"), model.get("embed_init")]
    if M3E in starts or (decision.recipe == "distil" and teacher_init == M3E):  # opt-in only
        notes.append(f"{M3E}: {M3E_LICENCE}")
    threads = torch.get_num_threads()
    machine = f"{precision}, {threads} thread{'s' * (threads != 1)}{busy_note()}"
    if torch.cuda.is_available() and trainer.get("accelerator") != "cpu":
        machine += "; steps measured on the CPU, the run trains on the GPU"
    return Plan(
        decision.recipe, decision.reason, profile, lang, tuple(stages), tuple(chosen),
        tuple(notes), machine, sizing.measured,
    )  # fmt: skip


POSITION_REASON = (
    "the stage's and the model's scheme (the command names none): a bias by distance, no table "
    "to outgrow when fine-tuning reads rows longer than the stage's"
)


def decide(config: Namespace, profile: DataProfile, lang: str) -> tuple[Decision, str]:
    """The recipe (`rule.choose`) and the teacher start."""
    asked = config.get("recipe") or "plain"
    start, task_note = check_recipe_options(config)
    teacher_init = config.get("teacher_init") or "minilm"
    if asked == "plain":
        return Decision("plain", "no stage before the labels: --recipe plain"), teacher_init
    ready = commands.teacher_installed(teacher_init)
    windows = reads_windows(config.data.get("long_text"))
    return choose(asked, lang, profile, ready, start, task_note, windows), teacher_init


def check_recipe_options(config: Namespace) -> tuple[str | None, str | None]:
    """(the option that already names where the model starts, why the stages do not serve this
    task), each None when there is none; a `UserError` when an asked recipe cannot run with
    them. Reads only the config: fit calls it before anything else is read."""
    model, data = config.model, config.data
    start = next(
        (
            f"--model.{name} {model[name]}"
            for name in ("init_from", "teacher", "embed_init")
            if model.get(name)
        ),
        None,
    )
    task_note = None
    if data.get("text_pair_column") is not None:
        task_note = "text pairs: the stages serve single texts"
    elif data.get("label_delimiter") is not None:
        task_note = "multi-label data: the stages serve single-label texts"
    check_patience(config)
    asked = config.get("recipe") or "plain"
    long_text = data.get("long_text")
    check_pooled_batches(long_text, data.get("max_tokens"))
    if reads_windows(long_text) and (asked == "distil" or model.get("teacher")):
        what = "--recipe distil" if asked == "distil" else f"--model.teacher {model.teacher}"
        raise UserError(
            f"{what} cannot be used with --data.long_text {long_text} (a teacher gives one set "
            "of logits per text, and a student reads no windows); drop one of them"
        )
    if asked not in ("auto", "plain") and (start or task_note):
        raise UserError(
            f"--recipe {asked} cannot be used with {start or task_note}; drop one of them"
        )
    return start, task_note


def reads_teacher_vocabulary(config: Namespace, teacher_init: str) -> bool:
    """Whether the distilled student will read the teacher's vocabulary (no tokenizer given, a
    teacher vocabulary within `TEACHER_VOCABULARY`; a teacher folder is read when it has run)."""
    if config.data.get("tokenizer") is not None:
        return False
    shape = TEACHERS.get(teacher_init)  # a folder: known once the stage has run
    return shape is None or shape["vocab_size"] <= TEACHER_VOCABULARY


def auto_settings(
    view: Namespace,
    splits: LabeledSplits,
    profile: DataProfile,
    distilling: bool,
    teacher_vocabulary: int | None = None,
) -> list[Choice]:
    """The `auto` options' values (`settings.choose`), the class weights, and the vocabulary's
    size from a given tokenizer or the ``teacher_vocabulary`` the student will read; the epochs
    are left to `distil_settings` when distilling."""
    data = view.data
    wanted = wanted_options(view)
    chosen: list[Choice] = []
    if "model.class_weights" in wanted:
        wanted.remove("model.class_weights")
        chosen.append(class_weights(splits))
    if distilling and "trainer.max_epochs" in wanted:
        wanted.remove("trainer.max_epochs")
    if "data.vocab_size" in wanted and data.get("tokenizer") is not None:
        wanted.remove("data.vocab_size")
        size = load_tokenizer(data.tokenizer).get_vocab_size()
        chosen.append(Choice("data.vocab_size", size, f"the size of {data.tokenizer}"))
    elif "data.vocab_size" in wanted and teacher_vocabulary is not None:
        wanted.remove("data.vocab_size")
        why = "the teacher's vocabulary, which the student reads"
        chosen.append(Choice("data.vocab_size", teacher_vocabulary, why))
    asked = {k: v for k, v in view.model.as_dict().items() if v != AUTO}
    encoder = EncoderConfig.from_flat(asked, vocab_size=2)
    length = None if "data.max_length" in wanted else data.max_length
    chosen += settings.choose(profile, wanted, position_length_limit(encoder), length)
    return chosen


def long_text_choice(
    view: Namespace, profile: DataProfile, given: Collection[str], distilling: bool
) -> Choice | None:
    """`settings.long_text` for texts cut at the run's length, unless the command chose how to
    read long texts or reads text pairs (cut longest-first; windows do not read pairs)."""
    data, length = view.data, view.data.get("max_length")
    if "data.long_text" in given or data.get("long_text") not in (None, "truncate"):
        return None
    if data.get("text_pair_column") is not None or not isinstance(length, int):
        return None
    return settings.long_text(profile, length, distilling)


def class_weights(splits: LabeledSplits) -> Choice:
    """Inverse-frequency class weights of the training split, averaging 1."""
    labels = column(splits.train, "labels")
    if labels and isinstance(labels[0], list):  # multi-label: class weights do not apply
        from tscratch.training.multilabel import check_multilabel_options  # torchmetrics: lazily

        check_multilabel_options("auto", "cross_entropy")
    counts = Counter(labels)
    per_class = [counts.get(i, 0) for i in range(len(splits.label_names))]
    weights = inverse_frequency(per_class, splits.label_names)
    rows = ", ".join(
        f"{name} ({n:,} rows)" for name, n in zip(splits.label_names, per_class, strict=True)
    )
    reason = f"inverse frequency of the training labels: {rows}"
    return Choice("model.class_weights", [round(w, 6) for w in weights], reason)


def reads_words_from(data: Namespace, chosen: Sequence[Choice]) -> bool:
    """Whether the run's tokenizer will read jieba's words: a given one's record, else the
    segmenter asked or chosen. A tokenizer that cannot be read counts as not reading words:
    its one-line error comes from the check or the data module that needs it."""
    if data.get("tokenizer") is not None:
        try:
            return reads_words(load_tokenizer(data.tokenizer))
        except UserError:
            return False
    return data.get("segmenter") == "jieba" or any(c.value == "jieba" for c in chosen)


def segmenter_choice(data: Namespace, lang: str) -> list[Choice]:
    """`data.segmenter` when it is `auto` (`settings.segmenter`); a given tokenizer (or the
    one `--model.init_from` brings) records its own."""
    if data.get("segmenter") != AUTO:
        return []
    if data.get("tokenizer") is not None:
        return [Choice("data.segmenter", None, f"the tokenizer {data.tokenizer} cuts its own")]
    return [settings.segmenter(lang, jieba_installed())]


def training_profile(
    splits: LabeledSplits, pairs: bool = False, words_cut: bool = False
) -> DataProfile:
    """The profile of the training split. With ``pairs``, a row is measured as the model reads
    it, ``[CLS] a [SEP] b [SEP]``: both texts and three special tokens. ``words_cut``: the
    texts are read as jieba's words (`tscratch.data.words`)."""
    texts, classes = column(splits.train, "text"), len(splits.label_names)
    if words_cut:
        texts = cut_words(texts)
    if not pairs:
        return DataProfile.of(texts, classes, words_cut)
    log.info("text pairs: the plan measures each row as [CLS] text [SEP] text_pair [SEP]")
    second = column(splits.train, "text_pair")
    if words_cut:
        second = cut_words(second)
    counts = []
    for a, b in zip(texts, second, strict=True):  # each estimate counts one [CLS]: + 1
        (tokens_a, chars_a) = estimate_counts(a, words_cut)
        (tokens_b, chars_b) = estimate_counts(b, words_cut)
        counts.append((tokens_a + tokens_b + 1, chars_a + chars_b))
    profile = DataProfile.from_counts(counts, classes)
    if not words_cut:
        return profile
    pairs_read = zip(texts, second, strict=True)
    read = sum(estimate_counts(a)[0] + estimate_counts(b)[0] + 1 for a, b in pairs_read)
    return profile.read_as_words(texts + second, read)
