"""The verified round: verification wrapped around a round's transfer, and kept for verifiers.

``RoundVerification`` is the transfer's hooks (``RoundHooks``) when the plan says reducers are
verified. As a sender it commits to each chunk before it leaves (``SenderLedger``); as a reducer it
checks those commitments as chunks arrive and seals its part once it is reduced (``ReducerLedger``);
as a receiver it keeps each reducer's seal, refusing ones that are malformed or not signed. After the
transfer (``conclude``) it checks the parts its coin chose (``verifier``) and compares every seal the
members it asked hold with its own: two seals that one reducer signed differently for the same part
prove that it told members different things. A part whose reducer it caught is not used: ``repairs``
says what replaces it (the recomputed aggregate where it has one, else its own input, as when a
reducer fails).

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
from typing import TYPE_CHECKING

from core.averaging.config import VerificationConfig
from core.averaging.messages import (
    InputCommitment,
    PartSeal,
    ReduceSummary,
    SealStamp,
    VerifyReply,
    VerifyRequest,
)
from core.averaging.result import Finding
from core.averaging.robust.aggregation import AggregationConfig
from core.averaging.round.checks import (
    COMMITMENT_MISMATCH,
    REDUCER_EQUIVOCATION,
    REDUCER_MISMATCH,
    choose_checks,
    pick_chunks,
)
from core.averaging.round.hooks import RoundHooks
from core.averaging.round.plan import RoundPlan
from core.averaging.round.reducer import ChunkResult
from core.averaging.round.tensors import Span
from core.averaging.round.transfer import Transfer
from core.averaging.verified.commitments import (
    ReducerLedger,
    SenderLedger,
    malformed_seal,
    seal_digest,
    seal_signed,
    stamp_signed,
    values_digest,
)
from core.averaging.verified.repairs import Repair, put_back
from core.averaging.verified.verifier import PartCheck, verify_part
from core.codecs.arrays import F32
from core.codecs.chunks import decode
from core.net.errors import InvalidRequestError, PermissionDeniedError, ResourceExhaustedError
from core.net.wire.stream import Stream
from core.trust.peer_id import PeerID

if TYPE_CHECKING:
    from core.net.host.host import Host


class RoundVerification(RoundHooks):
    commits = True

    def __init__(
        self,
        host: Host,
        plan: RoundPlan,
        *,
        config: VerificationConfig,
        aggregation: AggregationConfig,
    ) -> None:
        self.host = host
        self.plan = plan
        self.config = config
        self.aggregation = aggregation
        index = plan.index
        self.sender = (
            SenderLedger(host.identity, plan.group_id, index, plan.weight)
            if plan.weight > 0
            else None
        )
        self.reducer = (
            ReducerLedger(host.identity, plan.group_id, index, plan.peers)
            if plan.spans[index]
            else None
        )
        self.seals: dict[int, PartSeal] = {}
        self.findings: list[Finding] = []
        self._own_seal: asyncio.Future[PartSeal] = asyncio.get_running_loop().create_future()
        self._used: list[frozenset[int] | None] = [None] * len(plan.spans[index])
        self._asked: Counter[PeerID] = Counter()
        self._checked: dict[int, PartCheck] = {}

    # ---- the transfer's hooks: as a sender and as a reducer ------------------------------------

    def commit(self, part: int, chunk: int, data: bytes | memoryview) -> InputCommitment:
        assert self.sender is not None, "a member without weight sends nothing"
        return self.sender.commit(part, chunk, data)

    async def before_send(
        self, stream: Stream, part: int, chunk: int, data: bytes | memoryview
    ) -> None:
        # signed before the reducer has it: what it aggregates is what we vouch for
        await stream.send(self.commit(part, chunk, data).to_wire())

    def own_input(self, chunk: int, values: F32, weight: float) -> None:
        if self.sender is not None and self.reducer is not None:
            self.reducer.own(chunk, weight, self.sender.keep_own(self.plan.index, chunk, values))

    async def before_take(self, stream: Stream) -> InputCommitment | None:
        return InputCommitment.from_wire(await stream.recv_message())

    def accept(
        self,
        sender: int,
        weight: float,
        commitment: InputCommitment | None,
        data: bytes | memoryview,
    ) -> str | None:
        assert self.reducer is not None
        if commitment is None:
            return None
        refused = self.reducer.accept(sender, weight, commitment, data)
        if refused is not None:
            peer = self.plan.members[sender].peer
            chunk = commitment.chunk
            self.findings.append(
                Finding(peer, self.plan.index, chunk, COMMITMENT_MISMATCH, 1.0, refused)
            )
        return refused

    def reduced(self, chunk: int, outcome: ChunkResult) -> None:
        """A chunk of our part is finished (told by whoever sees it first); after the last one the
        part is sealed."""
        assert self.reducer is not None
        if self._used[chunk] is not None:
            return
        self.reducer.result(chunk, outcome.values)
        self._used[chunk] = outcome.inputs
        if all(u is not None for u in self._used):
            self.seal_now()

    def seal_now(self) -> None:
        """Seal the part as it stands (at its end, or when the round gives up: chunks not finished
        are sealed as not averaged), so that no receiver waits for a seal that cannot come."""
        if self.reducer is None or self._own_seal.done():
            return
        seal = self.reducer.seal([u or frozenset() for u in self._used])
        self.seals[self.plan.index] = seal
        self._own_seal.set_result(seal)

    async def seal(self) -> PartSeal | None:
        return await asyncio.shield(self._own_seal)

    # ---- the transfer's hooks: as a receiver -----------------------------------------------------

    def summarized(self, part: int, summary: ReduceSummary) -> None:
        """A reducer's seal, from its summary: kept if it is sound, a finding if not."""
        seal = summary.seal
        members = self.plan.members
        reason = malformed_seal(seal, len(self.plan.spans[part]), len(members))
        reducer = members[part].peer
        if reason is None and seal is not None:
            if seal_signed(reducer, self.plan.group_id, part, seal):
                self.seals[part] = seal
                return
            reason = "its seal's signature does not verify"
        self.findings.append(Finding(reducer, part, -1, REDUCER_MISMATCH, 1.0, reason or ""))

    def stamps(self) -> list[SealStamp]:
        gid = self.plan.group_id
        return [
            SealStamp(part, seal_digest(gid, part, seal), seal.signature)
            for part, seal in sorted(self.seals.items())
        ]

    # ---- after the transfer ----------------------------------------------------------------------

    async def conclude(self, transfer: Transfer) -> None:
        """Before the caller gets its tensors back (a verifier compares the values it received):
        seal what is left, check the parts our coin picks, put back what a liar sent us."""
        self.seal_now()
        result = transfer.result
        failed = frozenset(result.failed_members())
        result.findings.extend(await self.verify(transfer.tensors.view, failed))
        if self.plan.index in self.plan.receivers:
            put_back(transfer, self.repairs(), self.distrusted())

    async def verify(
        self,
        received: Callable[[Span], F32],
        failed: frozenset[PeerID],
        rng: random.Random | None = None,
    ) -> list[Finding]:
        """Check the parts our coin picks; the findings (also those about seals) are returned."""
        plan = self.plan
        if plan.index not in plan.verifiers:
            return self.findings
        sealed = [p for p in plan.checks(plan.index) if p in self.seals]
        rng = rng or random.SystemRandom()
        checks = choose_checks(
            plan.index,
            sealed,
            [len(spans) for spans in plan.spans],
            pairs=plan.check_pairs,
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
                group=plan.group,
                me=plan.index,
                part=check.part,
                spans=plan.spans[check.part],
                seal=self.seals[check.part],
                chunks=check.chunks,
                received=_reader(received, plan.spans[check.part]),
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
        members = self.plan.members
        return sorted(
            {
                f.part
                for f in self.findings
                if f.statistic in (REDUCER_MISMATCH, REDUCER_EQUIVOCATION)
                and f.part != self.plan.index
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
            for c, span in enumerate(self.plan.spans[part]):
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
        seal, spans = self.seals[part], self.plan.spans[part]
        for c in pick_chunks(rng, len(spans), max(1, self.config.chunks)):
            if seal.results[c] and values_digest(received(spans[c])) != seal.results[c]:
                reason = f"chunk {c} of part {part} it sent us is not the one its seal names"
                reducer = self.plan.members[part].peer
                self.findings.append(Finding(reducer, part, c, REDUCER_MISMATCH, 1.0, reason))
                return

    def _compare(self, gathered: dict[int, list[SealStamp]]) -> None:
        """Two seals signed by one reducer for one part, with different contents: equivocation."""
        gid = self.plan.group_id
        ours = {part: seal_digest(gid, part, seal) for part, seal in self.seals.items()}
        told = {f.part for f in self.findings if f.statistic == REDUCER_EQUIVOCATION}
        for member, stamps in sorted(gathered.items()):
            for stamp in stamps:
                mine = ours.get(stamp.part)
                if mine is None or stamp.digest == mine or stamp.part in told:
                    continue
                reducer = self.plan.members[stamp.part].peer
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
        members = self.plan.peers
        if requester not in members:
            raise PermissionDeniedError("only members of the round may verify it")
        if not 0 <= request.part < len(members):
            raise InvalidRequestError(f"there is no part {request.part} in that round")
        chunks = request.chunks
        count = len(self.plan.spans[request.part])
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


def _reader(received: Callable[[Span], F32], spans: Sequence[Span]) -> Callable[[int], F32]:
    return lambda chunk: received(spans[chunk])
