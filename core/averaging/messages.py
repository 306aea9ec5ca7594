"""The averager's wire messages: joining a group, streaming parts to reducers, verifying reducers,
downloading state."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.net.wire.rpc import Method, StreamMethod
from core.trust.peer_id import PeerID
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
    reduce_only: bool = False
    weight: float = 0.0
    """What it brings to this round (samples): a leader told how much makes a round worth
    closing counts its members' claims (``Matchmaker.form_group``)."""


@dataclass(frozen=True, slots=True)
class GroupSpec(WireMessage):
    """A formed group: the same ordered member list on every member."""

    group_id: bytes
    round_key: str
    members: list[MemberInfo]
    slots: int = 0
    """Equal slots the round's vector is dealt in (a round of several groups; the leader decides
    for everyone, ``round.columns``); 0: parts sized by the load-balancing program."""


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
    commit: bool = False
    """The sender signs a commitment before each chunk (reducers are verified in this group)."""


@dataclass(frozen=True, slots=True)
class InputCommitment(WireMessage):
    """Sent before each chunk when reducers are verified: the chunk's hash, and the sender's signature
    over the hash chain of every chunk it has sent this reducer so far (see ``commitments``)."""

    chunk: int
    digest: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class InputRow(WireMessage):
    """One sender's inputs to a part, as the reducer accepted them."""

    sender: int
    weight: float
    digests: list[bytes]
    """Hash of each chunk received from it, in order (a prefix of the part's chunks)."""
    signature: bytes
    """The sender's signature over the chain of ``digests`` (empty for the reducer's own row)."""


@dataclass(frozen=True, slots=True)
class PartSeal(WireMessage):
    """A reducer's signed account of its part: which inputs went into each chunk, and what came out."""

    rows: list[InputRow]
    used: list[list[int]]
    """Per chunk: the senders whose inputs it aggregated (screened ones included)."""
    results: list[bytes]
    """Per chunk: hash of the aggregate's float32 values; empty when the chunk was not averaged."""
    signature: bytes
    """The reducer's signature over everything above (``commitments.seal_digest``)."""


@dataclass(frozen=True, slots=True)
class ReduceSummary(WireMessage):
    chunks: int
    excluded: dict[int, str] = field(default_factory=dict)
    """Sender index -> why it was left out of some chunks of this part."""
    seal: PartSeal | None = None
    """When reducers are verified: the same seal for every receiver."""


@dataclass(frozen=True, slots=True)
class SealStamp(WireMessage):
    """A member's copy of one part's seal, in short: its digest and the reducer's signature."""

    part: int
    digest: bytes
    signature: bytes


@dataclass(frozen=True, slots=True)
class VerifyRequest(WireMessage):
    """A verifier asks a member for the inputs it sent to ``part`` (raw data follows, a chunk each)."""

    group_id: bytes
    part: int
    chunks: list[int]


@dataclass(frozen=True, slots=True)
class VerifyReply(WireMessage):
    stamps: list[SealStamp] = field(default_factory=list)
    """The seals this member received, so that a reducer that told members different things shows."""


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
    block_bytes: int = 0
    blocks: list[bytes] = field(default_factory=list)
    """SHA-256 of every ``block_bytes`` of the state (``sharing.digest``); a header without them
    commits to nothing, and no downloader loads its state."""


@dataclass(frozen=True, slots=True)
class Empty(WireMessage):
    pass


JOIN = Method("avg.join", JoinRequest, JoinResponse)
REDUCE = StreamMethod("avg.reduce", ReduceRequest, ReduceSummary)
VERIFY = StreamMethod("avg.verify", VerifyRequest, VerifyReply)
STATE_HEADER = Method("avg.state_header", Empty, StateHeader)
STATE_RANGE = StreamMethod("avg.state_range", StateRequest, Empty)
