"""Proof that whoever asks for a pass holds the peer key it names (so nobody borrows another's).

PeerIDs are public, so naming one proves nothing. ``POST /pass/challenge`` hands the session's user
a challenge; ``POST /pass`` must carry it with the peer key's Ed25519 signature over
``proof_payload`` (the domain, the project, the user's name, the PeerID and the challenge), so a
signature serves one coordinator's project, one account, one key, once.

A challenge is stateless until used: 16 random bytes, its expiry and an HMAC-SHA-256 over both and
the user's key under a secret drawn when the service starts (a restart voids every challenge out).
It is single-use: redeeming it records its nonce until it would have expired anyway, so the record
holds only the last ``lifetime`` seconds of passes. The wire format of ``proof_payload`` is also
written in ``core.account.proof``, the client's side (the two packages may not import each other);
a test checks that they agree.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import struct

from core.coordinator.errors import BadProof
from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack

PROOF_DOMAIN = "barnraise/pass-request/v1"
CHALLENGE_LIFETIME = 120.0
MAX_CHALLENGE_CHARS = 100
MAX_SIGNATURE_CHARS = 200
_NONCE = 16
_MAC = 16
_LAYOUT = struct.Struct(">16sQ16s")
UPDATE = (
    "this coordinator hands out a pass only with proof that you hold the peer key "
    "(a signed challenge); update Barnraise"
)


def proof_payload(project: str, username: str, peer: PeerID, challenge: str) -> bytes:
    """The bytes a peer key signs to ask for a pass: domain-separated, naming everything."""
    return pack([PROOF_DOMAIN, project, username, str(peer), challenge])


class PassChallenges:
    def __init__(self, lifetime: float = CHALLENGE_LIFETIME, secret: bytes | None = None) -> None:
        self.lifetime = lifetime
        self._secret = secret or secrets.token_bytes(32)
        self._used: dict[bytes, float] = {}
        """Nonces redeemed, with the time their challenge expires."""

    def issue(self, user_key: str, now: float) -> tuple[str, float]:
        """A new challenge for ``user_key`` and the Unix time it expires."""
        nonce = secrets.token_bytes(_NONCE)
        expires = int(now + self.lifetime) + 1
        raw = _LAYOUT.pack(nonce, expires, self._mac(user_key, nonce, expires))
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="), float(expires)

    def redeem(self, challenge: str, user_key: str, now: float) -> None:
        """Use up ``challenge``; ``BadProof`` unless this coordinator issued it to ``user_key``
        and it is neither expired nor used."""
        try:
            raw = _unbase64(challenge)
            nonce, expires, mac = _LAYOUT.unpack(raw)
        except (binascii.Error, ValueError, struct.error):
            raise BadProof("the challenge is malformed; ask for a new one") from None
        if not hmac.compare_digest(mac, self._mac(user_key, nonce, expires)):
            raise BadProof(
                "this challenge was not issued to this account by this coordinator "
                "(it may have restarted); ask for a new one"
            )
        if expires <= now:
            raise BadProof("the challenge has expired; ask for a new one")
        self._forget_expired(now)
        if nonce in self._used:
            raise BadProof("the challenge was already used; ask for a new one")
        self._used[nonce] = float(expires)

    def __len__(self) -> int:
        return len(self._used)

    def _forget_expired(self, now: float) -> None:
        stale = [nonce for nonce, expires in self._used.items() if expires <= now]
        for nonce in stale:
            del self._used[nonce]

    def _mac(self, user_key: str, nonce: bytes, expires: int) -> bytes:
        message = pack([PROOF_DOMAIN, user_key, nonce, expires])
        return hmac.new(self._secret, message, hashlib.sha256).digest()[:_MAC]


def signature_bytes(text: str) -> bytes:
    """The signature's bytes from its URL-safe base64 text; ``BadProof`` if it is not one."""
    try:
        raw = _unbase64(text)
    except (binascii.Error, ValueError):
        raise BadProof("the signature is not URL-safe base64") from None
    if len(raw) != 64:
        raise BadProof("the signature is not an Ed25519 signature (64 bytes)")
    return raw


def _unbase64(text: str) -> bytes:
    # Strict: characters outside the URL-safe alphabet are an error, not skipped.
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
