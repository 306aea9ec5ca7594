"""The checks of verified reducers: what their findings are called, and which parts each member
checks after a round (the checking itself is ``core.averaging.verified``; its settings,
``VerificationConfig``, are the averager's, ``core.averaging.config``).

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

import random
from collections.abc import Sequence
from dataclasses import dataclass

from core.averaging.config import VerificationConfig

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
