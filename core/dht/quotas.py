"""Who stored a record, and how much each source may make a node keep.

A node keeps records for anyone who asks. Without limits per source, one client can fill the whole
byte budget with large, day-long values, and a full store would then push out the short-lived
records the swarm lives on. So each value is charged to its ``Source``: the peer that sent it (its
PeerID, proven by TLS) and the network it came from (the /24 for IPv4, the /48 for IPv6, of the
address seen on the connection). Both have quotas of bytes and of values (``Quotas``, set from
``DHTConfig``): identities cost nothing to make, addresses do, so the network's quota is what bounds
a flood of fresh identities. A peer reached through a relay has no address of its own that we see;
it counts as a network of its own (the relay's own limits bound how many circuits it carries).

``Tally`` keeps the bytes and values per holder and finds the one holding the most bytes in
logarithmic time: the storage makes that holder give way first when it is full.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.net.host.admission import address_block
from core.trust.peer_id import PeerID

K = TypeVar("K")

IPV6_PREFIX = 48
"""The IPv6 block one home, office or provider customer typically holds (IPv4: a /24)."""

_HEAP_SLACK = 64
"""A tally's heap is rebuilt once its stale entries outnumber the holders by this much."""


@dataclass(frozen=True, slots=True)
class Source:
    """Who stored a value: a peer and the network it came from."""

    peer: str
    network: str


LOCAL = Source("local", "local")
"""Our own values (what we store and what we cache from our lookups): no quota applies. No remote
caller can be it: a remote peer is a PeerID and its network an address prefix or ``peer:<PeerID>``."""


def network_of(ip: str) -> str | None:
    """The prefix ``ip`` is counted under (its /24 or /48), or None if it is not an IP address."""
    return address_block(ip, IPV6_PREFIX)


def source_of(peer: PeerID, ip: str | None) -> Source:
    """The source of a remote call: ``ip`` is the address seen on its connection (None if relayed)."""
    network = network_of(ip) if ip is not None else None
    return Source(str(peer), network or f"peer:{peer}")


@dataclass(frozen=True, slots=True)
class Quotas:
    """What one source may make a store keep (``DHTConfig`` explains each default)."""

    peer_bytes: int
    peer_values: int
    network_bytes: int
    network_values: int

    def __post_init__(self) -> None:
        if min(self.peer_bytes, self.peer_values, self.network_bytes, self.network_values) < 1:
            raise ValueError("storage quotas must be at least 1")


class Tally(Generic[K]):
    """Bytes and values per holder, and which holder has the most bytes.

    The heap is lazy: every change pushes the holder's new total, and entries that no longer match
    a holder's total are dropped when they reach the top (so the top valid entry is the largest).
    """

    def __init__(self) -> None:
        self.bytes: dict[K, int] = {}
        self.values: dict[K, int] = {}
        self._heap: list[tuple[int, int, K]] = []
        self._counter = 0  # tie-breaker, so the heap never compares holders

    def __len__(self) -> int:
        return len(self.values)

    def add(self, holder: K, nbytes: int, nvalues: int) -> None:
        """Count ``nbytes`` and ``nvalues`` more (or fewer, if negative) for ``holder``."""
        values = self.values.get(holder, 0) + nvalues
        if values <= 0:
            self.values.pop(holder, None)
            self.bytes.pop(holder, None)
            return
        total = self.bytes.get(holder, 0) + nbytes
        self.values[holder] = values
        self.bytes[holder] = total
        self._counter += 1
        heapq.heappush(self._heap, (-total, self._counter, holder))
        if len(self._heap) > 2 * len(self.values) + _HEAP_SLACK:
            self._rebuild()

    def largest(self) -> K | None:
        """The holder with the most bytes (None when nobody holds anything)."""
        heap = self._heap
        while heap:
            negative, _, holder = heap[0]
            if self.bytes.get(holder) == -negative:
                return holder
            heapq.heappop(heap)
        return None

    def _rebuild(self) -> None:
        heap = []
        for holder, total in self.bytes.items():
            self._counter += 1
            heap.append((-total, self._counter, holder))
        heapq.heapify(heap)
        self._heap = heap
