"""How we are connected to our peers: directly, through a hole punch, or through a relay.

For the app's line "Behind a router: direct to 3 of 4 peers". Each peer counts once, by its best
connection (a peer reached both directly and through a relay counts as direct), because that is
the one its calls use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.net.host.host import Host
    from core.net.wire.connection import Connection

KINDS = ("direct", "punched", "relayed")
"""Best first. ``punched``: direct connections that a hole punch opened (``core.net.punch.puncher`` marks
them ``punched = True``); without hole punching there are none."""


def kind_of(conn: Connection) -> str:
    if conn.relayed_via is not None:
        return "relayed"
    # a hole-punched connection is marked by its maker; plain connections have no such attribute
    if getattr(conn, "punched", False):
        return "punched"
    return "direct"


def peer_kinds(host: Host) -> dict[str, str]:
    """PeerID -> the best kind among its usable connections."""
    best: dict[str, int] = {}
    for conn in host.connections():
        if conn.peer is None or not conn.is_usable:
            continue
        rank = KINDS.index(kind_of(conn))
        key = str(conn.peer)
        best[key] = min(rank, best.get(key, rank))
    return {peer: KINDS[rank] for peer, rank in best.items()}


def connection_kinds(host: Host) -> dict[str, int]:
    """Connected peers by the best kind of their usable connections; ``peers`` is their total."""
    kinds = peer_kinds(host)
    counts = dict.fromkeys(KINDS, 0)
    for kind in kinds.values():
        counts[kind] += 1
    counts["peers"] = len(kinds)
    return counts


__all__ = ["KINDS", "connection_kinds", "kind_of", "peer_kinds"]
