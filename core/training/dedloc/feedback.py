"""ErrorFeedback: what a sparse codec left out of this peer's gradients, sent with the next round.

A top-k codec sends a few percent of each gradient. Without feedback the rest is simply gone, and
small coordinates never move; with it, every coordinate's leftovers add up until they are large
enough to be sent (the residual of SparseLoCo and of error-feedback SGD). A round that formed no
group applied this peer's gradients whole, so nothing is left over; a round that did leaves in
the feedback buffers exactly what the codec dropped from every chunk this peer sent
(``AllReduce``'s ``feedback``).
"""

from __future__ import annotations

import torch


class ErrorFeedback:
    def __init__(self) -> None:
        self.residual: list[torch.Tensor] | None = None
        self._buffers: list[torch.Tensor] | None = None

    def add_to(self, grads: list[torch.Tensor]) -> None:
        """The leftovers of earlier rounds join this round's gradients (in place)."""
        if self.residual is not None:
            for g, r in zip(grads, self.residual, strict=True):
                g.add_(r)

    def buffers(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """Zeroed buffers shaped like ``grads`` for the round to write what it left out into."""
        self._buffers = [torch.zeros_like(g) for g in grads]
        return self._buffers

    def settle(self, *, sent: bool) -> None:
        """After the round: ``sent`` (a group averaged) keeps what was left out for the next
        round; otherwise everything was applied locally and nothing is left."""
        self.residual = self._buffers if sent else None
        self._buffers = None
