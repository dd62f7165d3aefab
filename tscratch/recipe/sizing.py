"""What every part's time estimate reads: the config with the plan's settings written in, the
data, and this machine's measured step times (`tscratch.recipe.estimate`), each measured once.

A part's seconds are its steps times a measured step (`Sizing.run_seconds` adds the training
loop's own work around each batch), plus what a command does before its first step that the
plan can size: the pretrained encoder reading every vocabulary entry once when the token table
starts from its vectors (`vectors_seconds`). `SETUP_SECONDS` per command covers the rest
(imports, reading and encoding the data, the tokenizer, checkpoints, the bag-of-words bar).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from tscratch.config import EncoderConfig
from tscratch.data.sources import LabeledSplits
from tscratch.errors import UserError
from tscratch.pretrained.m3e import M3E
from tscratch.pretrained.m3e import SHAPE as M3E_SHAPE
from tscratch.recipe.estimate import step_seconds
from tscratch.recipe.profile import DataProfile
from tscratch.recipe.settings import AUTO

SETUP_SECONDS = 15.0
"""Allowance per command for what is not a step and not sized: imports, reading and encoding the
data, the tokenizer, checkpoints, the bag-of-words bar."""
LOOP_SECONDS = 0.012
"""Allowance per batch a Lightning loop runs (validation and test batches too: their steps
log and update metrics, and the callbacks run), for the work around the model that a timed step
leaves out: fetching and padding the batch, the task's extra loss terms, its metrics and logs,
the callbacks. It is Python's work and does not grow with the model, so it is a large share of
a small student's short steps and nothing beside a teacher's (docs/results.md has the profile
it comes from)."""
TEACHERS = {
    "minilm": {"d_model": 384, "num_heads": 12, "d_ff": 1536, "num_layers": 6, "vocab_size": 30522},
    "e5": {"d_model": 384, "num_heads": 12, "d_ff": 1536, "num_layers": 12, "vocab_size": 250002},
    M3E: M3E_SHAPE,
}  # fmt: skip
"""Shapes of the packaged encoders (teachers, and the sources of `--model.embed_init` vectors),
for their time estimates; any other (a folder, a checkpoint) is estimated as MiniLM-sized."""
VECTORS_BATCH = 256
"""Entries per forward pass when an encoder reads a vocabulary for its vectors
(`tscratch.training.static_embeddings.pooled_vectors` runs at it)."""
VECTORS_WIDTH = 4
"""Tokens per entry then: [CLS], the entry as one or two of the encoder's pieces, [SEP]."""


@dataclass
class Sizing:
    """What every part's estimate reads: the config with the plan's settings written in, the
    splits and their profile, the precision measured at, and the measurements so far."""

    view: Namespace
    splits: LabeledSplits
    profile: DataProfile
    precision: str
    measured: dict[str, float] = field(default_factory=dict)

    def limit(self, split: str, batches: int) -> int:
        """Batches per pass of ``split`` under Lightning's `limit_*_batches`."""
        limit = self.view.trainer.get(f"limit_{split}_batches")
        if limit is None:
            return batches
        if isinstance(limit, float) and limit <= 1.0:
            return max(1, int(batches * limit)) if limit > 0 else 0
        return min(batches, int(limit))

    def time(
        self,
        key: str,
        config: EncoderConfig,
        batch: int,
        length: int,
        precision: str | None = None,
        **kw: Any,
    ) -> float:
        """Seconds of one step, measured once per ``key`` (at the run's precision unless
        ``precision`` is given)."""
        if key not in self.measured:
            precision = precision or self.precision
            self.measured[key] = step_seconds(config, batch, length, precision, **kw)
        return self.measured[key]

    def eval_batches(self, passes: int, batch: int) -> int:
        """Batches of ``passes`` validations and one test pass at ``batch`` rows each, under
        Lightning's `limit_*_batches`."""
        val = self.limit("val", math.ceil(len(self.splits.validation) / batch))
        test = self.limit("test", math.ceil(len(self.splits.test) / batch))
        return passes * val + test

    @staticmethod
    def run_seconds(steps: int, step: float, evals: int = 0, infer: float = 0.0) -> float:
        """Seconds of a Lightning run: ``steps`` training steps of ``step`` seconds and
        ``evals`` validation and test batches of ``infer``, each with `LOOP_SECONDS` around it,
        after the command's `SETUP_SECONDS`."""
        return SETUP_SECONDS + steps * (step + LOOP_SECONDS) + evals * (infer + LOOP_SECONDS)


def encoder(model: Namespace, vocab_size: int, **changes: Any) -> EncoderConfig:
    """The encoder ``model``'s options describe, with a vocabulary of ``vocab_size``."""
    values = {k: v for k, v in model.as_dict().items() if v != AUTO}
    try:
        return EncoderConfig.from_flat({**values, **changes}, vocab_size=vocab_size)
    except ValueError as error:
        raise UserError(f"the model's options: {error}") from None


def schedule(batches: int, trainer: Namespace) -> tuple[int, int]:
    """(passes, optimizer steps) of a run of ``batches`` per pass under the trainer's
    `max_epochs` and `max_steps` (whichever ends it first; -1 or None: no limit)."""
    epochs, cap = trainer.get("max_epochs"), trainer.get("max_steps") or -1
    if epochs is None or epochs < 0:  # only max_steps ends it (Lightning's 1000 passes else)
        epochs = 1000 if cap < 0 else math.ceil(cap / max(1, batches))
    steps = batches * epochs if cap < 0 else min(batches * epochs, cap)
    return math.ceil(steps / max(1, batches)), steps


def teacher_estimate(name: str = "minilm") -> EncoderConfig:
    """A packaged encoder's shape for its estimates (a teacher, a vectors source), else
    MiniLM's."""
    shape = TEACHERS.get(name, TEACHERS["minilm"])
    return EncoderConfig(**shape, position="learned", max_len=512, ffn="gelu")


def vectors_seconds(sizing: Sizing, source: str, entries: int) -> float:
    """Seconds for ``source`` to read each of ``entries`` vocabulary entries on its own, the
    start of a token table from its vectors (`--model.embed_init`): forward passes in float32
    of `VECTORS_BATCH` rows of `VECTORS_WIDTH` tokens. A forward pass's time does not depend on
    the size of the table it looks tokens up in, so the source is measured with a small one."""
    config = teacher_estimate(source)
    config = replace(config, vocab_size=min(config.vocab_size, 1000))
    key = f"{Path(source).name} vectors batch"
    batch = sizing.time(key, config, VECTORS_BATCH, VECTORS_WIDTH, "32-true", train=False)
    return math.ceil(entries / VECTORS_BATCH) * batch
