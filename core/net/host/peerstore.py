"""PeerStore: where the peers we heard of can be dialed, so that calls can name a peer alone.

Addresses arrive from peers' hellos, DHT contacts, averaging groups and relays, and every one of
them is a hint that is given again when it matters (a DHT contact carries its addresses, a group
its members'). So the store may forget, and it must, in an engine that runs for weeks beside a DHT
of strangers: a peer keeps the ``max_addresses`` it was given most recently, and past ``max_peers``
the peers heard of least recently, and not connected now, are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID

MAX_PEERS = 10_000
"""Far more than a swarm's peers and the DHT contacts a node works with; the rest are strangers
met once in a lookup."""

MAX_ADDRESSES = 16
"""A peer advertises a handful (interfaces, its public address, relays); the rest are the old ones
of the networks it has left."""


class PeerStore:
    """Addresses by peer, in the order first learned; bounded in peers and addresses per peer."""

    def __init__(
        self,
        connected: Callable[[PeerID], bool] = lambda peer: False,
        *,
        max_peers: int = MAX_PEERS,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self._connected = connected
        self.max_peers = max_peers
        self.max_addresses = max_addresses
        # per peer, each address with the tick it was last given at (dict order: first learned)
        self._peers: dict[PeerID, dict[PeerAddress, int]] = {}
        self._heard: dict[PeerID, int] = {}
        self._tick = 0

    def add(self, peer: PeerID, addresses: Sequence[PeerAddress]) -> None:
        """Remember where ``peer`` can be dialed (addresses naming another peer are refused)."""
        self._tick += 1
        known = self._peers.setdefault(peer, {})
        self._heard[peer] = self._tick
        for given in addresses:
            if given.peer_id not in (None, peer):
                raise AddressError(f"{given} does not belong to {peer}")
            known[given.with_peer(peer)] = self._tick
        if len(known) > self.max_addresses:
            stale = sorted(known, key=known.__getitem__)[: len(known) - self.max_addresses]
            for address in stale:
                del known[address]
        if len(self._peers) > self.max_peers:
            self._forget_some()

    def _forget_some(self) -> None:
        """Drop the peers heard of least recently, down to nine tenths of the cap (so that the
        sort runs once per many additions), keeping those connected now."""
        keep = self.max_peers * 9 // 10
        idle = sorted(
            (p for p in self._peers if not self._connected(p)), key=self._heard.__getitem__
        )
        for peer in idle[: max(0, len(self._peers) - keep)]:
            del self._peers[peer]
            del self._heard[peer]

    def get(self, peer: PeerID, default: Sequence[PeerAddress] = ()) -> Sequence[PeerAddress]:
        """The peer's addresses, first learned first (a new list), or ``default``."""
        known = self._peers.get(peer)
        return default if known is None else list(known)

    def __getitem__(self, peer: PeerID) -> list[PeerAddress]:
        return list(self._peers[peer])

    def __contains__(self, peer: object) -> bool:
        return peer in self._peers

    def __iter__(self) -> Iterator[PeerID]:
        return iter(self._peers)

    def __len__(self) -> int:
        return len(self._peers)
