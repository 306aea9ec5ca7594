"""RoundPlan: what a round decides before any byte moves, built by a pure function of the group.

Every member builds the same plan from the same group list and settings; only its place in the group
and its own weight differ. The plan says who reduces which part (sized by the load-balancing program),
how the parts are cut into chunks and in which codec each travels, what members must agree on to
exchange them, and the roles that make a member send, reduce, receive or verify nothing. ``plan_round``
computes it without a network (the plan cache only remembers solved programs), so it can be tested as
a table; ``Transfer`` carries it out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.averaging.config import AveragerConfig
from core.averaging.messages import GroupSpec, MemberInfo
from core.averaging.round.checks import possible_checks
from core.averaging.round.columns import MAX_SLOTS
from core.averaging.round.load_balancing import PeerCapacity, PlanCache, split
from core.averaging.round.tensors import Span, layout, schema_hash
from core.codecs import Codec
from core.codecs.chunks import encoded_size
from core.trust.peer_id import PeerID
from core.util.errors import ConfigError

PIPELINE_FILL_SECONDS = 0.05
MIN_CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class RoundPlan:
    """One round as this member will run it.

    The rules that decide what the round's numbers count for live here, not in the transfer that
    moves them, so that changing one touches only the plan:

    - ``weight_of``: what a sender's claimed weight counts for in the average (a reduce-only
      member's counts for nothing). Bounding claimed weights, so that no member steers the
      average by what it claims, belongs there.
    - ``lands``: whether an averaged chunk replaces a member's own values, given the weight it was
      averaged over. How a round that lost members lands (how much of the expected weight a chunk
      must hold, with ``senders`` saying whose data a reducer waits for) belongs there.
    """

    group: GroupSpec
    """The members in their order: member j reduces part j."""
    index: int
    """This member's place in the group."""
    weight: float
    """What this member's data counts for (``weight_of`` its claim)."""
    parts: tuple[int, ...]
    """Values each member reduces, in member order (0: it reduces nothing)."""
    chunk: int
    """Values per chunk, at most."""
    spans: tuple[tuple[Span, ...], ...]
    """Each part's chunks, each inside one tensor, with the codec it travels in and comes back in."""
    schema: bytes
    """What two members must agree on to exchange chunks: the tensors' sizes, the codec, the chunk
    size, and when reducers are verified the aggregation settings (verifiers recompute with their
    own settings: members that differ in them must not meet, or honest reducers would be accused)."""
    senders: frozenset[int]
    """Members whose data a reducer waits for: all but reduce-only ones, which have none."""
    receivers: frozenset[int]
    """Members that take the averages back: all but reduce-only ones. Each opens a stream to every
    other reducer, and sends its data on it when it has weight."""
    verified: bool
    """Senders commit to their chunks and reducers seal their parts (``core.averaging.verified``)."""
    verifiers: frozenset[int]
    """Members that check other parts' reducers after the round: the receivers, when verified (an
    reduce-only member takes no results, so holds no seals to check)."""
    slots: tuple[tuple[int, ...], ...] = ()
    """With slots (``plan_round``'s ``slots``): for each member, the slot of each of its chunks.
    The vector is cut into that many equal slots, the same in every group of a round, so that the
    reducers of one slot in different groups can average it across groups (``round.columns``)."""

    @property
    def members(self) -> list[MemberInfo]:
        return self.group.members

    @property
    def me(self) -> MemberInfo:
        return self.group.members[self.index]

    @property
    def group_id(self) -> bytes:
        return self.group.group_id

    @property
    def peers(self) -> list[PeerID]:
        return [m.peer for m in self.group.members]

    @property
    def total(self) -> int:
        return sum(self.parts)

    @property
    def reducers(self) -> frozenset[int]:
        """Members with a part to reduce (a client member, which nobody can dial, has none)."""
        return frozenset(j for j, spans in enumerate(self.spans) if spans)

    def weight_of(self, sender: int, claimed: float) -> float:
        """What ``sender``'s data counts for when it claims ``claimed`` (0: it contributes nothing).
        A claim that is not a finite positive number is the reducer's to refuse (``PartReducer``)."""
        return 0.0 if self.group.members[sender].reduce_only else float(claimed)

    def lands(self, weight: float) -> bool:
        """Whether a chunk averaged over ``weight`` replaces our values (0: no sender's data
        reached its reducer, and the chunk keeps its local values)."""
        return weight > 0

    def checks(self, member: int) -> tuple[int, ...]:
        """The parts ``member`` may check after the round: every other part, if it verifies. Which
        of them it does check is its own coin, tossed after the round (``verification``)."""
        if member not in self.verifiers:
            return ()
        return tuple(p for p in sorted(self.reducers) if p != member)

    @property
    def check_pairs(self) -> int:
        """How many (verifier, part) checks the group allows: what one check's chance divides."""
        return possible_checks([len(s) for s in self.spans], sorted(self.verifiers))


