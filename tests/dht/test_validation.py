"""Record rules: sizes, expirations, owner signatures and schemas."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core.dht.records import (
    InvalidRecord,
    StoredValue,
    owner_marker,
    owner_of,
    required_signer,
    signing_payload,
)
from core.dht.validation import Limits, RecordRules, RecordSchema
from core.net import Identity
from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack
from core.util.wire import WireMessage

NOW = 1_700_000_000.0
RULES = Limits(max_key_bytes=256, max_value_bytes=1024, max_expiration_ahead=3600)


def signed(
    identity: Identity, key: object, subkey: object, value: object, expiration: float
) -> StoredValue:
    data = pack(value)
    return StoredValue(
        data, expiration, identity.sign(signing_payload(key, subkey, data, expiration))
    )


def test_owner_markers() -> None:
    peer = Identity.generate().peer_id
    assert owner_of(f"progress{owner_marker(peer)}") == peer
    assert owner_of("plain") is None
    assert owner_of(b"[owner:x]") is None  # only strings can be owned
    with pytest.raises(InvalidRecord, match="bad owner marker"):
        owner_of("[owner:not-a-peer]")
    with pytest.raises(InvalidRecord, match="unterminated"):
        owner_of("[owner:12D3")


def test_owned_records_need_the_owners_signature() -> None:
    rules = RecordRules(RULES)
    owner, stranger = Identity.generate(), Identity.generate()
    subkey = owner_marker(owner.peer_id)
    good = signed(owner, "run_progress", subkey, {"samples": 5}, NOW + 60)
    rules.check("run_progress", subkey, good, NOW)
    with pytest.raises(InvalidRecord, match="carries no signature"):
        rules.check("run_progress", subkey, StoredValue(good.data, good.expiration), NOW)
    forged = signed(stranger, "run_progress", subkey, {"samples": 5}, NOW + 60)
    with pytest.raises(InvalidRecord, match="signature is not"):
        rules.check("run_progress", subkey, forged, NOW)
    tampered = StoredValue(pack({"samples": 5000}), good.expiration, good.signature)
    with pytest.raises(InvalidRecord, match="signature is not"):
        rules.check("run_progress", subkey, tampered, NOW)
    extended = StoredValue(good.data, good.expiration + 100, good.signature)
    with pytest.raises(InvalidRecord, match="signature is not"):
        rules.check("run_progress", subkey, extended, NOW)
    moved = signed(owner, "other_key", subkey, {"samples": 5}, NOW + 60)
    with pytest.raises(InvalidRecord, match="signature is not"):
        rules.check("run_progress", subkey, moved, NOW)


def test_a_signature_that_held_is_not_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    rules = RecordRules(RULES)
    owner = Identity.generate()
    subkey = owner_marker(owner.peer_id)
    good = signed(owner, "run_progress", subkey, {"samples": 5}, NOW + 60)
    checked: list[bytes] = []
    real = PeerID.verify

    def counted(self: PeerID, signature: bytes, data: bytes) -> bool:
        checked.append(signature)
        return real(self, signature, data)

    monkeypatch.setattr(PeerID, "verify", counted)
    for _ in range(3):  # the same record from three nodes of a lookup
        rules.check("run_progress", subkey, good, NOW)
    assert len(checked) == 1
    # the same signature over other bytes is checked, and refused, every time
    tampered = StoredValue(pack({"samples": 5000}), good.expiration, good.signature)
    for _ in range(2):
        with pytest.raises(InvalidRecord, match="signature is not"):
            rules.check("run_progress", subkey, tampered, NOW)
    assert len(checked) == 3


def test_key_and_subkey_owned_by_different_peers_is_invalid() -> None:
    a, b = Identity.generate().peer_id, Identity.generate().peer_id
    assert required_signer(owner_marker(a), None) == a
    assert required_signer("x", owner_marker(b)) == b
    with pytest.raises(InvalidRecord, match="cannot hold a subkey owned by another"):
        required_signer(owner_marker(a), owner_marker(b))


def test_sizes_and_expirations() -> None:
    rules = RecordRules(RULES)
    rules.check("k", None, StoredValue(pack("v"), NOW + 10), NOW)
    with pytest.raises(InvalidRecord, match="exceeds 1024"):
        rules.check("k", None, StoredValue(bytes(2000), NOW + 10), NOW)
    with pytest.raises(InvalidRecord, match="key longer"):
        rules.check("k" * 500, None, StoredValue(pack("v"), NOW + 10), NOW)
    with pytest.raises(InvalidRecord, match="at most 3600 s"):
        rules.check("k", None, StoredValue(pack("v"), NOW + 7200), NOW)
    with pytest.raises(InvalidRecord, match="hashable"):
        rules.check("k", [1, 2], StoredValue(pack("v"), NOW + 10), NOW)


@dataclass(frozen=True)
class Progress(WireMessage):
    epoch: int
    samples: int


def test_schemas_hold_well_known_records_to_their_shape() -> None:
    schema = RecordSchema("progress", key="run_progress", value=Progress, subkeys="owned")
    rules = RecordRules(RULES, [schema])
    owner = Identity.generate()
    subkey = owner_marker(owner.peer_id)
    rules.check(
        "run_progress", subkey, signed(owner, "run_progress", subkey, [3, 100], NOW + 60), NOW
    )
    with pytest.raises(InvalidRecord, match="does not match its schema"):
        rules.check(
            "run_progress", subkey, signed(owner, "run_progress", subkey, ["3", 100], NOW + 60), NOW
        )
    with pytest.raises(InvalidRecord, match="need an owned subkey"):
        rules.check("run_progress", "anyone", StoredValue(pack([3, 100]), NOW + 60), NOW)
    rules.check("other", "anyone", StoredValue(pack("whatever"), NOW + 60), NOW)  # not matched
    plain_only = RecordRules(
        RULES, [RecordSchema("plain", key=lambda k: k == "cfg", subkeys="none")]
    )
    with pytest.raises(InvalidRecord, match="take no subkeys"):
        plain_only.check("cfg", "x", StoredValue(pack(1), NOW + 60), NOW)
