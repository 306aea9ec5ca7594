"""Our ``LlamaCLM`` as transformers' ``LlamaForCausalLM``: its ``config.json`` and its tensors.

Our model was written with transformers' names and computations (``core.models.llama``), so the
tensors move as they are. Two things need care:

- the rotary base goes under ``rope_parameters``, where transformers 5 reads it; it is also written
  as ``rope_theta`` at the top, where older readers of Llama folders (transformers 4, converters
  to other runtimes) look, and transformers 5 takes either;
- a tied read-out is written once, as the token embedding: transformers saves tied models so, and
  with ``tie_word_embeddings`` it ties ``lm_head.weight`` to it on loading, with nothing left newly
  initialized. An untied read-out is written under its own name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from core.data.tokenizer import TextTokenizer
from core.export.errors import ExportError
from core.export.mapping import KindMapping
from core.models.llama import LlamaCLM

ARCHITECTURE = "LlamaForCausalLM"
READ_OUT = "lm_head.weight"
EMBEDDING = "model.embed_tokens.weight"


def _llama(model: nn.Module) -> LlamaCLM:
    if not isinstance(model, LlamaCLM):
        raise ExportError(f"the Llama export got a {type(model).__name__}, not a LlamaCLM")
    return model


def llama_config(model: nn.Module, tokenizer: TextTokenizer) -> dict[str, Any]:
    """The ``config.json`` of ``model`` as a ``LlamaForCausalLM``."""
    c = _llama(model).config
    return {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_layers,
        "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads,
        "head_dim": c.head_size,
        "max_position_embeddings": c.max_position,
        "rope_parameters": {"rope_type": "default", "rope_theta": c.rope_theta},
        "rope_theta": c.rope_theta,
        "rms_norm_eps": c.rms_norm_eps,
        "hidden_act": "silu",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": c.tie_embeddings,
        "use_cache": True,
        # every training sequence opens with [CLS], and [SEP] closes each text in it
        "bos_token_id": tokenizer.cls_id,
        "eos_token_id": tokenizer.sep_id,
        "pad_token_id": tokenizer.pad_id,
    }


def llama_tensors(model: nn.Module, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The tensors of ``state`` (``model``'s layout) under ``LlamaForCausalLM``'s names, which are
    ours; a tied read-out only as the embedding."""
    c = _llama(model).config
    out = dict(state)
    if c.tie_embeddings:
        read_out = out.pop(READ_OUT)
        if not torch.equal(read_out, state[EMBEDDING]):
            raise ExportError(
                "the checkpoint's read-out (lm_head.weight) differs from its token embedding; the "
                "manifest ties them (model.tie_embeddings), so this checkpoint was not written by "
                "its model"
            )
    # safetensors refuses views and tensors that share memory: each name gets its own copy
    return {
        name: tensor.detach().clone(memory_format=torch.contiguous_format)
        for name, tensor in out.items()
    }


def llama_summary(model: nn.Module) -> str:
    """The model's shape in a sentence."""
    c = _llama(model).config
    kv = (
        f"{c.num_kv_heads} key/value heads shared among them"
        if c.num_kv_heads != c.num_heads
        else "one key/value head each"
    )
    read_out = (
        "a read-out that reuses the token embedding"
        if c.tie_embeddings
        else "a read-out of its own"
    )
    return (
        f"A Llama-shaped causal language model, which predicts each next token: {c.num_layers} "
        f"decoder layers of width {c.hidden_size} ({c.num_heads} attention heads, {kv}; rotary "
        f"position embeddings of base {c.rope_theta:g}; a SwiGLU feed-forward of "
        f"{c.intermediate_size}), a vocabulary of {c.vocab_size:,} with {read_out}, and up to "
        f"{c.max_position:,} tokens per sequence."
    )


LLAMA = KindMapping(
    architecture=ARCHITECTURE,
    auto_class="AutoModelForCausalLM",
    pipeline_tag="text-generation",
    causal=True,
    config=llama_config,
    tensors=llama_tensors,
    summary=llama_summary,
)
