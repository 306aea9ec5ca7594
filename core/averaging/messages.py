"""The averager's wire messages: joining a group, streaming parts to reducers, downloading state."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.averaging.load_balancing import PeerCapacity
from core.net.peer_id import PeerID
from core.net.rpc import Method, StreamMethod
from core.util.wire import WireMessage


@dataclass(frozen=True, slots=True)
class MemberInfo(WireMessage):
    """What a member tells its group: who it is, where to reach it, and its capacity."""

    peer: PeerID
    addresses: list[str]
    compute: float = 0.0
    upload: float = 0.0
    download: float = 0.0
    client: bool = False
    auxiliary: bool = False

    def capacity(self) -> PeerCapacity:
        return PeerCapacity(self.compute, self.upload, self.download, self.client, self.auxiliary)


@dataclass(frozen=True, slots=True)
class GroupSpec(WireMessage):
    """A formed group: the same ordered member list on every member."""

    group_id: bytes
    round_key: str
    members: list[MemberInfo]


@dataclass(frozen=True, slots=True)
class JoinRequest(WireMessage):
    round_key: str
    info: MemberInfo
    deadline: float
    """Wall-clock time at which the follower stops waiting."""


@dataclass(frozen=True, slots=True)
class JoinResponse(WireMessage):
    group: GroupSpec | None
    reason: str = ""
    redirect: PeerID | None = None
    """A better leader the follower should try instead."""


@dataclass(frozen=True, slots=True)
class ReduceRequest(WireMessage):
    group_id: bytes
    sender: int
    part: int
    weight: float
    schema: bytes
    """Hash of the tensor shapes, codec and chunk size: members must agree on all of them."""


@dataclass(frozen=True, slots=True)
class ReduceSummary(WireMessage):
    chunks: int
    excluded: dict[int, str] = field(default_factory=dict)
    """Sender index -> why it was left out of some chunks of this part."""


@dataclass(frozen=True, slots=True)
class StateRequest(WireMessage):
    start: int
    end: int
    """Byte range of the flattened state to send (resumable, spread over donors)."""


@dataclass(frozen=True, slots=True)
class StateHeader(WireMessage):
    version: int
    metadata: dict[str, object]
    shapes: list[list[int]]
    dtypes: list[str]
    total_bytes: int


@dataclass(frozen=True, slots=True)
class Empty(WireMessage):
    pass


JOIN = Method("avg.join", JoinRequest, JoinResponse)
REDUCE = StreamMethod("avg.reduce", ReduceRequest, ReduceSummary)
STATE_HEADER = Method("avg.state_header", Empty, StateHeader)
STATE_RANGE = StreamMethod("avg.state_range", StateRequest, Empty)
