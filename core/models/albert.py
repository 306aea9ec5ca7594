"""A small ALBERT-style masked language model in plain torch.

ALBERT (Lan et al., 2019) differs from BERT in two ways that matter for volunteer training:
factorized embeddings (a narrow ``embedding_size`` projected up to ``hidden_size``) and one encoder
layer whose weights are reused at every depth. Both shrink the parameters, and so the bytes every
peer sends at each averaging round, without shrinking the compute per sample.

With ``gradient_checkpointing`` the activations inside each application of the shared layer are
not kept for the backward pass but computed again there: activation memory then grows with the
layer's input alone (one hidden vector per token and depth), for about a third more compute. That
is what lets a real-size model (``resources/albert-xxlarge``) train at a useful microbatch on an
8 GB GPU. Dropout stays right: the recomputation replays the random state of the forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from core.models.checks import check_divisible, check_positive_ints

IGNORE_INDEX = -100
"""Label of positions that take no part in the loss (PyTorch's cross-entropy convention)."""


@dataclass(frozen=True)
class AlbertConfig:
    vocab_size: int = 4096
    embedding_size: int = 64
    hidden_size: int = 128
    num_layers: int = 4
    """Applications of the one shared encoder layer."""
    num_heads: int = 4
    intermediate_size: int = 256
    max_position: int = 128
    dropout: float = 0.0
    layer_norm_eps: float = 1e-12
    gradient_checkpointing: bool = False
    """Recompute each application of the shared layer in backward instead of keeping its
    activations (only while training with gradients)."""

    def __post_init__(self) -> None:
        check_positive_ints(self, (
            "vocab_size", "embedding_size", "hidden_size", "num_layers", "num_heads",
            "intermediate_size", "max_position",
        ))  # fmt: skip
        check_divisible(self, "hidden_size", "num_heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"AlbertConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not self.layer_norm_eps > 0.0:
            raise ValueError(
                f"AlbertConfig.layer_norm_eps must be positive, got {self.layer_norm_eps!r}"
            )
        if not isinstance(self.gradient_checkpointing, bool):
            raise ValueError(
                "AlbertConfig.gradient_checkpointing must be True or False, "
                f"got {self.gradient_checkpointing!r}"
            )


@dataclass
class MLMOutput:
    loss: Tensor | None
    """Mean cross-entropy over labelled positions; None when no labels were given."""
    logits: Tensor
    """Scores over the vocabulary, shape (batch, time, vocab_size)."""


class SelfAttention(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.dropout = config.dropout
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.out = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        batch, time, hidden = x.shape
        q, k, v = self.qkv(x).split(hidden, dim=2)
        # (batch, time, hidden) -> (batch, heads, time, head_size)
        q, k, v = (t.view(batch, time, self.num_heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0
        )
        out: Tensor = self.out(y.transpose(1, 2).reshape(batch, time, hidden))
        return out


class EncoderLayer(nn.Module):
    """Attention then feed-forward, each added to its input and then normalized (post-LN, as BERT)."""

    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.attention = SelfAttention(config)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.ffn_in = nn.Linear(config.hidden_size, config.intermediate_size)
        self.ffn_out = nn.Linear(config.intermediate_size, config.hidden_size)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x: Tensor, mask: Tensor | None) -> Tensor:
        x = self.attention_norm(x + self.drop(self.attention(x, mask)))
        out: Tensor = self.ffn_norm(x + self.drop(self.ffn_out(F.gelu(self.ffn_in(x)))))
        return out


class AlbertMLM(nn.Module):
    def __init__(self, config: AlbertConfig) -> None:
        super().__init__()
        self.config = config
        e, h = config.embedding_size, config.hidden_size
        self.token_embedding = nn.Embedding(config.vocab_size, e)
        self.position_embedding = nn.Embedding(config.max_position, e)
        self.embedding_norm = nn.LayerNorm(e, eps=config.layer_norm_eps)
        self.embedding_to_hidden = nn.Linear(e, h)
        self.drop = nn.Dropout(config.dropout)
        self.layer = EncoderLayer(config)  # one layer, applied num_layers times
        self.head_dense = nn.Linear(h, e)
        self.head_norm = nn.LayerNorm(e, eps=config.layer_norm_eps)
        self.decoder = nn.Linear(e, config.vocab_size)
        self.apply(self._init_weights)
        # tied after init: the decoder reads out with the very matrix that embeds tokens
        self.decoder.weight = self.token_embedding.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        """Distinct trainable values (shared and tied weights counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> MLMOutput:
        """Scores for every position; ``attention_mask`` is 1 (or True) for real tokens, 0 for padding."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, time), got shape {tuple(input_ids.shape)}")
        time = input_ids.size(1)
        if time > self.config.max_position:
            raise ValueError(
                f"sequence length {time} exceeds max_position {self.config.max_position}"
            )
        positions = torch.arange(time, device=input_ids.device)
        x = self.token_embedding(input_ids) + self.position_embedding(positions)
        x = self.drop(self.embedding_to_hidden(self.embedding_norm(x)))

        mask = None
        if attention_mask is not None:
            keys = attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, time)
            # a padded query may also see itself, so that an all-padding row never becomes NaN;
            # real queries are unaffected because their own key is real
            itself = torch.eye(time, dtype=torch.bool, device=input_ids.device)
            mask = keys | itself
        # in eval or under no_grad nothing is kept for backward anyway: nothing to save
        recompute = self.config.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for _ in range(self.config.num_layers):
            # non-reentrant: works with inputs that need no grad, replays autocast and the RNG
            x = (
                checkpoint(self.layer, x, mask, use_reentrant=False)
                if recompute
                else self.layer(x, mask)
            )

        y = self.head_norm(F.gelu(self.head_dense(x)))
        logits = self.decoder(y)
        loss = None if labels is None else masked_lm_loss(logits, labels)
        return MLMOutput(loss=loss, logits=logits)


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over positions whose label is not ``IGNORE_INDEX``.

    With no labelled position the result is a zero that still depends on ``logits``, so that
    ``backward`` works (and accumulates nothing) instead of producing NaN.
    """
    per_token = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(),
        labels.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )
    count = (labels != IGNORE_INDEX).sum().clamp(min=1)
    return per_token.sum() / count
