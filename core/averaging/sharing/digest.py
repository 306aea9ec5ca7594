"""What a state's bytes hash to: a digest per block, and the state's digest over the blocks.

A donor's header lists the SHA-256 of every ``BLOCK_BYTES`` of its packed state, so a downloader
checks each block as it arrives: a donor that sends other bytes than its header promised is caught
at the first such block, and the block is fetched again from another donor, rather than the whole
download failing one check at its end. The state's digest is the SHA-256 of its layout (shapes and
dtypes) and of the block digests: two donors offer the same state exactly when their digests are
equal, which is what a downloader compares (``vouching``) before it loads anything.

Metadata is not in the digest: honest donors of one version differ in it (the learning-rate clock,
the rollbacks they applied), and each mode checks its own.

Why SHA-256: hashlib's runs at 1-2 GB/s on a core with the SHA extensions (faster than BLAKE2 there),
a cost paid once per version served; and the digest is evidence between strangers, so a
non-cryptographic hash would let a donor forge a state with another's digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np

BLOCK_BYTES = 4 << 20
"""Bytes per block digest: 32 bytes of header per 4 MiB of state (8 KiB for a 1 GiB state)."""
DIGEST_BYTES = 32


def block_digests(buffers: Iterable[np.ndarray], block_bytes: int = BLOCK_BYTES) -> list[bytes]:
    """SHA-256 of every ``block_bytes`` of the buffers' bytes laid one after another (the last
    block may be shorter; an empty state has one digest, of nothing)."""
    if block_bytes <= 0:
        raise ValueError(f"block_bytes must be positive, got {block_bytes}")
    digests: list[bytes] = []
    hasher, filled = hashlib.sha256(), 0
    for buffer in buffers:
        data = np.ascontiguousarray(buffer).reshape(-1).view(np.uint8).data
        at = 0
        while at < len(data):
            take = min(block_bytes - filled, len(data) - at)
            hasher.update(data[at : at + take])
            filled, at = filled + take, at + take
            if filled == block_bytes:
                digests.append(hasher.digest())
                hasher, filled = hashlib.sha256(), 0
    if filled or not digests:
        digests.append(hasher.digest())
    return digests


def block_count(total_bytes: int, block_bytes: int) -> int:
    """How many block digests a state of ``total_bytes`` has."""
    return max(1, -(-total_bytes // block_bytes))


def state_digest(
    shapes: Sequence[Sequence[int]],
    dtypes: Sequence[str],
    block_bytes: int,
    blocks: Sequence[bytes],
) -> str:
    """The state's digest, in hexadecimal: its layout and its block digests."""
    hasher = hashlib.sha256(b"barnraise state v1\n")
    hasher.update(repr(([list(s) for s in shapes], list(dtypes), block_bytes)).encode())
    for block in blocks:
        hasher.update(block)
    return hasher.hexdigest()
