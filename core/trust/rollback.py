"""RollbackOrder: the moderators' signed word "put every replica back on checkpoint N".

An order is {project, sequence, to_epoch, issued, reason}, signed by the project key as an access
pass is (``passes``). ``barnraise coordinator rollback`` signs it, the coordinator stores and serves
the latest (``GET /rollback``), each moderated peer's pass keeper leaves its text on the
``AccessGate``, and the peer's training checks it against the manifest's project key before applying
it (``core.training.moderation.rollback``). Whoever carries it is trusted with delivery only: a forged or
altered order fails ``check``; ``project`` is in the signed bytes, so an order for another project
signed by the same key fails too; an old order served again is refused by its ``sequence``, which
every replica remembers (the last one it applied).
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass
from typing import Any

from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError, WireFormatError
from core.util.msgpack_codec import pack, unpack

_DOMAIN = "barnraise/rollback-order/v1"
MAX_REASON_CHARS = 500
MAX_ORDER_CHARS = 4096
"""An order's text is a few hundred characters; anything far longer is not one."""


class RollbackRefused(BarnraiseError):
    """An order that must not be applied (forged, or for another project); says why."""


@dataclass(frozen=True, slots=True)
class RollbackOrder:
    project: str
    sequence: int
    """1 for the project's first order, then one more each time: each applies once."""
    to_epoch: int
    """The epoch whose checkpoint every replica loads (training then goes on, numbered on)."""
    issued: float
    """Unix time the moderator signed it (for people; peers order orders by ``sequence``)."""
    reason: str
    signature: bytes

    def payload(self) -> bytes:
        """The bytes the project key signs."""
        return signing_payload(self.project, self.sequence, self.to_epoch, self.issued, self.reason)

    def to_wire(self) -> list[Any]:
        return [
            self.project,
            self.sequence,
            self.to_epoch,
            self.issued,
            self.reason,
            self.signature,
        ]

    @classmethod
    def from_wire(cls, raw: object) -> RollbackOrder:
        if not isinstance(raw, list | tuple) or len(raw) != 6:
            raise WireFormatError("a rollback order is a list of 6 fields")
        project, sequence, to_epoch, issued, reason, signature = raw
        if not isinstance(project, str) or not isinstance(reason, str):
            raise WireFormatError("a rollback order names its project and reason as strings")
        if len(reason) > MAX_REASON_CHARS:
            raise WireFormatError(f"a rollback order's reason is at most {MAX_REASON_CHARS} chars")
        if not (_whole(sequence) and sequence >= 1 and _whole(to_epoch) and to_epoch >= 0):
            raise WireFormatError("a rollback order's sequence (>= 1) and epoch (>= 0) are whole")
        if not (isinstance(issued, int | float) and not isinstance(issued, bool)):
            raise WireFormatError("a rollback order carries its time as a number")
        if not math.isfinite(issued):
            raise WireFormatError("a rollback order carries a finite time")
        if not isinstance(signature, bytes):
            raise WireFormatError("a rollback order carries its signature as bytes")
        return cls(project, sequence, to_epoch, float(issued), reason, signature)

    def check(self, project: str, project_key: PeerID) -> None:
        """Raise ``RollbackRefused`` unless the project key signed this order for ``project``."""
        if self.project != project:
            raise RollbackRefused(
                f"rollback order #{self.sequence} is for project {self.project!r}, not {project!r}"
            )
        if not project_key.verify(self.signature, self.payload()):
            raise RollbackRefused(
                f"rollback order #{self.sequence} is not signed by the project key {project_key}"
            )

    def describe(self) -> str:
        """How people read it (the logs)."""
        why = f": {self.reason}" if self.reason else ""
        return f"rollback #{self.sequence} to the checkpoint of epoch {self.to_epoch}{why}"


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def signing_payload(
    project: str, sequence: int, to_epoch: int, issued: float, reason: str
) -> bytes:
    return pack([_DOMAIN, project, int(sequence), int(to_epoch), float(issued), reason])


def sign_order(
    project_key: Identity,
    project: str,
    *,
    sequence: int,
    to_epoch: int,
    issued: float,
    reason: str = "",
) -> RollbackOrder:
    """An order signed by ``project_key``; ``ValueError`` for nonsense (the command line says
    it in its own words before it gets here)."""
    if sequence < 1:
        raise ValueError("a rollback order's sequence starts at 1")
    if to_epoch < 0:
        raise ValueError("a rollback order's epoch is 0 or more")
    if len(reason) > MAX_REASON_CHARS:
        raise ValueError(f"a rollback order's reason is at most {MAX_REASON_CHARS} characters")
    payload = signing_payload(project, sequence, to_epoch, issued, reason)
    return RollbackOrder(
        project, sequence, to_epoch, float(issued), reason, project_key.sign(payload)
    )


def order_to_text(order: RollbackOrder) -> str:
    """The order as one URL-safe line (JSON replies, the database, the gate)."""
    return base64.urlsafe_b64encode(pack(order.to_wire())).decode("ascii").rstrip("=")


def order_from_text(text: object) -> RollbackOrder:
    """Parse ``order_to_text``'s output; ``WireFormatError`` for anything else."""
    if not isinstance(text, str) or len(text) > MAX_ORDER_CHARS:
        raise WireFormatError(f"a rollback order is a string of at most {MAX_ORDER_CHARS} chars")
    try:
        raw = unpack(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error, WireFormatError) as exc:
        raise WireFormatError(f"not a rollback order: {exc}") from None
    return RollbackOrder.from_wire(raw)
