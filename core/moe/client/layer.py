"""RemoteMixtureOfExperts: a layer whose experts live on other peers (Learning@home, Section 3).

For inputs ``[batch, hidden]``:

1. the structured gate scores each grid dimension (``gating``);
2. the beam search finds each row's ``k`` best live experts from those scores, detached
   (``beam_search``): which experts are chosen is not differentiable, as in the paper;
3. each chosen expert is sent its rows in one call (rows grouped per expert and server), all calls
   at once, each bounded by ``forward_timeout``;
4. the output is the weighted average of the answering experts' outputs, with weights a softmax
   over the gate's logits of the experts that answered (Section 3.2: failed experts are excluded
   and the weights renormalised so they still sum to 1).

The remote calls are one ``torch.autograd.Function``. Its outputs are the raw expert outputs
``[batch, k, hidden]`` and a mask of who answered; its backward sends each expert that answered the
forward the gradient of its outputs (one call per expert again, ``backward_timeout``) and sums the
input gradients they return. The expert server updates the expert in that same call. The weights
are computed outside the Function in ordinary autograd, so the gate learns through them.

Failures: any typed error of a call (busy, unknown expert, unavailable, timeout, malformed reply,
unreachable) excludes that expert for this batch. A row left with fewer than ``k_min`` answering
experts fails the whole batch with ``TooFewExpertsError``, which the trainer counts and skips. In
backward, a failed expert contributes no input gradient, and a row with fewer than
``backward_k_min`` answers fails the backward the same way.

Load balancing (``balancing_loss``, set by each forward): the "importance" loss of Shazeer et al.
(2017) per grid dimension: the squared coefficient of variation, over a dimension's indices, of the
gate's softmax probability averaged over the batch, summed over dimensions. It is 0 when the batch
spreads evenly over each dimension's indices (a uniform gate gives exactly 0) and grows as the gate
favours a few, which would send most rows to a few servers. Per dimension, because that is what the
structured gate outputs; it costs no extra lookups.

Forward and backward run on torch worker threads and block on the network through the bridge
(``calls.ExpertCaller``). A layer object is used by one thread at a time (``balancing_loss`` is
the latest forward's); the asynchronous trainer gives each batch in flight its own copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from core.codecs import NONE, Codec
from core.moe.client.beam_search import FoundExpert, MoEBeamSearch
from core.moe.client.calls import (
    ExpertCall,
    ExpertCaller,
    ExpertSearchError,
    MoEError,
    MoEStats,
    Outcome,
    TooFewExpertsError,
    failure_summary,
)
from core.moe.client.gating import StructuredGating
from core.moe.client.receipts import ReceiptSender
from core.moe.grid import ExpertGrid
from core.net.host.host import Host
from core.worker.bridge import TrainingBridge

__all__ = [
    "ExpertSearchError",
    "MoEError",
    "RemoteMixtureOfExperts",
    "TooFewExpertsError",
    "balancing_loss",
]


def balancing_loss(dim_scores: Sequence[Tensor]) -> Tensor:
    """Sum over grid dimensions of CV² of the batch-mean softmax probabilities (0: balanced)."""
    total = dim_scores[0].new_zeros(())
    for scores in dim_scores:
        importance = torch.softmax(scores, dim=1).mean(dim=0)
        total = total + importance.var(unbiased=False) / importance.mean().square()
    return total


@dataclass(frozen=True, slots=True)
class _Group:
    """One expert's share of a batch: the rows it serves and the slot it fills in each."""

    uid: str
    address: str
    rows: Tensor
    slots: Tensor


@dataclass(frozen=True, slots=True)
class _Plan:
    """Who gets which rows of one batch, and how few answers the layer accepts."""

    caller: ExpertCaller
    groups: list[_Group]
    k: int
    k_min: int
    backward_k_min: int
    hidden: int

    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor]:
        """Outputs ``[batch, k, hidden]`` (zeros where no answer) and who answered ``[batch, k]``."""
        calls = [
            ExpertCall(g.uid, g.address, [inputs[g.rows]], [[len(g.rows), self.hidden]])
            for g in self.groups
        ]
        outcomes = self.caller.call("forward", calls)
        outputs = inputs.new_zeros(inputs.shape[0], self.k, self.hidden)
        alive = torch.zeros(inputs.shape[0], self.k, dtype=torch.bool, device=inputs.device)
        for group, outcome in zip(self.groups, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                outputs[group.rows, group.slots] = outcome[0].to(inputs)
                alive[group.rows, group.slots] = True
        self._require(alive.sum(dim=1), self.k_min, "forward", outcomes)
        return outputs, alive

    def backward(self, inputs: Tensor, grad_outputs: Tensor, alive: Tensor) -> Tensor:
        """The input gradient: the sum of what the experts that answered forward return now."""
        answered = [g for g in self.groups if bool(alive[g.rows[0], g.slots[0]])]
        calls = [
            ExpertCall(
                g.uid,
                g.address,
                [inputs[g.rows], grad_outputs[g.rows, g.slots]],
                [[len(g.rows), self.hidden]],
            )
            for g in answered
        ]
        outcomes = self.caller.call("backward", calls)
        grad_inputs = torch.zeros_like(inputs)
        counts = torch.zeros(inputs.shape[0], dtype=torch.long, device=inputs.device)
        for group, outcome in zip(answered, outcomes, strict=True):
            if not isinstance(outcome, BaseException):
                grad_inputs.index_add_(0, group.rows, outcome[0].to(inputs))
                counts[group.rows] += 1
        self._require(counts, self.backward_k_min, "backward", outcomes)
        return grad_inputs

    def _require(
        self, counts: Tensor, needed: int, phase: str, outcomes: Sequence[Outcome]
    ) -> None:
        if counts.numel() == 0 or needed == 0:
            return
        fewest, row = (int(v) for v in counts.min(dim=0))
        if fewest >= needed:
            return
        self.caller.stats.count_too_few()
        failures = failure_summary(outcomes)
        why = ", ".join(f"{kind} {n}" for kind, n in sorted(failures.items())) or "none"
        raise TooFewExpertsError(
            f"{phase}: only {fewest} expert(s) answered for input row {row}, the layer needs "
            f"{needed}; {len(outcomes)} expert calls, failures: {why}",
            phase=phase,
            answered=fewest,
            needed=needed,
        )


class _RemoteExperts(torch.autograd.Function):
    """The plan's forward and backward calls as one node of the autograd graph."""

    @staticmethod
    def forward(ctx: Any, plan: _Plan, inputs: Tensor) -> tuple[Tensor, Tensor]:
        outputs, alive = plan.forward(inputs)
        ctx.plan = plan
        ctx.save_for_backward(inputs, alive)
        ctx.mark_non_differentiable(alive)
        return outputs, alive

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_outputs: Tensor, _grad_alive: Any) -> tuple[None, Tensor]:
        inputs, alive = ctx.saved_tensors
        plan: _Plan = ctx.plan
        return None, plan.backward(inputs, grad_outputs, alive)


