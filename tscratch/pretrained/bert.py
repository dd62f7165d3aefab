"""HF BERT (Devlin et al. 2019) config.json and weights, in tscratch's terms.

`read_bert_config` refuses what the hand-written encoder cannot express; `bert_encoder_config`
turns the rest into an `EncoderConfig`; `bert_to_encoder` renames the weights by `bert_key_map`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tscratch.config import EncoderConfig
from tscratch.errors import MissingFile, UserError
from tscratch.model import TransformerEncoder

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # first found wins
IGNORED_PREFIXES = ("pooler.", "cls.", "classifier.", "qa_outputs.")  # heads we never load
IGNORED_KEYS = ("embeddings.position_ids",)  # a buffer older checkpoints saved

BERT_EMBEDDINGS = {  # tscratch key -> HF BertModel key
    "tok_emb.weight": "embeddings.word_embeddings.weight",
    "positions.weight": "embeddings.position_embeddings.weight",
    "type_emb.weight": "embeddings.token_type_embeddings.weight",
    "emb_norm.weight": "embeddings.LayerNorm.weight",
    "emb_norm.bias": "embeddings.LayerNorm.bias",
}
BERT_LAYER = {  # under layers.{i}. -> under encoder.layer.{i}., for .weight and .bias alike
    "attn.qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
    "attn.out_proj": ("attention.output.dense",),
    "attn_norm": ("attention.output.LayerNorm",),
    "ff.fc1": ("intermediate.dense",),
    "ff.fc2": ("output.dense",),
    "ff_norm": ("output.LayerNorm",),
}


def read_bert_config(folder: Path) -> dict[str, Any]:
    """config.json, checked to describe a BERT the hand-written encoder can express."""
    path = folder / "config.json"
    if not path.is_file():
        raise MissingFile(f"{folder}: no config.json; pass a Hugging Face BERT folder")
    hf = json.loads(path.read_text())
    model_type = hf.get("model_type")
    architectures = hf.get("architectures") or []
    is_bert = model_type == "bert" or (
        model_type is None
        and any(a.startswith("BertFor") or a == "BertModel" for a in architectures)
    )
    if not is_bert:
        raise UserError(
            f"{path}: model_type {model_type!r} is not supported; tscratch loads BERT-family "
            "checkpoints (model_type 'bert')"
        )
    if hf.get("hidden_act", "gelu") != "gelu":
        raise UserError(
            f"{path}: hidden_act {hf['hidden_act']!r} is not supported; tscratch's BERT uses "
            "'gelu' (exact erf)"
        )
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(
            f"{path}: position_embedding_type {hf['position_embedding_type']!r} is not "
            "supported; tscratch's BERT uses 'absolute'"
        )
    return hf


def bert_encoder_config(hf: dict[str, Any], pad_id: int) -> EncoderConfig:
    """The `EncoderConfig` that computes exactly what HF's BertModel computes for `hf`."""
    try:
        return EncoderConfig(
            vocab_size=hf["vocab_size"],
            d_model=hf["hidden_size"],
            num_heads=hf["num_attention_heads"],
            d_ff=hf["intermediate_size"],
            num_layers=hf["num_hidden_layers"],
            max_len=hf["max_position_embeddings"],
            dropout=hf.get("hidden_dropout_prob", 0.1),
            attention_dropout=hf.get("attention_probs_dropout_prob", 0.1),
            norm_first=False,
            norm_eps=hf.get("layer_norm_eps", 1e-12),
            position="learned",
            ffn="gelu",
            pad_id=pad_id,
            scale_embeddings=False,
            embedding_norm=True,
            type_vocab_size=hf.get("type_vocab_size", 2),
        )
    except KeyError as error:
        raise UserError(f"config.json has no {error.args[0]!r}; is it a BERT config?") from None


def read_weights(folder: Path) -> dict[str, Tensor]:
    """model.safetensors, else pytorch_model.bin (tensors only: weights_only=True)."""
    path = next((folder / f for f in WEIGHT_FILES if (folder / f).is_file()), None)
    if path is None:
        raise MissingFile(f"{folder}: no weights ({' or '.join(WEIGHT_FILES)})")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # a torn file or pickled code: either way not loadable safely
        raise UserError(
            f"{path}: not a plain tensor checkpoint ({type(error).__name__})"
        ) from error


def bert_key_map(num_layers: int) -> dict[str, tuple[str, ...]]:
    """tscratch `TransformerEncoder` key -> the HF BertModel keys it is made of.

    The names follow the BERT reference code (Devlin et al. 2019) as Hugging Face ported it.
    Query, key and value weights are concatenated along dim 0 in that order into one `qkv`
    projection; every other tensor is copied as is (both store nn.Linear's (out, in) layout).
    """
    table = {ours: (theirs,) for ours, theirs in BERT_EMBEDDINGS.items()}
    for i in range(num_layers):
        for ours, theirs in BERT_LAYER.items():
            for p in ("weight", "bias"):
                table[f"layers.{i}.{ours}.{p}"] = tuple(
                    f"encoder.layer.{i}.{t}.{p}" for t in theirs
                )
    return table


def bert_to_encoder(
    weights: dict[str, Tensor], num_layers: int, where: str = "checkpoint"
) -> dict[str, Tensor]:
    """Rename (and fuse) HF BERT weights into a `TransformerEncoder` state_dict.

    Accepts BertModel keys and `bert.`-prefixed ones (BertForMaskedLM, BertFor...Classification),
    and the `gamma`/`beta` LayerNorm names of the original TF-converted checkpoints; heads are
    dropped. Raises UserError naming a few missing or unexpected encoder keys.
    """
    if any(k.startswith("bert.") for k in weights):
        weights = {k.removeprefix("bert."): v for k, v in weights.items() if k.startswith("bert.")}
    renamed = {}
    for key, value in weights.items():
        if key in IGNORED_KEYS or key.startswith(IGNORED_PREFIXES):
            continue
        if ".LayerNorm." in key:
            key = key.replace(".gamma", ".weight").replace(".beta", ".bias")
        renamed[key] = value
    table = bert_key_map(num_layers)
    wanted = {k for theirs in table.values() for k in theirs}
    for label, keys in (
        ("missing", wanted - renamed.keys()),
        ("unexpected", renamed.keys() - wanted),
    ):
        if keys:
            few = ", ".join(sorted(keys)[:3]) + (", ..." if len(keys) > 3 else "")
            raise UserError(f"{where}: {len(keys)} {label} BERT encoder weights ({few})")
    return {
        ours: torch.cat([renamed[k] for k in theirs]) if len(theirs) > 1 else renamed[theirs[0]]
        for ours, theirs in table.items()
    }


def check_shapes(state: dict[str, Tensor], config: EncoderConfig, folder: Path) -> None:
    """UserError unless `state` loads into `TransformerEncoder(config)` with strict=True."""
    with torch.device("meta"):  # shapes only: no memory, no init cost
        expected = TransformerEncoder(config).state_dict()
    wrong = [k for k, v in expected.items() if k in state and state[k].shape != v.shape]
    if wrong or expected.keys() != state.keys():
        k = (wrong or sorted(expected.keys() ^ state.keys()))[0]
        got = tuple(state[k].shape) if k in state else None
        raise UserError(
            f"{folder}: weight {k} has shape {got}, config.json implies "
            f"{tuple(expected[k].shape) if k in expected else None}"
        )
