"""Ids and the routing table."""

from __future__ import annotations

import itertools
import random

from core.dht.ids import MAX_ID, key_id, node_id
from core.dht.routing import Contact, RoutingTable
from core.net import Identity, PeerAddress


def contact(identity: Identity | None = None) -> Contact:
    peer = (identity or Identity.generate()).peer_id
    return Contact(peer, node_id(peer), (PeerAddress.tcp("127.0.0.1", 1, peer),))


def test_ids_are_stable_and_keys_keep_their_types_apart() -> None:
    identity = Identity.from_seed(b"\x01" * 32)
    assert node_id(identity.peer_id) == node_id(Identity.from_seed(b"\x01" * 32).peer_id)
    assert 0 <= node_id(identity.peer_id) < MAX_ID
    assert key_id((1,)) != key_id([1])
    assert key_id("k") == key_id("k")


def test_buckets_partition_the_id_space_and_split_around_us() -> None:
    own = Identity.generate()
    table = RoutingTable(node_id(own.peer_id), k=4, depth_modulo=5)
    contacts = [contact() for _ in range(200)]
    for c in contacts:
        table.add(c)
    bounds = [(b.lower, b.upper) for b in table.buckets]
    assert bounds[0][0] == 0
    assert bounds[-1][1] == MAX_ID
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert all(len(b.contacts) <= 4 for b in table.buckets)
    assert len(table.buckets) > 1
    assert table.bucket_for(table.own_id).covers(table.own_id)
    for c in table:
        assert table.bucket_for(c.node_id).covers(c.node_id)


def test_nearest_is_sorted_by_xor_distance() -> None:
    table = RoutingTable(node_id(Identity.generate().peer_id), k=20)
    for _ in range(60):
        table.add(contact())
    target = random.getrandbits(160)
    nearest = table.nearest(target, 10)
    distances = [c.node_id ^ target for c in nearest]
    assert distances == sorted(distances)
    everyone = sorted(c.node_id ^ target for c in table)
    assert distances == everyone[:10]


def test_a_full_bucket_keeps_old_contacts_and_parks_newcomers() -> None:
    table = RoutingTable(0, k=2, depth_modulo=1)  # depth_modulo 1: only our own bucket splits
    far = [c for c in (contact() for _ in range(400)) if c.node_id >= MAX_ID // 2][:4]
    table.add(far[0])
    table.add(far[1])
    # the far half cannot split (it does not cover id 0), so the third is parked
    oldest = table.add(far[2])
    assert oldest is not None
    assert oldest.peer_id == far[0].peer_id
    assert far[2].peer_id not in table
    # the oldest was pinged and did not answer: the parked newcomer takes its place
    table.remove(far[0].peer_id)
    assert far[2].peer_id in table
    assert far[0].peer_id not in table


def test_seeing_a_contact_again_moves_it_to_the_fresh_end() -> None:
    table = RoutingTable(0, k=3, depth_modulo=1)
    far = [c for c in (contact() for _ in range(400)) if c.node_id >= MAX_ID // 2][:4]
    for c in far[:3]:
        table.add(c)
    table.add(far[0])  # far[0] is alive again
    assert table.add(far[3]).peer_id == far[1].peer_id  # far[1] is now the oldest
