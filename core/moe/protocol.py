"""The expert call's wire messages, their validation, and how tensors travel on a call's stream.

A call is a streaming RPC. The caller sends an ``ExpertRequest`` header (expert uid, batch size,
dtype, codec, one shape per tensor), then each tensor as raw data frames in that order. The server
answers on the same stream with a ``ReplyHeader`` message (codec and shapes of what follows), the
result tensors as data frames, and finally an empty ``ExpertDone``. ``moe.forward`` carries the
inputs and returns the outputs; ``moe.backward`` carries the inputs then the output gradients and
returns the gradients with respect to the inputs. ``moe.info`` is a unary call that returns an
expert's ``ExpertInfo`` (per-sample shapes, dtype, largest batch). ``moe.receipt`` is a unary call
by which a trainer hands a server its signed receipt (``core.trust.receipts``) for the work that
server did for it; the server answers whether it kept it as its newest.

Both sides check every declared size against a bound before allocating anything: a header from a
stranger cannot make us reserve more than ``max_batch`` samples of the expert's own shapes (server)
or more than ``MAX_REPLY_VALUES`` values (caller). Typed errors: an unknown uid is
``NotFoundError``, a bad shape, dtype, codec or batch size is ``InvalidRequestError``, a full queue
is ``ResourceExhaustedError`` (busy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.codecs import NONE, Codec, active_codecs
from core.codecs.chunks import decode, encode, encoded_size
from core.net.errors import InvalidRequestError, MalformedResponseError
from core.net.wire.rpc import Method, StreamMethod
from core.net.wire.stream import Stream
from core.trust.receipts import Receipt
from core.util.errors import WireFormatError
from core.util.wire import WireMessage

DTYPE = "float32"
"""The only dtype on the wire: the codecs encode float32 (fp16 is a codec, not a dtype)."""
MAX_REPLY_VALUES = 1 << 28
"""The most values a caller accepts in one reply (1 GiB of float32): a bound on a lying server."""
MAX_RANK = 8


@dataclass(frozen=True, slots=True)
class InfoRequest(WireMessage):
    uid: str


@dataclass(frozen=True, slots=True)
class ExpertInfo(WireMessage):
    """What a caller needs to use an expert: per-sample shapes (without the batch dimension)."""

    uid: str
    dtype: str
    inputs: list[list[int]]
    outputs: list[list[int]]
    max_batch: int


@dataclass(frozen=True, slots=True)
class ExpertRequest(WireMessage):
    uid: str
    batch: int
    dtype: str
    codec: int
    shapes: list[list[int]]
    """Full shapes of the tensors that follow as data, batch dimension first."""


@dataclass(frozen=True, slots=True)
class ReplyHeader(WireMessage):
    codec: int
    shapes: list[list[int]]


@dataclass(frozen=True, slots=True)
class ExpertDone(WireMessage):
    pass


@dataclass(frozen=True, slots=True)
class ReceiptRequest(WireMessage):
    receipt: Receipt
    """Parsed strictly on arrival (``Receipt.from_wire``): a malformed one is an invalid request."""


@dataclass(frozen=True, slots=True)
class ReceiptReply(WireMessage):
    kept: bool
    """False: the server already holds this receipt or a newer one of the same session."""


INFO = Method("moe.info", InfoRequest, ExpertInfo)
FORWARD = StreamMethod("moe.forward", ExpertRequest, ExpertDone)
BACKWARD = StreamMethod("moe.backward", ExpertRequest, ExpertDone)
RECEIPT = Method("moe.receipt", ReceiptRequest, ReceiptReply)
METHODS = {"forward": FORWARD, "backward": BACKWARD}


def expected_shapes(info: ExpertInfo, method: str, batch: int) -> list[list[int]]:
    """The shapes a ``method`` request of ``batch`` samples must declare for this expert."""
    per_sample = info.inputs if method == "forward" else info.inputs + info.outputs
    return [[batch, *shape] for shape in per_sample]


def validate_request(info: ExpertInfo, method: str, request: ExpertRequest) -> Codec:
    """Check a request header against the expert before reading any of its data."""
    if request.dtype != info.dtype:
        raise InvalidRequestError(
            f"expert {info.uid} takes {info.dtype} tensors, not {request.dtype[:32]!r}"
        )
    if not 1 <= request.batch <= info.max_batch:
        raise InvalidRequestError(
            f"batch of {request.batch} samples for expert {info.uid}: "
            f"it takes 1 to {info.max_batch} per call"
        )
    codec = _wire_codec(request.codec, InvalidRequestError)
    wanted = expected_shapes(info, method, request.batch)
    if request.shapes != wanted:
        raise InvalidRequestError(
            f"{method} on expert {info.uid} needs tensors of shapes {wanted}, "
            f"got {request.shapes[:8]}"
        )
    return codec


def validate_reply(header: ReplyHeader, batch: int, exact: list[list[int]] | None) -> Codec:
    """Check a server's reply header: shapes as expected (``exact``) or at least batch-first and
    bounded in size, before the caller allocates room for them."""
    codec = _wire_codec(header.codec, MalformedResponseError)
    if exact is not None and header.shapes != exact:
        raise MalformedResponseError(f"reply shapes {header.shapes[:8]}, expected {exact}")
    total = 0
    for shape in header.shapes:
        if not 1 <= len(shape) <= MAX_RANK or shape[0] != batch or min(shape) < 0:
            raise MalformedResponseError(f"reply tensor of shape {shape[: MAX_RANK + 1]}")
        total += math.prod(shape)
        if total > MAX_REPLY_VALUES:
            raise MalformedResponseError(f"reply of more than {MAX_REPLY_VALUES} values")
    return codec


def _wire_codec(value: int, error: type[InvalidRequestError | MalformedResponseError]) -> Codec:
    """The codec of the table in force with wire id ``value``, if it is fit for activations and
    gradients (``Codec.activations``: raw or float16; 8-bit codecs are too lossy for them)."""
    codecs = active_codecs()
    codec = codecs.by_wire_id(value)
    if codec is None:
        raise error(f"unknown codec {value}")
    if not codec.activations:
        fit = " or ".join(c.name for c in codecs.for_activations)
        raise error(f"codec {codec.name} is not used for activations; use {fit}")
    return codec


async def send_tensors(stream: Stream, codec: Codec, tensors: Sequence[torch.Tensor]) -> None:
    """Send each tensor's float32 values as data frames, encoded with ``codec``."""
    for tensor in tensors:
        values = tensor.detach().to("cpu", torch.float32).contiguous().reshape(-1).numpy()
        await stream.send_data(encode(codec, values))


async def recv_tensors(
    stream: Stream, codec: Codec, shapes: Sequence[Sequence[int]]
) -> list[torch.Tensor]:
    """Receive tensors of already validated ``shapes``; a short or garbled stream is an error."""
    out = []
    for shape in shapes:
        count = math.prod(shape)
        values = np.empty(count, dtype=np.float32)
        if codec is NONE:
            await stream.recv_data_into(values.data)
        else:
            raw = bytearray(encoded_size(codec, count))
            await stream.recv_data_into(raw)
            try:
                decode(codec, raw, count, out=values)
            except WireFormatError as exc:
                raise InvalidRequestError(f"tensor data: {exc}") from None
        out.append(torch.from_numpy(values).reshape(tuple(shape)))
    return out
