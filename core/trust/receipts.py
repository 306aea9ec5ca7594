"""Receipts: a trainer's signed word of how much expert work one server did for it.

In a mixture-of-experts project a trainer sends batches to experts on volunteers' servers. The
server's own count of what it served proves nothing to anyone else, but the trainer that got the
answers can vouch for it: it signs, with its identity key, {project, server, trainer, session,
sequence, forward samples, backward samples}. The samples are **running totals** of the calls that
server answered for this trainer in this session (a random nonce per trainer process), so receipts
supersede one another: a lost one is covered by the next, and whoever credits them credits the
newest total less what it already credited for (server, trainer, session).

A receipt cannot be made by the server (it does not hold the trainer's key) and does not name
anyone else's server (the server's PeerID is signed). What it cannot prove is that the trainer
tells the truth: the server checks the totals against what it served, and the coordinator checks
who holds the keys (``core.coordinator.reports.receipts``).

Pure: no I/O. The wire form is a msgpack list (``to_wire``, ``to_bytes``), the coordinator's a
JSON object (``to_json``); both are parsed strictly, every number and size bounded.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack, unpack

FORMAT = "barnraise/receipt/v1"
"""The format tag, signed first, so a receipt's signature can never pass for another record's."""
MAX_PROJECT_CHARS = 100
SESSION_BYTES = 16
MAX_COUNT = 2**53
"""Samples and sequence numbers stay below this (JSON numbers keep them exact)."""
SIGNATURE_BYTES = 64
MAX_RECEIPT_BYTES = 512
"""A receipt's wire bytes: about 220 in practice; anything longer is not one."""
_WIRE_FIELDS = 9
_SESSION_HEX = re.compile(r"[0-9a-f]{32}")
_SIGNATURE_CHARS = 86
"""An Ed25519 signature is 64 bytes: 86 characters of unpadded base64."""


class InvalidReceipt(WireFormatError):
    """A receipt that is malformed, out of bounds, or not signed by the trainer it names."""


class ForgedReceipt(InvalidReceipt):
    """A well-formed receipt whose signature is not its trainer's."""


@dataclass(frozen=True, slots=True)
class Receipt:
    project: str
    server: PeerID
    """Whose experts did the work."""
    trainer: PeerID
    """Who signed it: the trainer whose calls were answered."""
    session: bytes
    """Random per trainer process: a restart starts new totals."""
    sequence: int
    """Grows with every receipt a session signs; the highest is the newest."""
    forward_samples: int
    backward_samples: int
    signature: bytes

    def __post_init__(self) -> None:
        _check_fields(self)

    @property
    def samples(self) -> int:
        """Forward and backward samples together: what the leaderboard credits."""
        return self.forward_samples + self.backward_samples

    @property
    def key(self) -> tuple[PeerID, PeerID, bytes]:
        """(server, trainer, session): the running totals this receipt belongs to."""
        return (self.server, self.trainer, self.session)

    def payload(self) -> bytes:
        """The bytes the trainer's key signs."""
        return pack([FORMAT, *self._fields()])

    def verify(self) -> None:
        """``ForgedReceipt`` unless the trainer named in the receipt signed it."""
        if not self.trainer.verify(self.signature, self.payload()):
            raise ForgedReceipt("the receipt is not signed by the trainer it names")

    # ---- wire form -------------------------------------------------------------------------------

    def to_wire(self) -> list[Any]:
        return [FORMAT, *self._fields(), self.signature]

    @classmethod
    def from_wire(cls, raw: object) -> Receipt:
        """The receipt from ``to_wire``'s list; ``InvalidReceipt`` for anything else (the
        signature is checked by ``verify``, not here)."""
        if not isinstance(raw, list | tuple) or len(raw) != _WIRE_FIELDS:
            raise InvalidReceipt(f"a receipt is a list of {_WIRE_FIELDS} fields")
        tag, project, server, trainer, session, sequence, forward, backward, signature = raw
        if tag != FORMAT:
            raise InvalidReceipt(f"not a receipt of format {FORMAT}")
        try:
            server_id, trainer_id = PeerID.from_wire(server), PeerID.from_wire(trainer)
        except PeerIdError as exc:
            raise InvalidReceipt(f"the receipt names a peer badly: {exc}") from None
        if not isinstance(session, bytes) or not isinstance(signature, bytes):
            raise InvalidReceipt("a receipt carries its session and signature as bytes")
        return _build(
            project,
            server_id,
            trainer_id,
            session,
            sequence=sequence,
            forward=forward,
            backward=backward,
            signature=signature,
        )

    def to_bytes(self) -> bytes:
        """The signed receipt as one msgpack value (what the coordinator keeps)."""
        return pack(self.to_wire())

    @classmethod
    def from_bytes(cls, data: bytes) -> Receipt:
        if len(data) > MAX_RECEIPT_BYTES:
            raise InvalidReceipt(f"a receipt has at most {MAX_RECEIPT_BYTES} bytes")
        try:
            raw = unpack(data)
        except WireFormatError as exc:
            raise InvalidReceipt(f"not a receipt: {exc}") from None
        return cls.from_wire(raw)

    # ---- JSON form -------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The JSON object the coordinator's ``POST /receipts`` takes."""
        return {
            "format": FORMAT,
            "project": self.project,
            "server": str(self.server),
            "trainer": str(self.trainer),
            "session": self.session.hex(),
            "sequence": self.sequence,
            "forward_samples": self.forward_samples,
            "backward_samples": self.backward_samples,
            "signature": base64.urlsafe_b64encode(self.signature).decode("ascii").rstrip("="),
        }

    @classmethod
    def from_json(cls, raw: object) -> Receipt:
        """The receipt from ``to_json``'s object; ``InvalidReceipt`` for anything else."""
        if not isinstance(raw, dict):
            raise InvalidReceipt("a receipt must be a JSON object")
        if raw.get("format") != FORMAT:
            raise InvalidReceipt(f"not a receipt of format {FORMAT}")
        peers = []
        for name in ("server", "trainer"):
            text = raw.get(name)
            if not isinstance(text, str) or len(text) > 100:
                raise InvalidReceipt(f"{name} must be a PeerID string")
            try:
                peers.append(PeerID.from_string(text))
            except PeerIdError as exc:
                raise InvalidReceipt(f"{name} is not a PeerID: {exc}") from None
        session = raw.get("session")
        if not isinstance(session, str) or not _SESSION_HEX.fullmatch(session):
            raise InvalidReceipt(f"session must be {SESSION_BYTES} bytes in lowercase hex")
        text = raw.get("signature")
        if not isinstance(text, str) or len(text) > _SIGNATURE_CHARS:
            raise InvalidReceipt("signature must be the base64 of an Ed25519 signature")
        try:
            padded = text + "=" * (-len(text) % 4)
            signature = base64.b64decode(padded, altchars=b"-_", validate=True)
        except (ValueError, binascii.Error):
            raise InvalidReceipt("signature is not base64") from None
        return _build(
            raw.get("project"),
            peers[0],
            peers[1],
            bytes.fromhex(session),
            sequence=raw.get("sequence"),
            forward=raw.get("forward_samples"),
            backward=raw.get("backward_samples"),
            signature=signature,
        )

    def describe(self) -> str:
        """One line for people."""
        return (
            f"receipt {self.sequence} of session {self.session.hex()[:8]}: trainer "
            f"{self.trainer.short()} vouches for {self.forward_samples} forward and "
            f"{self.backward_samples} backward samples by server {self.server.short()}"
        )

    def _fields(self) -> list[Any]:
        return [
            self.project,
            self.server.to_wire(),
            self.trainer.to_wire(),
            self.session,
            self.sequence,
            self.forward_samples,
            self.backward_samples,
        ]


