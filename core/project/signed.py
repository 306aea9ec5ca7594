"""SignedManifest: a project's manifest as its coordinator serves it, signed by the project key.

``GET /manifest`` on a coordinator answers one JSON object, the envelope::

    {"format": "barnraise-signed-manifest/1", "project": NAME, "project_key": PEERID,
     "version": INT, "issued": UNIX_TIME, "manifest": "<the TOML text>", "signature": "<base64>"}

The project key (Ed25519) signs ``payload()``: a domain-separation prefix (so that no other
signature made with the project key, a pass or a rollback order, can pass for a manifest's) and
the canonical JSON of the project, the key, the version, the time and the SHA-256 of the text's
UTF-8 bytes. ``issued`` is whole seconds, so that the signed bytes are the same whoever encodes
them. ``version`` grows by one with every change of the organizer's file; a volunteer's engine
takes only a version above the one it holds.

The coordinator builds envelopes (``sign_manifest``), the engine reads them (``parse_envelope``,
then ``check``): the size limits, the types of every field, the signature and the manifest inside
(valid, of the project named, not naming another key) are checked here once, and every refusal is
a ``SignedManifestError`` whose message says what is wrong.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from core.project.errors import ManifestError
from core.project.kinds import AnyManifest, parse_any_manifest
from core.project.reading import MAX_MANIFEST_BYTES
from core.project.sections import PROJECT_NAME
from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError

FORMAT = "barnraise-signed-manifest/1"
DOMAIN = b"barnraise/signed-manifest/v1\x00"
"""Prefixed to the signed bytes: the project key signs passes and rollback orders too."""
MAX_ENVELOPE_BYTES = 2 * MAX_MANIFEST_BYTES
"""An envelope holds a manifest of at most 1 MiB, which JSON's escapes (newlines, quotes) can
grow, and a few short fields: anything larger is not one, and is refused unread."""
_MAX_KEY_CHARS = 128
_MAX_SIGNATURE_CHARS = 128
"""An Ed25519 signature is 64 bytes, 88 characters in base64."""


class SignedManifestError(BarnraiseError):
    """A signed manifest that must not be used: malformed, too large, of another format, not
    signed by the key it should be, or holding an invalid manifest; the message says which."""


@dataclass(frozen=True, slots=True)
class SignedManifest:
    project: str
    project_key: PeerID
    version: int
    """1 for the first manifest the coordinator served, one more for each change."""
    issued: int
    """Unix time (whole seconds) the coordinator signed this version."""
    text: str
    """The manifest's TOML text, as the organizer wrote it."""
    signature: bytes

    def payload(self) -> bytes:
        """The bytes the project key signs."""
        return signing_payload(self.project, self.project_key, self.version, self.issued, self.text)

    def to_json(self) -> dict[str, Any]:
        """The envelope as ``GET /manifest`` answers it."""
        return {
            "format": FORMAT,
            "project": self.project,
            "project_key": str(self.project_key),
            "version": self.version,
            "issued": self.issued,
            "manifest": self.text,
            "signature": base64.b64encode(self.signature).decode("ascii"),
        }

    def to_bytes(self) -> bytes:
        """The envelope's JSON, UTF-8 (non-ASCII text kept as it is, not escaped six-fold)."""
        return json.dumps(self.to_json(), ensure_ascii=False).encode("utf-8")

    def verified(self) -> bool:
        """Whether ``project_key`` signed exactly this envelope."""
        return self.project_key.verify(self.signature, self.payload())

    def check(self, expected_key: PeerID | None = None, *, source: str = "") -> AnyManifest:
        """The manifest inside, once every check passed: signed by ``expected_key`` (when given:
        the key the user pinned), the signature good, the text a valid manifest of the project
        the envelope names, naming no other project key. ``source`` (a URL) names it in errors."""
        where = f" at {source}" if source else ""
        if expected_key is not None and self.project_key != expected_key:
            raise SignedManifestError(
                f"the manifest{where} is signed by project key {self.project_key}, not by "
                f"{expected_key}, the key you trusted for it: it may not be the project you "
                "meant (or its organizer changed keys; then they must say so)"
            )
        if not self.verified():
            raise SignedManifestError(
                f"the manifest{where} does not match its signature: it was altered after "
                f"project key {self.project_key} signed it, or signed by another key"
            )
        try:
            manifest = parse_any_manifest(self.text)
        except ManifestError as exc:
            reason = f"{exc.key}: {exc.reason}" if exc.key else exc.reason
            raise SignedManifestError(
                f"the manifest{where} is signed but not valid: {reason}"
            ) from None
        if manifest.project.name != self.project:
            raise SignedManifestError(
                f"the manifest{where} is of project {manifest.project.name!r}, but its "
                f"envelope names {self.project!r}"
            )
        named = manifest.access.project_key
        if named and named != str(self.project_key):
            raise SignedManifestError(
                f"the manifest{where} names project key {named} but is signed by {self.project_key}"
            )
        return manifest


