"""Checking one reducer's part: fetch the committed inputs, recompute, compare.

The verifier holds the reducer's signed seal and the values the reducer sent it. For the chunks it
checks it makes sure, in order:

1. that its own values are the ones the seal names (else the reducer sent it something it did not
   sign for);
2. that every sender's row in the seal carries that sender's signature (else the reducer invented
   an input);
3. that every member's input, fetched from that member (our own from our ledger), hashes to its row
   (else the member swapped its data after committing: it is the liar, not the reducer — or, for
   the reducer's own row, the reducer is);
4. that ``aggregate_chunk`` over those inputs, encoded in the codec the part's means go back in
   (a sparse codec's: denser than its inputs') and decoded as every member does, gives the
   reducer's values within the tolerance (else the reducer lied).

A member that does not hand over its inputs is reported (``verification_refused``) unless it already
failed in the round; a chunk it fed is then not recomputed. Inputs are decoded exactly as the reducer
decoded them, so codecs change nothing but the final comparison, which allows one codec step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from core.averaging.config import VerificationConfig
from core.averaging.messages import VERIFY, GroupSpec, InputRow, PartSeal, SealStamp, VerifyRequest
from core.averaging.result import Finding
from core.averaging.robust.aggregation import AggregationConfig, aggregate_chunk
from core.averaging.round.checks import (
    COMMITMENT_MISMATCH,
    REDUCER_MISMATCH,
    VERIFICATION_REFUSED,
)
from core.averaging.round.tensors import Span
from core.averaging.verified.commitments import SenderLedger, digest, row_signed, values_digest
from core.codecs import NONE, Codec
from core.codecs.arrays import F32
from core.codecs.chunks import decode, encode, encoded_size, flip_edges, max_abs_error
from core.net.errors import NetError, RpcError
from core.trust.peer_id import PeerID
from core.util.errors import WireFormatError

if TYPE_CHECKING:
    from core.net.host.host import Host


@dataclass
class PartCheck:
    host: Host
    group: GroupSpec
    me: int
    part: int
    spans: Sequence[Span]
    seal: PartSeal
    chunks: tuple[int, ...]
    received: Callable[[int], F32]
    """Our values of a chunk of this part (what the reducer sent us)."""
    ledger: SenderLedger | None
    """What we sent (our own input to this part is taken from here)."""
    aggregation: AggregationConfig
    config: VerificationConfig
    failed: frozenset[PeerID]
    """Members that already failed in the round: their silence now is no news."""
    findings: list[Finding] = field(default_factory=list)
    stamps: dict[int, list[SealStamp]] = field(default_factory=dict)
    """Each member's copies of the seals, as it handed them over with its inputs."""
    confirmed: set[int] = field(default_factory=set)
    """Chunks whose values we recomputed and found right."""
    corrected: dict[int, F32] = field(default_factory=dict)
    """Chunks the reducer lied about: the aggregate their sealed inputs give (what we use instead)."""

    def find(self, peer: int, chunk: int, statistic: str, value: float, reason: str) -> None:
        accused = self.group.members[peer].peer
        self.findings.append(Finding(accused, self.part, chunk, statistic, value, reason))


async def verify_part(check: PartCheck) -> PartCheck:
    """Run the checks above; findings and the stamps gathered are left in ``check``."""
    seal = check.seal
    chunks = [c for c in check.chunks if seal.results[c]]  # unaveraged chunks have nothing to check
    chunks = [c for c in chunks if _received_as_sealed(check, c)]
    if not chunks or not _rows_signed(check):
        return check
    wanted: dict[int, list[int]] = {}
    for c in chunks:
        for sender in seal.used[c]:
            wanted.setdefault(sender, []).append(c)
    asked = sorted(wanted.items())
    fetched = await asyncio.gather(*(_inputs(check, sender, cs) for sender, cs in asked))
    # when no other member answered at all, the fault is as likely ours (our host is closing, our
    # link is down) as theirs: only a refusal in words, or silence amid answers, is reported
    answered = any(
        isinstance(got, list) and sender != check.me
        for (sender, _), got in zip(asked, fetched, strict=True)
    )
    inputs: dict[tuple[int, int], bytes] = {}
    for (sender, cs), got in zip(asked, fetched, strict=True):
        if isinstance(got, Refusal):
            peer = check.group.members[sender].peer
            if peer not in check.failed and (answered or got.remote):
                check.find(
                    sender,
                    -1,
                    VERIFICATION_REFUSED,
                    0.0,
                    f"did not hand over its inputs to part {check.part} for verification: "
                    f"{got.reason}",
                )
            continue
        for c, data in zip(cs, got, strict=True):
            if _as_committed(check, sender, c, data):
                inputs[(sender, c)] = data
    rows = {row.sender: row for row in seal.rows}
    for c in chunks:
        if all((s, c) in inputs for s in seal.used[c]):
            _recompute(check, c, rows, inputs)
    return check


def _received_as_sealed(check: PartCheck, c: int) -> bool:
    """Whether the values the reducer sent us for chunk ``c`` are the ones its seal names."""
    if values_digest(check.received(c)) == check.seal.results[c]:
        return True
    reason = f"chunk {c} of part {check.part} it sent us is not the one its seal names"
    check.find(check.part, c, REDUCER_MISMATCH, 1.0, reason)
    return False


def _rows_signed(check: PartCheck) -> bool:
    """Whether every sender really signed its row (the reducer's own row needs no signature)."""
    for row in check.seal.rows:
        peer = check.group.members[row.sender].peer
        if row.sender != check.part and not row_signed(peer, check.group.group_id, check.part, row):
            reason = f"its seal of part {check.part} lists inputs member {row.sender} never signed"
            check.find(check.part, -1, REDUCER_MISMATCH, 1.0, reason)
            return False
    return True