def plan_round(
    group: GroupSpec,
    index: int,
    sizes: Sequence[int],
    *,
    weight: float,
    config: AveragerConfig,
    plans: PlanCache | None = None,
    slots: int = 0,
) -> RoundPlan:
    """The plan of ``group``'s round for its member ``index``, averaging tensors of ``sizes`` values
    with ``weight``; ``plans`` keeps solved load-balancing programs between rounds. With ``slots``
    (a round of several groups) the vector is cut into that many equal slots, dealt out in turn to
    the members able to reduce, instead of parts sized by the load-balancing program."""
    codec = config.codec
    verified = config.verification.enabled
    if not 0 <= slots <= MAX_SLOTS:
        raise ConfigError(f"a round is dealt in at most {MAX_SLOTS} slots, not {slots}")
    if slots and verified:
        raise ConfigError(
            "reducers cannot be verified in a round of several groups (a reducer's mean then "
            "holds the other groups' too)"
        )
    members = group.members
    total = sum(sizes)
    capacities = [_capacity(m) for m in members]
    if slots:
        # the chunk size every group computes alike: from the settings, not from the members
        chunk = chunk_elements(config, (), slots)
        spans, slot_of, parts = _dealt(sizes, slots, members, chunk, codec)
    else:
        wire_bytes = encoded_size(codec.resolve(total), total) if total else 0
        program = (plans or PlanCache()).plan(capacities, wire_bytes)
        parts = split(total, program.shares)
        chunk = chunk_elements(config, capacities, sum(1 for p in parts if p > 0))
        spans = layout(sizes, parts, chunk, codec, len(members))
        slot_of = []
    schema = schema_hash(sizes, codec, chunk)
    if slots:  # a member that deals slots and one that balances parts cut differently
        schema = hashlib.sha256(schema + b"slots%d" % slots).digest()[: len(schema)]
    if verified:
        settings = repr(config.aggregation).encode()
        schema = hashlib.sha256(schema + settings).digest()[: len(schema)]
    takers = frozenset(i for i, m in enumerate(members) if not m.reduce_only)
    plan = RoundPlan(
        group=group,
        index=index,
        weight=0.0,
        parts=tuple(parts),
        chunk=chunk,
        spans=tuple(tuple(s) for s in spans),
        schema=schema,
        senders=takers,
        receivers=takers,
        verified=verified,
        verifiers=takers if verified else frozenset(),
        slots=tuple(tuple(s) for s in slot_of),
    )
    return replace(plan, weight=plan.weight_of(index, weight))  # its own rule, as for others'


def _dealt(
    sizes: Sequence[int],
    slots: int,
    members: Sequence[MemberInfo],
    chunk: int,
    codec: Codec,
) -> tuple[list[list[Span]], list[list[int]], list[int]]:
    """Equal slots of the vector, dealt in turn to the members able to reduce (not clients):
    each member's chunks, the slot of each chunk, and the values each member reduces. A slot's
    chunks are cut the same way whoever reduces it, so that a slot's reducers in different groups
    average chunks of the same ranges."""
    total = sum(sizes)
    slot_spans = layout(sizes, split(total, [1.0 / slots] * slots), chunk, codec, len(members))
    able = [j for j, m in enumerate(members) if not m.client] or [0]
    spans: list[list[Span]] = [[] for _ in members]
    slot_of: list[list[int]] = [[] for _ in members]
    for slot, chunks in enumerate(slot_spans):
        reducer = able[slot % len(able)]
        spans[reducer].extend(chunks)
        slot_of[reducer].extend([slot] * len(chunks))
    parts = [sum(span.count for span in member) for member in spans]
    return spans, slot_of, parts


def chunk_elements(
    config: AveragerConfig, capacities: Sequence[PeerCapacity] = (), reducers: int = 1
) -> int:
    """Values per chunk: ``config.chunk_bytes``, smaller when a member announced a slow link.

    Until a reducer has every member's first chunk, nothing comes back, and after the last one the
    last averages still have to travel; a slow member feeds all reducers at once, so each of its
    streams moves at its link speed over the number of reducers. On a 2.5 MB/s link a 1 MiB chunk
    costs 0.4 s of waiting per round; chunks that take ~50 ms on each stream of the slowest announced
    link keep that short. Every member computes the same size from the same group list.
    """
    size = config.chunk_bytes
    links = [min(c.upload, c.download) for c in capacities if c.upload > 0 and c.download > 0]
    if links:
        per_stream = min(links) / max(1, reducers)
        size = min(size, max(MIN_CHUNK_BYTES, int(per_stream * PIPELINE_FILL_SECONDS)))
    return max(1024, size // 4)


def _capacity(member: MemberInfo) -> PeerCapacity:
    return PeerCapacity(
        member.compute, member.upload, member.download, member.client, member.reduce_only
    )
