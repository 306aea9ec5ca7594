"""Errors of the trust layer: a malformed peer id or identity key.

Both are ``ValueError``s too, so that a message decoder (``core.util.wire``) turns a bad PeerID
received from a peer into a ``WireFormatError`` naming the field.
"""

from __future__ import annotations

from core.util.errors import BarnraiseError


class TrustError(BarnraiseError):
    """An identity, signature or signed statement that cannot be used."""


class PeerIdError(TrustError, ValueError):
    """A string or byte string that is not a valid PeerID."""


class IdentityError(TrustError):
    """The identity key file is missing, unreadable or malformed."""
