"""Property checks of an encoder built from a config, shared by tests/test_model.py (every scheme
in POSITIONS) and tests/nn/test_position_registry.py (a scheme registered by the test)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tscratch.config import EncoderConfig
from tscratch.model import TransformerClassifier, TransformerEncoder

V, PAD, D, H, T = 13, 0, 16, 2, 7
TOL = {"atol": 1e-5, "rtol": 1e-5}
# Gradients sum many fp32 products in a different order per kernel: 1e-4 is still four orders
# of magnitude below any real error (a missing mask or scale moves them by >1e-2).
GRAD_TOL = {"atol": 1e-4, "rtol": 1e-4}


def config(**changes) -> EncoderConfig:
    base = {
        "vocab_size": V,
        "d_model": D,
        "num_heads": H,
        "d_ff": 32,
        "num_layers": 2,
        "max_len": 32,
        "dropout": 0.0,
        "pad_id": PAD,
    }
    return EncoderConfig(**{**base, **changes})


def random_ids(batch: int, length: int) -> torch.Tensor:
    return torch.randint(1, V, (batch, length))  # never the pad id


def right_padded(lengths: list[int], length: int = T) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids with pad_id after each row's length, and the (B, T) True = real mask."""
    ids = random_ids(len(lengths), length)
    real = torch.arange(length)[None, :] < torch.tensor(lengths)[:, None]
    return ids.masked_fill(~real, PAD), real


def spread_t5_bias(model: torch.nn.Module) -> None:
    """T5 biases start at N(0, 0.02); make them large enough for a wrong bias to show."""
    for module in model.modules():
        if hasattr(module, "embedding") and module.__class__.__name__ == "T5RelativeBias":
            with torch.no_grad():
                module.embedding.weight.normal_(0, 1.0)


def run_and_grad(model: TransformerEncoder, ids, real, causal: bool, weight: torch.Tensor):
    """Output, gradient at the token embeddings, and every parameter's gradient."""
    captured = {}

    def keep_grad(_module, _inputs, output):
        output.retain_grad()
        captured["emb"] = output

    handle = model.tok_emb.register_forward_hook(keep_grad)
    out = model(ids, real, causal=causal).last_hidden_state
    handle.remove()
    (out * weight).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return out, captured["emb"].grad, grads


def check_explicit_matches_fused(cfg: EncoderConfig, padded: bool, causal: bool) -> None:
    """Outputs and every gradient agree between the fused and the explicit attention paths."""
    fused = TransformerEncoder(cfg.replace(attention_impl="sdpa"))
    spread_t5_bias(fused)
    explicit = TransformerEncoder(cfg.replace(attention_impl="explicit"))
    explicit.load_state_dict(fused.state_dict())
    ids, real = right_padded([T, 4])
    real = real if padded else None
    weight = torch.randn(2, T, D)
    out_f, emb_f, grads_f = run_and_grad(fused, ids, real, causal, weight)
    out_e, emb_e, grads_e = run_and_grad(explicit, ids, real, causal, weight)
    torch.testing.assert_close(out_f, out_e, **TOL)
    torch.testing.assert_close(emb_f, emb_e, **GRAD_TOL)
    assert grads_f.keys() == grads_e.keys()
    for name, grad in grads_f.items():
        torch.testing.assert_close(
            grad, grads_e[name], **GRAD_TOL, msg=lambda m, n=name: f"{n}: {m}"
        )


def check_padding_invariance(cfg: EncoderConfig, pooling: str = "cls") -> None:
    """Appending padding leaves real-token outputs and the logits unchanged."""
    model = TransformerClassifier(cfg, num_classes=3, pooling=pooling).eval()
    spread_t5_bias(model)
    ids, real = right_padded([T, 5])
    extra = 4
    padded_ids = torch.cat([ids, torch.full((2, extra), PAD)], dim=1)
    padded_real = torch.cat([real, torch.zeros(2, extra, dtype=torch.bool)], dim=1)
    hidden = model.encoder(ids, real).last_hidden_state
    hidden_padded = model.encoder(padded_ids, padded_real).last_hidden_state
    torch.testing.assert_close(hidden_padded[:, :T][real], hidden[real], **TOL)
    torch.testing.assert_close(
        model(padded_ids, padded_real).logits, model(ids, real).logits, **TOL
    )


def check_batch_rows_independent(cfg: EncoderConfig) -> None:
    """Row i of a padded batch equals that row run alone, unpadded."""
    model = TransformerEncoder(cfg).eval()
    spread_t5_bias(model)
    ids, real = right_padded([T, 3, 5])
    batched = model(ids, real).last_hidden_state
    for i in range(3):
        n = int(real[i].sum())
        alone = model(ids[i : i + 1, :n]).last_hidden_state  # no padding, no mask
        torch.testing.assert_close(batched[i, :n], alone[0], **TOL)


def check_fully_padded_rows_finite(cfg: EncoderConfig, precision: str) -> None:
    """A row of nothing but padding gives finite logits and finite gradients (fp32, bf16)."""
    model = TransformerClassifier(cfg, num_classes=3)
    if precision == "bf16-true":
        model = model.to(torch.bfloat16)
    ids, real = right_padded([T, 0])  # the second row is nothing but padding
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-autocast"):
        logits = model(ids, real).logits
        loss = F.cross_entropy(logits.float(), torch.tensor([0, 1]))
    assert torch.isfinite(logits).all()
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def every_parameter_gradient(cfg: EncoderConfig) -> tuple[TransformerClassifier, dict]:
    """Backpropagate a loss through a classifier with token types and an embedding norm; checks
    every parameter got a finite gradient and returns the model and {name: grad}."""
    cfg = cfg.replace(type_vocab_size=2, embedding_norm=True)
    model = TransformerClassifier(cfg, num_classes=3, pooling="mean")
    ids, real = right_padded([T, 5])
    types = torch.randint(0, 2, ids.shape)
    loss = F.cross_entropy(model(ids, real, token_type_ids=types).logits, torch.tensor([0, 2]))
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        grads[name] = p.grad
    return model, grads
