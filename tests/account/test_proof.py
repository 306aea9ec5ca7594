"""The client and the coordinator build the same bytes for a pass request's proof (the two
packages may not import each other, so each writes the format down; this keeps them one)."""

from __future__ import annotations

from core.account import proof as client_side
from core.coordinator.people import possession as coordinator_side
from core.net import Identity


def test_both_sides_sign_and_check_the_same_payload() -> None:
    assert client_side.PROOF_DOMAIN == coordinator_side.PROOF_DOMAIN
    key = Identity.generate()
    for project, user, challenge in [
        ("demo", "alice", "abc"),
        ("স", "দীপা", "x" * 40),
        ("", "", ""),
    ]:
        ours = client_side.proof_payload(project, user, key.peer_id, challenge)
        theirs = coordinator_side.proof_payload(project, user, key.peer_id, challenge)
        assert ours == theirs
        text = client_side.signature_text(key.sign(ours))
        assert key.peer_id.verify(coordinator_side.signature_bytes(text), theirs)
    # each field is bound: changing any one gives other bytes
    base = client_side.proof_payload("p", "u", key.peer_id, "c")
    other = Identity.generate().peer_id
    assert base != client_side.proof_payload("q", "u", key.peer_id, "c")
    assert base != client_side.proof_payload("p", "v", key.peer_id, "c")
    assert base != client_side.proof_payload("p", "u", other, "c")
    assert base != client_side.proof_payload("p", "u", key.peer_id, "d")
