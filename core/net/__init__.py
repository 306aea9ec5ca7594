"""Authenticated connections between peers, and the ways to reach peers behind home routers.

The sub-packages stack: ``wire`` (one connection) under ``host`` (making and accepting them) under
``reach``, ``relay`` and ``punch`` (siblings that each use a Host), under ``presence``, which composes
them for one Host. Identities and signed statements are ``core.trust``, below all of it.

- ``wire/``       frames, calls and streams over one authenticated connection.
- ``host/``       Host: listen, dial, admit, reuse connections; addresses, TLS, access passes.
- ``reach/``      who can reach us: observed addresses, dial-back checks, port mapping.
- ``relay/``      relays: reservations and circuits for peers no one can dial.
- ``punch/``      hole punching: relayed connections moved onto direct ones.
- ``presence``    Presence: reachability checks, relays (used or offered), hole punching, port
  mapping and meeting peers, composed for one Host and steered by its reachability.
- ``connection_kinds`` our peers counted by how we reach them: direct, hole-punched, relayed.
- ``config``      NetConfig: limits and timeouts.
- ``errors``      the error hierarchy, including RPC errors rebuilt from wire codes.

This ``__init__`` is the package's face: what other layers need to make a Host and serve calls.
"""

from core.net.config import NetConfig
from core.net.host.address import PeerAddress
from core.net.host.host import Host, StreamCall
from core.net.wire.rpc import CallContext, Method, StreamMethod
from core.net.wire.stream import EndOfStream, Stream
from core.trust.identity import Identity
from core.trust.peer_id import PeerID

__all__ = [
    "CallContext",
    "EndOfStream",
    "Host",
    "Identity",
    "Method",
    "NetConfig",
    "PeerAddress",
    "PeerID",
    "Stream",
    "StreamCall",
    "StreamMethod",
]
