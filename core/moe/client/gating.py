"""The structured gating function of Learning@home (Section 3, Appendix C).

A flat gate over N experts needs N outputs and scoring every expert, which is impossible when experts
number in the thousands and only a few are online. On a d-dimensional grid the gate instead has one
linear layer per dimension, and an expert's score is the sum of its coordinates' scores. That is
``sum(grid sizes)`` outputs instead of their product, and it lets the beam search rank a prefix by the
partial sum of the dimensions it fixes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from core.util.errors import BarnraiseError


class GatingInputError(BarnraiseError):
    """Inputs or expert coordinates whose shape does not fit the gate."""


class StructuredGating(nn.Module):
    """``hidden`` features -> one score vector per grid dimension."""

    def __init__(self, hidden: int, grid_shape: Sequence[int]) -> None:
        super().__init__()
        if hidden < 1:
            raise GatingInputError(f"the gate needs at least one input feature, not {hidden}")
        shape = tuple(grid_shape)
        if not shape or any(size < 1 for size in shape):
            raise GatingInputError(f"grid shape {shape} needs one or more positive sizes")
        self.hidden = hidden
        self.grid_shape = shape
        self.proj = nn.ModuleList(nn.Linear(hidden, size) for size in shape)

    def forward(self, inputs: Tensor) -> list[Tensor]:
        """Scores ``[batch, grid_shape[i]]`` for each dimension ``i``."""
        if inputs.dim() != 2 or inputs.shape[1] != self.hidden:
            raise GatingInputError(
                f"the gate takes inputs of shape [batch, {self.hidden}], not {list(inputs.shape)}"
            )
        if not inputs.is_floating_point():
            raise GatingInputError(f"the gate takes floating-point inputs, not {inputs.dtype}")
        return [layer(inputs) for layer in self.proj]

    def score(self, dim_scores: Sequence[Tensor], coords: Tensor) -> Tensor:
        """The differentiable scores ``[batch, k]`` of the experts at ``coords`` ``[batch, k, d]``.

        The beam search picks experts without gradients; this recomputes the chosen experts' logits
        from the gate's outputs so the gate learns from the mixture's loss.
        """
        depth = len(self.grid_shape)
        if len(dim_scores) != depth:
            raise GatingInputError(
                f"{len(dim_scores)} score tensors for a {depth}-dimensional grid"
            )
        if coords.dim() != 3 or coords.shape[2] != depth or coords.dtype != torch.long:
            raise GatingInputError(
                f"coordinates must be an int64 tensor [batch, k, {depth}], "
                f"not {coords.dtype} {list(coords.shape)}"
            )
        batch = coords.shape[0]
        total = torch.zeros(coords.shape[:2], dtype=dim_scores[0].dtype, device=coords.device)
        for dim, (scores, size) in enumerate(zip(dim_scores, self.grid_shape, strict=True)):
            if scores.shape != (batch, size):
                raise GatingInputError(
                    f"scores of dimension {dim} have shape {list(scores.shape)}, not {[batch, size]}"
                )
            index = coords[:, :, dim]
            if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
                raise GatingInputError(f"a coordinate of dimension {dim} is outside 0..{size - 1}")
            total = total + scores.gather(1, index)
        return total
