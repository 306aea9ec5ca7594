"""DilocoState: the outer parameters, their momentum, the work not landed yet, and the torch work of
a DiLoCo round, all of it on the training thread.

Float32 vectors the size of the model live in host memory, each 4 bytes a parameter:

- ``anchor``: the outer parameters, where every peer of the last round stands;
- the outer momentum (none without momentum, ``topk``'s rule);
- with ``overlap``, ``base``: where the work done since the last round's end is measured from
  (without overlap ``base`` is ``anchor`` itself);
- two working buffers, used in turn: the round's pseudo-gradient, which the exchange averages in
  place, and the buffer the exchange writes what of ours its result lacks into. After a landing
  the second is the residual (work not landed yet: what a sparse codec or the mean left out, a
  range whose reducer failed, data a reducer left out) and the first becomes the next round's
  second.

That is 16 bytes a parameter with ``topk`` (no momentum) and overlap, 20 with momentum. A state
served to a newcomer is packed only when one asks (``packed``: 8 bytes a parameter more while it is
served). The model's own parameters (``theta``) are where the inner steps go. A round's
pseudo-gradient is ``base - theta`` plus the residual (decayed by ``residual_decay`` with a sparse
codec, whose residual stands in for the outer momentum, as SparseLoCo's error feedback does). When
the round's average lands, the outer step moves the anchor, and ``theta`` moves by as much as the
anchor did past ``base``: without overlap that puts every peer on the identical anchor; with
overlap the inner steps taken meanwhile stay on top.

Rounds a checker replays (``fresh_moments``) start where every peer stands. Without overlap that
is the anchor after the landing. With overlap (``anchored``) a round starts at the anchor as it
is when the last round ends, with fresh moments: the member's own round stays out of ``theta``
(it went out in the pseudo-gradient), and when that round lands, mid-way through this one,
``theta`` moves by as much as the anchor did, as always. The round is then a function of two
anchors every peer holds, the step at which the landing came, and its batches
(``checks.replay``). The price: the steps before the landing are computed one round behind.

The inner learning-rate schedule follows the collaboration, not this peer: its clock is the
collaboration's inner steps per round, added up over the rounds that landed (``schedule``, handed
to newcomers with the anchor), plus this peer's steps into the current round (at most a round's
worth). A fast device does not run ahead of the schedule, a slow one does not lag, and a newcomer
does not warm up again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from core.averaging.sharing.digest import BLOCK_BYTES, block_digests, state_digest
from core.averaging.sharing.state import PackedState
from core.optim.outer import F32, OuterNesterov
from core.training.moderation.rollback import METADATA_KEY
from core.training.state import TrainingState
from core.worker.precision import clip_gradients

SCHEDULE_KEY = "schedule"
"""In a shared state's metadata and a checkpoint's: the inner schedule's clock at that epoch."""
DIGEST_KEY = "anchor"
"""In a shared state's metadata: the anchor's digest (``anchor_digest``)."""


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
        residual_decay: float = 1.0,
        fresh_moments: bool = False,
    ) -> None:
        """``residual_decay``: how much of the residual each round keeps before it adds its own
        work (1: all; applies with a sparse codec only, whose residual carries momentum);
        ``fresh_moments``: the inner optimizer's statistics start from zero at every round's end,
        so that without overlap a round is a function of what every peer holds (the anchor, the
        schedule) and of its batches: a checker can replay it (``core.training.diloco.checks``)."""
        if not 0 < residual_decay <= 1:
            raise ValueError(f"residual_decay must be in (0, 1], got {residual_decay}")
        self.state = state
        self.overlap = overlap
        self.fresh_moments = fresh_moments
        self.clip_norm = clip_norm
        self.sparse = sparse
        self.anchored = overlap and fresh_moments
        """With overlap, each round starts at the anchor (see the module's map)."""
        self.residual_decay = residual_decay if sparse else 1.0
        self.anchor: list[F32] = [_host_copy(p) for p in state.parameters]
        self.outer = OuterNesterov(self.anchor, lr=outer_lr, momentum=outer_momentum)
        self.base: list[F32] = [a.copy() for a in self.anchor] if overlap else self.anchor
        self.residual: list[F32] | None = None
        """Work measured and not landed yet, added to the next pseudo-gradient (None: none yet;
        the pseudo-gradient is built in this buffer, so it is None while a round is out)."""
        self.spare: list[F32] | None = None
        """The buffer the next exchange writes what its result lacks of ours into."""
        self.inner_steps = 0
        """Inner steps this peer took, all rounds together (for the logs)."""
        self.round_steps = 0
        """Inner steps since this peer's last round end."""
        self.last_round_steps = 0
        """Inner steps of this peer's last ended round."""
        self.at_anchor = fresh_moments
        """The round in progress began with ``theta`` at the anchor and the inner moments at
        zero, and the anchor has moved since only by a landing (with overlap): a checker can
        replay it (``checks.replay``). Without overlap, a round after one that found no group
        goes on from where that one ended, and one whose anchor a download moved went on from
        another: neither can."""
        self._idle_at_anchor = False
        """The last round ended where it began, at the anchor, without a step."""
        self.moves = 0
        """Times ``theta`` was moved other than by an inner step (a landing, a download, a
        replay's start): which parameters a gradient was computed at, as a round receipt tells
        them apart (read from any thread)."""
        self.schedule = 0.0
        """The inner schedule's clock at the last landing: the collaboration's inner steps."""
        self.per_round = 0.0
        """The collaboration's inner steps per round, as the last landing estimated them."""
        self.skipped = 0
        self.missing: list[tuple[int, int]] = []
        """The ranges the last landing averaged nothing in here (our own values there went to
        the residual)."""
        self.digest = self.anchor_digest()
        """``anchor_digest()`` as of the anchor's last move (read from any thread)."""

    @property
    def epoch(self) -> int:
        """Rounds landed: the collaboration's outer step count."""
        return self.state.epoch

    @property
    def on_cpu(self) -> bool:
        """The parameters live on the CPU: a round's end may read them from another thread while
        a microbatch computes (on a GPU that read would queue behind the microbatch's kernels on
        the device's stream anyway)."""
        return all(p.device.type == "cpu" for p in self.state.parameters)

    # ---- inner steps -----------------------------------------------------------------------------

    def schedule_clock(self) -> float:
        """Where the inner schedule stands: the landed rounds' steps, and this round's so far."""
        into = self.round_steps if self.per_round <= 0 else min(self.round_steps, self.per_round)
        return self.schedule + into

    def inner_step(self) -> bool:
        """One step of the inner optimizer with the gradients in ``.grad`` (then cleared);
        False if their norm was not finite (the step is skipped)."""
        params = self.state.parameters
        norm = clip_gradients(params, self.clip_norm)
        stepped = math.isfinite(norm)
        if stepped:
            self.state.set_learning_rate(int(self.schedule_clock()))
            self.state.optimizer.step()
            self.inner_steps += 1
            self.round_steps += 1
        else:
            self.skipped += 1
        for p in params:
            p.grad = None
        return stepped

    def drop_gradients(self) -> None:
        """Clear ``.grad`` without a step (a gradient the round must not take)."""
        for p in self.state.parameters:
            p.grad = None

    # ---- a round ---------------------------------------------------------------------------------

    def end_round(self, *, decay: bool = True) -> list[F32]:
        """The round's pseudo-gradient: ``base - theta`` plus the residual (times
        ``residual_decay`` when ``decay``: a round that computed nothing keeps it whole), built in
        the residual's buffer, which the exchange then averages in place. The work from now on is
        measured from ``theta``. Reads the parameters only: a microbatch in flight on another
        thread may go on (its step waits for the lock that the round's end holds)."""
        delta = self.residual if self.residual is not None else self._zeros()
        self.residual = None
        beta = np.float32(self.residual_decay if decay else 1.0)
        for d, b, p in zip(delta, self.base, self.state.parameters, strict=True):
            theta = _host_copy(p)  # one tensor at a time: no second copy of the model
            if beta != 1:
                np.multiply(d, beta, out=d)
            moved = np.subtract(b, theta)  # the work first: no work adds exactly nothing
            np.add(d, moved, out=d)
            if self.overlap:
                b[...] = theta
        self.last_round_steps, self.round_steps = self.round_steps, 0
        # a round that took no step from the anchor leaves theta there: one that finds no group
        # leaves the next round at the anchor still (as when a swarm forms: the first rounds end
        # before a newcomer's first microbatch)
        self._idle_at_anchor = self.at_anchor and self.last_round_steps == 0
        self.at_anchor = False  # until the landing (or ``restart_at_anchor``) puts theta there
        if self.fresh_moments:
            self.state.reset_optimizer_state()
        return delta

    def restart_at_anchor(self) -> None:
        """With ``anchored``, after ``end_round``: the next round starts at the anchor (its
        moments are fresh already). On the training thread: a microbatch computing meanwhile
        would see its parameters change under it (it is left out: computed at other ones)."""
        with torch.no_grad():
            for p, a, b in zip(self.state.parameters, self.anchor, self.base, strict=True):
                p.copy_(torch.from_numpy(a).reshape(p.shape).to(p.device, p.dtype))
                b[...] = a
        self.moves += 1
        self.at_anchor = True

    def arrive_at(self, anchor: Sequence[np.ndarray], schedule: float, per_round: float) -> None:
        """A checker's replica, mid-round: the last round lands as the member's did, the anchor
        becomes ``anchor`` and ``theta`` moves by as much, the schedule jumps to its new clock
        (``replay``)."""
        arrived = [
            np.asarray(a, dtype=np.float32).reshape(mine.shape)
            for a, mine in zip(anchor, self.anchor, strict=True)
        ]
        # as the member's landing moves theta: by the new anchor less the old, in float32
        self._shift_theta(
            np.subtract(a, mine) for a, mine in zip(arrived, self.anchor, strict=True)
        )
        for mine, a in zip(self.anchor, arrived, strict=True):
            mine[...] = a
        if self.overlap:
            for b, a in zip(self.base, self.anchor, strict=True):
                b[...] = a
        self.schedule, self.per_round = schedule, per_round
        self.moves += 1

    def round_work(self) -> F32:
        """The round's work so far, ``base - theta``, flat and new (what a round receipt names;
        nothing carried from earlier rounds)."""
        return np.concatenate(
            [
                np.subtract(b, _host_copy(p)).reshape(-1)
                for b, p in zip(self.base, self.state.parameters, strict=True)
            ]
        )

    def feedback(self) -> list[F32]:
        """Where the exchange writes what of ours its result lacks (the next residual): zeros."""
        if self.spare is None:
            self.spare = self._zeros()
        else:
            for s in self.spare:
                s[...] = 0.0
        return self.spare

    def land(
        self,
        averaged: list[F32],
        left: list[F32],
        missing: Sequence[tuple[int, int]],
        per_round: float | None = None,
    ) -> None:
        """The round landed: ``averaged`` holds the mean where it landed and our own values in the
        ``missing`` ranges of the concatenated vector (nothing was averaged there); ``left``
        (``feedback``) holds what of ours the mean lacks. The outer step takes the mean (nothing
        where missing), ``theta`` follows the anchor, and what did not land is the residual. The
        schedule moves on by ``per_round`` (None: this peer's own steps of the round)."""
        self._keep_missing(averaged, left, missing)
        self.outer.step(averaged)
        self._follow_anchor()
        self.residual, self.spare = left, averaged
        self.missing = list(missing)
        self._advance_schedule(per_round)

    def landed_elsewhere(
        self, averaged: list[F32], left: list[F32], missing: Sequence[tuple[int, int]]
    ) -> None:
        """The round landed, but this peer took a newer anchor meanwhile (which holds it): only
        what the result lacks of ours stays, as the residual."""
        self._keep_missing(averaged, left, missing)
        self.residual, self.spare = left, averaged
        self.missing = []

    def land_alone(self, delta: list[F32], per_round: float | None = None) -> None:
        """Nobody else trains: this peer's own pseudo-gradient is the round's, exactly."""
        self.outer.step(delta)
        self._follow_anchor()
        for d in delta:
            d[...] = 0.0
        self.residual = delta
        self.missing = []
        self._advance_schedule(per_round)

    def missed(self, delta: list[F32], left: list[F32] | None = None) -> None:
        """The round did not land here and nothing of it was averaged with anyone: its work goes
        out with the next round (``left``: what the exchange left out of ``delta``, which then
        holds what was sent of it). With overlap the pseudo-gradient becomes the residual;
        without, ``theta`` still holds the work since the anchor (the next round measures it
        again), so only the rest of it (the decayed residual) stays."""
        for d, rest in zip(delta, left or [], strict=False):
            np.add(d, rest, out=d)
        if not self.overlap:
            for d, a, p in zip(delta, self.anchor, self.state.parameters, strict=True):
                np.subtract(d, a, out=d)
                np.add(d, _host_copy(p), out=d)
        self.residual = delta
        if not self.anchored:  # anchored: the round in progress began at the anchor, unmoved
            self.at_anchor = self._idle_at_anchor  # else it goes on from this one's end

    def forget_residual(self) -> None:
        """Drop what has not landed (a peer that misbehaves on purpose keeps none of its attack)."""
        for r in self.residual or []:
            r[...] = 0.0

    def carry(self, arrays: list[F32]) -> None:
        """Work measured earlier (a restart's unsent work) joins the residual: the next round
        sends it."""
        if self.residual is None:
            self.residual = self._zeros()
        for r, a in zip(self.residual, arrays, strict=True):
            np.add(r, a, out=r)

    def unsent(self) -> list[F32]:
        """All the work of ours nobody has (the residual and the steps since the last round's end),
        as new arrays; changes nothing."""
        out = [
            np.subtract(b, _host_copy(p))
            for b, p in zip(self.base, self.state.parameters, strict=True)
        ]
        for o, r in zip(out, self.residual or [], strict=False):
            np.add(o, r, out=o)
        return out

    def drop_missing(self) -> None:
        """Forget what the last landing left in the residual where it averaged nothing here:
        another member's mean there, which we are about to take, already holds it (a reducer
        that failed after answering some members had averaged our data)."""
        if self.residual is not None:
            for k, span in _spans(self.residual, self.missing):
                self.residual[k].reshape(-1)[span] = 0.0
        self.missing = []

    def rebase(self, epoch: int, arrays: list[np.ndarray], schedule: float | None = None) -> None:
        """Take a newer outer state (anchor, then momentum) from a peer: ``theta`` keeps the work
        it did since ``base`` on top of it, and the residual stays. Raises ValueError, changing
        nothing, if it does not fit."""
        count = len(self.anchor)
        if len(arrays) != 2 * count:
            raise ValueError(f"the state has {len(arrays)} tensors, diloco needs {2 * count}")
        for mine, theirs in zip(self.anchor * 2, arrays, strict=True):
            if mine.shape != tuple(theirs.shape):
                raise ValueError(f"a tensor of shape {theirs.shape} where {mine.shape} belongs")
            if theirs.dtype != np.float32:
                raise ValueError(f"{theirs.dtype} values where float32 belongs")
        self.outer.load_buffers([np.asarray(a) for a in arrays[count:]])
        self.at_anchor = self.at_anchor and self.round_steps == 0
        self.moves += 1
        if not self.overlap:
            # base is the anchor itself: theta moves by as much as the anchor does
            self._shift_theta(
                np.subtract(t, a) for a, t in zip(self.anchor, arrays[:count], strict=True)
            )
        for mine, theirs in zip(self.anchor, arrays[:count], strict=True):
            mine[...] = theirs
        if self.overlap:
            self._follow_anchor()
        self.digest = self.anchor_digest()
        self.state.epoch = epoch
        if schedule is not None and math.isfinite(schedule) and schedule >= 0:
            self.schedule = schedule

    def start_round_at(
        self, anchor: Sequence[np.ndarray], schedule: float, per_round: float
    ) -> None:
        """A checker's replica: a round begins at ``anchor`` with this schedule (the inner
        steps so far, and per round), fresh moments, nothing carried (``replay``)."""
        with torch.no_grad():
            for p, a, mine in zip(self.state.parameters, anchor, self.anchor, strict=True):
                mine[...] = np.asarray(a, dtype=np.float32).reshape(mine.shape)
                p.copy_(torch.from_numpy(mine).reshape(p.shape).to(p.device, p.dtype))
        if self.overlap:
            for b, a in zip(self.base, self.anchor, strict=True):
                b[...] = a
        self.residual = None
        self.round_steps = 0
        self.schedule, self.per_round = schedule, per_round
        self.state.reset_optimizer_state()
        self.at_anchor = True
        self.moves += 1

    def restart(self, epoch: int, momentum: list[np.ndarray], schedule: float = 0.0) -> None:
        """Start over from the model's current parameters as the anchor (a checkpoint loaded
        into the model), with this momentum; the residual is dropped."""
        self.outer.load_buffers(momentum)
        for a, p in zip(self.anchor, self.state.parameters, strict=True):
            a[...] = _host_copy(p)
        if self.overlap:
            for b, a in zip(self.base, self.anchor, strict=True):
                b[...] = a
        self.residual = None
        self.state.epoch = epoch
        self.schedule = schedule
        self.digest = self.anchor_digest()
        self.at_anchor = False  # the inner moments are not known to be fresh
        self.moves += 1

    def _advance_schedule(self, per_round: float | None) -> None:
        """A round landed in which the collaboration's trainers took ``per_round`` inner steps
        each (an estimate; None: as many as this peer): the schedule moves on by as much."""
        steps = float(self.last_round_steps) if per_round is None else per_round
        if math.isfinite(steps) and steps > 0:
            self.per_round = steps
            self.schedule += steps

    def _keep_missing(
        self, averaged: list[F32], left: list[F32], missing: Sequence[tuple[int, int]]
    ) -> None:
        """Where nothing was averaged, ``averaged`` holds our own values: they move to ``left``
        (the residual to be), and the outer step takes nothing there."""
        for k, span in _spans(averaged, missing):
            flat, rest = averaged[k].reshape(-1), left[k].reshape(-1)
            rest[span] = flat[span]
            flat[span] = 0.0

    def _follow_anchor(self) -> None:
        """``theta += anchor - base``, then ``base = anchor``; without overlap, ``theta = anchor``
        exactly (no inner step happens between a round's end and its landing)."""
        self.digest = self.anchor_digest()
        self.moves += 1
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
        self.at_anchor = self.fresh_moments and self.round_steps == 0

    def _shift_theta(self, moved: Iterable[np.ndarray]) -> None:
        """``theta += moved``, one tensor at a time (no second copy of the model)."""
        with torch.no_grad():
            for p, m in zip(self.state.parameters, moved, strict=True):
                p.add_(torch.from_numpy(m).reshape(p.shape).to(p.device, p.dtype))

    def _zeros(self) -> list[F32]:
        return [np.zeros_like(a) for a in self.anchor]

    def anchor_digest(self) -> str:
        """The digest of the outer state as this peer serves it (``packed``: the anchor, then the
        momentum): ``digest.state_digest``, what a downloader computes from a donor's header. It
        covers every byte, since it is what the backbone confirms and what a newcomer loads by:
        a sample of the values would let a donor poison the rest. SHA-256 over 8 bytes a
        parameter, once per move of the anchor (a landing, a download)."""
        shapes = [list(a.shape) for a in self.anchor] * 2
        momentum = self.outer.held or _zeros_as(self.anchor)
        blocks = block_digests([*self.anchor, *momentum], BLOCK_BYTES)
        return state_digest(shapes, ["<f4"] * len(shapes), BLOCK_BYTES, blocks)

    # ---- sharing and checkpoints -----------------------------------------------------------------

    def metadata(self, rollback: int = 0) -> dict[str, Any]:
        """What a shared outer state says of itself."""
        return {
            "epoch": self.epoch,
            "mode": "diloco",
            METADATA_KEY: rollback,
            SCHEDULE_KEY: self.schedule,
            DIGEST_KEY: self.digest,
        }

    def packed(self, rollback: int = 0) -> PackedState:
        """The outer state for a peer that joins, anchor then momentum, packed into one buffer
        (8 bytes a parameter, made only when a peer asks: ``StateSharing.serve_packed``)."""
        sizes = [a.nbytes for a in self.anchor]
        data = np.empty(2 * sum(sizes), dtype=np.uint8)
        position = 0
        momentum = self.outer.buffers
        for array in (*self.anchor, *momentum):
            data[position : position + array.nbytes] = array.reshape(-1).view(np.uint8)
            position += array.nbytes
        shapes = [list(a.shape) for a in self.anchor] * 2
        # hashed here, on the training thread, rather than on the event loop that serves it
        return PackedState(
            self.epoch,
            self.metadata(rollback),
            shapes,
            ["<f4"] * len(shapes),
            data,
            block_digests([data]),
        )

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
            SCHEDULE_KEY: self.schedule,
        }


def _spans(arrays: Sequence[F32], ranges: Sequence[tuple[int, int]]) -> Iterator[tuple[int, slice]]:
    """Where ``ranges`` of the arrays laid end to end fall: (array, slice of it) pairs."""
    offsets = np.cumsum([0, *(a.size for a in arrays)])
    for start, end in ranges:
        for k in range(len(arrays)):
            lo, hi = max(start, int(offsets[k])), min(end, int(offsets[k + 1]))
            if lo < hi:
                yield k, slice(lo - int(offsets[k]), hi - int(offsets[k]))


def _zeros_as(arrays: Sequence[F32]) -> list[F32]:
    """As many float32 zeros as ``arrays`` hold, as views of one block (what a state without
    momentum serves in its place, hashed without a second copy of the model)."""
    zeros = np.zeros(min(max((a.size for a in arrays), default=0), 1 << 20), dtype=np.float32)
    views = []
    for a in arrays:
        left = a.size
        while left > 0:
            views.append(zeros[: min(left, zeros.size)])
            left -= zeros.size
    return views


def _host_copy(p: torch.Tensor) -> F32:
    array: F32 = p.detach().to("cpu", torch.float32, copy=True).numpy().reshape(-1)
    return array
