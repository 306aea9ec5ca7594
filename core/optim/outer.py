"""OuterNesterov: DiLoCo's outer optimizer, Nesterov momentum SGD on the averaged pseudo-gradient.

For outer parameters ``x`` (the round's starting point, which every peer of a round shares),
the averaged pseudo-gradient ``g`` (start minus where the inner steps went), momentum ``mu`` and
learning rate ``lr``::

    m = mu * m + g
    x = x - lr * (g + mu * m)

which is ``torch.optim.SGD(nesterov=True)``. With ``lr = 1`` and ``mu = 0`` it is plain
averaging of the peers' parameters.

Why numpy and one operation at a time: every peer must end a round with bit-identical outer
parameters, whatever its CPU. Each numpy operation on float32 is rounded once, in IEEE order;
torch's fused ``add_(alpha=...)`` may use a fused multiply-add on one CPU and not on another,
which differs in the last bit, and the outer step runs once per round, so speed does not matter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


class OuterNesterov:
    def __init__(self, params: Sequence[F32], *, lr: float, momentum: float) -> None:
        """``params``: CPU float32 arrays, updated in place by ``step``."""
        if not lr > 0:
            raise ValueError(f"outer lr must be above 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"outer momentum must be in [0, 1), got {momentum}")
        self.params = list(params)
        for p in self.params:
            if p.dtype != np.float32:
                raise ValueError(f"outer parameters are float32, got {p.dtype}")
        self.lr = np.float32(lr)
        self.momentum = np.float32(momentum)
        # without momentum (``topk``'s rule) a buffer would only ever hold zeros: none is kept
        self._buffers = [np.zeros_like(p) for p in self.params] if momentum else None

    @property
    def held(self) -> list[F32] | None:
        """The momentum buffers themselves; None without momentum."""
        return self._buffers

    @property
    def buffers(self) -> list[F32]:
        """The momentum, one buffer per parameter (zeros, made for the asker, without momentum)."""
        if self._buffers is None:
            return [np.zeros_like(p) for p in self.params]
        return self._buffers

    def step(self, grads: Sequence[F32]) -> None:
        """One outer step with the averaged pseudo-gradient ``grads`` (not changed)."""
        if len(grads) != len(self.params):
            raise ValueError(f"{len(grads)} pseudo-gradients for {len(self.params)} parameters")
        for p, g in zip(self.params, grads, strict=True):
            if g.shape != p.shape:
                raise ValueError(f"a pseudo-gradient of shape {g.shape} for {p.shape}")
        if self._buffers is None:
            for p, g in zip(self.params, grads, strict=True):
                update = np.multiply(g, self.lr)
                np.subtract(p, update, out=p)
            return
        for p, m, g in zip(self.params, self._buffers, grads, strict=True):
            np.multiply(m, self.momentum, out=m)
            np.add(m, g, out=m)
            update = np.multiply(m, self.momentum)
            np.add(update, g, out=update)
            np.multiply(update, self.lr, out=update)
            np.subtract(p, update, out=p)

    def load_buffers(self, buffers: Sequence[F32]) -> None:
        """Take another peer's momentum (a newcomer's download), shapes checked first."""
        if len(buffers) != len(self.buffers):
            raise ValueError(f"{len(buffers)} momentum buffers for {len(self.buffers)} parameters")
        for p, theirs in zip(self.params, buffers, strict=True):
            if p.shape != tuple(theirs.shape):
                raise ValueError(f"a momentum buffer of shape {theirs.shape} for {p.shape}")
        if self._buffers is None:
            return  # no momentum here: what another peer kept of it does not apply
        for mine, theirs in zip(self._buffers, buffers, strict=True):
            mine[...] = theirs
