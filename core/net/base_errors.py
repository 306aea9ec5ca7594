"""The root of the networking layer's errors, and the one error ``peer_id`` raises.

They live apart from ``errors`` (which re-exports both) because ``errors`` names ``PeerID`` (the peer
an ``RpcError`` came from) and ``peer_id`` raises ``PeerIdError``: in one module the two would import
each other.
"""

from __future__ import annotations

from core.util.errors import BarnraiseError


class NetError(BarnraiseError):
    """A networking failure on this side."""


class PeerIdError(NetError, ValueError):
    """A string or byte string that is not a valid PeerID."""
