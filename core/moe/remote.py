"""The caller's half of an expert call, shared by trainers, tests and benchmarks: ``call_expert``
(one call on a connection) and ``RemoteExpert`` (an expert on another peer, called like a local one).
The server that answers is ``core.moe.server.server``; the wire itself is ``protocol``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from core.codecs import NONE, Codec
from core.moe.protocol import (
    DTYPE,
    INFO,
    METHODS,
    ExpertInfo,
    ExpertRequest,
    InfoRequest,
    ReplyHeader,
    recv_tensors,
    send_tensors,
    validate_reply,
)
from core.net.errors import MalformedResponseError
from core.net.host.host import Host
from core.net.host.outbound import Target
from core.util.errors import WireFormatError


async def call_expert(
    host: Host,
    peer: Target,
    uid: str,
    method: str,
    tensors: Sequence[torch.Tensor],
    *,
    codec: Codec = NONE,
    timeout: float | None = None,
    reply_shapes: list[list[int]] | None = None,
) -> list[torch.Tensor]:
    """Call ``method`` ("forward" or "backward") of expert ``uid`` on ``peer`` with ``tensors``
    (batch dimension first); ``reply_shapes``, when known, are the only reply shapes accepted."""
    stream_method = METHODS.get(method)
    if stream_method is None:
        raise ValueError(f"unknown expert method {method!r}; use one of {sorted(METHODS)}")
    if not tensors:
        raise ValueError("an expert call needs at least one tensor")
    batch = int(tensors[0].shape[0])
    request = ExpertRequest(uid, batch, DTYPE, codec.wire_id, [list(t.shape) for t in tensors])
    async with host.open_stream(peer, stream_method, request, timeout=timeout) as call:
        await send_tensors(call.stream, codec, tensors)
        try:
            header = ReplyHeader.from_wire(await call.stream.recv_message())
        except WireFormatError as exc:
            raise MalformedResponseError(f"reply header from expert {uid}: {exc}") from None
        outputs = await recv_tensors(
            call.stream, validate_reply(header, batch, reply_shapes), header.shapes
        )
        await call.result()
    return outputs


class RemoteExpert:
    """An expert on another peer, called like a local one (no autograd here: the DMoE layer adds it)."""

    def __init__(
        self,
        host: Host,
        peer: Target,
        uid: str,
        *,
        codec: Codec = NONE,
        timeout: float | None = None,
    ) -> None:
        self.host = host
        self.peer = peer
        self.uid = uid
        self.codec = codec
        self.timeout = timeout
        self._info: ExpertInfo | None = None

    async def info(self) -> ExpertInfo:
        if self._info is None:
            info = await self.host.call(
                self.peer, INFO, InfoRequest(self.uid), timeout=self.timeout
            )
            if info.uid != self.uid:
                raise MalformedResponseError(f"asked for expert {self.uid}, got {info.uid[:64]}")
            self._info = info
        return self._info

    async def forward(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        return await self._call("forward", list(inputs), None)

    async def backward(
        self, inputs: Sequence[torch.Tensor], grad_outputs: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        # input gradients have exactly the inputs' shapes; anything else is a broken server
        shapes = [list(x.shape) for x in inputs]
        return await self._call("backward", [*inputs, *grad_outputs], shapes)

    async def _call(
        self, method: str, tensors: list[torch.Tensor], shapes: list[list[int]] | None
    ) -> list[torch.Tensor]:
        if shapes is None and self._info is not None:  # forward, with the outputs' shapes known
            shapes = [[int(tensors[0].shape[0]), *shape] for shape in self._info.outputs]
        return await call_expert(
            self.host,
            self.peer,
            self.uid,
            method,
            tensors,
            codec=self.codec,
            timeout=self.timeout,
            reply_shapes=shapes,
        )
