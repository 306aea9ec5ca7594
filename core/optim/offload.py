"""Offload: stream an optimizer's update through host memory, one parameter at a time.

With ``offload_optimizer = true`` the optimizer's statistics never touch the training device: for
each parameter the weights (and the gradient, unless it is already on the host) are copied to host
memory, updated there by the optimizer, and copied back. Only one parameter is in flight at a
time (two staging slots: the next parameter's copy runs while this one is updated), so the host
memory this adds is a few times the largest parameter, whatever the model's size.

On CUDA the staging slots are pinned (page-locked) buffers, kept between steps because pinning is
slow, and copies are ``non_blocking`` with an event per copy: the copy engine moves parameter i+1
down and parameter i-1 back while the CPU updates parameter i. Everything runs on the current
stream, so the copies stay ordered after the backward pass and before the next forward. On MPS
(where asynchronous copies to the host are not reliable) the same slots are filled with blocking
copies. On the CPU the "host copy" is the parameter itself: the same loop, with nothing to move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

Update = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]], None]
"""``update(param, weight_on_host, grad_on_host, group)``: changes ``weight_on_host`` in place."""


@dataclass
class _Slot:
    """One staging area: raw bytes for a weight and a gradient, and the event after which the
    last write-back from it has finished (so that it may be filled again)."""

    weight: torch.Tensor
    grad: torch.Tensor
    done: Any = None


@dataclass
class _InFlight:
    param: torch.Tensor
    group: dict[str, Any]
    weight: torch.Tensor
    grad: torch.Tensor
    ready: Any = None
    slot: _Slot | None = None


class Offload:
    """Runs an optimizer's per-parameter update on host memory.

    ``always_stage`` copies through staging buffers even for parameters already on the CPU (the
    tests use it to exercise the copies without a GPU).
    """

    def __init__(self, *, always_stage: bool = False) -> None:
        self.always_stage = always_stage
        self._slots: list[_Slot] = []

    def run(
        self,
        work: Sequence[tuple[torch.Tensor, dict[str, Any]]],
        update: Update,
        grads: Sequence[torch.Tensor] | None = None,
    ) -> None:
        """Update each ``(param, group)`` in ``work`` with its ``.grad`` (or ``grads[i]``, host
        tensors, when given: then only the weights travel)."""
        if not work:
            return
        given = list(grads) if grads is not None else None
        flights: list[_InFlight | None] = [None] * len(work)
        flights[0] = self._fetch(work[0], 0, given)
        for i, (param, group) in enumerate(work):
            if i + 1 < len(work):
                flights[i + 1] = self._fetch(work[i + 1], i + 1, given)
            flight = flights[i]
            assert flight is not None
            flights[i] = None
            if flight.ready is not None:
                flight.ready.synchronize()
            update(param, flight.weight, flight.grad, group)
            self._write_back(flight)
        for slot in self._slots:
            if slot.done is not None:
                slot.done.synchronize()
                slot.done = None

    def release(self) -> None:
        """Free the staging buffers (they are rebuilt at the next step)."""
        self._slots = []

    @property
    def staged_bytes(self) -> int:
        """Host memory held for staging now."""
        return sum(s.weight.numel() + s.grad.numel() for s in self._slots)

    # ---- per parameter --------------------------------------------------------------------------

    def _fetch(
        self,
        item: tuple[torch.Tensor, dict[str, Any]],
        index: int,
        grads: list[torch.Tensor] | None,
    ) -> _InFlight:
        param, group = item
        grad = grads[index] if grads is not None else param.grad
        if grad is None:
            raise ValueError("a parameter in the work list has no gradient")
        device = param.device
        if device.type == "cpu" and not self.always_stage:
            host_grad = grad if grad.device.type == "cpu" else grad.to("cpu")
            return _InFlight(param, group, param.detach(), host_grad)
        cuda = device.type == "cuda"
        slot = self._slot(index % 2, param, grad, pin=cuda and torch.cuda.is_available())
        if slot.done is not None:  # its previous write-back must finish before we overwrite it
            slot.done.synchronize()
            slot.done = None
        # asynchronous only from CUDA: copies to the host from MPS may be read before they land
        weight = _view(slot.weight, param)
        weight.copy_(param.detach(), non_blocking=cuda)
        if grad.device.type == "cpu":
            host_grad = grad
        else:
            host_grad = _view(slot.grad, grad)
            host_grad.copy_(grad, non_blocking=cuda)
        ready = None
        if cuda:
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record()
        return _InFlight(param, group, weight, host_grad, ready, slot)

    def _write_back(self, flight: _InFlight) -> None:
        param = flight.param
        if flight.weight.data_ptr() == param.data_ptr() and param.device.type == "cpu":
            return  # updated in place
        non_blocking = param.device.type == "cuda"
        param.detach().copy_(flight.weight, non_blocking=non_blocking)
        if non_blocking and flight.slot is not None:
            done = torch.cuda.Event()  # type: ignore[no-untyped-call]
            done.record()
            flight.slot.done = done

    def _slot(self, number: int, param: torch.Tensor, grad: torch.Tensor, *, pin: bool) -> _Slot:
        """Staging slot ``number``, grown to hold ``param`` and ``grad`` if it is too small."""
        need_w = param.numel() * param.element_size()
        need_g = grad.numel() * grad.element_size() if grad.device.type != "cpu" else 0
        while len(self._slots) <= number:
            self._slots.append(_Slot(_bytes(0, pin), _bytes(0, pin)))
        slot = self._slots[number]
        if (
            slot.weight.numel() < need_w
            or slot.grad.numel() < need_g
            or (pin and not slot.weight.is_pinned())
        ):
            if slot.done is not None:
                slot.done.synchronize()
            slot = _Slot(
                _bytes(max(need_w, slot.weight.numel()), pin),
                _bytes(max(need_g, slot.grad.numel()), pin),
            )
            self._slots[number] = slot
        return slot


def _bytes(size: int, pin: bool) -> torch.Tensor:
    return torch.empty(size, dtype=torch.uint8, pin_memory=pin)


def _view(buffer: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The first bytes of ``buffer`` seen as a tensor shaped and typed like ``like``."""
    size = like.numel() * like.element_size()
    return buffer[:size].view(like.dtype).view(like.shape)
