"""Verified reducers: settings, and which parts each member checks after a round.

A reducer can lie: return an aggregate its inputs do not give, or give different members different
results. In the spirit of BTARD (Gorbunov et al. 2021, "Secure Distributed Training at Scale"), when
``VerificationConfig.enabled`` every sender commits to each chunk it sends (``verified.commitments``),
every reducer signs a seal of its part, and after the round members recompute a few parts from the
committed inputs (``verified.verifier``); ``verified.verified_round`` runs all this for one member.

Who checks what is each member's own coin, tossed after the round with the system's randomness: a
reducer learns that its part is checked only when a verifier asks for inputs, after it has returned
every aggregate and signed its seal, so it can neither predict nor steer the choice. (A choice drawn
from the round's own data — the seals, say — could be computed by a reducer that holds its results
back until the other parts are sealed, and it would lie only when not drawn.) Each member checks
each part it received with the same probability, so that ``parts`` parts are checked per round on
average over the group; a part whose reducer failed has no seal and is never checked.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from core.util.errors import ConfigError

REDUCER_MISMATCH = "reducer_mismatch"
"""A reducer's aggregate, or its account of its inputs, is not what its inputs give."""
REDUCER_EQUIVOCATION = "reducer_equivocation"
"""A reducer signed two different seals for one part (told members different things)."""
COMMITMENT_MISMATCH = "commitment_mismatch"
"""A sender handed a verifier an input that differs from the one it signed for the reducer."""
VERIFICATION_REFUSED = "verification_refused"
"""A member did not hand over its inputs for verification (it refused, left or timed out)."""
PROVEN = frozenset({REDUCER_MISMATCH, REDUCER_EQUIVOCATION, COMMITMENT_MISMATCH})
"""Findings the verifier checked itself against signed data: grounds for a local ban."""


@dataclass(frozen=True)
class VerificationConfig:
    enabled: bool = False
    """Commit, seal and verify in every round. Off by default: it keeps a copy of what this peer sent
    for ``timeout`` seconds after the round (memory as large as the averaged tensors) and hashes
    every chunk twice (docs/benchmarks.md has the figures). Every member of a group must agree."""
    parts: float = 1.0
    """How many parts the group checks per round, on average; n * (n - 1) or more (for n members):
    every member checks every part it received."""
    chunks: int = 1
    """How many chunks of a checked part are recomputed (0: all). A verifier downloads each sender's
    copy of those chunks, so checking a whole part costs it about as much as the round itself; one
    chunk catches a reducer that lies in every chunk, a lie in one chunk of c is caught 1/c of the
    time."""
    timeout: float = 10.0
    """How long a verifier waits for each member's inputs, and members keep theirs for verifiers
    after the round."""
    tolerance: float = 1e-5
    """Allowed difference from the recomputed aggregate, relative to the chunk's largest value (plus
    one step of a lossy codec): summation order and BLAS kernels differ between machines."""
    ban_seconds: float = 3600.0
    """How long this peer refuses to group with a member it caught lying."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.parts) and self.parts >= 0):
            raise ConfigError(f"verification parts must be 0 or more, got {self.parts}")
        if isinstance(self.chunks, bool) or self.chunks < 0:
            raise ConfigError(f"verification chunks must be 0 (all) or more, got {self.chunks}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigError(f"verification timeout must be positive, got {self.timeout}")
        if not (math.isfinite(self.tolerance) and 0 <= self.tolerance < 1):
            raise ConfigError(f"verification tolerance must be in [0, 1), got {self.tolerance}")
        if not (math.isfinite(self.ban_seconds) and self.ban_seconds >= 0):
            raise ConfigError(f"ban_seconds must be 0 or more, got {self.ban_seconds}")


@dataclass(frozen=True)
class Check:
    """Recompute ``chunks`` of ``part``."""

    part: int
    chunks: tuple[int, ...]


def choose_checks(
    me: int,
    sealed: Sequence[int],
    chunk_counts: Sequence[int],
    *,
    pairs: int,
    config: VerificationConfig,
    rng: random.Random,
) -> list[Check]:
    """The parts this member checks: each of ``sealed`` (parts it holds a seal for, not its own)
    with probability ``parts / pairs``, where ``pairs`` counts every (member, part) check possible in
    the group. ``rng`` is the system's randomness (tests may pass a seeded one)."""
    if config.parts <= 0 or pairs <= 0:
        return []
    chance = min(1.0, config.parts / pairs)
    checks = []
    for part in sealed:
        if part == me or chunk_counts[part] <= 0:
            continue
        if chance < 1.0 and rng.random() >= chance:
            continue
        checks.append(Check(part, pick_chunks(rng, chunk_counts[part], config.chunks)))
    return checks


def possible_checks(chunk_counts: Sequence[int], verifiers: Sequence[int]) -> int:
    """How many (verifier, part) checks a group allows: every verifier, every part but its own."""
    return sum(
        len([v for v in verifiers if v != part])
        for part, count in enumerate(chunk_counts)
        if count > 0
    )


def pick_chunks(rng: random.Random, count: int, wanted: int) -> tuple[int, ...]:
    """``wanted`` distinct chunk indices below ``count`` (all when 0 or more than there are)."""
    if wanted <= 0 or wanted >= count:
        return tuple(range(count))
    return tuple(sorted(rng.sample(range(count), wanted)))