def sign_receipt(
    identity: Identity,
    project: str,
    server: PeerID,
    *,
    session: bytes,
    sequence: int,
    forward_samples: int,
    backward_samples: int,
) -> Receipt:
    """Sign, as the trainer ``identity``, that ``server`` answered these running totals in
    ``session``; ``InvalidReceipt`` for values a receipt cannot carry."""
    unsigned = Receipt(
        project,
        server,
        identity.peer_id,
        session,
        sequence,
        forward_samples,
        backward_samples,
        b"",
    )
    return dataclasses.replace(unsigned, signature=identity.sign(unsigned.payload()))


def _build(
    project: object,
    server: PeerID,
    trainer: PeerID,
    session: bytes,
    *,
    sequence: object,
    forward: object,
    backward: object,
    signature: bytes,
) -> Receipt:
    if not isinstance(project, str):
        raise InvalidReceipt("a receipt names its project as text")
    if not all(_is_int(x) for x in (sequence, forward, backward)):
        raise InvalidReceipt("a receipt gives its sequence and samples as whole numbers")
    if len(signature) != SIGNATURE_BYTES:
        raise InvalidReceipt(f"a receipt's signature has {SIGNATURE_BYTES} bytes")
    return Receipt(
        project,
        server,
        trainer,
        session,
        sequence,  # type: ignore[arg-type]  # checked to be int above
        forward,  # type: ignore[arg-type]
        backward,  # type: ignore[arg-type]
        signature,
    )


def _check_fields(r: Receipt) -> None:
    """Every bound a receipt must keep, whoever built it."""
    if not r.project or len(r.project) > MAX_PROJECT_CHARS or not r.project.isprintable():
        raise InvalidReceipt(
            f"the project must be printable text of 1 to {MAX_PROJECT_CHARS} characters"
        )
    if len(r.session) != SESSION_BYTES:
        raise InvalidReceipt(f"a receipt's session has {SESSION_BYTES} bytes")
    for name, value in (
        ("sequence", r.sequence),
        ("forward samples", r.forward_samples),
        ("backward samples", r.backward_samples),
    ):
        if not 0 <= value < MAX_COUNT:
            raise InvalidReceipt(f"the {name} must be 0 or more and below 2**53")
    if r.trainer == r.server:
        raise InvalidReceipt("a peer cannot sign a receipt for its own experts")
    if len(r.signature) > SIGNATURE_BYTES:
        raise InvalidReceipt("the signature is too long for Ed25519")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
