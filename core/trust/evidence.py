"""Evidence: one peer's signed accusation that another misbehaved in an averaging round.

A member that screens a sender's part out (non-finite values, a norm far beyond the group's), clips
it hard, or catches a reducer returning a wrong aggregate, signs what it saw with its identity key:
{project, reporter, accused, round key, group id, epoch, part, chunk, statistic, value, reason,
time}. Anyone can check the signature against the reporter's PeerID, so nobody can accuse in
another's name, and the record travels unchanged from the DHT to the backbone to the
coordinator. It is an accusation, not proof: one reporter's word about data only it received.
Whoever reads it counts how many distinct reporters accused the same peer.

Every field is bounded and printable (``reason`` ends up in a moderator's terminal), so a
malicious member cannot hide escape sequences or megabytes in one. Lives in ``core.net`` beside
``passes``: the training peers sign and collect it, the account client and the coordinator (which
never import the training code) send and judge it.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from core.trust.errors import PeerIdError
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError
from core.util.msgpack_codec import pack

_DOMAIN = "barnraise/evidence/v1"
MAX_PROJECT_CHARS = 100
MAX_ROUND_CHARS = 64
MAX_GROUP_CHARS = 64
MAX_STATISTIC_CHARS = 32
MAX_REASON_CHARS = 300
MAX_PART = 10_000
"""Parts are reducers' indices in a group: far fewer than this."""
MAX_CHUNK = 2**31
MAX_EPOCH = 2**53
_WIRE_FIELDS = 13
_STATISTIC = re.compile(r"[a-z0-9_]+")
_GROUP = re.compile(r"[0-9a-f]*")
_SIGNATURE_CHARS = 90
"""An Ed25519 signature is 64 bytes: 86 characters of unpadded base64."""


class InvalidEvidence(WireFormatError):
    """Evidence that is malformed, oversized, or not signed by the peer it names as reporter."""


@dataclass(frozen=True, slots=True)
class Evidence:
    project: str
    reporter: PeerID
    """Who signed it: the member that measured the misbehaviour."""
    accused: PeerID
    round_key: str
    """The averaging round, e.g. ``grads.12``."""
    group: str
    """The group's id in hex: which of the round's groups (Moshpit) it was."""
    epoch: int
    part: int
    chunk: int
    """-1 when the finding is about the whole part."""
    statistic: str
    """``nonfinite``, ``norm_ratio``, ``opposed``, ``clip_weight``, ``reducer_mismatch``…"""
    value: float | None
    """The statistic's value; None when it was not a finite number."""
    reason: str
    time: float
    """Unix time the reporter signed it."""
    signature: bytes

    def __post_init__(self) -> None:
        _check_fields(self)

    def payload(self) -> bytes:
        """The bytes the reporter's key signs."""
        return pack([_DOMAIN, *self._fields()])

    def verify(self) -> None:
        """``InvalidEvidence`` unless the reporter named in the record signed it."""
        if not self.reporter.verify(self.signature, self.payload()):
            raise InvalidEvidence(f"the evidence is not signed by its reporter {self.reporter}")

    @property
    def identity(self) -> tuple[str, str, str, int, int, str]:
        """What makes two records the same accusation (a republished one is not counted twice)."""
        return (
            str(self.reporter),
            str(self.accused),
            self.group,
            self.part,
            self.chunk,
            self.statistic,
        )

    def to_wire(self) -> list[Any]:
        return [*self._fields(), self.signature]

    @classmethod
    def from_wire(cls, raw: object) -> Evidence:
        """The record from ``to_wire``'s list; ``InvalidEvidence`` for anything else (its
        signature is checked by ``verify``, not here)."""
        if not isinstance(raw, list | tuple) or len(raw) != _WIRE_FIELDS:
            raise InvalidEvidence(f"evidence is a list of {_WIRE_FIELDS} fields")
        project, reporter, accused, *rest, signature = raw
        try:
            reporter_id, accused_id = PeerID.from_wire(reporter), PeerID.from_wire(accused)
        except PeerIdError as exc:
            raise InvalidEvidence(f"evidence names a peer badly: {exc}") from None
        if not isinstance(signature, bytes):
            raise InvalidEvidence("evidence carries its signature as bytes")
        return _build(project, reporter_id, accused_id, rest, signature)

    def to_json(self) -> dict[str, Any]:
        """The JSON object the coordinator's ``POST /evidence`` takes."""
        return {
            "project": self.project,
            "reporter": str(self.reporter),
            "accused": str(self.accused),
            "round": self.round_key,
            "group": self.group,
            "epoch": self.epoch,
            "part": self.part,
            "chunk": self.chunk,
            "statistic": self.statistic,
            "value": self.value,
            "reason": self.reason,
            "time": self.time,
            "signature": base64.urlsafe_b64encode(self.signature).decode("ascii").rstrip("="),
        }

    @classmethod
    def from_json(cls, raw: object) -> Evidence:
        """The record from ``to_json``'s object; ``InvalidEvidence`` for anything else."""
        if not isinstance(raw, dict):
            raise InvalidEvidence("evidence must be a JSON object")
        peers = []
        for name in ("reporter", "accused"):
            text = raw.get(name)
            if not isinstance(text, str) or len(text) > 100:
                raise InvalidEvidence(f"{name} must be a PeerID string")
            try:
                peers.append(PeerID.from_string(text))
            except PeerIdError as exc:
                raise InvalidEvidence(f"{name} is not a PeerID: {exc}") from None
        text = raw.get("signature")
        if not isinstance(text, str) or len(text) > _SIGNATURE_CHARS:
            raise InvalidEvidence("signature must be the base64 of an Ed25519 signature")
        try:
            signature = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (ValueError, binascii.Error):
            raise InvalidEvidence("signature is not base64") from None
        names = ("round", "group", "epoch", "part", "chunk", "statistic", "value", "reason", "time")
        rest = [raw.get(name) for name in names]
        return _build(raw.get("project"), peers[0], peers[1], rest, signature)

    def describe(self) -> str:
        """One line for people: where, what, and the reporter's words."""
        where = f"part {self.part}" + (f", chunk {self.chunk}" if self.chunk >= 0 else "")
        value = "not finite" if self.value is None else f"{self.value:.4g}"
        return (
            f"{where} of round {self.round_key} (group {self.group[:8] or '?'}): "
            f"{self.statistic} = {value}: {self.reason}"
        )

    def _fields(self) -> list[Any]:
        return [
            self.project,
            self.reporter.to_wire(),
            self.accused.to_wire(),
            self.round_key,
            self.group,
            self.epoch,
            self.part,
            self.chunk,
            self.statistic,
            self.value,
            self.reason,
            self.time,
        ]


