"""One member's part in verifying a round's reducers, and the rounds kept for verifiers.

``RoundVerification`` is created with a round's ``AllReduce`` when verification is on. As a sender it
commits to each chunk (``SenderLedger``); as a reducer it checks commitments and seals its part
(``ReducerLedger``); as a receiver it keeps each reducer's seal, refusing ones that are malformed or
not signed. After the all-reduce it checks the parts its coin chose (``verifier``) and compares every
seal the members it asked hold with its own: two seals that one reducer signed differently for the
same part prove that it told members different things. A part whose reducer it caught is not used:
``repairs`` says what replaces it (the recomputed aggregate where it has one, else its own input, as
when a reducer fails).

Its inputs stay available to verifiers for ``timeout`` seconds after the round (``retained``),
so that members who are not checking anything return at once: only verifiers wait. A member may
fetch from another at most one request per part per round, and at most ``chunks`` chunks each, so
nobody can make a member upload more than a round's worth.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.averaging.messages import (
    GroupSpec,
    InputCommitment,
    PartSeal,
    SealStamp,
    VerifyReply,
    VerifyRequest,
)
from core.averaging.result import Finding
from core.averaging.robust.aggregation import AggregationConfig
from core.averaging.round.tensors import Span
from core.averaging.verification import (
    COMMITMENT_MISMATCH,
    REDUCER_EQUIVOCATION,
    REDUCER_MISMATCH,
    VerificationConfig,
    choose_checks,
    pick_chunks,
    possible_checks,
)
from core.averaging.verified.commitments import (
    ReducerLedger,
    SenderLedger,
    malformed_seal,
    seal_digest,
    seal_signed,
    stamp_signed,
    values_digest,
)
from core.averaging.verified.verifier import PartCheck, verify_part
from core.codecs.arrays import F32
from core.codecs.chunks import decode
from core.net.errors import InvalidRequestError, PermissionDeniedError, ResourceExhaustedError
from core.net.wire.stream import Stream
from core.trust.peer_id import PeerID

if TYPE_CHECKING:
    from core.net.host.host import Host


@dataclass(frozen=True)
class Repair:
    """What to put in place of one chunk a lying reducer sent."""

    part: int
    chunk: int
    values: F32 | None
    """The recomputed aggregate, or our own input; None when we sent none (nothing to go back to)."""
    averaged: bool
    """Whether ``values`` is an aggregate of the group's inputs (else the chunk was not averaged)."""


