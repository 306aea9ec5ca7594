"""The expert architectures a project can name, and how a server builds one hosted expert.

A project's manifest says which architecture its experts have (``kind``) and their width
(``hidden``); every server that hosts a uid builds the same module from that, seeded by the uid, so
two servers starting the same expert start from the same weights and a checkpoint of one loads into
the other.

- ``ffn``: a residual feed-forward block, ``LayerNorm(x + W2·gelu(W1·x))`` with ``W1`` of
  ``hidden -> 4·hidden``; the shape of Learning@home's experts and of hivemind's ``ffn`` expert (so
  the throughput benchmark compares like with like).
- ``linear``: one ``hidden -> hidden`` layer, for tests that need an expert whose arithmetic is easy
  to follow.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from core.moe.grid import uid_seed
from core.moe.server.backend import ExpertBackend
from core.moe.server.guard import DEFAULT_MAX_GRAD_NORM
from core.util.errors import BarnraiseError

KINDS = ("ffn", "linear")
OPTIMIZERS = ("adam", "sgd")
MAX_HIDDEN = 65_536


class ExpertSpecError(BarnraiseError):
    """An expert description that cannot be built."""


class FeedForwardExpert(nn.Module):
    """``LayerNorm(x + W2·gelu(W1·x))``, with the tanh approximation of GELU."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.inner = nn.Linear(hidden, 4 * hidden)
        self.outer = nn.Linear(4 * hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x: Tensor) -> Tensor:
        h = nn.functional.gelu(self.inner(x), approximate="tanh")
        out: Tensor = self.norm(x + self.outer(h))
        return out


@dataclass(frozen=True, slots=True)
class ExpertSpec:
    """What every hosted expert of a grid is: architecture, width, optimizer and batch bound."""

    kind: str = "ffn"
    hidden: int = 64
    optimizer: str = "adam"
    lr: float = 1e-3
    max_batch: int = 256
    max_grad_norm: float = DEFAULT_MAX_GRAD_NORM

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ExpertSpecError(f"expert kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not 1 <= self.hidden <= MAX_HIDDEN:
            raise ExpertSpecError(f"expert width must be 1 to {MAX_HIDDEN}, got {self.hidden}")
        if self.optimizer not in OPTIMIZERS:
            raise ExpertSpecError(
                f"expert optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}"
            )
        if not 0 < self.lr <= 10:
            raise ExpertSpecError(f"expert learning rate must be in (0, 10], got {self.lr}")
        if not 1 <= self.max_batch <= 65_536:
            raise ExpertSpecError(f"expert max_batch must be 1 to 65536, got {self.max_batch}")
        if not 0 <= self.max_grad_norm <= 1e6:
            raise ExpertSpecError(
                f"expert max_grad_norm must be 0 (no clipping) to 1e6, got {self.max_grad_norm}"
            )

    def module(self, uid: str) -> nn.Module:
        """A fresh module for ``uid``, initialised from a seed derived from the uid."""
        generator_state = torch.random.get_rng_state()
        try:
            torch.manual_seed(uid_seed(uid))
            if self.kind == "ffn":
                return FeedForwardExpert(self.hidden)
            return nn.Linear(self.hidden, self.hidden)
        finally:
            torch.random.set_rng_state(generator_state)  # the caller's random stream is its own

    def optimizer_for(self, module: nn.Module) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(module.parameters(), lr=self.lr)
        return torch.optim.SGD(module.parameters(), lr=self.lr)

    def backend(self, uid: str) -> ExpertBackend:
        """A hosted expert ``uid``: its module, optimizer, and the shapes it takes and gives."""
        module = self.module(uid)
        shape = [self.hidden]
        return ExpertBackend(
            uid,
            module,
            self.optimizer_for(module),
            input_shapes=[shape],
            output_shapes=[shape],
            max_batch=self.max_batch,
            max_grad_norm=self.max_grad_norm,
            initial_state=lambda: self.module(uid).state_dict(),
        )
