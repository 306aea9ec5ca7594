"""Receipts: signed by the trainer, checked against what they say, parsed strictly in both forms."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.trust.identity import Identity
from core.trust.receipts import (
    FORMAT,
    MAX_COUNT,
    MAX_RECEIPT_BYTES,
    ForgedReceipt,
    InvalidReceipt,
    Receipt,
    sign_receipt,
)
from core.util.msgpack_codec import pack

TRAINER = Identity.from_seed(bytes(range(32)))
SERVER = Identity.from_seed(bytes(range(1, 33)))
SESSION = bytes(range(16))


def signed(**changes: Any) -> Receipt:
    fields: dict[str, Any] = {
        "session": SESSION,
        "sequence": 3,
        "forward_samples": 120,
        "backward_samples": 96,
    }
    fields.update(changes)
    return sign_receipt(TRAINER, "digits", SERVER.peer_id, **fields)


def test_a_signed_receipt_verifies_and_survives_both_forms() -> None:
    receipt = signed()
    receipt.verify()
    assert receipt.trainer == TRAINER.peer_id
    assert receipt.samples == 216
    assert receipt.key == (SERVER.peer_id, TRAINER.peer_id, SESSION)
    for copy in (
        Receipt.from_wire(receipt.to_wire()),
        Receipt.from_bytes(receipt.to_bytes()),
        Receipt.from_json(receipt.to_json()),
    ):
        assert copy == receipt
        copy.verify()
    assert len(receipt.to_bytes()) < MAX_RECEIPT_BYTES
    assert "216" not in receipt.describe()  # forward and backward are shown apart
    assert "120 forward" in receipt.describe()


@pytest.mark.parametrize(
    "change",
    [
        {"forward_samples": 121},
        {"backward_samples": 0},
        {"sequence": 4},
        {"session": bytes(16)},
        {"project": "other"},
        {"server": Identity.generate().peer_id},
    ],
    ids=lambda c: next(iter(c)),
)
def test_any_changed_field_breaks_the_signature(change: dict[str, Any]) -> None:
    tampered = dataclasses.replace(signed(), **change)
    with pytest.raises(ForgedReceipt, match="not signed by the trainer it names"):
        tampered.verify()


def test_the_server_cannot_sign_in_the_trainers_name() -> None:
    receipt = signed()
    forged = dataclasses.replace(receipt, signature=SERVER.sign(receipt.payload()))
    with pytest.raises(ForgedReceipt):
        forged.verify()
    # a receipt the server signed as itself names the server as the trainer: refused outright
    with pytest.raises(InvalidReceipt, match="its own experts"):
        sign_receipt(
            SERVER,
            "digits",
            SERVER.peer_id,
            session=SESSION,
            sequence=1,
            forward_samples=1,
            backward_samples=1,
        )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"forward_samples": -1}, "forward samples"),
        ({"backward_samples": MAX_COUNT}, "backward samples"),
        ({"sequence": MAX_COUNT}, "sequence"),
        ({"session": b"short"}, "session"),
    ],
)
def test_bounds_are_refused_when_signing(change: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidReceipt, match=why):
        signed(**change)


def test_bad_projects_are_refused() -> None:
    for project in ("", "x" * 101, "bad\x1b[2Jproject"):
        with pytest.raises(InvalidReceipt, match="project"):
            sign_receipt(
                TRAINER,
                project,
                SERVER.peer_id,
                session=SESSION,
                sequence=1,
                forward_samples=1,
                backward_samples=1,
            )


def test_malformed_wire_forms_are_refused_with_their_cause() -> None:
    wire = signed().to_wire()
    cases: list[tuple[object, str]] = [
        ("not a list", "list of 9"),
        (wire[:-1], "list of 9"),
        (["barnraise/evidence/v1", *wire[1:]], "format"),
        ([*wire[:2], b"not a peer", *wire[3:]], "names a peer badly"),
        ([*wire[:4], "text", *wire[5:]], "as bytes"),
        ([*wire[:5], 1.5, *wire[6:]], "whole numbers"),
        ([*wire[:6], True, *wire[7:]], "whole numbers"),
        ([*wire[:7], 2**64, *wire[8:]], "below 2\\*\\*53"),
        ([*wire[:8], b"short"], "signature has 64 bytes"),
    ]
    for raw, why in cases:
        with pytest.raises(InvalidReceipt, match=why):
            Receipt.from_wire(raw)
    with pytest.raises(InvalidReceipt, match="at most"):
        Receipt.from_bytes(pack([*wire[:1], "x" * MAX_RECEIPT_BYTES, *wire[2:]]))
    with pytest.raises(InvalidReceipt, match="not a receipt"):
        Receipt.from_bytes(b"\xc1")


def test_malformed_json_forms_are_refused_with_their_cause() -> None:
    good = signed().to_json()
    cases: list[tuple[object, str]] = [
        ([good], "JSON object"),
        ({**good, "format": "v0"}, "format"),
        ({**good, "server": 5}, "server must be"),
        ({**good, "trainer": "12D3KooWnot"}, "trainer is not a PeerID"),
        ({**good, "session": "00" * 8}, "session"),
        ({**good, "session": "AB" * 16}, "session"),
        ({**good, "signature": "!" * 86}, "base64"),
        ({**good, "signature": "A" * 200}, "signature must be"),
        ({**good, "sequence": "3"}, "whole numbers"),
        ({**good, "forward_samples": 2.0}, "whole numbers"),
        ({**good, "backward_samples": -5}, "backward samples"),
        ({**good, "project": None}, "project"),
    ]
    for raw, why in cases:
        with pytest.raises(InvalidReceipt, match=why):
            Receipt.from_json(raw)
    assert good["format"] == FORMAT
