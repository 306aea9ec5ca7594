"""Access passes: a project's signed word that a user may take part with one peer key.

A pass is {project, username, peer, issued, expires}, signed by the project's Ed25519 key (held by the
coordinator). The project key is named like a peer, by the PeerID of its public key, so a manifest can
carry it as one short string. A pass proves nothing on its own: whoever shows it must also prove, on
the TLS connection or in a signed record, that it holds the peer key the pass names.
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

_DOMAIN = "barnraise/access-pass/v1"
MAX_USERNAME_CHARS = 64


class AccessDenied(BarnraiseError):
    """A pass that does not admit its holder; the message says why in plain words."""


@dataclass(frozen=True, slots=True)
class AccessPass:
    project: str
    username: str
    peer: PeerID
    """The peer key the pass is bound to: only that peer may use it."""
    issued: float
    expires: float
    """Unix time after which the pass admits nobody."""
    signature: bytes

    def payload(self) -> bytes:
        """The bytes the project key signs."""
        return signing_payload(self.project, self.username, self.peer, self.issued, self.expires)

    def to_wire(self) -> list[Any]:
        return [
            self.project,
            self.username,
            self.peer.to_wire(),
            self.issued,
            self.expires,
            self.signature,
        ]

    @classmethod
    def from_wire(cls, raw: object) -> AccessPass:
        if not isinstance(raw, list | tuple) or len(raw) != 6:
            raise WireFormatError("an access pass is a list of 6 fields")
        project, username, peer, issued, expires, signature = raw
        if not isinstance(project, str) or not isinstance(username, str):
            raise WireFormatError("an access pass names its project and user as strings")
        numbers = (issued, expires)
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
            raise WireFormatError("an access pass carries its times as numbers")
        if not all(math.isfinite(x) for x in numbers):
            raise WireFormatError("an access pass carries finite times")
        if not isinstance(signature, bytes):
            raise WireFormatError("an access pass carries its signature as bytes")
        return cls(
            project, username, PeerID.from_wire(peer), float(issued), float(expires), signature
        )

    def check(self, project: str, project_key: PeerID, now: float, *, grace: float = 0.0) -> None:
        """Raise ``AccessDenied`` unless the project key signed this pass for ``project`` and it
        has not expired (``grace`` seconds of clock difference are forgiven)."""
        if self.project != project:
            raise AccessDenied(f"the pass is for project {self.project!r}, not {project!r}")
        if not project_key.verify(self.signature, self.payload()):
            raise AccessDenied(f"the pass for {self.username!r} is not signed by the project key")
        if now > self.expires + grace:
            raise AccessDenied(
                f"the pass for {self.username!r} expired {now - self.expires:.0f} s ago"
            )
        if self.issued > now + grace:
            raise AccessDenied(f"the pass for {self.username!r} is issued in the future")


def signing_payload(
    project: str, username: str, peer: PeerID, issued: float, expires: float
) -> bytes:
    return pack([_DOMAIN, project, username, peer.to_wire(), float(issued), float(expires)])


def issue_pass(
    project_key: Identity,
    project: str,
    username: str,
    peer: PeerID,
    *,
    issued: float,
    lifetime: float,
) -> AccessPass:
    """Sign a pass for ``username`` bound to ``peer``, valid ``lifetime`` seconds from ``issued``."""
    if lifetime <= 0:
        raise ValueError("a pass must live a positive number of seconds")
    expires = issued + lifetime
    payload = signing_payload(project, username, peer, issued, expires)
    return AccessPass(project, username, peer, issued, expires, project_key.sign(payload))


def pass_to_text(access: AccessPass) -> str:
    """The pass as one URL-safe line (for JSON, the keyring and the command line)."""
    return base64.urlsafe_b64encode(pack(access.to_wire())).decode("ascii").rstrip("=")


def pass_from_text(text: str) -> AccessPass:
    """Parse ``pass_to_text``'s output; ``WireFormatError`` for anything else."""
    if not isinstance(text, str) or len(text) > 4096:
        raise WireFormatError("an access pass is a string of at most 4096 characters")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return AccessPass.from_wire(unpack(raw))
    except (ValueError, binascii.Error) as exc:
        raise WireFormatError(f"not an access pass: {exc}") from None
