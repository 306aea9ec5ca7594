"""The first frame each side sends after the TLS handshake."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.util.wire import WireMessage

PROTOCOL_VERSION = 1
AGENT = "barnraise/0.1.0"


@dataclass(frozen=True, slots=True)
class Hello(WireMessage):
    """Who we are beyond the TLS identity: protocol version, limits and where we listen."""

    protocol: int
    agent: str
    window: int
    """Stream bytes the sender of this hello accepts before it grants more credit."""
    listen: list[str] = field(default_factory=list)
    """Addresses where the sender accepts connections (empty for peers that cannot be dialed)."""
    observed: str | None = None
    """The address this connection's other end appears to come from (helps NAT detection)."""
    extensions: dict[str, object] = field(default_factory=dict)
    """Room for later additions (access passes) without a new protocol version."""
