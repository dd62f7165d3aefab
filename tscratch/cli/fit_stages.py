"""tscratch fit's stages: run the plan's stage commands, each in its own folder and checkpointed
(`tscratch.cli.stages`), and point the main run at what they made.

The plan (`tscratch.recipe`) has decided which stages run, with which commands; here they run,
and their results are written into the config: the pretraining stage's checkpoint as
`--model.init_from`, the teacher's as `--model.teacher`, and for a distilled student the
teacher's vocabulary and word vectors (`student_vocabulary`).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from jsonargparse import Namespace
from tokenizers import Tokenizer

from tscratch.checkpoint_files import read_checkpoint
from tscratch.cli.stages import reusable, run_root, run_stage
from tscratch.data.tokenizer import save_tokenizer
from tscratch.nn.positions import position_is_learned
from tscratch.recipe import settings
from tscratch.recipe.plan import Plan
from tscratch.recipe.planner import TEACHER_VOCABULARY

log = logging.getLogger("tscratch")


def run_stages(plan: Plan, config: Namespace, resuming: bool) -> dict[str, float]:
    """Run the plan's stage commands not finished before, point the main run at their result
    (`model.init_from` or `model.teacher`; the student's vocabulary) and return the seconds
    each stage took (reused stages: none).

    Args:
        resuming: whether `--ckpt_path last` was given: an unfinished stage continues.
    """
    root = run_root(config.trainer)
    took: dict[str, float] = {}
    for stage in plan.stages:
        if not stage.command:
            continue
        command = list(stage.command)
        reused = reusable(root, stage.name, command) is not None
        start = time.perf_counter()
        checkpoint = run_stage(stage.name, command, root, resuming)
        if not reused:
            took[stage.name] = time.perf_counter() - start
        if stage.name == "pretrain":
            config.model.init_from = checkpoint
        else:
            config.model.teacher = checkpoint
            student_vocabulary(config, config.get("teacher_init") or "minilm")
    return took


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
            ("learned positions", position_is_learned(model.get("position"))),
            ("token-pair embeddings", model.get("bigram_buckets") not in (None, 0, settings.AUTO)),
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
