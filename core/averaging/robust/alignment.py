"""How far each sender's chunk went the way the others' went: the raw material of scoring work.

A reducer holds every sender's chunk of its part. For a pseudo-gradient (many inner steps), how far
a sender moved along what the *other* senders moved grows with the work it did: an honest member's
steps share the others' direction, a member that computed nothing sent zeros, one that flipped its
update points away. So for each sender ``i`` the reducer takes the others' mean ``r_i`` (the round's
effective weights, without ``i``) and keeps three sums over its part's chunks: ``<x_i, r_i>``,
``‖x_i‖²`` and ``‖r_i‖²``. Its projection on the others' direction, ``<x_i, r_i> / ‖r_i‖``, per
sample it claimed, is what the backbone scores (``core.training.credit.scores``).

Choices, and why:

- **Leave one out.** With ``i`` in its own reference, part of its score is ``‖x_i‖²`` times its
  share: noise scores, and a claim that raised the share (bounded, still up to 4 times the median)
  raised the score with it, so the score per claimed sample no longer fell with the claim.
- **The effective weights** (``β``: bounded claims, times CenteredClip's clip factors): a sender far
  from the others barely enters the others' references, as it barely entered the aggregate.
- **From n dot products.** ``r_i = (B·m - β_i·x_i) / (B - β_i)`` with ``m`` the β-weighted mean and
  ``B = Σβ``, so every sum follows from ``<x_i, m>``, ``‖x_i‖²`` and ``‖m‖²``: one pass over each
  chunk, as the norms already take, whatever the group's size.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.codecs.arrays import F32


@dataclass(frozen=True, slots=True)
class Alignment:
    """One sender's chunks as a reducer saw them (sums over the chunks of its part that went in)."""

    weight: float
    """The sample weight it claimed."""
    along: float = 0.0
    """Σ <x_i, r_i>: how far it moved along the others' mean (negative: away from it)."""
    norm2: float = 0.0
    """Σ ‖x_i‖²."""
    reference2: float = 0.0
    """Σ ‖r_i‖²."""

    def plus(self, along: float, norm2: float, reference2: float) -> Alignment:
        return Alignment(
            self.weight, self.along + along, self.norm2 + norm2, self.reference2 + reference2
        )

    @property
    def projection(self) -> float:
        """How far it went along the others' direction: ``along / ‖r‖`` (0 with no reference).
        Not ``along`` itself: a member far ahead of the others would score the others' smaller
        steps in its reference, and a slow one the fast one's."""
        return self.along / math.sqrt(self.reference2) if self.reference2 > 0 else 0.0

    @property
    def cosine(self) -> float:
        """Its cosine with the others' mean over the part (0 when either is empty)."""
        scale = math.sqrt(self.norm2 * self.reference2)
        return self.along / scale if scale > 0 else 0.0


def leave_one_out(
    rows: Sequence[F32], weights: Sequence[float], mean: F32 | None = None
) -> list[tuple[float, float, float]] | None:
    """For each row: (<x_i, r_i>, ‖x_i‖², ‖r_i‖²), with ``r_i`` the ``weights``-weighted mean of
    the other rows; ``mean``: the weighted mean of all of them, when the caller has it. None with
    fewer than two rows of positive weight (no sender has others to be compared with)."""
    total = math.fsum(weights)
    if len(rows) < 2 or sum(1 for w in weights if w > 0) < 2 or total <= 0:
        return None
    if mean is None:
        mean = np.zeros_like(rows[0])
        for row, weight in zip(rows, weights, strict=True):
            mean += np.float32(weight / total) * row
    mm = float(np.dot(mean, mean))
    found = []
    for row, weight in zip(rows, weights, strict=True):
        rest = total - weight
        if rest <= total * 1e-9:
            found.append((0.0, float(np.dot(row, row)), 0.0))
            continue
        xm, xx = float(np.dot(row, mean)), float(np.dot(row, row))
        along = (total * xm - weight * xx) / rest
        reference2 = (total * total * mm - 2 * total * weight * xm + weight * weight * xx) / (
            rest * rest
        )
        found.append((along, xx, max(0.0, reference2)))
    return found
