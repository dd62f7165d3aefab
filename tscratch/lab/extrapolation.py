"""Lab: do position schemes trained on short sequences work on longer ones?

The article says sinusoidal encodings let a model extrapolate to sequences longer than those it
was trained on (Vaswani et al. 2017, section 3.5), and that RoPE (Su et al. 2021) and ALiBi
(Press et al. 2022) suit long sequences better. Here every position scheme trains the same small
encoder on a synthetic task that cannot be solved without positions, on sequences of at most
`train_length` tokens, and is then evaluated on longer ones.

The task: `[CLS]` then random filler tokens holding exactly one `FIRST` and one `SECOND` marker;
the label is 1 when `FIRST` comes before `SECOND`. The answer does not depend on the length, so a
drop at longer lengths is the position scheme's doing. A model without positions is permutation
equivariant: it gives a sequence and the one with both markers swapped the same logits, while
their labels differ. Evaluation sets are built from such swapped pairs, so that model scores 50%
exactly. Training lengths are drawn log-uniformly: the many short sequences make the position
signal easy to find (with lengths drawn uniformly, learned positions and the T5 bias stayed at
chance for 1,500 steps in trials), the longer ones teach the whole table.

The learned table has `max_len` = the longest evaluation length, so its rows past
`train_length` exist but keep their initial values: no training step ever reads them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import Tensor
from tqdm import tqdm

from tscratch.config import EncoderConfig
from tscratch.lab.report import LabResult
from tscratch.model import TransformerClassifier
from tscratch.nn.positions import POSITIONS

NAME = "extrapolation"
CLAIM = (
    "Sinusoidal position encodings extrapolate to sequences longer than those seen in "
    "training, and RoPE and ALiBi suit long sequences better."
)
PAD, CLS, FIRST, SECOND = 0, 1, 2, 3
"""Token ids of the task; fillers are the ids from 4 up to `vocab_size` - 1."""
SCHEMES = tuple(POSITIONS)
"""Every position scheme the encoder has (sinusoidal, learned, rope, alibi, t5, none)."""
LEARNED_AT = 0.75
"""Accuracy at the training length a scheme needs before its extrapolation is judged."""
KEEPS = 0.05
"""A scheme extrapolates when no longer length costs it more than this much accuracy."""
BETTER_BY = 0.05
"""How much higher a scheme's mean accuracy past the training length must be to count as better."""


@dataclass(frozen=True)
class Settings:
    """Sizes of one run of the experiment (`FULL` or `TOY`)."""

    d_model: int
    num_heads: int
    d_ff: int
    num_layers: int
    vocab_size: int
    min_train_length: int
    train_length: int
    eval_lengths: tuple[int, ...]
    eval_pairs: int
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int


FULL = Settings(
    d_model=64, num_heads=4, d_ff=128, num_layers=2, vocab_size=32, min_train_length=8,
    train_length=128, eval_lengths=(128, 256, 512, 1024), eval_pairs=256, steps=2400,
    batch_size=32, lr=1e-3, warmup_steps=100,
)  # fmt: skip
TOY = Settings(
    d_model=32, num_heads=4, d_ff=64, num_layers=2, vocab_size=8, min_train_length=4,
    train_length=16, eval_lengths=(16, 32, 64), eval_pairs=64, steps=150, batch_size=32,
    lr=3e-3, warmup_steps=10,
)  # fmt: skip


def order_batch(size: int, length: int, vocab_size: int, generator: torch.Generator):
    """`size` task sequences of `length` tokens and their labels.

    Returns:
        input_ids (B, T): `[CLS]`, then fillers with one `FIRST` and one `SECOND` at two distinct
        random positions; labels (B,): 1 where `FIRST` comes first.
    """
    ids = torch.randint(SECOND + 1, vocab_size, (size, length), generator=generator)  # (B, T)
    ids[:, 0] = CLS
    # Two distinct positions in 1..T-1 per row: the first two of a random permutation.
    order = torch.rand(size, length - 1, generator=generator).argsort(dim=1)[:, :2] + 1  # (B, 2)
    rows = torch.arange(size)
    ids[rows, order[:, 0]] = FIRST
    ids[rows, order[:, 1]] = SECOND
    return ids, (order[:, 0] < order[:, 1]).long()


