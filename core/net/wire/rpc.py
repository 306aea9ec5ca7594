"""Methods, handlers and the router that maps method names to them.

A ``Method`` names a unary call and the ``WireMessage`` types of its request and response; a
``StreamMethod`` is the same for calls that also carry a bidirectional ``Stream``. Handlers receive a
``CallContext`` whose ``peer`` is the caller's authenticated PeerID.

Raw handlers (``add_raw``) take and return any msgpack value, for callers that do their own validation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from core.net.errors import InvalidRequestError
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.wire import WireMessage

if TYPE_CHECKING:
    from core.net.wire.link import Link
    from core.net.wire.stream import Stream

Req = TypeVar("Req", bound=WireMessage)
Resp = TypeVar("Resp", bound=WireMessage)


@dataclass(frozen=True, slots=True)
class CallContext:
    """What a handler knows about the call it serves."""

    peer: PeerID
    """The caller, as proven by its TLS identity; never taken from the request."""
    method: str
    connection: Link
    """The connection the call came on (its ``Connection``, seen as what calls need of it)."""
    deadline: float | None
    """Loop time (``loop.time()``) by which the caller stops waiting, if it set one."""


@dataclass(frozen=True, slots=True)
class Method(Generic[Req, Resp]):
    """A unary call: one request, one response."""

    name: str
    request: type[Req]
    response: type[Resp]


@dataclass(frozen=True, slots=True)
class StreamMethod(Generic[Req, Resp]):
    """A call that opens a bidirectional stream next to its request and final response."""

    name: str
    request: type[Req]
    response: type[Resp]


RawUnary = Callable[[CallContext, Any], Awaitable[Any]]
RawStreaming = Callable[[CallContext, Any, "Stream"], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Handler:
    """A registered handler, already wrapped to take and return raw msgpack values."""

    name: str
    streaming: bool
    unary: RawUnary | None = None
    stream: RawStreaming | None = None


def decode_request(cls: type[Req], raw: Any) -> Req:
    try:
        return cls.from_wire(raw)
    except WireFormatError as exc:
        raise InvalidRequestError(f"malformed request: {exc}") from None


class Router:
    """Handlers by method name. One per Host; handlers may be added while it runs."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def _register(self, handler: Handler) -> None:
        if handler.name in self._handlers:
            raise ValueError(f"a handler for {handler.name!r} is already registered")
        self._handlers[handler.name] = handler

    def add(
        self, method: Method[Req, Resp], fn: Callable[[CallContext, Req], Awaitable[Resp]]
    ) -> None:
        request_cls = method.request

        async def unary(ctx: CallContext, raw: Any) -> Any:
            response = await fn(ctx, decode_request(request_cls, raw))
            return response.to_wire()

        self._register(Handler(method.name, streaming=False, unary=unary))

    def add_stream(
        self,
        method: StreamMethod[Req, Resp],
        fn: Callable[[CallContext, Req, Stream], Awaitable[Resp]],
    ) -> None:
        request_cls = method.request

        async def streaming(ctx: CallContext, raw: Any, stream: Stream) -> Any:
            response = await fn(ctx, decode_request(request_cls, raw), stream)
            return response.to_wire()

        self._register(Handler(method.name, streaming=True, stream=streaming))

    def add_raw(self, name: str, fn: RawUnary) -> None:
        self._register(Handler(name, streaming=False, unary=fn))

    def add_raw_stream(self, name: str, fn: RawStreaming) -> None:
        self._register(Handler(name, streaming=True, stream=fn))

    def remove(self, name: str) -> None:
        self._handlers.pop(name, None)

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)
