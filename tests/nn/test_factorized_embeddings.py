"""`EncoderConfig.embed_dim`: a token table narrower than d_model, projected up (ALBERT)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import tscratch
from tests.test_export import TEXTS
from tests.test_export import checkpoint as plain_checkpoint  # noqa: F401  (a fixture)
from tscratch.config import EncoderConfig
from tscratch.data.encoding import encode_texts
from tscratch.electra import TransformerForReplacedTokenDetection
from tscratch.errors import UserError
from tscratch.export import export
from tscratch.export.onnx_graph import export_onnx, onnx_forward
from tscratch.masked_lm import TransformerForMaskedLM, masked_lm_flops
from tscratch.model import TransformerClassifier, TransformerEncoder, forward_flops
from tscratch.seq2seq.config import Seq2SeqConfig
from tscratch.seq2seq.model import TransformerSeq2Seq
from tscratch.training.classification import ClassificationTask

SIZES = {"vocab_size": 50, "d_model": 16, "num_heads": 2, "d_ff": 32, "num_layers": 1}


def _config(**changes: object) -> EncoderConfig:
    return EncoderConfig(**{**SIZES, "max_len": 32, "dropout": 0.0, **changes})


@pytest.mark.parametrize("width", [-1, 17, 2.5, True])
def test_a_width_outside_one_to_d_model_is_one_line(width):
    with pytest.raises(UserError, match=rf"^embed_dim \({width!r}\) must be an integer from 1 to "
                                        r"d_model \(16\), or 0 for d_model$"):  # fmt: skip
        _config(embed_dim=width)


@pytest.mark.parametrize("width", [0, 16])
def test_full_width_adds_no_projection_and_keeps_the_keys(width):
    torch.manual_seed(0)
    plain = TransformerEncoder(_config())
    torch.manual_seed(0)
    same = TransformerEncoder(_config(embed_dim=width))
    assert same.emb_proj is None and same.state_dict().keys() == plain.state_dict().keys()
    assert same.config == plain.config  # d_model is spelled 0: a resume or init_from matches
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(same.state_dict()[key], value, atol=0, rtol=0)


def test_a_narrow_table_is_projected_up_to_d_model():
    torch.manual_seed(0)
    encoder = TransformerEncoder(_config(embed_dim=4)).eval()
    plain = TransformerEncoder(_config())
    assert encoder.tok_emb.weight.shape == (50, 4) and encoder.emb_proj.weight.shape == (16, 4)
    saved = sum(p.numel() for p in plain.parameters()) - sum(
        p.numel() for p in encoder.parameters()
    )
    assert saved == 50 * 16 - (50 * 4 + 4 * 16)
    ids = torch.randint(1, 50, (2, 7))
    expected = encoder.emb_proj(encoder.tok_emb(ids)) * math.sqrt(16)
    expected = encoder.positions.embed(expected)  # sinusoidal: added
    torch.testing.assert_close(encoder.embed(ids), expected)
    assert encoder(ids).last_hidden_state.shape == (2, 7, 16)


def test_the_projection_keeps_the_tables_spread():
    torch.manual_seed(0)
    wide = TransformerEncoder(_config(vocab_size=4000, d_model=64, num_heads=2, embed_dim=0))
    narrow = TransformerEncoder(_config(vocab_size=4000, d_model=64, num_heads=2, embed_dim=16))
    ids = torch.arange(1, 4000)[None]
    wide_x, narrow_x = wide.tok_emb(ids), narrow.emb_proj(narrow.tok_emb(ids))
    assert narrow_x.std().item() == pytest.approx(wide_x.std().item(), rel=0.1)


def test_the_flop_counts_add_the_projection_and_the_narrower_head():
    plain, narrow = _config(), _config(embed_dim=4)
    assert forward_flops(narrow, 2, 7) - forward_flops(plain, 2, 7) == 2 * 7 * (2 * 4 * 16)
    head = masked_lm_flops(narrow, 2, 7, 3) - forward_flops(narrow, 2, 7)
    assert head == 3 * (2 * 16 * 4 + 2 * 4 * 50)  # dense D -> E, tied decoder E -> V


def test_masked_lm_maps_down_to_the_tables_width_and_stays_tied():
    model = TransformerForMaskedLM(_config(embed_dim=4))
    assert model.head.decoder.weight is model.encoder.tok_emb.weight
    assert model.head.dense.weight.shape == (4, 16)
    ids = torch.randint(1, 50, (2, 6))
    assert model(ids, torch.ones(2, 6, dtype=torch.bool)).shape == (2, 6, 50)


def test_electra_and_seq2seq_refuse_a_narrow_table_in_one_line():
    with pytest.raises(UserError, match=r"^embed_dim \(4\): ELECTRA's generator shares"):
        TransformerForReplacedTokenDetection(_config(embed_dim=4))
    config = Seq2SeqConfig(**SIZES, max_len=32, embed_dim=4)
    with pytest.raises(UserError, match=r"^embed_dim \(4\): the decoder reads and writes"):
        TransformerSeq2Seq(config)


def test_frozen_embeddings_keep_the_table_and_train_the_projection():
    task = ClassificationTask(**SIZES, embed_dim=4, num_classes=3, freeze_embeddings=True)
    encoder = task.model.encoder
    assert not encoder.tok_emb.weight.requires_grad and encoder.emb_proj.weight.requires_grad


@pytest.fixture
def factorized_checkpoint(plain_checkpoint) -> dict:  # noqa: F811
    """The export tests' checkpoint, with a 4-wide table projected up to its d_model 16."""
    checkpoint = copy.deepcopy(plain_checkpoint)
    hparams = checkpoint["hyper_parameters"]
    config = EncoderConfig.from_flat({**hparams, "embed_dim": 4})
    torch.manual_seed(1)
    model = TransformerClassifier(config, 3, pooling="mean")
    checkpoint["hyper_parameters"] = {**hparams, "embed_dim": 4}
    checkpoint["state_dict"] = {f"model.{k}": v for k, v in model.state_dict().items()}
    return checkpoint


def test_a_factorized_classifier_exports_and_loads_to_the_same_logits(
    factorized_checkpoint, tmp_path
):
    folder = export(factorized_checkpoint, tmp_path / "factorized")
    classifier = tscratch.load(folder)
    assert classifier.module.encoder.tok_emb.weight.shape[1] == 4
    assert "(token vectors 4 wide, projected up to d_model)." in (folder / "README.md").read_text()
    model = tscratch.export.classifier_from_checkpoint(factorized_checkpoint).eval()
    batch = encode_texts(classifier.tokenizer, TEXTS, 24, pad_id=0)
    with torch.no_grad():
        expected = model(batch["input_ids"], batch["attention_mask"]).logits
    torch.testing.assert_close(classifier.logits(TEXTS, batch_size=2), expected, atol=1e-6, rtol=0)


@pytest.mark.slow
def test_a_factorized_classifier_exports_to_onnx(tmp_path):
    pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    model = TransformerClassifier(_config(embed_dim=4), 3, pooling="mean").eval()
    export_onnx(model, 24, tmp_path / "model.onnx")
    ids = torch.randint(1, 50, (3, 11))
    mask = torch.arange(11) < torch.tensor([[11], [5], [1]])
    ids[~mask] = 0
    with torch.no_grad():
        expected = model(ids, mask).logits
    got = onnx_forward(tmp_path / "model.onnx")(ids, mask)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
