"""Commitments for verified reducers: what each sender signed, and what each reducer sealed.

When reducers are verified, a sender precedes every chunk it streams to a reducer with the chunk's
SHA-256 and its Ed25519 signature over the hash chain of all its chunks to that reducer so far (and
its weight). The reducer hashes what arrives and takes the chunk only if hash and signature agree,
before the chunk can go into any aggregate: so a sender cannot later claim it sent something else,
and a reducer cannot claim a sender sent something it did not (it would need the sender's key).

When its part is done, the reducer signs a *seal*: each sender's row (weight, chunk hashes, the
sender's last signature), which senders went into each chunk, and the hash of each aggregate it
returned. Every receiver gets the same seal; a reducer that signs two different seals for one part
has equivocated, and anyone holding both can show it.

Hashes are over the bytes on the wire (encoded), except the reducer's own input, which never travels
and is hashed as raw float32; results are hashed as the decoded float32 values every member holds.
Signed payloads are msgpack arrays with a domain string, so no signature can be replayed elsewhere.
``malformed_seal`` checks a received seal's shape before anything indexes into it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.averaging.messages import InputCommitment, InputRow, PartSeal
from core.codecs.arrays import F32
from core.trust.identity import Identity
from core.trust.peer_id import PeerID
from core.util.msgpack_codec import pack

DIGEST_BYTES = 32
CHAIN_START = bytes(DIGEST_BYTES)
_COMMIT_DOMAIN = "barnraise/averaging/input/v1"
_SEAL_DOMAIN = "barnraise/averaging/seal/v1"


def digest(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.sha256(data).digest()


def values_digest(values: F32) -> bytes:
    """The hash of float32 values as every member holds them (results, the reducer's own input)."""
    return digest(values.data.cast("B"))


def extend_chain(chain: bytes, chunk_digest: bytes) -> bytes:
    """One step of the hash chain that a sender's signature covers (constant work per chunk)."""
    return digest(chain + chunk_digest)


def chain_of(digests: Sequence[bytes]) -> bytes:
    chain = CHAIN_START
    for item in digests:
        chain = extend_chain(chain, item)
    return chain


def commitment_payload(
    group_id: bytes, part: int, sender: int, *, weight: float, count: int, chain: bytes
) -> bytes:
    """What a sender signs after its ``count``-th chunk to ``part``."""
    return pack([_COMMIT_DOMAIN, group_id, part, sender, float(weight), count, chain])


def row_signed(peer: PeerID, group_id: bytes, part: int, row: InputRow) -> bool:
    """Whether ``peer`` (the row's sender) really signed these chunk hashes and this weight."""
    if not row.digests:
        return True  # nothing sent, nothing to vouch for
    payload = commitment_payload(
        group_id,
        part,
        row.sender,
        weight=row.weight,
        count=len(row.digests),
        chain=chain_of(row.digests),
    )
    return peer.verify(row.signature, payload)


def seal_digest(group_id: bytes, part: int, seal: PartSeal) -> bytes:
    """The hash a reducer signs: everything in the seal but the signature itself."""
    rows = [row.to_wire() for row in seal.rows]
    return digest(pack([_SEAL_DOMAIN, group_id, part, rows, seal.used, seal.results]))


def seal_signed(peer: PeerID, group_id: bytes, part: int, seal: PartSeal) -> bool:
    return peer.verify(seal.signature, seal_digest(group_id, part, seal))


def stamp_signed(peer: PeerID, seal_hash: bytes, signature: bytes) -> bool:
    """A seal known only by its digest (a stamp another member passed on)."""
    return peer.verify(signature, seal_hash)


class SenderLedger:
    """What this member sent each reducer, kept (copied: tensors are averaged in place) until the
    round's verification is over, so that a verifier can fetch it."""

    def __init__(self, identity: Identity, group_id: bytes, sender: int, weight: float) -> None:
        self._identity = identity
        self._group_id = group_id
        self._sender = sender
        self._weight = weight
        self._sent: dict[tuple[int, int], bytes] = {}
        self._chains: dict[int, tuple[int, bytes]] = {}

    def commit(self, part: int, chunk: int, data: bytes | memoryview) -> InputCommitment:
        """Keep a chunk about to go to ``part``'s reducer; the commitment to send before it."""
        kept = bytes(data)
        self._sent[(part, chunk)] = kept
        count, chain = self._chains.get(part, (0, CHAIN_START))
        if chunk != count:
            raise ValueError(f"chunk {chunk} of part {part} committed out of order")
        chunk_digest = digest(kept)
        chain = extend_chain(chain, chunk_digest)
        self._chains[part] = (count + 1, chain)
        payload = commitment_payload(
            self._group_id, part, self._sender, weight=self._weight, count=count + 1, chain=chain
        )
        return InputCommitment(chunk, chunk_digest, self._identity.sign(payload))

    def keep_own(self, part: int, chunk: int, values: F32) -> bytes:
        """Keep our own input to our own part (raw float32, it never travels); its hash."""
        kept = values.tobytes()
        self._sent[(part, chunk)] = kept
        return digest(kept)

    def sent(self, part: int, chunk: int) -> bytes | None:
        return self._sent.get((part, chunk))

    def release(self) -> None:
        self._sent.clear()


@dataclass
class _Row:
    weight: float
    digests: list[bytes] = field(default_factory=list)
    chain: bytes = CHAIN_START
    signature: bytes = b""


class ReducerLedger:
    """The reducer's side: checks each commitment as its chunk arrives, and seals the part."""

    def __init__(
        self, identity: Identity, group_id: bytes, part: int, members: Sequence[PeerID]
    ) -> None:
        self._identity = identity
        self._group_id = group_id
        self._part = part
        self._members = list(members)
        self._rows: dict[int, _Row] = {}
        self._results: dict[int, bytes] = {}

    def accept(
        self,
        sender: int,
        weight: float,
        commitment: InputCommitment,
        data: bytes | memoryview,
    ) -> str | None:
        """Record a sender's chunk; the reason to refuse it, or None when it is what it signed."""
        row = self._rows.setdefault(sender, _Row(weight))
        expected = len(row.digests)
        if commitment.chunk != expected:
            return f"it committed to chunk {commitment.chunk} when chunk {expected} was due"
        chunk_digest = digest(data)
        if chunk_digest != commitment.digest:
            return f"its chunk {expected} does not match the hash it committed to"
        chain = extend_chain(row.chain, chunk_digest)
        payload = commitment_payload(
            self._group_id, self._part, sender, weight=weight, count=expected + 1, chain=chain
        )
        if not self._members[sender].verify(commitment.signature, payload):
            return f"its signature on chunk {expected} does not verify"
        row.digests.append(chunk_digest)
        row.chain = chain
        row.signature = commitment.signature
        return None

    def own(self, chunk: int, weight: float, chunk_digest: bytes) -> None:
        """Our own input to our part (our word is its only warrant: we are the one checked)."""
        row = self._rows.setdefault(self._part, _Row(weight))
        if chunk == len(row.digests):
            row.digests.append(chunk_digest)

    def result(self, chunk: int, values: F32 | None) -> None:
        self._results[chunk] = b"" if values is None else values_digest(values)

    def seal(self, used: Sequence[frozenset[int]]) -> PartSeal:
        """Sign the part's account; ``used`` is each chunk's aggregated senders, in chunk order."""
        rows = [
            InputRow(sender, row.weight, list(row.digests), row.signature)
            for sender, row in sorted(self._rows.items())
            if row.digests
        ]
        results = [self._results.get(i, b"") for i in range(len(used))]
        unsigned = PartSeal(rows, [sorted(chunk) for chunk in used], results, b"")
        signature = self._identity.sign(seal_digest(self._group_id, self._part, unsigned))
        return PartSeal(unsigned.rows, unsigned.used, unsigned.results, signature)


def malformed_seal(seal: PartSeal | None, chunks: int, members: int) -> str | None:
    """What is wrong with a seal's shape, or None (its signature is checked separately)."""
    if seal is None:
        return "it sent no seal of its part"
    if len(seal.used) != chunks or len(seal.results) != chunks:
        return "its seal does not have one entry per chunk"
    if any(r and len(r) != DIGEST_BYTES for r in seal.results):
        return "its seal has malformed result hashes"
    rows: dict[int, int] = {}
    for row in seal.rows:
        problem = _malformed_row(row, rows, chunks, members)
        if problem:
            return problem
        rows[row.sender] = len(row.digests)
    for c, senders in enumerate(seal.used):
        if sorted(set(senders)) != senders or any(rows.get(s, 0) <= c for s in senders):
            return f"its seal says chunk {c} used inputs it has no hash for"
    return None


def _malformed_row(row: InputRow, seen: dict[int, int], chunks: int, members: int) -> str:
    if not 0 <= row.sender < members or row.sender in seen:
        return "its seal lists a sender twice or one outside the group"
    if len(row.digests) > chunks or any(len(d) != DIGEST_BYTES for d in row.digests):
        return "its seal has malformed input hashes"
    if not (math.isfinite(row.weight) and row.weight > 0):
        return "its seal has a weight that is not a finite positive number"
    return ""
