"""The Kademlia routing table: k-buckets over the id space, split as they fill.

A bucket holds at most ``k`` contacts, least recently seen first. A full bucket splits when it covers our
own id, or when its depth is not a multiple of ``depth_modulo`` (the relaxed rule from the Kademlia
paper, which keeps more contacts in far regions and shortens lookups). A full bucket that cannot split
keeps its old contacts, which are known to stay up, and parks the newcomer in a replacement cache that
refills the bucket when a contact is evicted for not answering.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

from core.dht.ids import MAX_ID, node_id
from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID


@dataclass(slots=True)
class Contact:
    """A DHT server we know of."""

    peer_id: PeerID
    node_id: int
    addresses: tuple[PeerAddress, ...]
    last_seen: float = 0.0
    failures: int = 0


@dataclass(slots=True)
class Bucket:
    lower: int
    upper: int
    depth: int
    contacts: OrderedDict[PeerID, Contact] = field(default_factory=OrderedDict)
    replacements: OrderedDict[PeerID, Contact] = field(default_factory=OrderedDict)
    last_lookup: float = 0.0

    def covers(self, node_id: int) -> bool:
        return self.lower <= node_id < self.upper


class RoutingTable:
    """Contacts by distance from our own id."""

    def __init__(self, own_id: int, k: int = 20, depth_modulo: int = 5) -> None:
        self.own_id = own_id
        self.k = k
        self.depth_modulo = depth_modulo
        self.buckets: list[Bucket] = [Bucket(0, MAX_ID, 0)]

    def __len__(self) -> int:
        return sum(len(bucket.contacts) for bucket in self.buckets)

    def __contains__(self, peer: PeerID) -> bool:
        return self.get(peer) is not None

    def __iter__(self) -> Iterator[Contact]:
        for bucket in self.buckets:
            yield from bucket.contacts.values()

    def bucket_for(self, node_id: int) -> Bucket:
        lo, hi = 0, len(self.buckets)
        while lo < hi:  # buckets are sorted and cover the id space without gaps
            mid = (lo + hi) // 2
            if self.buckets[mid].upper <= node_id:
                lo = mid + 1
            else:
                hi = mid
        return self.buckets[lo]

    def get(self, peer: PeerID) -> Contact | None:
        return self.bucket_for(node_id(peer)).contacts.get(peer)

    def add(self, contact: Contact) -> Contact | None:
        """Record that ``contact`` is alive.

        Returns the bucket's least recently seen contact when the bucket is full and cannot split: the
        caller should ping it and ``remove`` it if it does not answer (the newcomer then takes its place
        from the replacement cache).
        """
        if contact.node_id == self.own_id:
            return None
        while True:
            bucket = self.bucket_for(contact.node_id)
            known = bucket.contacts.get(contact.peer_id)
            if known is not None:
                known.last_seen = max(known.last_seen, contact.last_seen)
                known.addresses = contact.addresses or known.addresses
                known.failures = 0
                bucket.contacts.move_to_end(contact.peer_id)
                return None
            if len(bucket.contacts) < self.k:
                bucket.contacts[contact.peer_id] = contact
                bucket.replacements.pop(contact.peer_id, None)
                return None
            if bucket.covers(self.own_id) or bucket.depth % self.depth_modulo != 0:
                self._split(bucket)
                continue
            bucket.replacements[contact.peer_id] = contact
            bucket.replacements.move_to_end(contact.peer_id)
            while len(bucket.replacements) > self.k:
                bucket.replacements.popitem(last=False)
            return next(iter(bucket.contacts.values()))

    def _split(self, bucket: Bucket) -> None:
        middle = (bucket.lower + bucket.upper) // 2
        left = Bucket(bucket.lower, middle, bucket.depth + 1, last_lookup=bucket.last_lookup)
        right = Bucket(middle, bucket.upper, bucket.depth + 1, last_lookup=bucket.last_lookup)
        for source, kind in ((bucket.contacts, "contacts"), (bucket.replacements, "replacements")):
            for peer, contact in source.items():
                target = left if contact.node_id < middle else right
                getattr(target, kind)[peer] = contact
        index = self.buckets.index(bucket)
        self.buckets[index : index + 1] = [left, right]

    def remove(self, peer: PeerID) -> Contact | None:
        """Drop a contact; the most recently seen replacement, if any, takes its place."""
        bucket = self.bucket_for(node_id(peer))
        removed = bucket.contacts.pop(peer, None)
        bucket.replacements.pop(peer, None)
        if removed is not None and bucket.replacements:
            _, replacement = bucket.replacements.popitem(last=True)
            bucket.contacts[replacement.peer_id] = replacement
        return removed

    def nearest(self, target: int, count: int, exclude: PeerID | None = None) -> list[Contact]:
        """Up to ``count`` contacts closest to ``target`` by XOR distance."""
        candidates = [c for c in self if c.peer_id != exclude]
        candidates.sort(key=lambda c: c.node_id ^ target)
        return candidates[:count]

    def stale_buckets(self, now: float, interval: float) -> list[Bucket]:
        return [b for b in self.buckets if now - b.last_lookup >= interval]

    def touch(self, target: int, now: float) -> None:
        """A lookup went through ``target``'s bucket, so it needs no refresh for a while."""
        self.bucket_for(target).last_lookup = now
