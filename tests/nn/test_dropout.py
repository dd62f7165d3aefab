"""The CPU dropout (`tscratch.nn.dropout`): the share it drops, the scale of what it keeps, its
gradient, its seeding, and that every dropout in the models is this one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers import torch_threads
from tscratch import EncoderConfig, TransformerClassifier
from tscratch.nn.dropout import LEVELS, Dropout, drop_threshold, dropout


def test_not_training_or_p_zero_is_the_input_itself():
    x = torch.randn(4, 5)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x


def test_p_one_drops_everything():
    assert torch.equal(dropout(torch.ones(3, 7), 1.0), torch.zeros(3, 7))


@pytest.mark.parametrize("p", [-0.1, 1.5])
def test_a_probability_outside_0_1_is_refused(p):
    with pytest.raises(ValueError, match=rf"dropout probability \({p}\) must be in \[0, 1\]"):
        dropout(torch.ones(2), p)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        Dropout(p)


def test_p_is_rounded_to_one_in_65536():
    assert drop_threshold(0.1) == 6554 and LEVELS == 65536
    assert drop_threshold(0.5) == 32768


@pytest.mark.parametrize("p", [0.1, 0.25, 0.5, 0.9])
def test_it_drops_the_rounded_share_and_scales_the_rest_to_keep_the_mean(p):
    torch.manual_seed(0)
    n = 1 << 20
    out = dropout(torch.ones(n), p)
    dropped = float((out == 0).float().mean())
    rounded = drop_threshold(p) / LEVELS
    sigma = (rounded * (1 - rounded) / n) ** 0.5
    assert abs(dropped - rounded) < 5 * sigma
    kept = out[out != 0]
    assert torch.all(kept == LEVELS / (LEVELS - drop_threshold(p)))  # one scale, exactly
    assert abs(float(out.mean()) - 1.0) < 5 * sigma / (1 - rounded)


def test_each_16_bit_quarter_of_a_draw_is_used():
    """Positions 0-3 of every group of four come from one 64-bit draw: each must drop its share
    (a draw over half the int64 range would leave one quarter's top bit fixed)."""
    torch.manual_seed(1)
    out = dropout(torch.ones(1 << 20), 0.5).view(-1, 4)
    shares = (out == 0).float().mean(dim=0)
    assert torch.all((shares - 0.5).abs() < 0.01), shares


def test_the_gradient_is_the_mask_and_its_scale():
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    out = dropout(x, 0.2)
    out.backward(torch.ones_like(out))
    mask = (out != 0).float() * (LEVELS / (LEVELS - drop_threshold(0.2)))
    assert torch.equal(x.grad, mask)
    assert torch.allclose(out, x.detach() * mask)


def test_the_dtype_and_an_odd_shape_are_kept():
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16)  # 105 elements: not a multiple of four
    out = dropout(x, 0.1)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape


def test_masks_follow_the_seed_not_the_thread_count():
    masks = []
    for count in (1, 2, 1):
        with torch_threads(count):
            torch.manual_seed(7)
            masks.append(dropout(torch.ones(10_000), 0.3) != 0)
    assert torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])
    torch.manual_seed(7)
    first, second = dropout(torch.ones(10_000), 0.3), dropout(torch.ones(10_000), 0.3)
    assert not torch.equal(first != 0, second != 0)  # the generator moves on


def test_the_module_is_off_in_eval_mode():
    module = Dropout(0.5)
    x = torch.ones(1000)
    assert (module(x) == 0).any()
    module.eval()
    assert module(x) is x
    assert repr(module) == "Dropout(p=0.5)"


def test_the_models_use_it_and_not_torchs():
    model = TransformerClassifier(
        EncoderConfig(vocab_size=50, d_model=16, num_heads=2, d_ff=32, num_layers=2), 3
    )
    ours = [m for m in model.modules() if isinstance(m, Dropout)]
    assert len(ours) == 1 + 2 * 2 + 1  # embeddings, each block and its feed-forward, the head
    assert not any(isinstance(m, nn.Dropout) for m in model.modules())