def signing_payload(project: str, key: PeerID, version: int, issued: int, text: str) -> bytes:
    """The canonical bytes of an envelope: the domain prefix, then sorted compact JSON."""
    fields = {
        "project": project,
        "project_key": str(key),
        "version": int(version),
        "issued": int(issued),
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return DOMAIN + canonical.encode("ascii")


def sign_manifest(
    project_key: Identity, project: str, text: str, *, version: int, issued: float
) -> SignedManifest:
    """``text``, the manifest of ``project``, signed as ``version`` (the coordinator's side)."""
    if version < 1:
        raise ValueError("a signed manifest's version starts at 1")
    if len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise ValueError(f"a manifest has at most {MAX_MANIFEST_BYTES:,} bytes")
    when = int(issued)
    payload = signing_payload(project, project_key.peer_id, version, when, text)
    return SignedManifest(
        project, project_key.peer_id, version, when, text, project_key.sign(payload)
    )


def parse_envelope(raw: bytes, *, source: str = "") -> SignedManifest:
    """The envelope in ``raw`` (the body of ``GET /manifest``), its fields checked; the signature
    and the manifest inside are ``check``'s. ``source`` (a URL) names it in errors."""
    where = f" from {source}" if source else ""
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise SignedManifestError(
            f"the answer{where} is too large for a signed manifest "
            f"(more than {MAX_ENVELOPE_BYTES:,} bytes)"
        )
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise SignedManifestError(
            f"the answer{where} is not a signed manifest (not JSON): is this a Barnraise "
            "project's URL?"
        ) from None
    if not isinstance(document, dict):
        raise SignedManifestError(f"the answer{where} is not a signed manifest (not an object)")
    said = document.get("format")
    if said != FORMAT:
        if isinstance(said, str) and said.startswith("barnraise-signed-manifest/"):
            raise SignedManifestError(
                f"the project{where} serves its manifest as {said[:60]!r}, which this version "
                f"of Barnraise cannot read ({FORMAT!r}): update Barnraise"
            )
        raise SignedManifestError(
            f"the answer{where} is not a signed manifest (no format {FORMAT!r}): is this a "
            "Barnraise project's URL?"
        )
    fields = _Fields(document, where)
    project = fields.text("project", 64)
    if not PROJECT_NAME.fullmatch(project):
        raise fields.bad("project", "is not a project name")
    try:
        key = PeerID.from_string(fields.text("project_key", _MAX_KEY_CHARS))
    except PeerIdError as exc:
        raise fields.bad("project_key", f"is not a PeerID ({exc})") from None
    version = fields.whole("version", 1)
    issued = fields.whole("issued", 0)
    text = fields.text("manifest", MAX_MANIFEST_BYTES)
    if len(text.encode("utf-8")) > MAX_MANIFEST_BYTES:
        raise fields.bad("manifest", f"is larger than {MAX_MANIFEST_BYTES:,} bytes")
    encoded = fields.text("signature", _MAX_SIGNATURE_CHARS)
    try:
        signature = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise fields.bad("signature", "is not base64") from None
    if len(signature) != 64:
        raise fields.bad("signature", "is not an Ed25519 signature (64 bytes)")
    return SignedManifest(project, key, version, issued, text, signature)


class _Fields:
    """Typed reads of the envelope's fields, each refusal naming its field."""

    def __init__(self, document: dict[str, Any], where: str) -> None:
        self._document = document
        self._where = where

    def bad(self, name: str, reason: str) -> SignedManifestError:
        return SignedManifestError(
            f"the signed manifest{self._where} is malformed: {name} {reason}"
        )

    def text(self, name: str, limit: int) -> str:
        value = self._document.get(name)
        if not isinstance(value, str) or not value:
            raise self.bad(name, "must be a non-empty string")
        if len(value) > limit:
            raise self.bad(name, f"is longer than {limit:,} characters")
        return value

    def whole(self, name: str, least: int) -> int:
        value = self._document.get(name)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)  # 1.0 from an encoder that writes every number as a float
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(name, "must be a whole number")
        if not least <= value < 2**53:
            raise self.bad(name, f"must be at least {least} (and below 2**53), got {value}")
        return value
