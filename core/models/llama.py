"""A decoder-only causal language model of the Llama family's shape, in plain torch.

The decentralized training runs of 2025-26 train decoder-only language models that predict the next
token, not masked-language encoders: that is what their volunteers' work is useful for afterwards.
This is that shape, small to about a billion parameters: pre-normalization with RMSNorm, attention
without biases whose queries and keys are rotated by their position (rotary embeddings, no position
table), grouped-query attention (``num_kv_heads`` key/value heads shared by the query heads, which
shrinks the k/v projections), a SwiGLU feed-forward block, and a read-out that may reuse the token
embedding (``tie_embeddings``). Unlike ALBERT every layer has its own weights.

Parameter names and every computation follow transformers' ``LlamaForCausalLM`` (the "rotate_half"
rotary convention, RMSNorm in float32), so that a state dict loads there as it is and gives the same
logits. With ``gradient_checkpointing`` each layer's activations are recomputed in the backward pass
instead of kept, as ``core.models.albert`` does for its shared layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from core.models.albert import masked_lm_loss
from core.models.checks import check_divisible, check_positive_ints


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 4096
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4
    """Query heads; ``hidden_size / num_heads`` (the head width) must be even for the rotation."""
    num_kv_heads: int = 4
    """Key and value heads, each shared by ``num_heads / num_kv_heads`` query heads."""
    intermediate_size: int = 352
    max_position: int = 128
    """The longest sequence accepted."""
    rope_theta: float = 10000.0
    """The rotary embeddings' base: longer wavelengths for larger values."""
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    """The read-out uses the token embedding's matrix (fewer parameters)."""
    gradient_checkpointing: bool = False
    """Recompute each layer in backward instead of keeping its activations (only while training
    with gradients)."""

    def __post_init__(self) -> None:
        check_positive_ints(self, (
            "vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
            "intermediate_size", "max_position",
        ))  # fmt: skip
        check_divisible(self, "hidden_size", "num_heads")
        if self.head_size % 2:
            raise ValueError(
                f"LlamaConfig.hidden_size / num_heads ({self.head_size}) must be even: rotary "
                "embeddings rotate pairs of values"
            )
        check_divisible(self, "num_heads", "num_kv_heads")
        for name in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"LlamaConfig.{name} must be a positive number, got {value!r}")
        for name in ("tie_embeddings", "gradient_checkpointing"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"LlamaConfig.{name} must be True or False, got {getattr(self, name)!r}"
                )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


@dataclass
class CLMOutput:
    loss: Tensor | None
    """Mean next-token cross-entropy over labelled targets; None when no labels were given."""
    logits: Tensor
    """Scores over the vocabulary for the token after each position, (batch, time, vocab_size)."""


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        # in float32 whatever the input, then back, as transformers does: half precision would
        # lose the mean of squares
        dtype = x.dtype
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        out: Tensor = self.weight * y.to(dtype)
        return out


def rotary_tables(config: LlamaConfig, time: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """cos and sin of every position's angles, (time, head_size) in float32: frequency ``j`` turns
    value ``j`` of a head's first half together with value ``j`` of its second half."""
    d = config.head_size
    inv_freq = 1.0 / (
        config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d)
    )
    positions = torch.arange(time, device=device, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    angles = torch.cat((freqs, freqs), dim=-1)
    return angles.cos(), angles.sin()


def rotate_half(x: Tensor) -> Tensor:
    half = x.size(-1) // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """``x`` (batch, heads, time, head_size) rotated by its positions' angles."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_size
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_size = d
        self.q_proj = nn.Linear(h, config.num_heads * d, bias=False)
        self.k_proj = nn.Linear(h, config.num_kv_heads * d, bias=False)
        self.v_proj = nn.Linear(h, config.num_kv_heads * d, bias=False)
        self.o_proj = nn.Linear(config.num_heads * d, h, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
        batch, time, _ = x.shape
        d = self.head_size
        # (batch, time, heads * d) -> (batch, heads, time, d)
        q = self.q_proj(x).view(batch, time, self.num_heads, d).transpose(1, 2)
        k = self.k_proj(x).view(batch, time, self.num_kv_heads, d).transpose(1, 2)
        v = self.v_proj(x).view(batch, time, self.num_kv_heads, d).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        # each key/value head serves num_heads / num_kv_heads consecutive query heads: the kernel
        # shares them without a repeated copy
        gqa = self.num_heads != self.num_kv_heads
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
        out: Tensor = self.o_proj(y.transpose(1, 2).reshape(batch, time, self.num_heads * d))
        return out


class MLP(nn.Module):
    """SwiGLU: silu(gate) * up, then down."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return out


class DecoderLayer(nn.Module):
    """Normalize, attend, add; normalize, feed forward, add (pre-normalization)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        out: Tensor = x + self.mlp(self.post_attention_layernorm(x))
        return out


class LlamaBody(nn.Module):
    """Everything but the read-out: transformers' ``LlamaModel`` (the ``model.`` of its names)."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaCLM(nn.Module):
    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaBody(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        if config.tie_embeddings:
            # tied after init: the read-out scores with the very matrix that embeds tokens
            self.lm_head.weight = self.model.embed_tokens.weight

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)

    def num_parameters(self) -> int:
        """Distinct trainable values (a tied read-out counted once, under the embedding)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
    ) -> CLMOutput:
        """Next-token scores for every position. ``attention_mask`` is 1 (or True) for real tokens,
        0 for padding; ``labels`` are the sequence itself (the shift by one happens here), with
        ``IGNORE_INDEX`` where nothing is to be predicted."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (batch, time), got shape {tuple(input_ids.shape)}")
        time = input_ids.size(1)
        if time > self.config.max_position:
            raise ValueError(
                f"sequence length {time} exceeds max_position {self.config.max_position}"
            )
        device = input_ids.device
        cos, sin = rotary_tables(self.config, time, device)
        mask = None
        if attention_mask is not None:
            causal = torch.ones(time, time, dtype=torch.bool, device=device).tril()
            keys = attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, time)
            # a padded query may also see itself, so that a row of padding never becomes NaN;
            # real queries are unaffected because their own key is real
            itself = torch.eye(time, dtype=torch.bool, device=device)
            mask = (causal & keys) | itself
        x = self.model.embed_tokens(input_ids)
        # in eval or under no_grad nothing is kept for backward anyway: nothing to save
        recompute = self.config.gradient_checkpointing and self.training and torch.is_grad_enabled()
        for layer in self.model.layers:
            # non-reentrant: works with inputs that need no grad, replays autocast
            x = (
                checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
                if recompute
                else layer(x, cos, sin, mask)
            )
        logits = self.lm_head(self.model.norm(x))
        loss = None
        if labels is not None:
            # position t predicts the label at t + 1; the last position has nothing to predict
            loss = masked_lm_loss(logits[:, :-1], labels[:, 1:])
        return CLMOutput(loss=loss, logits=logits)