def swapped_pairs(ids: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """`ids` followed by the same rows with `FIRST` and `SECOND` exchanged (labels flipped)."""
    swapped = ids.clone()
    swapped[ids == FIRST] = SECOND
    swapped[ids == SECOND] = FIRST
    return torch.cat([ids, swapped]), torch.cat([labels, 1 - labels])


def train_lengths(settings: Settings, generator: torch.Generator) -> list[int]:
    """One length per step, log-uniform in [min_train_length, train_length]."""
    low, high = math.log(settings.min_train_length), math.log(settings.train_length)
    draws = torch.empty(settings.steps).uniform_(low, high, generator=generator)
    return [min(settings.train_length, round(math.exp(x))) for x in draws.tolist()]


def build_model(settings: Settings, position: str) -> TransformerClassifier:
    """The encoder classifier of the experiment with position scheme `position`."""
    config = EncoderConfig(
        vocab_size=settings.vocab_size,
        d_model=settings.d_model,
        num_heads=settings.num_heads,
        d_ff=settings.d_ff,
        num_layers=settings.num_layers,
        max_len=max(settings.eval_lengths),
        dropout=0.0,
        norm_first=True,
        position=position,
        pad_id=PAD,
    )
    return TransformerClassifier(config, num_classes=2, pooling="cls")


def train(model: TransformerClassifier, settings: Settings, seed: int) -> float:
    """Train on the task (AdamW without weight decay, warmup then cosine to 10%). Returns the
    mean training loss of the last 10% of steps."""
    generator = torch.Generator().manual_seed(seed)
    # No weight decay: the learned table's rows past train_length must stay exactly untrained.
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)

    def scale(step: int) -> float:
        if step < settings.warmup_steps:
            return (step + 1) / settings.warmup_steps
        progress = (step - settings.warmup_steps) / max(1, settings.steps - settings.warmup_steps)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, scale)
    model.train()
    losses = []
    for length in train_lengths(settings, generator):
        ids, labels = order_batch(settings.batch_size, length, settings.vocab_size, generator)
        loss = F.cross_entropy(model(ids).logits, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    tail = losses[-max(1, len(losses) // 10) :]
    return sum(tail) / len(tail)


@torch.no_grad()
def accuracy(
    model: TransformerClassifier, settings: Settings, length: int, seed: int, batch_size: int = 32
) -> float:
    """Accuracy on `eval_pairs` swapped pairs of sequences of `length` tokens."""
    generator = torch.Generator().manual_seed(10_000 + seed * 7919 + length)
    ids, labels = swapped_pairs(
        *order_batch(settings.eval_pairs, length, settings.vocab_size, generator)
    )
    model.eval()
    correct = 0
    for start in range(0, len(ids), batch_size):
        logits = model(ids[start : start + batch_size]).logits  # (B, 2)
        correct += (logits.argmax(-1) == labels[start : start + batch_size]).sum().item()
    return correct / len(ids)


def verdict(acc: dict[str, dict[int, float]], train_length: int) -> str:
    """The verdict on `CLAIM` from accuracies by scheme and evaluation length.

    Rule: a scheme *extrapolates* when it reaches `LEARNED_AT` at `train_length` and loses at
    most `KEEPS` at every longer length; RoPE or ALiBi is *better on long sequences* when its
    mean accuracy over the longer lengths beats sinusoidal's by more than `BETTER_BY`. The
    claim holds when sinusoidal extrapolates and both RoPE and ALiBi are better; it does not
    hold when sinusoidal does not extrapolate and neither is better; anything else depends.
    """

    def longer(scheme: str) -> list[float]:
        return [a for length, a in acc[scheme].items() if length > train_length]

    def extrapolates(scheme: str) -> bool:
        at_train = acc[scheme][train_length]
        return at_train >= LEARNED_AT and min(longer(scheme)) >= at_train - KEEPS

    def mean_longer(scheme: str) -> float:
        return sum(longer(scheme)) / len(longer(scheme))

    sin = extrapolates("sinusoidal")
    better = {s: mean_longer(s) - mean_longer("sinusoidal") > BETTER_BY for s in ("rope", "alibi")}
    lengths = sorted(acc["sinusoidal"])
    sin_part = (
        f"sinusoidal {'extrapolates' if sin else 'does not extrapolate'} "
        f"({acc['sinusoidal'][lengths[0]]:.2f} at {lengths[0]}, "
        f"{acc['sinusoidal'][lengths[-1]]:.2f} at {lengths[-1]})"
    )
    long_part = "; ".join(
        f"{s} {'beats' if better[s] else 'does not beat'} it past {train_length} "
        f"({mean_longer(s):.2f} vs {mean_longer('sinusoidal'):.2f} mean accuracy)"
        for s in ("rope", "alibi")
    )
    if sin and all(better.values()):
        word = "holds"
    elif not sin and not any(better.values()):
        word = "does not hold here"
    else:
        word = "depends"
    return f"{word}: {sin_part}; {long_part}"


def figure(acc: dict[str, dict[int, float]], settings: Settings) -> Figure:
    """Accuracy against evaluation length, one line per scheme."""
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.subplots()
    for scheme, by_length in acc.items():
        lengths = sorted(by_length)
        ax.plot(lengths, [by_length[n] for n in lengths], marker="o", label=scheme)
    ax.axhline(0.5, color="grey", linestyle=":", label="chance")
    ax.axvline(settings.train_length, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(settings.eval_lengths), [str(n) for n in settings.eval_lengths])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(f"evaluation length (tokens; trained on <= {settings.train_length})")
    ax.set_ylabel("accuracy: does FIRST come before SECOND?")
    ax.set_title("Length extrapolation of position schemes")
    ax.legend(fontsize=8, ncol=2, loc="lower left")
    fig.tight_layout()
    return fig


def run(toy: bool = False, seeds: Sequence[int] | None = None) -> LabResult:
    """Train every position scheme at each seed, evaluate at every length; mean over seeds."""
    settings = TOY if toy else FULL
    seeds = list(seeds) if seeds else [0]
    start = time.perf_counter()
    acc = {s: dict.fromkeys(settings.eval_lengths, 0.0) for s in SCHEMES}
    losses = dict.fromkeys(SCHEMES, 0.0)
    runs = [(scheme, seed) for scheme in SCHEMES for seed in seeds]
    for scheme, seed in tqdm(runs, desc=NAME, unit="run"):
        torch.manual_seed(seed)
        model = build_model(settings, scheme)
        losses[scheme] += train(model, settings, seed) / len(seeds)
        for length in settings.eval_lengths:
            acc[scheme][length] += accuracy(model, settings, length, seed) / len(seeds)
    rows = [
        {
            "scheme": scheme,
            **{f"acc@{n}": acc[scheme][n] for n in settings.eval_lengths},
            "final train loss": losses[scheme],
        }
        for scheme in SCHEMES
    ]
    return LabResult(
        name=NAME,
        claim=CLAIM,
        rows=rows,
        figure=figure(acc, settings),
        settings={
            "toy": toy,
            **asdict(settings),
            "task": "does FIRST occur before SECOND? (chance 0.5)",
            "training lengths": "log-uniform per batch in [min_train_length, train_length]",
            "evaluation": "2 * eval_pairs sequences per length, each with its swapped twin",
            "model": "Pre-LN, dropout 0, cls pooling, fp32",
            "learned table": f"max_len {max(settings.eval_lengths)}: rows past "
            f"{settings.train_length} exist but are never trained",
            "seeds": seeds,
            "threads": torch.get_num_threads(),
            "wall_s": round(time.perf_counter() - start, 1),
        },
        verdict=verdict(acc, settings.train_length),
    )
