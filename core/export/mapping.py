"""``KindMapping``: how one model kind of ours becomes a model of the transformers library.

A mapping names the transformers class that loads the folder (and the ``Auto`` class the model
card loads it with), the pipeline it serves, whether it predicts the next token, and three
functions: the ``config.json`` document for a model, its tensors under transformers' names, and a
sentence on its shape for the model card.
Both take the model as ``build_model`` makes it (possibly on the meta device: only its config and
the layout of its parameters are read) and the checkpoint's state dict, already checked to fit it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from core.data.tokenizer import TextTokenizer


@dataclass(frozen=True)
class KindMapping:
    architecture: str
    """The transformers class that loads the exported folder (``AlbertForMaskedLM``)."""
    auto_class: str
    """The ``Auto`` class of transformers that the model card's loading lines use
    (``AutoModelForMaskedLM``)."""
    pipeline_tag: str
    """The Hub's task for the model card (``fill-mask``)."""
    causal: bool
    """Whether the model predicts each next token (and so generates text) rather than masked
    tokens: its tokenizer opens a text with [CLS] and leaves it open for the model to continue,
    and its card speaks of next tokens."""
    config: Callable[[nn.Module, TextTokenizer], dict[str, Any]]
    """The ``config.json`` document: the model's shape and the tokenizer's special ids."""
    tensors: Callable[[nn.Module, Mapping[str, Tensor]], dict[str, Tensor]]
    """The checkpoint's tensors under transformers' names, each contiguous and its own copy."""
    summary: Callable[[nn.Module], str]
    """The model's shape in a sentence, for the model card."""
