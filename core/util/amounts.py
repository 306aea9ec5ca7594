"""Amounts written for people in plain text: bytes, counts and lengths of time.

Shared by what speaks to people outside the app (estimates before joining, the project page, the
training modes' descriptions, a held-out loss beside its floor), so that one figure reads the same
wherever it appears.
"""

from __future__ import annotations

import math


def size_text(n: float) -> str:
    """Bytes for people: "2.06 TB"."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} bytes"


def count_text(n: float) -> str:
    """A count for people: "172 billion"."""
    for unit, size in (("billion", 1e9), ("million", 1e6), ("thousand", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)}"


def rough_duration(seconds: float) -> str:
    """An estimated length, rounded to what matters: "45 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{math.ceil(seconds)} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def exact_length(seconds: float) -> str:
    """A set length (a round) in the largest unit that keeps it exact: "90 s", "5 min", "2 h"."""
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def below_floor(loss: float | None, floor: float | None) -> str:
    """A held-out loss in words, with the unigram floor (``core.training.evaluation.floor``)
    beside it: "loss 5.7312 nats, 0.51 below the unigram floor (6.24)"; without a floor, the loss
    alone."""
    if loss is None:
        return "loss not finite"
    if floor is None:
        return f"loss {loss:.4f} nats"
    return f"loss {loss:.4f} nats, {floor_gap(loss, floor)}"


def floor_gap(loss: float, floor: float) -> str:
    """Where a held-out loss stands against the unigram floor: "0.51 below the unigram floor
    (6.24)" (below: the model uses context; above: it knows less than a word count)."""
    gap = floor - loss
    side = "below" if gap >= 0 else "above"
    return f"{abs(gap):.2f} {side} the unigram floor ({floor:.2f})"
