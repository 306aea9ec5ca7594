"""RoundHooks: the points at which a round may do more than move bytes; these do nothing.

``Transfer`` calls them at fixed points of the exchange, the same in every round. A wrapper overrides
them to add a concern around the transfer without the transfer knowing it: the verified round
(``core.averaging.verified``) commits before sending, checks commitments as chunks arrive, seals what
it reduced and keeps the seals reducers send back.
"""

from __future__ import annotations

from core.averaging.messages import InputCommitment, PartSeal, ReduceSummary
from core.averaging.round.reducer import ChunkResult
from core.codecs.arrays import F32
from core.net.wire.stream import Stream


class RoundHooks:
    commits: bool = False
    """Senders send a header before each chunk (``before_send``; read by ``before_take``) and say so
    in their request (both sides must agree), and a reducer may read what it accepted after the chunk
    is aggregated, so chunks are not received into recycled buffers."""

    def own_input(self, chunk: int, values: F32, weight: float) -> None:
        """Our own input to a chunk of our own part, before the reducer takes it."""

    async def before_send(
        self, stream: Stream, part: int, chunk: int, data: bytes | memoryview
    ) -> None:
        """Just before ``data``, our chunk ``chunk`` of ``part``, leaves on ``stream``."""

    async def before_take(self, stream: Stream) -> InputCommitment | None:
        """Just before a sender's chunk is received: the header it sent ahead of it, if any."""
        return None

    def accept(
        self,
        sender: int,
        weight: float,
        commitment: InputCommitment | None,
        data: bytes | memoryview,
    ) -> str | None:
        """A sender's chunk arrived (after ``commitment``, its header): why to refuse it, or None."""
        return None

    def reduced(self, chunk: int, outcome: ChunkResult) -> None:
        """A chunk of our part is finished (told by whoever sees it first, and again by the rest)."""

    async def seal(self) -> PartSeal | None:
        """What our part's summary carries to every receiver, once the part is finished."""
        return None

    def summarized(self, part: int, summary: ReduceSummary) -> None:
        """The reducer of ``part`` sent its summary, after the last averaged chunk."""
