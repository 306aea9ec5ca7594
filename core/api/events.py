"""Typed events on the control API's websocket stream.

Each event travels as ``{"seq": n, "time": t, "type": "<name>", "data": {...}}``; ``seq`` grows by one
per event, so a client sees at once if it missed some (and can ask for the backlog with ``since``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.api.codec import decode, encode
from core.api.errors import BadRequest
from core.api.schema import AccountInfo, Code, EpochPoint, HeldOutPoint, Network, Progress
from core.policy import StateName


@dataclass(frozen=True)
class StateChanged:
    state: StateName
    previous: StateName
    code: Code
    reason: str


@dataclass(frozen=True)
class ProgressUpdated:
    project: str
    progress: Progress


@dataclass(frozen=True)
class EpochFinished:
    project: str
    epoch: int
    samples: int
    """Our samples in it."""
    group_size: int
    averaged: bool
    seconds: float


@dataclass(frozen=True)
class PeersSeen:
    project: str
    peers: int


@dataclass(frozen=True)
class ErrorRaised:
    where: str
    message: str


@dataclass(frozen=True)
class ProjectsChanged:
    projects: list[str]
    active: str | None


@dataclass(frozen=True)
class AccountChanged:
    """A login, a logout, a renewed access pass, or a new problem with the account."""

    account: AccountInfo


@dataclass(frozen=True)
class CollaborationEpoch:
    """The collaboration completed an epoch: one more point of the loss curve."""

    project: str
    point: EpochPoint


@dataclass(frozen=True)
class HeldOutMeasured:
    """The project's backbone measured the model on its held-out text: one more held-out point."""

    project: str
    point: HeldOutPoint


@dataclass(frozen=True)
class NetworkChanged:
    """The reachability check changed its verdict (reachable from the internet, or not)."""

    project: str
    network: Network


@dataclass(frozen=True)
class RolledBack:
    """The project's moderators rolled the model back: every replica now holds the checkpoint of
    ``to_epoch``, and training goes on at ``epoch`` (epochs are numbered on, never back)."""

    project: str
    to_epoch: int
    epoch: int
    reason: str


@dataclass(frozen=True)
class ManifestUpdated:
    """A project joined by URL served a new signed manifest: applied (new peers, data sources,
    coordinator, training numbers) or refused (it would break training, or it is not signed by
    the pinned project key), ``reason`` saying what changed or why it was refused."""

    project: str
    version: int
    """The version served (applied, or refused)."""
    applied: bool
    reason: str


EventData = (
    StateChanged
    | ProgressUpdated
    | EpochFinished
    | PeersSeen
    | ErrorRaised
    | ProjectsChanged
    | AccountChanged
    | CollaborationEpoch
    | HeldOutMeasured
    | NetworkChanged
    | RolledBack
    | ManifestUpdated
)

EVENT_TYPES: dict[str, type[Any]] = {
    "state_changed": StateChanged,
    "progress": ProgressUpdated,
    "epoch_finished": EpochFinished,
    "peers_seen": PeersSeen,
    "error": ErrorRaised,
    "projects_changed": ProjectsChanged,
    "account_changed": AccountChanged,
    "collaboration_epoch": CollaborationEpoch,
    "held_out_measured": HeldOutMeasured,
    "network_changed": NetworkChanged,
    "rolled_back": RolledBack,
    "manifest_updated": ManifestUpdated,
}
_NAMES = {cls: name for name, cls in EVENT_TYPES.items()}


@dataclass(frozen=True)
class Event:
    seq: int
    time: float
    data: EventData

    @property
    def type(self) -> str:
        return _NAMES[type(self.data)]

    def to_wire(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time, "type": self.type, "data": encode(self.data)}

    @classmethod
    def from_wire(cls, message: Any, *, strict: bool = True) -> Event:
        """Decode one event; ``strict=False`` (clients) ignores fields added by a newer engine.

        An event type this side does not know raises ``UnknownEventType`` (a ``BadRequest``), so
        that a client can skip it and read on."""
        if not isinstance(message, dict):
            raise BadRequest("an event must be a JSON object")
        kind = EVENT_TYPES.get(message.get("type"))  # type: ignore[arg-type]
        if kind is None:
            raise UnknownEventType(f"unknown event type {message.get('type')!r}")
        seq, when = message.get("seq"), message.get("time")
        if not isinstance(seq, int) or not isinstance(when, int | float):
            raise BadRequest("an event needs an integer seq and a time")
        path = f"event.{message['type']}"
        return cls(seq, float(when), decode(kind, message.get("data"), path, strict=strict))


class UnknownEventType(BadRequest):
    """An event of a type added after this client was built (skipped, not fatal)."""
