"""The cheap checks a reducer makes on each sender's chunk before aggregating it.

Two things are never averaged: values that are not finite (NaN or infinity: a broken GPU, an fp16
overflow, or malice), and a chunk whose L2 norm is more than ``norm_ratio_limit`` times the group's
reference norm (a gradient x1000 moves a plain mean as far as its sender likes).

The reference is a *lower median*: the ⌈k/2⌉-th smallest of the k norms. A minority of senders
cannot move it, whatever they send; and unlike the usual median of an even count (the mean of the
two middle values) it is not raised by half of the senders inflating their norms. Each sender counts
in it by its vote (``votes``, from ``medians.votes``): whole for a sender claiming typical work or
more, a share of one for less, so identities claiming a thousandth of a sample cannot set it by
their number; and a group is a pair when its votes are worth fewer than ``MAJORITY`` senders (two
honest members and any number of such identities are still a pair). In a pair, that
makes the reference the smaller norm. A pair has no majority to tell who is honest, and honest pairs
differ by more than ten times in chunks that one batch touched far more than the other (an
embedding's rows: a clean two-trainer run screened an honest chunk at 12.4x), so a pair's limit is
``PAIR_FACTOR`` times the group's: 50x by default, and far below what does harm (a gradient x1000,
noise 100x its size; without it, a round that happened to pair the one bad peer with one honest
peer let the noise in, and the loss went 23 % off the clean run). Honest pairs still cross it at
times: in the demo swarm, pairs of honest trainers differed by 61x to 150x in one chunk of the
embedding. So a pair's larger chunk is left out, but not *accused* (``unattributed``): no finding,
no evidence against a volunteer whom nobody can show to be wrong. A group of three screens against
its true median, and accuses, except in a chunk of fewer than ``NORM_SIZE`` values (a bias),
whose norms differ between honest senders by tens of times: such a chunk is left out unattributed.

Chunks that are exactly zero take no part in the reference. A zero chunk has no scale to compare
with (a peer whose batch touched none of the chunk's rows), and counting zeros would make the one
sender that did have data look like an outlier. When every chunk is zero there is nothing to screen.

A mode whose chunks are updates over many steps (diloco's pseudo-gradients) may also screen by
direction (``opposed_from``): there honest members' norms sit within about 10 % of each other, so a
gradient flipped and scaled x10 lands right at the norm limit and passes whenever its own norm is
a little low, and CenteredClip's radius, set by the honest spread, still lets it bend the mean (the
held-out loss went 11-18 % off the clean run; a flip x3, far below the norm limit, up to 80 %).
Such a chunk has a norm above ``OPPOSED_FROM`` of the limit (twice the median) *and* points away
from the others, and is left out. It is not accused: in a clean swarm of 64 with speeds spread
4x, three honest chunks of members far ahead in inner steps had norms 6-7.6x the median and cosines
of -0.78 to -0.94 (they overshot where the slower members had not yet arrived); leaving such a chunk
out costs its sender that chunk of one round, accusing it would put signed evidence against a
volunteer for having a fast GPU. A single batch's gradient (dedloc) is a worse fit still: an
embedding row that one batch touched is far above the median and unrelated to the others', so the
rule is off there.

How far above the limit a chunk must be to be *accused* is the mode's too (``accuse_from``, a
multiple of the limit; ``NEVER``: no finding at all). Diloco's norm screen accuses nobody: honest
pseudo-gradients differ in norm by more than any fixed multiple. In a clean diloco swarm of four at
equal speed one honest member's output layer sat at 10.1-11.8x the median in converged rounds (its
data kept moving it while the others' had settled), and near the end of the inner learning-rate
schedule, where the members' clocks put some a few steps from a rate of zero and others a few
steps before it, an honest trainer's chunk measured 14,080x the median (40-round demo runs, rounds
31-40, each time an honest trainer signed against). Diloco's rounds are replayed: the replays
name a cheat on evidence no honest member produces, and an outlier the screens leave out does the
model no harm.

Everything here is a pure function of its inputs, in ascending sender order, so that a verifier
recomputing a reducer's chunk reaches the same verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from core.averaging.robust.medians import coordinate_median, median_by, voters
from core.codecs.arrays import F32

NONFINITE = "nonfinite"
NORM_RATIO = "norm_ratio"
MAJORITY = 3
"""Senders with data (finite, non-zero chunks) for a majority, counted by their votes (a group
whose votes are worth less than ``MAJORITY - 1/2`` senders gets ``PAIR_FACTOR``)."""
PAIR_FACTOR = 5.0
"""A pair's limit over the group's: no majority says which of two chunks is wrong."""
OPPOSED = "opposed"
OPPOSED_FROM = 0.2
"""The share of the norm limit above which a mode that screens by direction leaves out a chunk
that points away from the others (a negative cosine with their coordinate-wise median): twice the
median at the default limit. Honest pseudo-gradients reach a cosine near 0 once the model learns
little, but seldom with a norm twice the median; a flip x3, which every other screen lets through
and CenteredClip only bounds by the honest spread, cost a diloco swarm up to 80 % at equal rounds
in its first rounds with the limit at half (5x)."""
OPPOSED_SIZE = 256
"""The fewest values a chunk needs for its direction to say anything: a chunk of one value (a
bias) has a cosine of +1 or -1 whoever sent it, and an honest scalar 6.5x the median with the
other sign was accused that way."""
NEVER = math.inf
"""``accuse_from`` for a mode whose norm screen leaves chunks out without a finding (diloco's)."""
NORM_SIZE = 16
"""The fewest values a chunk needs for its norm to accuse anyone: an honest output bias (one value)
was 10-27x another honest one's in four-trainer dedloc runs, where a vector of a few dozen values
differs between honest senders by a few times at most. A smaller chunk is still left out above the
limit, without a finding."""


def l2_norm(values: F32) -> float:
    """The chunk's L2 norm, or NaN when a value is not finite.

    One float32 BLAS dot product does it: any NaN or infinity makes the dot non-finite, so finite
    chunks cost no separate check. Only a dot that overflows float32 from finite values (a norm
    above ~1.8e19) is recomputed in float64.
    """
    squares = float(np.dot(values, values))
    if math.isfinite(squares):
        return math.sqrt(squares)
    if not np.isfinite(values).all():
        return math.nan
    return float(np.linalg.norm(values.astype(np.float64)))


@dataclass
class Screening:
    norms: dict[int, float] = field(default_factory=dict)
    """Every sender's chunk norm (NaN for a non-finite chunk)."""
    reference: float = 0.0
    """The lower median of the finite, non-zero norms, by their senders' votes; 0 when there are
    none."""
    screened: dict[int, tuple[str, float, str]] = field(default_factory=dict)
    """Sender -> (statistic, value, reason) for each chunk that must not be aggregated."""
    unattributed: set[int] = field(default_factory=set)
    """Screened senders nobody can be sure did wrong: the larger of a pair's two chunks (left out
    all the same, but not a finding against it)."""


def screen(
    inputs: Mapping[int, F32],
    norm_ratio_limit: float,
    opposed_from: float | None = None,
    accuse_from: float = 1.0,
    votes: Mapping[int, float] | None = None,
) -> Screening:
    """Which senders' chunks to leave out, and why (see the module's docstring for the rules);
    ``opposed_from``: the share of the limit from which a chunk is screened by direction too
    (None: not at all); ``accuse_from``: the multiple of the limit from which a chunk left out
    for its norm is a finding (below it: left out, unattributed); ``votes``: each sender's vote
    in the medians (``medians.votes``; None: a whole one each)."""
    result = Screening()
    for sender in sorted(inputs):
        values = inputs[sender]
        norm = l2_norm(values)
        result.norms[sender] = norm
        if math.isnan(norm):
            bad = int(values.size - np.count_nonzero(np.isfinite(values)))
            result.screened[sender] = (
                NONFINITE,
                float(bad),
                f"{bad} of its {values.size} values are NaN or infinite",
            )
    counted = [s for s, n in result.norms.items() if s not in result.screened and n > 0]
    if not counted:
        return result
    held = [1.0 if votes is None else votes[s] for s in counted]
    if not any(v > 0 for v in held):
        held = [1.0] * len(counted)  # nobody's vote tells them apart: counted
    result.reference = median_by([result.norms[s] for s in counted], held)
    pair = voters(held) < MAJORITY - 0.5
    limit = norm_ratio_limit * (PAIR_FACTOR if pair else 1.0)
    for sender, norm in result.norms.items():
        if sender in result.screened:
            continue
        ratio = norm / result.reference
        if ratio > limit:
            reason, accused = _norm_verdict(ratio, limit, pair, inputs[sender].size, accuse_from)
            # the sizes themselves tell a chunk grown large from a median grown small
            reason += f" [its norm {norm:.4g}, the median {result.reference:.4g}]"
            if not accused:
                result.unattributed.add(sender)
            result.screened[sender] = (NORM_RATIO, ratio, reason)
    if opposed_from is None or pair or next(iter(inputs.values())).size < OPPOSED_SIZE:
        return result
    for sender, norm in list(result.norms.items()):
        if sender in result.screened or norm / result.reference <= limit * opposed_from:
            continue
        ratio = norm / result.reference
        cosine = _cosine_to_others(inputs, votes, sender, result)
        if cosine < 0.0:
            reason = (
                f"its norm is {ratio:.3g}x the group's median and it points away from the "
                f"others (cosine {cosine:.2f} with their median; not accused: an honest member "
                "many inner steps ahead of the others can overshoot that way)"
            )
            result.screened[sender] = (OPPOSED, cosine, reason)
            result.unattributed.add(sender)
    return result


def _norm_verdict(
    ratio: float, limit: float, pair: bool, size: int, accuse_from: float
) -> tuple[str, bool]:
    """Why a chunk ``ratio`` times the median, above ``limit``, is left out, and whether that
    accuses its sender."""
    if pair:
        why = (
            f"its norm is {ratio:.3g}x the other sender's (limit {limit:g}x; with two senders "
            "nobody can tell which is wrong, so nobody is accused)"
        )
        return why, False
    reason = f"its norm is {ratio:.3g}x the group's median (limit {limit:g}x)"
    if size < NORM_SIZE:
        why = (
            f"{reason}; a chunk of {size} values is too small to tell an honest outlier from a "
            "bad one, so nobody is accused"
        )
        return why, False
    if math.isinf(accuse_from):
        return f"{reason}; this mode's norm screen accuses nobody", False
    if ratio <= limit * accuse_from:
        return f"{reason}; not accused below {limit * accuse_from:g}x", False
    return reason, True


def _cosine_to_others(
    inputs: Mapping[int, F32], votes: Mapping[int, float] | None, sender: int, checks: Screening
) -> float:
    """The cosine between ``sender``'s chunk and the coordinate-wise median of the other senders'
    usable chunks (finite, not zero, not screened), by their votes."""
    others = [
        s
        for s in sorted(inputs)
        if s != sender and s not in checks.screened and checks.norms[s] > 0
    ]
    if not others:
        return 1.0
    held = [1.0 if votes is None else votes[s] for s in others]
    if not any(v > 0 for v in held):
        held = [1.0] * len(others)  # nobody's vote tells them apart: counted
    centre = coordinate_median([inputs[s] for s in others], held)
    scale = checks.norms[sender] * l2_norm(centre)
    if not scale > 0:
        return 1.0
    return float(np.dot(inputs[sender], centre)) / scale
