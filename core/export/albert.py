"""Our ``AlbertMLM`` as transformers' ``AlbertForMaskedLM``: its ``config.json`` and its tensors.

The two models compute the same function; only the layout differs:

- our attention has one fused ``qkv`` projection, theirs three (``query``, ``key``, ``value``): its
  rows are split in that order;
- their embeddings add a token-type embedding, which ours lacks: it is exported as zeros (two rows,
  so that sentence pairs, whose second sentence has type 1, also add nothing);
- their encoder groups shared layers: one group of one layer, applied ``num_hidden_layers`` times,
  is our one shared layer;
- our decoder's weight is the token embedding (tied, as theirs) and its bias is their
  ``predictions.bias`` (which their decoder's bias is tied to: both names are written).

Our feed-forward and head use exact GELU (``F.gelu``): ``hidden_act`` is ``gelu``, not the tanh
approximation ``gelu_new`` that Google's ALBERT checkpoints use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from core.data.tokenizer import TextTokenizer
from core.export.errors import ExportError
from core.export.mapping import KindMapping
from core.models.albert import AlbertMLM

ARCHITECTURE = "AlbertForMaskedLM"
TOKEN_TYPES = 2
_LAYER = "albert.encoder.albert_layer_groups.0.albert_layers.0."
_RENAMED = (
    # (ours, theirs) for the linear and norm layers whose weight and bias move as they are
    ("embedding_norm", "albert.embeddings.LayerNorm"),
    ("embedding_to_hidden", "albert.encoder.embedding_hidden_mapping_in"),
    ("layer.attention.out", _LAYER + "attention.dense"),
    ("layer.attention_norm", _LAYER + "attention.LayerNorm"),
    ("layer.ffn_in", _LAYER + "ffn"),
    ("layer.ffn_out", _LAYER + "ffn_output"),
    ("layer.ffn_norm", _LAYER + "full_layer_layer_norm"),
    ("head_dense", "predictions.dense"),
    ("head_norm", "predictions.LayerNorm"),
)


def _albert(model: nn.Module) -> AlbertMLM:
    if not isinstance(model, AlbertMLM):
        raise ExportError(f"the ALBERT export got a {type(model).__name__}, not an AlbertMLM")
    return model


def albert_config(model: nn.Module, tokenizer: TextTokenizer) -> dict[str, Any]:
    """The ``config.json`` of ``model`` as an ``AlbertForMaskedLM``."""
    c = _albert(model).config
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "albert",
        "vocab_size": c.vocab_size,
        "embedding_size": c.embedding_size,
        "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers,
        "num_hidden_groups": 1,
        "inner_group_num": 1,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.intermediate_size,
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.dropout,
        "max_position_embeddings": c.max_position,
        "type_vocab_size": TOKEN_TYPES,
        "initializer_range": 0.02,
        "layer_norm_eps": c.layer_norm_eps,
        "position_embedding_type": "absolute",
        "pad_token_id": tokenizer.pad_id,
        "bos_token_id": tokenizer.cls_id,
        "eos_token_id": tokenizer.sep_id,
        "tie_word_embeddings": True,
    }


def albert_tensors(model: nn.Module, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The tensors of ``state`` (``model``'s layout) under ``AlbertForMaskedLM``'s names."""
    c = _albert(model).config
    embedding = state["token_embedding.weight"]
    if not torch.equal(state["decoder.weight"], embedding):
        raise ExportError(
            "the checkpoint's decoder weight differs from its token embedding; the model ties "
            "them, so this checkpoint was not written by it"
        )
    out: dict[str, Tensor] = {
        "albert.embeddings.word_embeddings.weight": embedding,
        "albert.embeddings.position_embeddings.weight": state["position_embedding.weight"],
        "albert.embeddings.token_type_embeddings.weight": torch.zeros(
            TOKEN_TYPES, c.embedding_size, dtype=embedding.dtype
        ),
        "predictions.decoder.weight": embedding,
        "predictions.decoder.bias": state["decoder.bias"],
        "predictions.bias": state["decoder.bias"],
    }
    for ours, theirs in _RENAMED:
        for part in ("weight", "bias"):
            out[f"{theirs}.{part}"] = state[f"{ours}.{part}"]
    for part in ("weight", "bias"):
        query, key, value = state[f"layer.attention.qkv.{part}"].chunk(3, dim=0)
        out[f"{_LAYER}attention.query.{part}"] = query
        out[f"{_LAYER}attention.key.{part}"] = key
        out[f"{_LAYER}attention.value.{part}"] = value
    # safetensors refuses views and tensors that share memory: each name gets its own copy
    return {
        name: tensor.detach().clone(memory_format=torch.contiguous_format)
        for name, tensor in out.items()
    }


def albert_summary(model: nn.Module) -> str:
    """The model's shape in a sentence."""
    c = _albert(model).config
    return (
        f"An ALBERT masked language model: {c.embedding_size}-wide token embeddings projected to "
        f"{c.hidden_size}, one encoder layer ({c.num_heads} attention heads, feed-forward "
        f"{c.intermediate_size}) shared by all {c.num_layers} layers, a vocabulary of "
        f"{c.vocab_size:,} and up to {c.max_position:,} tokens per sequence."
    )


ALBERT = KindMapping(
    architecture=ARCHITECTURE,
    auto_class="AutoModelForMaskedLM",
    pipeline_tag="fill-mask",
    causal=False,
    config=albert_config,
    tensors=albert_tensors,
    summary=albert_summary,
)