class RemoteMixtureOfExperts(nn.Module):
    """``[batch, hidden]`` -> ``[batch, hidden]`` through the ``k`` best live experts of ``grid``.

    ``search`` finds the experts (its DHT, its prefix cache); calls go out on ``host``, and the
    worker threads reach the loop through ``bridge``. Tensors travel with ``codec`` (``NONE`` or
    ``FP16``). A timeout of None is the Host's call timeout. ``receipts``, if given, counts what
    each server answered, for the receipts the trainer signs.
    """

    def __init__(
        self,
        *,
        hidden: int,
        grid: ExpertGrid,
        host: Host,
        bridge: TrainingBridge,
        search: MoEBeamSearch,
        k: int = 4,
        beam_size: int | None = None,
        k_min: int = 1,
        backward_k_min: int = 1,
        forward_timeout: float | None = None,
        backward_timeout: float | None = None,
        codec: Codec = NONE,
        receipts: ReceiptSender | None = None,
    ) -> None:
        super().__init__()
        if search.grid != grid:
            raise MoEError(f"the beam search walks grid {search.grid}, the layer uses {grid}")
        if not 1 <= k_min <= k:
            raise MoEError(f"need 1 <= k_min <= k, got k_min={k_min}, k={k}")
        if not 0 <= backward_k_min <= k:
            raise MoEError(f"need 0 <= backward_k_min <= k, got {backward_k_min}, k={k}")
        if beam_size is not None and beam_size < k:
            raise MoEError(f"the beam ({beam_size}) must be at least k ({k}) wide")
        self.hidden = hidden
        self.grid = grid
        self.k = k
        self.beam_size = beam_size
        self.k_min = k_min
        self.backward_k_min = backward_k_min
        self.gate = StructuredGating(hidden, grid.shape)
        self.caller = ExpertCaller(
            host,
            bridge,
            search,
            codec=codec,
            forward_timeout=forward_timeout,
            backward_timeout=backward_timeout,
            receipts=receipts,
        )
        self.balancing_loss: Tensor | None = None
        """The load-balancing loss of this layer's latest forward (differentiable w.r.t. the gate)."""

    @property
    def stats(self) -> MoEStats:
        """Batches, expert calls and their failures per kind (shared with the layer's copies)."""
        return self.caller.stats

    def forward(self, inputs: Tensor) -> Tensor:
        if inputs.dim() != 2 or inputs.shape[1] != self.hidden:
            raise MoEError(
                f"the layer takes inputs of shape [batch, {self.hidden}], not {list(inputs.shape)}"
            )
        dim_scores = self.gate(inputs)
        self.balancing_loss = balancing_loss(dim_scores)
        self.caller.stats.count_batch()
        found = self.caller.find(dim_scores, self.k, self.beam_size)
        plan, coords = self._plan(found, inputs.device)
        outputs, alive = _RemoteExperts.apply(plan, inputs)  # type: ignore[no-untyped-call]
        logits = self.gate.score(dim_scores, coords).masked_fill(~alive, float("-inf"))
        weights = torch.softmax(logits, dim=1)  # over the answering experts only: renormalised
        return torch.einsum("bk,bkh->bh", weights, outputs)

    def _plan(self, found: list[list[FoundExpert]], device: torch.device) -> tuple[_Plan, Tensor]:
        """Group the rows per expert; the chosen experts' coordinates ``[batch, k, depth]``."""
        coords = torch.zeros(len(found), self.k, self.grid.depth, dtype=torch.long)
        members: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        for row, experts in enumerate(found):
            if len(experts) < self.k_min:
                self.caller.stats.count_too_few()
                raise TooFewExpertsError(
                    f"forward: the beam search found only {len(experts)} live expert(s) for input "
                    f"row {row}, the layer needs {self.k_min}",
                    phase="forward",
                    answered=len(experts),
                    needed=self.k_min,
                )
            for slot, expert in enumerate(experts):
                coords[row, slot] = torch.tensor(expert.coords)
                rows, slots = members.setdefault((expert.uid, expert.address), ([], []))
                rows.append(row)
                slots.append(slot)
        groups = [
            _Group(
                uid,
                address,
                torch.tensor(rows, dtype=torch.long, device=device),
                torch.tensor(slots, dtype=torch.long, device=device),
            )
            for (uid, address), (rows, slots) in members.items()
        ]
        plan = _Plan(self.caller, groups, self.k, self.k_min, self.backward_k_min, self.hidden)
        return plan, coords.to(device)