class RoundVerification:
    def __init__(
        self,
        host: Host,
        group: GroupSpec,
        index: int,
        spans: Sequence[list[Span]],
        *,
        weight: float,
        config: VerificationConfig,
        aggregation: AggregationConfig,
    ) -> None:
        self.host = host
        self.group = group
        self.index = index
        self.spans = spans
        self.config = config
        self.aggregation = aggregation
        members = group.members
        me = members[index]
        self.sender = (
            SenderLedger(host.identity, group.group_id, index, weight) if weight > 0 else None
        )
        self.reducer = (
            ReducerLedger(host.identity, group.group_id, index, [m.peer for m in members])
            if spans[index]
            else None
        )
        self.verifies = not me.auxiliary  # auxiliary members take no results, so hold no seals
        self.seals: dict[int, PartSeal] = {}
        self.findings: list[Finding] = []
        self._own_seal: asyncio.Future[PartSeal] = asyncio.get_running_loop().create_future()
        self._used: list[frozenset[int] | None] = [None] * len(spans[index])
        self._asked: Counter[PeerID] = Counter()
        self._checked: dict[int, PartCheck] = {}

    # ---- as a sender and as a reducer ------------------------------------------------------------

    def commit(self, part: int, chunk: int, data: bytes | memoryview) -> InputCommitment:
        assert self.sender is not None, "a member without weight sends nothing"
        return self.sender.commit(part, chunk, data)

    def own_input(self, chunk: int, values: F32, weight: float) -> None:
        if self.sender is not None and self.reducer is not None:
            self.reducer.own(chunk, weight, self.sender.keep_own(self.index, chunk, values))

    def accept(
        self, sender: int, weight: float, commitment: InputCommitment, data: bytes | memoryview
    ) -> str | None:
        assert self.reducer is not None
        refused = self.reducer.accept(sender, weight, commitment, data)
        if refused is not None:
            peer = self.group.members[sender].peer
            chunk = commitment.chunk
            self.findings.append(
                Finding(peer, self.index, chunk, COMMITMENT_MISMATCH, 1.0, refused)
            )
        return refused

    def own_result(self, chunk: int, values: F32 | None, used: frozenset[int]) -> None:
        """A chunk of our part is finished (told by whoever sees it first); after the last one the
        part is sealed."""
        assert self.reducer is not None
        if self._used[chunk] is not None:
            return
        self.reducer.result(chunk, values)
        self._used[chunk] = used
        if all(u is not None for u in self._used):
            self.seal_now()

    def seal_now(self) -> None:
        """Seal the part as it stands (at its end, or when the round gives up: chunks not finished
        are sealed as not averaged), so that no receiver waits for a seal that cannot come."""
        if self.reducer is None or self._own_seal.done():
            return
        seal = self.reducer.seal([u or frozenset() for u in self._used])
        self.seals[self.index] = seal
        self._own_seal.set_result(seal)

    async def own_seal(self) -> PartSeal:
        return await asyncio.shield(self._own_seal)

    # ---- as a receiver ---------------------------------------------------------------------------

    def take_seal(self, part: int, seal: PartSeal | None) -> None:
        """A reducer's seal, from its summary: kept if it is sound, a finding if not."""
        reason = malformed_seal(seal, len(self.spans[part]), len(self.group.members))
        reducer = self.group.members[part].peer
        if reason is None and seal is not None:
            if seal_signed(reducer, self.group.group_id, part, seal):
                self.seals[part] = seal
                return
            reason = "its seal's signature does not verify"
        self.findings.append(Finding(reducer, part, -1, REDUCER_MISMATCH, 1.0, reason or ""))

    def stamps(self) -> list[SealStamp]:
        gid = self.group.group_id
        return [
            SealStamp(part, seal_digest(gid, part, seal), seal.signature)
            for part, seal in sorted(self.seals.items())
        ]

    # ---- after the all-reduce --------------------------------------------------------------------

    async def verify(
        self,
        received: Callable[[Span], F32],
        failed: frozenset[PeerID],
        rng: random.Random | None = None,
    ) -> list[Finding]:
        """Check the parts our coin picks; the findings (also those about seals) are returned."""
        if not self.verifies:
            return self.findings
        members = self.group.members
        counts = [len(spans) for spans in self.spans]
        verifiers = [i for i, m in enumerate(members) if not m.auxiliary]
        sealed = sorted(p for p in self.seals if p != self.index)
        rng = rng or random.SystemRandom()
        checks = choose_checks(
            self.index,
            sealed,
            counts,
            pairs=possible_checks(counts, verifiers),
            config=self.config,
            rng=rng,
        )
        checked = {check.part for check in checks}
        for part in sealed:
            if part not in checked:
                self._spot_check(part, received, rng)
        jobs = [
            PartCheck(
                host=self.host,
                group=self.group,
                me=self.index,
                part=check.part,
                spans=self.spans[check.part],
                seal=self.seals[check.part],
                chunks=check.chunks,
                received=_reader(received, self.spans[check.part]),
                ledger=self.sender,
                aggregation=self.aggregation,
                config=self.config,
                failed=failed,
            )
            for check in checks
        ]
        for job in await asyncio.gather(*(verify_part(job) for job in jobs)):
            self.findings.extend(job.findings)
            self._compare(job.stamps)
            self._checked[job.part] = job
        return self.findings

    def distrusted(self) -> list[int]:
        """Parts (not our own) whose reducer we proved dishonest in this round."""
        members = self.group.members
        return sorted(
            {
                f.part
                for f in self.findings
                if f.statistic in (REDUCER_MISMATCH, REDUCER_EQUIVOCATION)
                and f.part != self.index
                and 0 <= f.part < len(members)
                and f.peer == members[f.part].peer
            }
        )

    def repairs(self) -> list[Repair]:
        """For each chunk of a distrusted part that we did not recompute and find right: the values
        to use instead of the reducer's. A lie we caught is never applied here; members that did
        not check the part apply it once, and the ban keeps the liar out of later rounds."""
        repairs = []
        for part in self.distrusted():
            job = self._checked.get(part)
            for c, span in enumerate(self.spans[part]):
                if job is not None and c in job.confirmed:
                    continue
                if job is not None and c in job.corrected:
                    repairs.append(Repair(part, c, job.corrected[c], averaged=True))
                    continue
                sent = self.sender.sent(part, c) if self.sender is not None else None
                own = None if sent is None else decode(span.codec, sent, span.count)
                repairs.append(Repair(part, c, own, averaged=False))
        return repairs

    def _spot_check(self, part: int, received: Callable[[Span], F32], rng: random.Random) -> None:
        """A few chunks of a part nobody asked us to check: are the values it sent us the ones its
        seal names? (A reducer that sends one member other values than the rest, under one seal.)
        Hashing our own copy only: no traffic."""
        seal, spans = self.seals[part], self.spans[part]
        for c in pick_chunks(rng, len(spans), max(1, self.config.chunks)):
            if seal.results[c] and values_digest(received(spans[c])) != seal.results[c]:
                reason = f"chunk {c} of part {part} it sent us is not the one its seal names"
                reducer = self.group.members[part].peer
                self.findings.append(Finding(reducer, part, c, REDUCER_MISMATCH, 1.0, reason))
                return

    def _compare(self, gathered: dict[int, list[SealStamp]]) -> None:
        """Two seals signed by one reducer for one part, with different contents: equivocation."""
        gid = self.group.group_id
        ours = {part: seal_digest(gid, part, seal) for part, seal in self.seals.items()}
        told = {f.part for f in self.findings if f.statistic == REDUCER_EQUIVOCATION}
        for member, stamps in sorted(gathered.items()):
            for stamp in stamps:
                mine = ours.get(stamp.part)
                if mine is None or stamp.digest == mine or stamp.part in told:
                    continue
                reducer = self.group.members[stamp.part].peer
                if stamp_signed(reducer, stamp.digest, stamp.signature):
                    told.add(stamp.part)
                    self.findings.append(
                        Finding(
                            reducer,
                            stamp.part,
                            -1,
                            REDUCER_EQUIVOCATION,
                            1.0,
                            f"signed different seals of part {stamp.part} for us and for "
                            f"member {member}",
                        )
                    )

    # ---- serving verifiers -----------------------------------------------------------------------

    async def serve(self, requester: PeerID, request: VerifyRequest, stream: Stream) -> VerifyReply:
        """Hand a fellow member our inputs to one part (raw data, one chunk after another)."""
        members = [m.peer for m in self.group.members]
        if requester not in members:
            raise PermissionDeniedError("only members of the round may verify it")
        if not 0 <= request.part < len(members):
            raise InvalidRequestError(f"there is no part {request.part} in that round")
        chunks = request.chunks
        count = len(self.spans[request.part])
        if len(set(chunks)) != len(chunks) or any(not 0 <= c < count for c in chunks):
            raise InvalidRequestError(f"part {request.part} has no such chunks")
        if self.config.chunks and len(chunks) > self.config.chunks:
            raise InvalidRequestError(f"at most {self.config.chunks} chunks per check")
        self._asked[requester] += 1
        if self._asked[requester] > len(members):
            raise ResourceExhaustedError("one request per part per round")
        kept = [self.sender.sent(request.part, c) if self.sender else None for c in chunks]
        missing = [c for c, data in zip(chunks, kept, strict=True) if data is None]
        if missing:
            raise InvalidRequestError(
                f"we sent no input to chunk {missing[0]} of part {request.part}"
            )
        for data in kept:
            assert data is not None
            await stream.send_data(data)
        return VerifyReply(self.stamps())

    def release(self) -> None:
        if self.sender is not None:
            self.sender.release()


def _reader(received: Callable[[Span], F32], spans: list[Span]) -> Callable[[int], F32]:
    return lambda chunk: received(spans[chunk])