def sign_evidence(
    identity: Identity,
    project: str,
    accused: PeerID,
    *,
    round_key: str,
    group: bytes,
    epoch: int,
    part: int,
    chunk: int,
    statistic: str,
    value: float,
    reason: str,
    time: float,
) -> Evidence:
    """Sign an accusation as ``identity``. Words too long for the record are shortened, and a
    non-finite value becomes None (JSON cannot carry it); ``InvalidEvidence`` for the rest."""
    unsigned = Evidence(
        project,
        identity.peer_id,
        accused,
        round_key[:MAX_ROUND_CHARS],
        group.hex()[:MAX_GROUP_CHARS],
        epoch,
        part,
        chunk,
        statistic[:MAX_STATISTIC_CHARS],
        float(value) if math.isfinite(value) else None,
        "".join(c if c.isprintable() else " " for c in reason)[:MAX_REASON_CHARS],
        float(time),
        b"",
    )
    return dataclasses.replace(unsigned, signature=identity.sign(unsigned.payload()))


def _build(
    project: object, reporter: PeerID, accused: PeerID, rest: list[Any], signature: bytes
) -> Evidence:
    round_key, group, epoch, part, chunk, statistic, value, reason, when = rest
    if not all(isinstance(x, str) for x in (project, round_key, group, statistic, reason)):
        raise InvalidEvidence("evidence names its project, round, group, statistic and reason")
    if not all(_is_int(x) for x in (epoch, part, chunk)):
        raise InvalidEvidence("evidence gives its epoch, part and chunk as whole numbers")
    if value is not None and not _is_number(value):
        raise InvalidEvidence("the statistic's value must be a finite number (or null)")
    if not _is_number(when):
        raise InvalidEvidence("evidence carries the time it was signed, as a number")
    return Evidence(
        project,  # type: ignore[arg-type]  # checked to be str above
        reporter,
        accused,
        round_key,
        group,
        epoch,
        part,
        chunk,
        statistic,
        None if value is None else float(value),
        reason,
        float(when),
        signature,
    )


def _check_fields(e: Evidence) -> None:
    """Every bound a record must keep, whoever built it."""
    texts = (
        ("project", e.project, MAX_PROJECT_CHARS),
        ("round", e.round_key, MAX_ROUND_CHARS),
        ("reason", e.reason, MAX_REASON_CHARS),
    )
    for name, text, limit in texts:
        if not text and name != "reason":
            raise InvalidEvidence(f"evidence needs a {name}")
        if len(text) > limit or not text.isprintable():
            raise InvalidEvidence(f"{name} must be printable text of at most {limit} characters")
    if len(e.group) > MAX_GROUP_CHARS or not _GROUP.fullmatch(e.group):
        raise InvalidEvidence(f"group must be lowercase hex of at most {MAX_GROUP_CHARS} digits")
    if len(e.statistic) > MAX_STATISTIC_CHARS or not _STATISTIC.fullmatch(e.statistic):
        raise InvalidEvidence(
            f"statistic must be 1 to {MAX_STATISTIC_CHARS} of a-z, 0-9 and _ (like norm_ratio)"
        )
    if not (0 <= e.epoch < MAX_EPOCH and 0 <= e.part < MAX_PART and -1 <= e.chunk < MAX_CHUNK):
        raise InvalidEvidence("epoch, part or chunk is out of range")
    if e.value is not None and not math.isfinite(e.value):
        raise InvalidEvidence("the statistic's value must be finite (or None)")
    if not math.isfinite(e.time) or e.time <= 0:
        raise InvalidEvidence("evidence carries the Unix time it was signed")
    if e.reporter == e.accused:
        raise InvalidEvidence("a peer cannot accuse itself")
    if len(e.signature) > 64:
        raise InvalidEvidence("the signature is too long for Ed25519")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -(2**63) <= value < 2**63  # a float of a huge int would overflow
    return isinstance(value, float) and math.isfinite(value)
