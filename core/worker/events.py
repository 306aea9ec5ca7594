"""What a project's peer tells its owner: ready, one step of its own, an epoch of the collaboration,
its replica measured on held-out text, waiting for the collaboration (or no longer), rolled back by
the moderators, failed to start, stopped. One small frozen dataclass each, ``PeerEvent`` their
union.

Inside the engine they travel as these objects (``ProjectPeer`` and the runner emit them,
``PeerEvents`` handles them); ``barnraise peer`` prints each as a JSON line (``to_json``:
``{"event": "ready", ...}``) and ``barnraise swarm`` reads its children's lines back (``from_json``,
which checks every field and ignores fields a newer peer adds).

This module imports neither torch nor anything of ``core.training`` that does: the engine reads these
events before (and without) loading torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from core.util.errors import WireFormatError
from core.util.wire import WireMessage


@dataclass(frozen=True)
class PeerReady(WireMessage):
    """The peer joined the swarm and built its model: training can begin."""

    address: str
    role: str = "trainer"


@dataclass(frozen=True)
class PeerEpoch(WireMessage):
    """One collaborative step of this peer: what ``DedlocOptimizer.step`` returns at an epoch's end."""

    epoch: int
    """The epoch that was finished."""
    samples: int
    """Our samples in it."""
    group_size: int
    averaged: bool
    """True when the gradient round averaged everything it should have."""
    summary: str
    seconds: float
    round_samples: float = 0.0
    """The samples the gradient round averaged over, everyone's (ours alone without a group): what
    the collaborative step was taken on; 0 when not known (a delayed update)."""
    bytes_sent: int = 0
    """Bytes of chunks this peer sent in the round's exchange (0: not counted)."""
    anchor: str = ""
    """diloco: a digest of the outer parameters after the round; every member of a round has
    the same one (empty in dedloc mode)."""
    late: int = 0
    """diloco: how many rounds before this one the oldest work it landed of ours was computed
    (0: all of it in this round; a round missed, or late, carries its work to a later one)."""


@dataclass(frozen=True)
class PeerMetrics(WireMessage):
    """A completed epoch of the whole collaboration: one point of its loss curve."""

    epoch: int
    loss: float | None
    """Σ loss / Σ mini-steps over all peers; None when no peer reported a finite one."""
    samples: int
    samples_per_second: float
    alive_peers: int
    time: float
    contributions: dict[str, int] = field(default_factory=dict)
    """Samples per user (a backbone's metrics only)."""


@dataclass(frozen=True)
class PeerEvaluation(WireMessage):
    """The backbone measured its replica on the project's held-out text (``[evaluation]``)."""

    epoch: int
    """The replica's epoch when it was measured."""
    loss: float | None
    """Mean cross-entropy per predicted token; None when it was not finite."""
    accuracy: float
    """Share of predicted tokens whose most likely guess was right, 0 to 1."""
    samples: int
    """Sequences measured."""
    tokens: int
    """Tokens predicted (masked ones, or every next token of a causal model)."""
    seconds: float
    time: float
    floor: float | None = None
    """The unigram floor on the same tokens (``core.training.evaluation.floor``); None when it
    could not be computed."""


@dataclass(frozen=True)
class PeerWaiting(WireMessage):
    """The peer cannot contribute for now (it cannot load the collaboration's state), or can again."""

    reason: str | None
    """Why, in words; None: the wait is over."""


@dataclass(frozen=True)
class PeerRolledBack(WireMessage):
    """The moderators' rollback order was applied: this peer's replica holds checkpoint
    ``to_epoch``'s state, and training goes on at ``epoch`` (numbered on, never back)."""

    to_epoch: int
    epoch: int
    sequence: int
    """The order's number (each applies once)."""
    reason: str
    """The moderators' words ("" when they gave none)."""
    source: str = ""
    """Where the state came from, in words (a peer, the backbone's checkpoint, the published one)."""


@dataclass(frozen=True)
class PeerFailed(WireMessage):
    """The peer could not start, or stopped with an error (the engine's runner says so)."""

    message: str


@dataclass(frozen=True)
class PeerStopped(WireMessage):
    """The peer left the swarm as asked (the last line ``barnraise peer`` prints), with what it did
    since it was ready (zeros where nothing was counted: an older peer, the expert host)."""

    samples: int = 0
    """Samples its trainer computed (0 for the backbone)."""
    compute_seconds: float = 0.0
    """Time its trainer spent inside those microbatches (the Trainer's count)."""
    seconds: float = 0.0
    """Wall time from its ``ready`` event until it stopped training: with ``compute_seconds``, the
    share of its time spent computing."""
    bytes_sent: int = 0
    bytes_received: int = 0
    """Its Host's traffic, all connections (frame headers included, TLS overhead not)."""


@dataclass(frozen=True)
class PeerNetwork(WireMessage):
    """How others reach this peer and how it is connected to its peers: sent when that changes."""

    reachability: str
    """``public``, ``private`` or ``unknown`` (``core.net.reach.reachability``)."""
    public_address: str | None = None
    """The address dial-backs reached (public peers only)."""
    checked_at: float | None = None
    """Wall-clock time of the last reachability check that asked anyone."""
    peers: int = 0
    direct: int = 0
    punched: int = 0
    relayed: int = 0
    """Connected peers, and how many of them by the best kind of connection to each."""
    client: bool = False
    """Whether it averages as a client (reduces nothing) because others cannot dial it."""
    addresses: list[str] = field(default_factory=list)
    """What it advertises now."""
    connections: dict[str, str] = field(default_factory=dict)
    """PeerID -> ``direct``, ``punched`` or ``relayed`` for every peer it is connected to."""
    relays: list[str] = field(default_factory=list)
    """Relays holding a reservation for it."""


PeerEvent = (
    PeerReady
    | PeerEpoch
    | PeerMetrics
    | PeerEvaluation
    | PeerWaiting
    | PeerRolledBack
    | PeerFailed
    | PeerStopped
    | PeerNetwork
)

EVENT_NAMES: dict[type[PeerEvent], str] = {
    PeerReady: "ready",
    PeerEpoch: "epoch",
    PeerMetrics: "metrics",
    PeerEvaluation: "evaluation",
    PeerWaiting: "waiting",
    PeerRolledBack: "rollback",
    PeerFailed: "failed",
    PeerStopped: "stopped",
    PeerNetwork: "network",
}
_KINDS = {name: kind for kind, name in EVENT_NAMES.items()}


def to_json(event: PeerEvent) -> dict[str, Any]:
    """``{"event": name, field: value, ...}``, ready for ``json.dumps``."""
    return {"event": EVENT_NAMES[type(event)], **dataclasses.asdict(event)}


def from_json(data: object) -> PeerEvent:
    """The event in a JSON object; ``WireFormatError`` naming the field if it is not one."""
    if not isinstance(data, dict):
        raise WireFormatError(f"a peer event is a JSON object, not {type(data).__name__}")
    kind = _KINDS.get(data.get("event"))  # type: ignore[arg-type]
    if kind is None:
        raise WireFormatError(f"unknown peer event {data.get('event')!r}")
    values = []
    for f in dataclasses.fields(kind):
        if f.name not in data:
            break  # the rest must have defaults: the decoder says which one is missing if not
        values.append(data[f.name])
    return kind.from_wire(values)
