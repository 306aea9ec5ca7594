"""Errors of the networking layer.

``NetError`` covers local problems (bad address, failed dial or handshake). ``RpcError``
is what a call raises; its ``code`` travels on the wire, so a handler that raises
``NotFoundError("no such key")`` makes the caller's ``await`` raise ``NotFoundError`` with that message,
with ``remote=True`` and the responding ``peer`` attached. Tracebacks never cross the wire.

Import every networking error from this module; a malformed PeerID or identity key is a
``core.trust.errors`` error, not a networking one.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from core.util.errors import BarnraiseError

if TYPE_CHECKING:
    from core.trust.peer_id import PeerID

__all__ = [
    "AddressError",
    "CallCancelledError",
    "ConnectionClosedError",
    "DeadlineExceededError",
    "DialError",
    "FrameTooLargeError",
    "HandshakeError",
    "InvalidRequestError",
    "MalformedResponseError",
    "NetError",
    "NotFoundError",
    "PeerIdMismatchError",
    "PermissionDeniedError",
    "ProtocolViolation",
    "RemoteInternalError",
    "ResourceExhaustedError",
    "RpcError",
    "StreamClosedError",
    "UnavailableError",
    "UnknownMethodError",
    "error_from_code",
    "peer_short",
]


class NetError(BarnraiseError):
    """A networking failure on this side."""


class AddressError(NetError, ValueError):
    """An address string that cannot be parsed or dialed."""


class DialError(NetError):
    """Could not open a connection to the peer (refused, unreachable, timed out)."""


class HandshakeError(NetError):
    """The TLS handshake or the identity proof failed."""


class PeerIdMismatchError(HandshakeError):
    """We dialed one PeerID and met a different key."""


class ProtocolViolation(NetError):
    """The peer broke the framing or call protocol; its connection is closed."""


class FrameTooLargeError(ProtocolViolation):
    """A frame is longer than the configured hard limit."""


class RpcError(NetError):
    """A call failed. Subclasses name the reason; ``code`` is what travels on the wire."""

    code: ClassVar[str] = "internal"

    def __init__(self, message: str = "", *, peer: PeerID | None = None, remote: bool = False):
        super().__init__(message or self.code)
        self.message = message or self.code
        self.peer = peer
        self.remote = remote

    def __str__(self) -> str:
        where = f" (from {peer_short(self.peer)})" if self.remote and self.peer else ""
        return f"{self.message}{where}"


class RemoteInternalError(RpcError):
    """The remote handler raised something it did not mean to; the message names the exception."""

    code = "internal"


class UnknownMethodError(RpcError):
    """The peer has no handler with that name."""

    code = "unknown_method"


class InvalidRequestError(RpcError):
    """The request (or response) does not have the shape the method expects."""

    code = "invalid_argument"


class MalformedResponseError(RpcError):
    """The peer answered with something that is not a valid response (raised locally, never sent)."""

    code = "malformed_response"


class NotFoundError(RpcError):
    code = "not_found"


class PermissionDeniedError(RpcError):
    code = "permission_denied"


class ResourceExhaustedError(RpcError):
    """The peer is too busy (too many concurrent calls) or the request is too large."""

    code = "resource_exhausted"


class DeadlineExceededError(RpcError, TimeoutError):
    """The call did not finish before its deadline."""

    code = "deadline_exceeded"


class CallCancelledError(RpcError):
    """The other side cancelled the call."""

    code = "cancelled"


class UnavailableError(RpcError):
    """The peer cannot serve the call now (shutting down, connection lost)."""

    code = "unavailable"


class ConnectionClosedError(UnavailableError):
    """The connection closed before the call finished."""


class StreamClosedError(RpcError):
    """Sending on a stream whose call has finished, or reading past its end with ``recv_*``."""

    code = "cancelled"


_BY_CODE = MappingProxyType(
    {
        cls.code: cls
        for cls in (
            RemoteInternalError,
            UnknownMethodError,
            InvalidRequestError,
            NotFoundError,
            PermissionDeniedError,
            ResourceExhaustedError,
            DeadlineExceededError,
            CallCancelledError,
            UnavailableError,
        )
    }
)


def error_from_code(code: str, message: str, peer: PeerID | None) -> RpcError:
    """Rebuild a remote error on the caller's side; unknown codes become ``RemoteInternalError``."""
    cls = _BY_CODE.get(code, RemoteInternalError)
    if cls is RemoteInternalError and code != RemoteInternalError.code:
        message = f"[{code}] {message}"
    return cls(message, peer=peer, remote=True)


def peer_short(peer: PeerID | None) -> str:
    return "?" if peer is None else peer.short()
