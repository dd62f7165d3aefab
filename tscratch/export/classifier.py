"""`ExportedClassifier`: raw texts in, labels and probabilities out, whatever runs the network.

`tscratch.export.load` builds one from an exported folder (PyTorch or onnxruntime) and
`tscratch.export.from_checkpoint` from a checkpoint in memory; either way the texts are encoded
as in training (`tscratch.data.encoding`) and the network is a `Forward`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Tokenizer
from torch import Tensor

from tscratch.data.encoding import PairEncoder, pad_batch, pad_token_types
from tscratch.data.windows import (
    Reading,
    check_stride,
    default_stride,
    mean_of_windows,
    model_rows,
    window_room,
)
from tscratch.errors import UserError

if TYPE_CHECKING:
    from tscratch.model import TransformerClassifier

Forward = Callable[..., Tensor]
"""(input_ids (B, T), attention_mask (B, T)[, token_type_ids (B, T)]) -> float32 logits (B, C)."""


class ExportedClassifier:
    """A classifier read from an exported folder: raw texts in, labels and probabilities out.

    Build one with `load`. `config` is the folder's config.json; `labels` the class names,
    index = class id. A model trained on text pairs (`text_pair_column` is set) reads pairs
    only: `predict(texts, pairs)`, one pair per text; a model of single texts refuses pairs.
    A text longer than `max_length` is read as the model was trained (`long_text`, `stride`).
    """

    def __init__(self, config: dict[str, Any], tokenizer: Tokenizer, forward: Forward) -> None:
        self.config = config
        self.labels: list[str] = list(config["label_names"])
        self.max_length: int = config["max_length"]
        self.text_pair_column: str | None = config.get("text_pair_column")
        """The training data's column of second texts for a text-pair model, else None."""
        self.text_column: str | None = config.get("text_column")
        """The training data's text column of a text-pair model, when it was named."""
        self.thresholds: list[float] | None = config.get("thresholds")
        """A multi-label model's decision threshold per label (tuned on validation), else None."""
        self.temperature: float = float(config.get("temperature", 1.0))
        """T of temperature scaling: probabilities are softmax(logits / T), T fitted on the
        validation split at the end of fit (`tscratch.training.calibration`); 1 when none was."""
        self.calibrated: bool = "temperature" in config
        """Whether T was fitted (a model trained or exported before calibration has none)."""
        self.long_text: Reading = config.get("long_text", "truncate")
        """How a text longer than `max_length` is read unless told: "truncate" (its first
        `max_length` tokens), or "chunk" for a model trained with ``--data.long_text windows``
        (every token, in windows overlapping by `stride` tokens, their logits averaged:
        `tscratch.data.windows`)."""
        self.stride: int = config.get("stride", default_stride(self.max_length))
        """Tokens neighbouring windows share when a text is read in windows: the training
        run's ``data.stride`` for a model trained on windows, else max_length // 4."""
        self.tokenizer = tokenizer
        self._forward = forward
        self._pair_encoder: PairEncoder | None = None
        if self.long_text == "chunk":  # config.json is checked against max_length, not this
            check_stride(self.stride, self.room, self.max_length, "config.json's stride")

    @property
    def module(self) -> TransformerClassifier | None:
        """The PyTorch network behind the torch runtime (in eval mode, on its device); None
        for ONNX."""
        return getattr(self._forward, "module", None)

    @property
    def multi_label(self) -> bool:
        """Whether the model gives each label its own probability (sigmoid), any number of
        labels per text, rather than one label (softmax)."""
        return self.thresholds is not None

    @property
    def reads_pairs(self) -> bool:
        """Whether the model was trained on text pairs."""
        return self.text_pair_column is not None

    @property
    def room(self) -> int:
        """Text tokens one window holds (`max_length` less the tokenizer's special tokens)."""
        return window_room(self.tokenizer, self.max_length)

    def reading(
        self, long_text: Reading | None = None, stride: int | None = None, name: str = "stride"
    ) -> tuple[Reading, int | None]:
        """How to read long texts: ``long_text`` and ``stride``, or the model's own where None
        (the stride None for "truncate"); one line for a stride out of range or given to
        "truncate" (``name``: how the caller spells it)."""
        long_text = long_text or self.long_text
        if long_text not in ("truncate", "chunk"):
            raise UserError(f"long_text ({long_text!r}) must be 'truncate' or 'chunk'")
        if long_text == "truncate":
            if stride is not None:
                raise UserError(f"{name} ({stride}) applies only with long_text 'chunk'")
            return long_text, None
        stride = self.stride if stride is None else stride
        check_stride(stride, self.room, self.max_length, name)
        return long_text, stride

    def check_pairs(self, pairs: Sequence[str] | None) -> None:
        """Refuse single texts for a pair model, and pairs for a single-text model."""
        if self.reads_pairs and pairs is None:
            raise UserError(
                f"this model reads text pairs (trained with text_pair_column "
                f"{self.text_pair_column!r}); pass one pair per text: predict(texts, pairs)"
            )
        if not self.reads_pairs and pairs is not None:
            raise UserError("this model reads single texts, not pairs; call predict(texts)")

    def encode_pairs(
        self, texts: Sequence[str], pairs: Sequence[str]
    ) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids and token types of ``[CLS] text [SEP] pair [SEP]``, cut longest-first to
        `max_length` as in training (`PairEncoder`)."""
        if self._pair_encoder is None:
            self._pair_encoder = PairEncoder(self.tokenizer, self.max_length)
        return self._pair_encoder(texts, pairs)

    def logits(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        batch_size: int = 32,
        long_text: Reading | None = None,
        stride: int | None = None,
    ) -> Tensor:
        """Float32 logits (N, C) of `texts` (and their `pairs`, for a pair model), in order, on
        the CPU, each text read as in training: cut to `max_length` tokens, or for a model
        trained on windows, in windows whose logits are averaged (`long_text` "truncate" or
        "chunk", and `stride`, choose; pairs are always cut longest-first). A string is one
        text (and one pair): N = 1."""
        texts, pairs = one_or_many(texts), None if pairs is None else one_or_many(pairs)
        self.check_pairs(pairs)
        if pairs is None:
            reading, stride = self.reading(long_text, stride)
            rows, owner = model_rows(self.tokenizer, texts, self.max_length, reading, stride)
            return mean_of_windows(self.logits_of_ids(rows, batch_size), owner, len(texts))
        if long_text == "chunk":
            raise UserError("long_text 'chunk' reads single texts; pairs are cut longest-first")
        ids, types = self.encode_pairs(texts, pairs)
        return self.logits_of_ids(ids, batch_size, types)

    def logits_of_ids(
        self,
        ids: Sequence[Sequence[int]],
        batch_size: int = 32,
        token_type_ids: Sequence[Sequence[int]] | None = None,
    ) -> Tensor:
        """Float32 logits (N, C) of token id sequences, in order, on the CPU.

        Args:
            ids: one list of token ids per row, special tokens included, each at most
                `max_length` long (`encode_ids` cuts texts so).
            batch_size: rows per forward pass; each batch is padded to its longest row.
            token_type_ids: for a pair model, the token types of each row (as `encode_pairs`
                gives them).
        """
        if any(len(row) > self.max_length for row in ids):
            raise ValueError(f"logits_of_ids takes rows of at most {self.max_length} ids")
        if (token_type_ids is not None) != self.reads_pairs:
            raise ValueError("logits_of_ids takes token_type_ids exactly for a text-pair model")
        pad_id, vocab_size = self.config["encoder"]["pad_id"], self.config["encoder"]["vocab_size"]
        chunks = [torch.empty(0, len(self.labels))]
        for start in range(0, len(ids), batch_size):
            input_ids, attention_mask = pad_batch(ids[start : start + batch_size], pad_id)
            _check_vocabulary(input_ids, vocab_size)  # an id beyond it fails deep in the embedding
            if token_type_ids is None:
                chunks.append(self._forward(input_ids, attention_mask))
                continue
            types = pad_token_types(token_type_ids[start : start + batch_size], input_ids.shape[1])
            chunks.append(self._forward(input_ids, attention_mask, types))
        return torch.cat(chunks)

    def predict(
        self,
        texts: str | Sequence[str],
        pairs: str | Sequence[str] | None = None,
        batch_size: int = 32,
        min_confidence: float | None = None,
        long_text: Reading | None = None,
        stride: int | None = None,
    ) -> list[dict[str, Any]]:
        """One `{"text", "label", "probabilities": {label: p}}` per text, in order: the objects
        `tscratch predict` prints. A string is one text, not a sequence of characters:
        `predict("one text")` gives a list of one object. A pair model takes one pair per text
        (`pairs`; a string beside a string text), and its objects also hold `text_pair`. A
        multi-label model gives `{"text", "labels": {label: p}, "probabilities"}`: `labels` holds
        every label whose probability reaches its threshold, most probable first (maybe none).
        With ``min_confidence`` P, a text whose top probability is below P gets `label` None
        ("not sure"), its probabilities still given (`results`). Long texts are read as
        `logits` reads them (``long_text``, ``stride``: the model's own unless given)."""
        check_min_confidence(min_confidence, "min_confidence")  # before the slow part
        texts, pairs = one_or_many(texts), None if pairs is None else one_or_many(pairs)
        logits = self.logits(texts, pairs, batch_size, long_text, stride)
        return self.results(texts, logits, pairs, min_confidence)

    def results(
        self,
        texts: Sequence[str],
        logits: Tensor,
        pairs: Sequence[str] | None = None,
        min_confidence: float | None = None,
    ) -> list[dict[str, Any]]:
        """The `predict` objects of `texts` (and `pairs`) from their logits (N, C): probabilities
        softmax(logits / `temperature`) rounded to 6 decimals, `label` the most probable, or
        None where ``min_confidence`` is given and the top probability as shown (rounded) is
        below it."""
        check_min_confidence(min_confidence, "min_confidence")
        if min_confidence is not None and self.multi_label:
            raise UserError(
                "min_confidence applies to single-label models; this multi-label model's labels "
                "are decided by its per-label thresholds (tuned on validation)"
            )
        inputs = [texts] if pairs is None else [texts, pairs]
        finite = torch.isfinite(logits).all(dim=-1)  # (N,)
        if not finite.all():  # NaN would print as `NaN`, which is not JSON
            row = int((~finite).nonzero()[0])
            raise UserError(
                f"the model gives NaN or infinite logits for text {row + 1}: "
                "its weights overflow on this input; the model is damaged or diverged"
            )
        if self.thresholds is not None:
            return self._multi_label_results(inputs, logits)
        results = []
        probs = (logits.float() / self.temperature).softmax(-1)  # (N, C)
        for *row, p in zip(*inputs, probs.tolist(), strict=True):
            best = max(range(len(p)), key=p.__getitem__)
            rounded = {name: round(q, 6) for name, q in zip(self.labels, p, strict=True)}
            shown = dict(zip(("text", "text_pair"), row, strict=False))
            sure = min_confidence is None or round(p[best], 6) >= min_confidence
            label = self.labels[best] if sure else None
            results.append({**shown, "label": label, "probabilities": rounded})
        return results

    def _multi_label_results(self, inputs: list[Sequence[str]], logits: Tensor) -> list[dict]:
        results = []
        for *row, p in zip(*inputs, logits.float().sigmoid().tolist(), strict=True):
            rounded = {name: round(q, 6) for name, q in zip(self.labels, p, strict=True)}
            above = [n for n, q, t in zip(self.labels, p, self.thresholds, strict=True) if q >= t]
            above.sort(key=lambda name: -rounded[name])
            shown = dict(zip(("text", "text_pair"), row, strict=False))
            labels = {name: rounded[name] for name in above}
            results.append({**shown, "labels": labels, "probabilities": rounded})
        return results


def check_min_confidence(value: float | None, name: str = "--min_confidence") -> None:
    """One line for a ``value`` that is not a probability in [0, 1) (1 would null every label);
    ``name`` is how the caller spells it."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise UserError(
            f"{name} ({value!r}) must be a probability in [0, 1): the top probability below "
            "which the label is null"
        )


def one_or_many(texts: str | Sequence[str]) -> Sequence[str]:
    """``texts`` as a sequence of texts: a string is one text (iterated, it would be one text
    per character)."""
    return [texts] if isinstance(texts, str) else texts


def _check_vocabulary(input_ids: Tensor, vocab_size: int) -> None:
    """One line, rather than an index error in the embedding, for ids outside [0, V)."""
    if input_ids.numel() == 0:
        return
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        raise UserError(
            f"token ids must be in [0, {vocab_size}), the model's vocabulary; got {low}..{high} "
            "(is tokenizer.json the model's?)"
        )
