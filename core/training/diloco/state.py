"""DilocoState: the outer parameters, their momentum, the error-feedback residual, and the torch
work of a DiLoCo round, all of it on the training thread.

Four float32 vectors the size of the model live in host memory: the outer parameters
(``anchor``, where every peer of the last round stands), the outer momentum, and with a sparse
codec the residual (what the codec has not sent yet) and the buffer the next residual is written
into. With ``overlap`` one more, ``base``: the model as it was when the last round ended, from
which the work done since is measured. Without overlap ``base`` is ``anchor`` itself.

The model's own parameters (``theta``) are where the inner steps go. A round's pseudo-gradient
is ``base - theta`` plus the residual. When the round's average lands, the outer step moves the
anchor, and ``theta`` moves by as much as the anchor did past ``base``: without overlap that puts
every peer on the identical anchor; with overlap the inner steps taken meanwhile stay on top.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from core.optim.outer import F32, OuterNesterov
from core.training.moderation.rollback import METADATA_KEY
from core.training.state import TrainingState
from core.worker.precision import clip_gradients


class DilocoState:
    def __init__(
        self,
        state: TrainingState,
        *,
        outer_lr: float,
        outer_momentum: float,
        overlap: bool,
        sparse: bool,
        clip_norm: float | None,
    ) -> None:
        self.state = state
        self.overlap = overlap
        self.clip_norm = clip_norm
        self.anchor: list[F32] = [_host_copy(p) for p in state.parameters]
        self.outer = OuterNesterov(self.anchor, lr=outer_lr, momentum=outer_momentum)
        self.base: list[F32] = [a.copy() for a in self.anchor] if overlap else self.anchor
        self.residual: list[F32] | None = None
        self.feedback: list[F32] | None = None
        if sparse:
            self.residual = [np.zeros_like(a) for a in self.anchor]
            self.feedback = [np.zeros_like(a) for a in self.anchor]
        self.inner_steps = 0
        """Inner steps this peer took: the inner learning-rate schedule's clock."""
        self.skipped = 0

    @property
    def epoch(self) -> int:
        """Rounds landed: the collaboration's outer step count."""
        return self.state.epoch

    # ---- inner steps -----------------------------------------------------------------------------

    def inner_step(self) -> bool:
        """One step of the inner optimizer with the gradients in ``.grad`` (then cleared);
        False if their norm was not finite (the step is skipped)."""
        params = self.state.parameters
        norm = clip_gradients(params, self.clip_norm)
        stepped = math.isfinite(norm)
        if stepped:
            self.state.set_learning_rate(self.inner_steps)
            self.state.optimizer.step()
            self.inner_steps += 1
        else:
            self.skipped += 1
        for p in params:
            p.grad = None
        return stepped

    # ---- a round ---------------------------------------------------------------------------------

    def end_round(self) -> list[F32]:
        """The round's pseudo-gradient (``base - theta`` plus the residual) as new arrays, which
        the exchange averages in place; the work from now on is measured from ``theta``."""
        theta = [_host_copy(p) for p in self.state.parameters]
        delta = [np.subtract(b, t) for b, t in zip(self.base, theta, strict=True)]
        if self.residual is not None:
            for d, r in zip(delta, self.residual, strict=True):
                np.add(d, r, out=d)
        if self.overlap:
            for b, t in zip(self.base, theta, strict=True):
                b[...] = t
        return delta

    def land(self, averaged: list[F32], *, residual_sent: bool) -> None:
        """The round's outer step with the averaged pseudo-gradient; ``theta`` follows the anchor.
        ``residual_sent``: the feedback buffer holds what the codec left out (the next residual);
        otherwise everything went (a peer alone applies its own pseudo-gradient exactly)."""
        self.outer.step(averaged)
        self._follow_anchor()
        if self.residual is not None:
            if residual_sent and self.feedback is not None:
                self.residual, self.feedback = self.feedback, self.residual
            else:
                for r in self.residual:
                    r[...] = 0.0

    def missed(self, delta: list[F32]) -> None:
        """The round did not land here: nothing moves, and its work goes out with the next
        round. Without overlap ``theta`` still holds all the work since the anchor, so the next
        pseudo-gradient carries it; with overlap the round's pseudo-gradient (``delta``, its
        residual included) becomes the residual. Where an incomplete round averaged some ranges,
        ``delta`` holds the group's means there: every member carries the same means, so the
        next round's average puts them back at their weight."""
        if not self.overlap:
            return
        residual = self._residual()
        for r, d in zip(residual, delta, strict=True):
            r[...] = d

    def carry(self, arrays: list[F32]) -> None:
        """Work measured earlier (a restart's unsent work) joins the residual: the next round
        sends it."""
        for r, a in zip(self._residual(), arrays, strict=True):
            np.add(r, a, out=r)

    def rebase(self, epoch: int, arrays: list[np.ndarray]) -> None:
        """Take a newer outer state (anchor, then momentum) from a peer: ``theta`` keeps the work
        it did since ``base`` on top of it. Raises ValueError, changing nothing, if it does not fit."""
        count = len(self.anchor)
        if len(arrays) != 2 * count:
            raise ValueError(f"the state has {len(arrays)} tensors, diloco needs {2 * count}")
        for mine, theirs in zip(self.anchor * 2, arrays, strict=True):
            if mine.shape != tuple(theirs.shape):
                raise ValueError(f"a tensor of shape {theirs.shape} where {mine.shape} belongs")
            if theirs.dtype != np.float32:
                raise ValueError(f"{theirs.dtype} values where float32 belongs")
        self.outer.load_buffers([np.asarray(a) for a in arrays[count:]])
        if not self.overlap:
            # base is the anchor itself: theta moves by as much as the anchor does
            self._shift_theta(
                np.subtract(t, a) for a, t in zip(self.anchor, arrays[:count], strict=True)
            )
        for mine, theirs in zip(self.anchor, arrays[:count], strict=True):
            mine[...] = theirs
        if self.overlap:
            self._follow_anchor()
        self.state.epoch = epoch

    def restart(self, epoch: int, momentum: list[np.ndarray]) -> None:
        """Start over from the model's current parameters as the anchor (a checkpoint loaded
        into the model), with this momentum; the residual is dropped."""
        self.outer.load_buffers(momentum)
        for a, p in zip(self.anchor, self.state.parameters, strict=True):
            a[...] = _host_copy(p)
        if self.overlap:
            for b, a in zip(self.base, self.anchor, strict=True):
                b[...] = a
        for r in self.residual or []:
            r[...] = 0.0
        self.state.epoch = epoch

    def _follow_anchor(self) -> None:
        """``theta += anchor - base``, then ``base = anchor``; without overlap, ``theta = anchor``
        exactly (no inner step happens between a round's end and its landing)."""
        if self.overlap:
            self._shift_theta(
                np.subtract(a, b) for a, b in zip(self.anchor, self.base, strict=True)
            )
            for b, a in zip(self.base, self.anchor, strict=True):
                b[...] = a
            return
        with torch.no_grad():
            for p, a in zip(self.state.parameters, self.anchor, strict=True):
                p.copy_(torch.from_numpy(a).reshape(p.shape).to(p.device, p.dtype))

    def _shift_theta(self, moved: Iterable[np.ndarray]) -> None:
        """``theta += moved``, one tensor at a time (no second copy of the model)."""
        with torch.no_grad():
            for p, m in zip(self.state.parameters, moved, strict=True):
                p.add_(torch.from_numpy(m).reshape(p.shape).to(p.device, p.dtype))

    def _residual(self) -> list[F32]:
        """The residual, made (zero) the first time an exact codec's round has something to carry."""
        if self.residual is None:
            self.residual = [np.zeros_like(a) for a in self.anchor]
        return self.residual

    def anchor_digest(self) -> str:
        """A short digest of the outer parameters, from a fixed sample of about 4096 values per
        tensor: anchors that diverged differ almost everywhere, so the sample finds them without
        hashing gigabytes every round."""
        digest = hashlib.blake2b(digest_size=8)
        for a in self.anchor:
            digest.update(np.ascontiguousarray(a[:: max(1, a.size // 4096)]).tobytes())
        return digest.hexdigest()

    # ---- sharing and checkpoints -----------------------------------------------------------------

    def snapshot(self, rollback: int = 0) -> tuple[int, dict[str, Any], list[np.ndarray]]:
        """The outer state for a peer that joins: (epoch, metadata, anchor + momentum)."""
        arrays = [a.copy() for a in self.anchor] + [m.copy() for m in self.outer.buffers]
        return self.epoch, {"epoch": self.epoch, "mode": "diloco", METADATA_KEY: rollback}, arrays

    def model_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict with the anchor as its parameters (what a checkpoint keeps)."""
        state = {
            k: v.detach().to("cpu", copy=True) for k, v in self.state.model.state_dict().items()
        }
        named = [name for name, p in self.state.model.named_parameters() if p.requires_grad]
        for name, anchor, p in zip(named, self.anchor, self.state.parameters, strict=True):
            state[name] = torch.from_numpy(anchor.copy()).reshape(p.shape)
        return state

    def outer_state(self) -> dict[str, Any]:
        return {
            "outer_momentum": [torch.from_numpy(m.copy()) for m in self.outer.buffers],
            "inner": self.state.optimizer.state_dict(),
            "inner_steps": self.inner_steps,
        }


def _host_copy(p: torch.Tensor) -> F32:
    array: F32 = p.detach().to("cpu", torch.float32, copy=True).numpy().reshape(-1)
    return array
