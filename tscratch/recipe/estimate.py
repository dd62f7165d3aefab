"""How fast this machine trains and runs a given encoder: what the plan's time estimates read.

A plan's wall times are steps times a step's time measured here and now, not a constant: the
same recipe takes minutes on a CPU with AMX and much longer on one without native bf16 (only
what is not the model's own work has fixed allowances: `tscratch.recipe.sizing`). Each
measurement times real steps (forward, backward, clipping and an Adam-shaped update, or forward
only for inference) of the plain PyTorch model at the run's architecture, batch, row length and
precision, on random token ids, after one untimed warm-up step, and takes their median. Torch's
random generators are left as they were, so a run that measures first trains exactly as one
that does not.
"""

from __future__ import annotations

import statistics
import time
from contextlib import nullcontext

import torch
from torch.nn import functional as F

from tscratch.config import EncoderConfig
from tscratch.masked_lm import TransformerForMaskedLM
from tscratch.model import TransformerClassifier

STEPS = 5
"""Most timed steps per measurement, after one warm-up step; the median is taken."""
SECONDS = 0.2
"""Timing stops once the timed steps have taken this long (a slow step is timed once)."""


def _autocast(precision: str | int) -> torch.autocast | nullcontext:
    if str(precision).startswith("bf16"):  # the parser reads "32" and "16" as numbers
        return torch.autocast("cpu", torch.bfloat16)
    return nullcontext()


def step_seconds(
    config: EncoderConfig,
    batch_size: int,
    length: int,
    precision: str | int = "32-true",
    *,
    train: bool = True,
    masked_lm: bool = False,
    frozen_embeddings: bool = False,
    average: bool = False,
) -> float:
    """Seconds one step of ``config`` takes on (``batch_size``, ``length``) rows of this CPU.

    Per step, not per token: on short rows a step's fixed costs (the optimizer's update of every
    weight, the head, Python) outweigh its tokens, and a plan counts steps.

    Args:
        precision: the run's Lightning precision (bf16-mixed runs under bf16 autocast).
        train: a training step (forward, backward, an Adam update); False: forward only.
        masked_lm: the masked-LM model (15% of the positions predicted) instead of a classifier.
        frozen_embeddings: the token table gets no gradient (e5's teacher stage).
        average: the step also updates a moving average of the weights (`--model.ema_steps`).

    A training step clips the gradients' norm (fit clips at 1.0), as the run's step does.
    """
    length = max(2, length)
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(0)  # the CPU's only: a GPU generator stays as it is
        if masked_lm:
            model = TransformerForMaskedLM(config)
        else:
            model = TransformerClassifier(config, num_classes=2, pooling="mean")
        if frozen_embeddings:
            model.encoder.tok_emb.weight.requires_grad_(False)
        ids = torch.randint(5, config.vocab_size, (batch_size, length))
        mask = torch.ones(batch_size, length, dtype=torch.bool)
        masked = torch.rand(batch_size, length) < 0.15
        labels = torch.randint(0, 2, (batch_size,))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = AdamUpdate(params, average) if train else None
        model.train(train)
        times: list[float] = []
        cpu = 0.0
        for step in range(STEPS + 1):
            start, start_cpu = time.perf_counter(), time.thread_time()
            _step(model, optimizer, ids, mask, masked if masked_lm else None, labels, precision)
            if step:  # the first step builds kernels and caches: not timed
                times.append(time.perf_counter() - start)
                cpu += time.thread_time() - start_cpu
                if sum(times) >= SECONDS:
                    break
    SHARES.append(cpu / sum(times))
    return statistics.median(times)


class AdamUpdate:
    """The update a run's step makes beside its forward and backward: clipping the gradients'
    norm, AdamW, then a moving average of the weights when asked. AdamW is the fused kernel the
    runs use (`ClassificationTask.fused_optimizer`; on a CPU since torch 2.4, the oldest torch
    tscratch takes), called directly: `torch.optim`'s first step imports torch._dynamo (about a
    second, which `tscratch fit --plan` would pay)."""

    def __init__(self, params: list[torch.Tensor], average: bool = False) -> None:
        self.params = params
        self.first = [torch.zeros_like(p) for p in params]
        self.second = [torch.zeros_like(p) for p in params]
        self.steps = [torch.zeros((), dtype=torch.float32) for _ in params]
        self.average = [p.detach().clone() for p in params] if average else None

    @torch.no_grad()
    def step(self) -> None:
        grads = [p.grad for p in self.params]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))  # clipping
        torch._foreach_mul_(grads, torch.clamp(1.0 / (norm + 1e-6), max=1.0))
        torch._foreach_add_(self.steps, 1.0)
        torch._fused_adamw_(
            self.params, grads, self.first, self.second, [], self.steps, lr=1e-4, beta1=0.9,
            beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
        )  # fmt: skip
        if self.average is not None:
            torch._foreach_lerp_(self.average, self.params, 0.01)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def _step(
    model: torch.nn.Module,
    optimizer: AdamUpdate | None,
    ids: torch.Tensor,
    mask: torch.Tensor,
    masked: torch.Tensor | None,
    labels: torch.Tensor,
    precision: str | int,
) -> None:
    if optimizer is None:
        with torch.inference_mode(), _autocast(precision):
            model(ids, mask) if masked is None else model(ids, mask, masked)
        return
    with _autocast(precision):
        if masked is None:
            loss = F.cross_entropy(model(ids, mask).logits.float(), labels)
        else:
            logits = model(ids, mask, masked).float()  # (N, V)
            loss = F.cross_entropy(logits, ids[masked])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


SHARES: list[float] = []
"""For each `step_seconds` measurement, the share of its wall time the timing thread spent on a
core: about 1 on a machine to itself (the thread computes or runs Python throughout a step),
about 0.5 when as many other busy threads share the cores. `busy_note` reads them."""
BUSY_SHARE = 0.8
"""Below this share of a core (`SHARES`' median) the measured steps count as slowed by other
work."""


def busy_note() -> str:
    """A note for the plan's timing when other work shared the cores while it measured (the
    median of `SHARES` below `BUSY_SHARE`; the shares are then cleared): steps timed so are
    slower than the run will be if that work ends first. Empty when nothing was measured."""
    if not SHARES:
        return ""
    share = statistics.median(SHARES)
    SHARES.clear()
    if share >= BUSY_SHARE:
        return ""
    return (
        f"; timed while other work shared the cores (its timing thread had a core {share:.0%} of "
        f"the time), so likely high"
    )


def clock(seconds: float) -> str:
    """A duration as a plan shows it: `45 s`, `12 min`, `2 h 05 min`."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h {minutes % 60:02d} min"
