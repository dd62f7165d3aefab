"""Tiny encoder-decoders for the seq2seq tests: d_model 16, 2 + 2 layers, 12 tokens."""

from __future__ import annotations

import torch

from tscratch.seq2seq import Seq2SeqConfig, TransformerSeq2Seq

PAD, BOS, EOS, V = 0, 1, 2, 12


def tiny_config(**changes) -> Seq2SeqConfig:
    base = dict(
        vocab_size=V, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=24, dropout=0.0
    )
    return Seq2SeqConfig(**{**base, **changes})


def tiny_model(**changes) -> TransformerSeq2Seq:
    """An eval-mode model with weights spread wide (std 0.5, position tables std 1), so its
    outputs differ from token to token and a misplaced position or mask shows."""
    model = TransformerSeq2Seq(tiny_config(**changes)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm_weight = "norm" in name and name.endswith("weight")
            p.normal_(1.0 if is_norm_weight else 0.0, 1.0 if "positions" in name else 0.5)
    return model


def padded_sources(lengths: list[int], length: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(B, length) ids right-padded with PAD and their (B, length) mask, True = real token."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    ids = torch.randint(3, V, (len(lengths), length), generator=g).masked_fill(~mask, PAD)
    return ids, mask


def reverse_task(n: int, max_length: int = 6, seed: int = 0) -> dict[str, torch.Tensor]:
    """`n` random sources of 2..max_length tokens and, as targets, each reversed then EOS."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, max_length + 1, (n,), generator=g).tolist()
    input_ids, attention_mask = padded_sources(lengths, max_length, seed)
    labels = torch.full((n, max_length + 1), PAD)
    for row, length in enumerate(lengths):
        labels[row, :length] = input_ids[row, :length].flip(0)
        labels[row, length] = EOS
    decoder_input_ids = torch.cat([torch.full((n, 1), BOS), labels[:, :-1]], dim=1)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "decoder_input_ids": decoder_input_ids,
        "decoder_attention_mask": decoder_input_ids != PAD,
        "labels": labels,
    }


def train(model: TransformerSeq2Seq, batch: dict[str, torch.Tensor], steps: int, lr: float = 3e-3):
    """Full-batch Adam on the cross-entropy of the non-pad labels; returns the last loss."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    for _ in range(steps):
        logits = model(**inputs).logits  # (B, T, V)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=PAD
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()