def _as_committed(check: PartCheck, sender: int, c: int, data: bytes) -> bool:
    """Whether a fetched input is the one in the seal; if not, who lied."""
    row = next(row for row in check.seal.rows if row.sender == sender)
    if digest(data) == row.digests[c]:
        return True
    if sender == check.part:
        reason = f"its own input to chunk {c} of part {check.part} is not the one it sealed"
        check.find(sender, c, REDUCER_MISMATCH, 1.0, reason)
    else:
        reason = (
            f"handed over an input to chunk {c} of part {check.part} that differs from the one "
            "it signed for the reducer"
        )
        check.find(sender, c, COMMITMENT_MISMATCH, 1.0, reason)
    return False


@dataclass(frozen=True)
class Refusal:
    reason: str
    remote: bool
    """The member itself answered with an error (rather than silence or a broken connection)."""


async def _inputs(check: PartCheck, sender: int, chunks: list[int]) -> list[bytes] | Refusal:
    """The sender's inputs to these chunks, or why we could not get them."""
    if sender == check.me:
        kept = [check.ledger.sent(check.part, c) if check.ledger else None for c in chunks]
        if any(k is None for k in kept):
            return Refusal("we kept no copy", remote=False)  # cannot be: the reducer had them
        return [k for k in kept if k is not None]
    member = check.group.members[sender]
    request = VerifyRequest(check.group.group_id, check.part, chunks)
    try:
        async with asyncio.timeout(check.config.timeout):
            async with check.host.open_stream(
                member.peer, VERIFY, request, timeout=check.config.timeout
            ) as call:
                got = []
                for c in chunks:
                    buffer = bytearray(_input_size(check, sender, c))
                    await call.stream.recv_data_into(buffer)
                    got.append(bytes(buffer))
                reply = await call.result()
    except TimeoutError:
        return Refusal(f"no answer within {check.config.timeout:g} s", remote=False)
    except RpcError as exc:
        return Refusal(_quoted(exc), remote=exc.remote)
    except (NetError, WireFormatError) as exc:
        return Refusal(_quoted(exc), remote=False)
    check.stamps[sender] = reply.stamps
    return got


def _quoted(exc: Exception) -> str:
    """An error's words, as a finding may carry them: the member wrote them, so they are cut short
    and stripped of anything unprintable (they end up in a moderator's terminal)."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(exc))
    return text if len(text) <= 120 else text[:119] + "…"


def _input_size(check: PartCheck, sender: int, chunk: int) -> int:
    span = check.spans[chunk]
    # the reducer's own input never travelled: it is kept raw
    return span.count * 4 if sender == check.part else encoded_size(span.codec, span.count)


def _recompute(
    check: PartCheck, c: int, rows: dict[int, InputRow], inputs: dict[tuple[int, int], bytes]
) -> None:
    span = check.spans[c]
    senders = check.seal.used[c]
    values = {
        s: decode(NONE if s == check.part else span.codec, inputs[(s, c)], span.count)
        for s in senders
    }
    try:
        outcome = aggregate_chunk(values, {s: rows[s].weight for s in senders}, check.aggregation)
    except ValueError as exc:
        check.find(
            check.part,
            c,
            REDUCER_MISMATCH,
            1.0,
            f"chunk {c} of part {check.part} cannot come from its sealed inputs: {exc}",
        )
        return
    got = check.received(c)
    if outcome.values is None or outcome.weight <= 0:
        check.find(
            check.part,
            c,
            REDUCER_MISMATCH,
            float("inf"),
            f"returned values for chunk {c} of part {check.part}, whose inputs give none",
        )
        return
    expected = outcome.values
    back = span.returned  # what the reducer sends back in (a sparse codec's mean: denser)
    if back is not NONE:
        expected = decode(back, encode(back, expected), span.count)
    ratio = mismatch(got, expected, back, check.config.tolerance)
    if ratio <= 1.0:
        check.confirmed.add(c)
    else:
        check.corrected[c] = expected
        check.find(
            check.part,
            c,
            REDUCER_MISMATCH,
            ratio,
            f"returned chunk {c} of part {check.part} {ratio:.3g} times the tolerance "
            "away from the aggregate of its inputs",
        )


def mismatch(got: F32, expected: F32, codec: Codec, tolerance: float) -> float:
    """How far ``got`` is from ``expected``, in units of what is allowed (above 1: a lie).

    Allowed: ``tolerance`` times the chunk's largest value (rounding differs between machines and
    summation orders), plus one step of a lossy codec (a value that rounding puts on the other side
    of a step's boundary decodes a whole step away). A sparse codec's mean (``topk``) keeps each
    block's largest values: a position one side kept and the other dropped is allowed its block's
    smallest kept magnitude besides (two values tied at the edge, the tie broken otherwise), so a
    reducer may not move, drop or add anything larger than what rounding could.
    """
    if np.array_equal(got.view(np.uint32), expected.view(np.uint32)):
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        error = float(np.max(np.abs(got - expected)))
        scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    if not (np.isfinite(error) and np.isfinite(scale)):
        return float("inf")
    allowed = tolerance * scale + 2 * max_abs_error(codec, expected)
    allowed = max(allowed, float(np.finfo(np.float32).tiny))
    edges = flip_edges(codec, expected)
    if edges is None:
        return error / allowed
    # a sparse codec: where one side kept a value and the other did not, the value may be as
    # large as its block's smallest kept one (a tie broken otherwise), and no larger
    flipped = (got != 0) != (expected != 0)
    with np.errstate(invalid="ignore", over="ignore"):
        off = np.abs(got - expected)
        room = np.where(flipped, allowed + edges, allowed)
        ratio = float(np.max(off / room))
    return ratio if np.isfinite(ratio) else float("inf")
