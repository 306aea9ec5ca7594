"""CenteredClip (Karimireddy, He and Jaggi, 2020), vectorised over the (senders x chunk) matrix.

Starting from a point ``v``, each iteration moves it by the weighted mean of every sender's offset
``x_i - v`` clipped to length τ: ``v += Σ w_i · min(1, τ/‖x_i - v‖) · (x_i - v) / Σ w_i``. A sender
far from the others pulls with a force of at most τ, however far away it is, so a minority cannot
drag the result off.

Choices, and why:

- **Start: the medoid**, the sender whose sum of distances to all the others is smallest. The
  iterations stay near the honest mean only if they do not start dragged off, and a reducer has no
  earlier aggregate to start from (parts move between reducers). Like the coordinate-wise median,
  the medoid cannot be taken by a minority far from the rest; unlike it, it needs no pass over the
  chunk to find (a sorting network for the median of four 1 MiB chunks cost as much as everything
  else here together), only the n x n distances the iterations need anyway. The sum is weighted by
  the senders' votes (``medians.votes``, at most one each), not by their claims: by claims, one
  sender claiming enough would be the medoid wherever it sat; by votes, identities claiming next to
  nothing (zeros, small noise, copies of one another) do not become the start by their number; nor
  is such an identity the start itself (only a sender with at least half of the largest vote is):
  small noise sits at the origin, central to honest updates that agree little.
- **Weight buys influence only among agreeing senders.** A sender whose offset is clipped (farther
  than τ from the point) pulls with at most the senders' lower median share, by their votes (tiny
  shares cannot pull it down to theirs: three honest diloco members beside three identities
  claiming a thousandth, the start clipped one of them, which then pulled with a quarter of its
  share, and the result went 30 % off their mean), whatever weight it claimed: against honest peers
  of similar weights its force is then what it would be had it claimed as they did. (1/n would
  not do: a claim of 100 times leaves the others' shares tiny, so an equal 1/n against them is
  still several honest peers' worth.) Senders within τ keep their sample weights, so with honest
  peers (none clipped) the result is still the exact weighted mean. The weights themselves are
  bounded before this (``aggregation.bounded_weights``), which is all the plain mean has.
- **τ relative to the spread**: ``tau`` times the lower median of the other senders' distances from
  the medoid, by their votes (copies of one sender do not shrink it to nothing). An absolute τ
  would need tuning per model, per layer and per phase of training (gradients shrink by orders of
  magnitude). Honest senders sit at similar distances from each
  other and about 1/√2 of that from their mean, so with τ at the median distance (the default,
  1.0) none of them is clipped at the fixed point and the result is exactly their weighted mean,
  while a sender x1000 pulls with one spread at most. With one such sender among four, the result
  stayed within 0.6 of an honest sender's own distance from the honest mean (1.2 with τ at twice
  the median distance). A sender with much noisier data than the rest (far fewer samples) may be
  clipped a little: that is the price of robustness.
- **A floor under the spread**: at least ``spread_floor`` times the chunk's reference norm, so that
  replicas differing only in rounding (parameters most peers hold bit for bit) do not make the
  spread 0 and every last-bit difference an outlier. Zero chunks (no data for this chunk) take no
  part in the spread, as in screening.
- **Iterations on n x n numbers.** The offsets ``D_j = x_j - x_o`` from one sender ``o`` are formed
  once; every point considered is ``x_o`` plus a combination of them, so every distance is a
  quadratic form in their Gram matrix ``G = D Dᵀ``, and an iteration only updates n coefficients.
  The chunk is read a fixed number of times whatever the number of iterations: the offsets, their
  dot products (n(n+1)/2 BLAS dots), and one final combination. ``o`` is the sender with the lower
  median norm, so that the offsets have the scale of the spread (no far outlier as the origin) and
  the quadratic forms lose little to cancellation; the medoid is then found, and the Gram matrix
  moved to it, in float64.
- **Few iterations.** With one clipped sender among n, the distance to the fixed point shrinks about
  n-fold per iteration: three close ~98 % of the gap for four senders. When nobody is clipped, the
  second iteration finds the weighted mean again and the loop stops.
- Distances come from float32 BLAS dot products used in float64; they match direct norms to about
  1e-6 relative. On another CPU the BLAS kernel may round differently in the last bits, so a
  verifier on another machine must compare with a small tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from core.averaging.robust.medians import median_by
from core.codecs.arrays import F32

F64 = npt.NDArray[np.float64]

SETTLED = 1e-12
"""Coefficients that move less than this between iterations have reached the fixed point."""


def centered_clip(
    rows: Sequence[F32],
    weights: Sequence[float],
    norms: Sequence[float],
    *,
    tau: float,
    iterations: int,
    spread_floor: float,
    reference: float,
    offsets: np.ndarray,
    votes: Sequence[float] | None = None,
) -> tuple[F32, list[float]]:
    """The aggregate (a new array) and each row's clip factor in the last iteration.

    ``norms`` are the rows' L2 norms and ``reference`` the screening's reference norm; ``offsets``
    (len(rows) x chunk, float32) is scratch memory the caller lends (``aggregation.Workspace``);
    ``votes``: each row's vote in the medians (``medians.votes``; None: a whole one each).
    """
    count = len(rows)
    shares = np.asarray(weights, dtype=np.float64) / math.fsum(weights)
    origin = sorted(range(count), key=lambda i: (norms[i], i))[(count - 1) // 2]
    for row, offset in zip(rows, offsets, strict=True):
        np.subtract(row, rows[origin], out=offset)
    gram = _gram(offsets, skip=origin)
    if not np.isfinite(gram).all():
        # offsets beyond float32's range (only from values near its limit): keep a typical sender
        return rows[origin].copy(), [1.0] * count
    squares = np.diagonal(gram)
    apart = np.sqrt(np.maximum(squares[:, None] + squares[None, :] - 2.0 * gram, 0.0))
    held = [1.0] * count if votes is None or not any(v > 0 for v in votes) else list(votes)
    if all(v == held[0] for v in held):
        medoid = int(np.argmin(apart.sum(axis=1)))  # the plain sum, to the last bit
    else:
        # only a sender holding at least half of the largest vote may be the start: identities
        # sending next to nothing sit at the origin, which is central to honest updates that
        # agree little (three diloco members' updates: the start was a noise identity, and two
        # honest members were clipped, 30 % off their mean)
        sums = apart @ np.asarray(held, dtype=np.float64)
        sums[np.asarray(held) < 0.5 * max(held)] = np.inf
        medoid = int(np.argmin(sums))
    # the same offsets seen from the medoid: (D_i - D_m) . (D_j - D_m)
    gram = gram - gram[:, [medoid]] - gram[[medoid], :] + gram[medoid, medoid]
    others = [i for i in range(count) if i != medoid and norms[i] > 0]
    spread = [float(apart[medoid, i]) for i in others]
    apart_typically = median_by(spread, [held[i] for i in others]) if spread else 0.0
    radius = tau * max(apart_typically, spread_floor * reference)
    coefficients = np.zeros(
        count, dtype=np.float64
    )  # the point is x_medoid + Σ a_j (x_j - x_medoid)
    factors = np.ones(count, dtype=np.float64)
    equal = np.minimum(shares, median_by([float(w) for w in weights], held) / math.fsum(weights))
    for _ in range(iterations):
        distances = _distances(gram, coefficients)
        far = distances > radius
        factors = np.where(far, radius / np.maximum(distances, 1e-300), 1.0)
        counted = np.where(far, equal, shares)
        pulls = counted / counted.sum() * factors
        moved = coefficients * (1.0 - pulls.sum()) + pulls
        settled = float(np.max(np.abs(moved - coefficients))) <= SETTLED
        coefficients = moved
        if settled:
            break
    # back to the origin's offsets: x_m + Σ a_j (D_j - D_m) = x_o + Σ a_j D_j + (1 - Σ a) D_m
    combination = coefficients.copy()
    combination[medoid] += 1.0 - coefficients.sum()
    aggregate: F32 = np.dot(combination.astype(np.float32), offsets)
    aggregate += rows[origin]
    return aggregate, [float(f) for f in factors]


def _gram(offsets: np.ndarray, skip: int) -> F64:
    """Every pair's dot product (row ``skip`` is zero). One BLAS dot per pair: for a few long rows
    that is several times faster than a matrix product, which first copies both into its layout."""
    count = len(offsets)
    gram = np.zeros((count, count), dtype=np.float64)
    for i in range(count):
        for j in range(i, count):
            if skip not in (i, j):
                gram[i, j] = gram[j, i] = float(np.dot(offsets[i], offsets[j]))
    return gram


def _distances(gram: F64, coefficients: F64) -> F64:
    """‖D_i - Σ a_j D_j‖ for every i, from the Gram matrix: G_ii - 2 (G a)_i + aᵀ G a."""
    pulled = gram @ coefficients
    squares = np.diagonal(gram) - 2.0 * pulled + float(coefficients @ pulled)
    return np.sqrt(np.maximum(squares, 0.0))
