"""PeerStore: bounded in peers and in addresses per peer, without touching the network."""

from __future__ import annotations

import pytest

from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.net.host.peerstore import PeerStore
from core.trust.identity import Identity
from core.trust.peer_id import PeerID

# deriving 10 000 Ed25519 keys would take a while: a few real ones stand for the connected peers
PEERS = [Identity.generate().peer_id for _ in range(4)]


def fake_peer(n: int) -> PeerID:
    """A syntactically valid PeerID that no key stands behind (the store never checks)."""
    return PeerID(PEERS[0].to_bytes()[:-4] + n.to_bytes(4, "big"))


def address(n: int) -> PeerAddress:
    return PeerAddress.tcp(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}", 4000)


def test_addresses_are_remembered_in_the_order_first_learned() -> None:
    store = PeerStore()
    peer = PEERS[1]
    store.add(peer, [address(1), address(2)])
    store.add(peer, [address(2), address(3)])
    assert store[peer] == [address(n).with_peer(peer) for n in (1, 2, 3)]
    assert store.get(PEERS[2], ()) == ()
    with pytest.raises(AddressError):
        store.add(peer, [address(4).with_peer(PEERS[2])])


def test_a_peer_keeps_only_its_most_recently_given_addresses() -> None:
    """A peer that changes networks every day for weeks does not pile up its old addresses."""
    store = PeerStore(max_addresses=16)
    peer = PEERS[1]
    stable = address(0)
    for n in range(1, 10_000):
        store.add(peer, [stable, address(n)])  # its hello: the stable address and today's
        assert len(store[peer]) <= 16
    assert stable.with_peer(peer) in store[peer]
    assert address(9_999).with_peer(peer) in store[peer]
    assert address(1).with_peer(peer) not in store[peer]


def test_peers_heard_of_least_recently_and_not_connected_are_forgotten() -> None:
    connected = {PEERS[1]}
    store = PeerStore(lambda peer: peer in connected, max_peers=1000)
    store.add(PEERS[1], [address(1)])  # the oldest entry, but connected
    store.add(PEERS[2], [address(2)])
    for n in range(10_000):
        store.add(fake_peer(n), [address(n)])
        if n % 100 == 0:
            store.add(PEERS[2], [address(2)])  # heard of again and again
        assert len(store) <= 1000
    assert PEERS[1] in store
    assert PEERS[2] in store
    assert fake_peer(9_999) in store
    assert fake_peer(0) not in store
