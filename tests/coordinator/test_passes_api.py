"""Access passes: signed for the requested peer, refused to the banned, revoked when they are."""

from __future__ import annotations

import pytest

from core.account.proof import proof_payload, signature_text
from core.net import Identity
from core.net.host.gate import AccessGate
from core.trust.passes import AccessDenied, pass_from_text
from tests.coordinator.conftest import PROJECT, Running


async def test_a_pass_verifies_and_is_bound_to_the_requested_peer(coordinator: Running) -> None:
    coordinator.add_user("alice")
    session = (await coordinator.client.login("alice"))["session"]
    identity = Identity.generate()
    peer = identity.peer_id
    reply = await coordinator.client.request_pass(session, identity)
    assert reply.status == 200
    body = reply.body
    assert set(body) == {
        "pass",
        "expires",
        "project_key",
        "bootstrap",
        "revoked",
        "refresh_interval",
    }
    assert body["project_key"] == str(coordinator.key.peer_id)
    assert body["bootstrap"] == ["/ip4/127.0.0.1/tcp/4001/p2p/" + str(coordinator.key.peer_id)]
    assert body["revoked"] == []
    assert body["refresh_interval"] == 60.0
    now = coordinator.clock.time()
    access = pass_from_text(body["pass"])
    access.check(PROJECT, coordinator.key.peer_id, now)
    assert (access.username, access.peer) == ("alice", peer)
    assert access.expires == body["expires"] == now + 600.0

    # a gate on that peer accepts it; a gate on any other peer key refuses it
    gate = AccessGate(PROJECT, coordinator.key.peer_id, peer, clock=coordinator.clock)
    gate.set_pass(access)
    assert gate.admit(peer, access.to_wire()) == access
    other = Identity.generate().peer_id
    with pytest.raises(AccessDenied, match="another peer key"):
        gate.admit(other, access.to_wire())
    # and it expires with its lifetime
    with pytest.raises(AccessDenied, match="expired"):
        access.check(PROJECT, coordinator.key.peer_id, now + 601.0)


async def test_pass_refusals(coordinator: Running) -> None:
    coordinator.add_user("bob")
    client = coordinator.client
    peer = str(Identity.generate().peer_id)
    assert (await client.post("/pass", {"peer": peer})).status == 401
    assert (await client.post("/pass", {"peer": peer}, token="made-up")).status == 401
    session = (await client.login("bob"))["session"]
    for bad in ["not-a-peer", "", "Qm" + "1" * 44, 12]:
        reply = await client.post("/pass", {"peer": bad}, token=session)
        assert reply.status == 400, bad
    coordinator.clock.advance(24 * 3600 + 1)  # the session expired
    assert (await client.post("/pass", {"peer": peer}, token=session)).status == 401


async def test_a_banned_user_gets_no_pass_and_their_peers_are_revoked(coordinator: Running) -> None:
    coordinator.add_user("mallory")
    coordinator.add_user("alice")
    client = coordinator.client
    mallory = (await client.login("mallory"))["session"]
    alice = (await client.login("alice"))["session"]
    laptop_key, desktop_key, alice_key = (Identity.generate() for _ in range(3))
    laptop, desktop = str(laptop_key.peer_id), str(desktop_key.peer_id)
    for peer in (laptop_key, desktop_key):
        assert (await client.request_pass(mallory, peer)).status == 200
    assert (await client.request_pass(alice, alice_key)).status == 200
    assert (await client.get("/revocations")).body == {
        "revoked": [],
        "time": coordinator.clock.time(),
    }

    coordinator.service.store.ban("mallory", "cheating")
    refused = await client.request_pass(mallory, laptop_key)
    assert refused.status == 403
    assert "banned" in refused.body["error"]
    revoked = (await client.get("/revocations")).body["revoked"]
    assert revoked == sorted([laptop, desktop])  # peer keys only: no usernames are published
    # the other users learn of it with their next pass
    again = await client.request_pass(alice, alice_key)
    assert again.body["revoked"] == revoked

    # once the banned user's passes have expired there is nothing left to revoke
    coordinator.clock.advance(601.0)
    assert (await client.get("/revocations")).body["revoked"] == []
    coordinator.service.store.unban("mallory")
    assert (await client.request_pass(mallory, laptop_key)).status == 200


async def test_a_pass_needs_a_fresh_signed_challenge_from_the_key_it_names(
    coordinator: Running,
) -> None:
    coordinator.add_user("bob")
    coordinator.add_user("carol")
    client = coordinator.client
    bob = (await client.login("bob"))["session"]
    carol = (await client.login("carol"))["session"]
    key = Identity.generate()
    peer = str(key.peer_id)

    old_client = await client.post("/pass", {"peer": peer}, token=bob)
    assert (old_client.status, old_client.body["code"]) == (400, "bad_proof")
    assert "update Barnraise" in old_client.body["error"]
    assert (await client.post("/pass/challenge")).status == 401  # a session is needed

    issued = (await client.post("/pass/challenge", token=bob)).body
    assert (issued["project"], issued["username"]) == (PROJECT, "bob")
    assert issued["expires"] > coordinator.clock.time()

    def proof(challenge: str, signer: Identity = key, user: str = "bob") -> dict[str, str]:
        payload = proof_payload(PROJECT, user, key.peer_id, challenge)
        return {
            "peer": peer,
            "challenge": challenge,
            "signature": signature_text(signer.sign(payload)),
        }

    async def refused(body: dict[str, str], words: str, token: str = bob) -> None:
        reply = await client.post("/pass", body, token=token)
        assert (reply.status, reply.body["code"]) == (400, "bad_proof"), reply
        assert words in reply.body["error"]

    await refused(proof(issued["challenge"], Identity.generate()), "does not prove")
    await refused(proof(issued["challenge"]), "already used")  # burnt by the failed try
    fresh = (await client.post("/pass/challenge", token=bob)).body["challenge"]
    await refused(proof(fresh), "not issued to this account", token=carol)  # bob's challenge
    await refused(proof(fresh, user="carol"), "does not prove")  # signed for another user
    late = (await client.post("/pass/challenge", token=bob)).body["challenge"]
    coordinator.clock.advance(200.0)
    await refused(proof(late), "expired")
    await refused({**proof("x" * 30), "signature": "!!"}, "base64")
    await refused({**proof(late), "signature": "AAAA"}, "64 bytes")
    tampered = (await client.post("/pass/challenge", token=bob)).body["challenge"]
    await refused(proof(tampered[:-2] + ("AA" if tampered[-2:] != "AA" else "BB")), "not issued")

    assert (await client.request_pass(bob, key)).status == 200
    assert (await client.request_pass(bob, key)).status == 200  # renewing: the key stays bob's
    taken = await client.request_pass(carol, key)  # carol holds the key too, but bob proved it
    assert (taken.status, taken.body["code"]) == (409, "conflict")
    assert "another account" in taken.body["error"]
