"""What a peer signs to prove to the coordinator that it holds the key its pass will name.

The coordinator gives a logged-in user a challenge (``POST /pass/challenge``: the challenge, the
project and the user's name as it knows them); the peer key signs ``proof_payload`` over them and
its own PeerID, and ``POST /pass`` carries the challenge and the signature. Before signing, the
client checks that the challenge is for the project it means to join and for the user it logged in
as: a coordinator that is not the project's cannot get a signature that passes there for another
account. The same bytes are built by ``core.coordinator.people.possession`` (the coordinator's side; the
packages may not import each other); a test checks that the two agree.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack

PROOF_DOMAIN = "barnraise/pass-request/v1"

Signer = Callable[[bytes], bytes]
"""Signs bytes with the peer's identity key (``Identity.sign``)."""


def proof_payload(project: str, username: str, peer: PeerID, challenge: str) -> bytes:
    """The bytes the peer key signs to ask for a pass."""
    return pack([PROOF_DOMAIN, project, username, str(peer), challenge])


def signature_text(signature: bytes) -> str:
    """A signature as it travels in JSON (URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(signature).decode("ascii").rstrip("=")
