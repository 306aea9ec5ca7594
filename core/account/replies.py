"""The coordinator's answers as typed values, checked field by field.

A reply that lacks a field or has one of the wrong type becomes a ``CoordinatorUnavailable`` naming
the call and the field, never a ``KeyError`` deep inside the engine: a coordinator of another
version, or something else listening on that port, must give a message the volunteer can act on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from core.account.errors import CoordinatorUnavailable
from core.trust.passes import AccessPass, pass_from_text
from core.trust.peer_id import PeerID
from core.trust.reports import MAX_NOTE_CHARS as NOTE_CHARS
from core.util.errors import BarnraiseError


@dataclass(frozen=True)
class SessionTokens:
    """What a login gives: the session for calls and the refresh secret that renews it."""

    username: str
    session: str = field(repr=False)
    refresh: str = field(repr=False)
    session_expires: float
    """Unix time after which the coordinator will refuse ``session`` (refresh before)."""
    role: str = "volunteer"


@dataclass(frozen=True)
class CoordinatorInfo:
    api: int
    project: str
    project_key: PeerID
    mode: str
    allow_signup: bool
    bootstrap: list[str]
    pass_lifetime: float
    refresh_interval: float


@dataclass(frozen=True)
class PassGrant:
    access: AccessPass
    expires: float
    project_key: PeerID
    bootstrap: list[str]
    revoked: frozenset[PeerID]
    refresh_interval: float


class Reply:
    """One JSON object from the coordinator, read with type checks (``what`` names the call)."""

    def __init__(self, data: object, what: str, base_url: str) -> None:
        self.what = what
        self.base_url = base_url
        if not isinstance(data, dict):
            raise self.malformed("expected a JSON object")
        self.data: dict[str, Any] = data

    def malformed(self, reason: str) -> CoordinatorUnavailable:
        return CoordinatorUnavailable(
            f"the coordinator at {self.base_url} sent a malformed answer to {self.what}: {reason}"
        )

    def get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        if name not in self.data:
            raise self.malformed(f"{name!r} is missing")
        value = self.data[name]
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            raise self.malformed(f"{name!r} must be a number, not {value!r}")
        if not isinstance(value, kind):
            raise self.malformed(f"{name!r} has the wrong type ({type(value).__name__})")
        return value

    def text(self, name: str) -> str:
        value: str = self.get(name, str)
        return value

    def number(self, name: str) -> float:
        value = float(self.get(name, (int, float)))
        if not math.isfinite(value):
            raise self.malformed(f"{name!r} must be a finite number")
        return value

    def texts(self, name: str) -> list[str]:
        values = self.get(name, list)
        if not all(isinstance(v, str) for v in values):
            raise self.malformed(f"{name!r} must be a list of strings")
        return list(values)

    def peer(self, text: str, name: str) -> PeerID:
        try:
            return PeerID.from_string(text)
        except (BarnraiseError, ValueError) as exc:
            raise self.malformed(f"{name!r} holds a bad peer id: {exc}") from None


def session_tokens(reply: Reply) -> SessionTokens:
    role = reply.data.get("role", "volunteer")
    return SessionTokens(
        username=reply.text("username"),
        session=reply.text("session"),
        refresh=reply.text("refresh"),
        session_expires=reply.number("session_expires"),
        role=role if isinstance(role, str) else "volunteer",
    )


def coordinator_info(reply: Reply) -> CoordinatorInfo:
    return CoordinatorInfo(
        api=int(reply.number("api")),
        project=reply.text("project"),
        project_key=reply.peer(reply.text("project_key"), "project_key"),
        mode=reply.text("mode"),
        allow_signup=bool(reply.get("allow_signup", bool)),
        bootstrap=reply.texts("bootstrap"),
        pass_lifetime=reply.number("pass_lifetime"),
        refresh_interval=reply.number("refresh_interval"),
    )


def revoked_peers(reply: Reply) -> frozenset[PeerID]:
    return frozenset(reply.peer(text, "revoked") for text in reply.texts("revoked"))


def pass_grant(reply: Reply, peer: PeerID) -> PassGrant:
    """The grant, after checking that its pass is bound to ``peer`` and signed by its key."""
    try:
        access = pass_from_text(reply.text("pass"))
    except BarnraiseError as exc:
        raise reply.malformed(f"'pass' is not an access pass: {exc}") from None
    project_key = reply.peer(reply.text("project_key"), "project_key")
    if access.peer != peer:
        raise reply.malformed(f"the pass is bound to {access.peer}, not to {peer}")
    if not project_key.verify(access.signature, access.payload()):
        raise reply.malformed("the pass is not signed by the project key it came with")
    interval = reply.number("refresh_interval")
    if interval <= 0:
        raise reply.malformed("'refresh_interval' must be positive")
    return PassGrant(
        access=access,
        expires=reply.number("expires"),
        project_key=project_key,
        bootstrap=reply.texts("bootstrap"),
        revoked=revoked_peers(reply),
        refresh_interval=interval,
    )


@dataclass(frozen=True)
class CreditedEpochs:
    """What the coordinator credited to one of our peer keys (``GET /credit/mine``)."""

    peer: PeerID
    samples: int
    """Over every epoch."""
    epochs: dict[int, int]
    """Samples per epoch, from the epoch asked for on (the coordinator lists a bounded number)."""
    listed: int
    """How many epochs the coordinator listed (it stops at its limit)."""
    newest_epoch: int | None
    """The newest epoch the coordinator has a report of, anyone's; None: none yet."""
    notes: dict[int, tuple[int, str]] = field(default_factory=dict)
    """Epoch -> (samples claimed, why less was credited), where the work checks cut or withdrew
    the share (a coordinator before checked credit sends none)."""


def credited_epochs(reply: Reply, peer: PeerID) -> CreditedEpochs:
    """The credit of ``peer``, after checking that the answer is about ``peer``."""
    if reply.peer(reply.text("peer"), "peer") != peer:
        raise reply.malformed(f"it is about another peer than {peer}")
    samples = _count(reply, reply.get("samples", int), "samples")
    epochs: dict[int, int] = {}
    for item in reply.get("epochs", list):
        if not (isinstance(item, list) and len(item) == 2):
            raise reply.malformed("'epochs' must hold [epoch, samples] pairs")
        epochs[_count(reply, item[0], "epochs")] = _count(reply, item[1], "epochs")
    notes: dict[int, tuple[int, str]] = {}
    raw_notes = reply.data.get("notes", [])
    if not isinstance(raw_notes, list):
        raise reply.malformed("'notes' must be a list")
    for item in raw_notes:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], str)):
            raise reply.malformed("'notes' must hold [epoch, claimed, note] triples")
        notes[_count(reply, item[0], "notes")] = (
            _count(reply, item[1], "notes"),
            item[2][:NOTE_CHARS],
        )
    newest = reply.data.get("newest_epoch")
    return CreditedEpochs(
        peer=peer,
        samples=samples,
        epochs=epochs,
        listed=len(reply.data["epochs"]),
        newest_epoch=None if newest is None else _count(reply, newest, "newest_epoch"),
        notes=notes,
    )


def _count(reply: Reply, value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise reply.malformed(f"{name!r} must hold whole numbers of 0 or more")
    return value
