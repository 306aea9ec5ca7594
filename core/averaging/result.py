"""What a round of averaging actually did, told honestly.

A round never claims success for values it did not average: ``complete`` is True only when every part
was averaged over every member that was expected to contribute. Otherwise ``missing`` lists the ranges
of the concatenated vector that kept their local values, and ``excluded`` names the members whose data
were left out of some average, with the reason. ``findings`` are what this member saw as a reducer (or
as a verifier of another reducer): each names the peer, the part and chunk, and the statistic that
condemned it, so it can be signed and reported as evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.averaging.robust.alignment import Alignment
from core.trust.peer_id import PeerID


@dataclass(frozen=True)
class Finding:
    """One member's misbehaviour as this peer measured it (the raw material of signed evidence)."""

    peer: PeerID
    """The accused: a sender whose data was screened out or clipped, or a reducer that lied."""
    part: int
    """The part of the vector (the reducer's index in the group)."""
    chunk: int
    """The chunk of that part; -1 when the finding is about the whole part."""
    statistic: str
    """What was measured: ``nonfinite``, ``norm_ratio``, ``opposed``, ``clip_weight``,
    ``reducer_mismatch``."""
    value: float
    """Its value (for example the chunk's norm over the group's median norm)."""
    reason: str
    """The same, in words, as ``excluded`` says it."""


@dataclass
class AveragingResult:
    group_id: bytes
    members: list[PeerID]
    index: int
    total_elements: int
    averaged_elements: int = 0
    included_elements: int = 0
    """Values averaged with our own data in them (a reducer may leave our data out of a chunk:
    we were late, or screened out; then that chunk's mean lands without it)."""
    column_groups: int = 0
    """In a round of several groups: the most groups that a column of the slots we reduced
    averaged over (0: we reduced no slot, or no column formed: no other group met ours)."""
    left_out: list[tuple[int, int]] = field(default_factory=list)
    """The averaged ranges whose mean lacks our data (chunks, in the order they landed)."""
    missing: list[tuple[int, int]] = field(default_factory=list)
    excluded: dict[PeerID, str] = field(default_factory=dict)
    parts: list[int] = field(default_factory=list)
    """How many values each member reduced (the load-balancing plan, in member order)."""
    group_weight: float = 0.0
    """The total weight the averages were taken over (the smallest seen, if parts differ)."""
    values_by_weight: dict[float, int] = field(default_factory=dict)
    """How many values were averaged over each total weight (a chunk that screened a sender out
    was averaged over less than the others)."""
    errors: list[str] = field(default_factory=list)
    failed_reducers: list[PeerID] = field(default_factory=list)
    """Members whose part could not be fetched from them (they died, stalled or refused)."""
    seconds: float = 0.0
    bytes_sent: int = 0
    """Chunk bytes this member sent: its data to the reducers, its part's means back to them,
    and in a round of several groups what its slots' columns sent (stream framing and
    commitments not counted)."""
    bytes_received: int = 0
    """Chunk bytes this member received, counted alike."""
    weights: dict[PeerID, float] = field(default_factory=dict)
    """The weight each sender claimed, as our part's reducer received it (senders it left out
    not listed; empty when we reduced no part)."""
    capped: dict[PeerID, float] = field(default_factory=dict)
    """Senders whose claimed weight was above the bound (``AggregationConfig.weight_ratio_limit``)
    in some chunk of our part: the least weight it counted with there. Not a finding."""
    alignments: dict[PeerID, Alignment] = field(default_factory=dict)
    """Every sender to our part, screened out or not: its claim and how far its chunks went along
    the others' (``robust.alignment``); empty when we reduced no part."""
    findings: list[Finding] = field(default_factory=list)
    """What this member found against others in this round (see ``Finding``); empty when all were
    honest, and never a reason by itself for ``complete`` to be False (``excluded`` is that)."""

    def failed_members(self) -> set[PeerID]:
        """Everyone who let this round down: left out as a sender, or failed as a reducer."""
        return set(self.excluded) | set(self.failed_reducers)

    @property
    def complete(self) -> bool:
        return (
            self.averaged_elements == self.total_elements
            and not self.missing
            and not self.excluded
            and not self.errors
        )

    @property
    def held_weight(self) -> float:
        """The weight that at least half of the averaged values were averaged over: the samples
        that reached the round. A sender that brought nothing (killed since its report) is missing
        from every chunk and lowers it; a chunk or two averaged over less (an honest sender's
        sparse embedding rows screened out) cannot, and neither can one reducer claiming more for
        its own part than the others saw, as long as its part is under half of the vector.
        0 when nothing was averaged."""
        ordered = sorted(self.values_by_weight.items())
        half = sum(count for _, count in ordered) / 2
        seen = 0
        for weight, count in ordered:
            seen += count
            if seen >= half:
                return weight
        return 0.0

    @property
    def averaged_fraction(self) -> float:
        return self.averaged_elements / self.total_elements if self.total_elements else 1.0

    def summary(self) -> str:
        if self.complete:
            return f"averaged all {self.total_elements} values over {len(self.members)} peers"
        parts = [f"averaged {self.averaged_fraction:.1%} of {self.total_elements} values"]
        if self.missing:
            parts.append(f"{len(self.missing)} ranges kept local values")
        if self.excluded:
            parts.append(
                "left out: " + ", ".join(f"{p.short()} ({why})" for p, why in self.excluded.items())
            )
        parts.extend(self.errors)
        return "; ".join(parts)
