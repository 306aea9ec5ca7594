"""Who reduces how much of the vector: the DeDLOC linear program (Section 3.2 and Appendix B).

Variables: ``a[i][j]`` the rate at which peer i sends gradient parts to reducer j, ``g[j][i]`` the rate
at which reducer j returns averaged parts to i, ``c[i]`` in [0, 1] whether i contributes gradients, and
the surrogate ``xi`` (averaging rounds per second). Maximise ``xi`` subject to:

- ``xi <= sum_i s_i c_i / B`` (the collaboration computes a batch of B samples per round);
- ``xi <= sum_j g[j][i] / P`` for every peer i that needs the result (it receives P bytes per round;
  ``g[i][i]``, the part it reduces itself, costs no bandwidth but comes no faster than its reduction);
- upload ``sum_j a[i][j] + g[i][j] <= u_i`` and download ``sum_j a[j][i] + g[j][i] <= d_i``, not counting
  transfers inside one peer;
- ``g[i][j] <= m_i`` for every receiver j, with ``m_i <= a[k][i] + d_i (1 - c_k)`` for every other peer k
  (a reducer returns results no faster than its slowest contributor sends; ``m_i`` is the paper's
  ``min_k a[k][i]`` written as two sets of linear constraints, which keeps the program O(n^2));
- ``r_i <= g[i][j]`` for every receiver j: ``r_i`` is peer i's effective throughput ``min_j g[i][j]``;
- nothing flows to or from a peer that accepts no incoming connections in the direction that would need
  it to be dialed: such a peer (client mode) reduces nothing.

Peer i then reduces a share proportional to ``min_j g[i][j]``. Every member solves the same program from
the same inputs with ``scipy.optimize.linprog(method="highs")``, which is deterministic, and rounds the
shares the same way. Among optimal strategies it prefers the most even one (a second solve that keeps
``xi`` at its optimum and maximises the smallest ``r_i``), so equal peers get equal parts. Without a batch
size (plain averaging) every non-auxiliary member contributes (``c_i = 1``) and the compute constraint
is left out; auxiliary peers never contribute and need no result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog


@dataclass(frozen=True, slots=True)
class PeerCapacity:
    """What one group member announced about itself."""

    compute: float
    """Samples per second it can process (0 for auxiliary peers)."""
    upload: float
    """Bytes per second it can send."""
    download: float
    """Bytes per second it can receive."""
    client: bool = False
    """It accepts no incoming connections (behind NAT): it sends and receives, reduces nothing."""
    auxiliary: bool = False
    """It has no gradients and needs no result: it only helps to reduce."""


@dataclass(frozen=True, slots=True)
class Plan:
    shares: tuple[float, ...]
    """Fraction of the vector each member reduces (sums to 1)."""
    contributes: tuple[float, ...]
    """The program's ``c_i``: whether each member's gradients are worth computing."""
    rounds_per_second: float
    """The optimal ``xi``; ``inf`` when no capacity was given."""


def equal_plan(peers: Sequence[PeerCapacity]) -> Plan:
    """Everyone who can be dialed reduces the same share (what DeDLOC falls back to without figures)."""
    able = [not p.client for p in peers]
    count = sum(able) or len(peers)
    shares = tuple((1.0 / count) if (a or not any(able)) else 0.0 for a in able)
    return Plan(shares, tuple(1.0 for _ in peers), math.inf)


def solve(
    peers: Sequence[PeerCapacity], vector_bytes: float, batch_size: float | None = None
) -> Plan:
    """The DeDLOC plan for a group; ``batch_size`` None leaves out the compute constraint."""
    n = len(peers)
    if n < 2 or vector_bytes <= 0:
        return equal_plan(peers)
    if all(p.upload <= 0 and p.download <= 0 for p in peers):
        return equal_plan(peers)
    program = _Program(peers, float(vector_bytes), batch_size)
    solution = program.solve()
    if solution is None:
        return equal_plan(peers)
    return solution


SLIVER = 1e-5
"""Shares below this fraction of the vector are dropped (and the rest scaled up to cover it)."""


class _Program:
    def __init__(self, peers: Sequence[PeerCapacity], size: float, batch: float | None) -> None:
        self.peers = list(peers)
        n = self.n = len(peers)
        # variables: a[i][j] (n*n), g[i][j] = reducer i -> receiver j (n*n), c[i], m[i], r[i], xi, xc, t
        self.a0, self.g0 = 0, n * n
        self.c0, self.m0, self.r0 = 2 * n * n, 2 * n * n + n, 2 * n * n + 2 * n
        self.xi = 2 * n * n + 3 * n
        self.xc = self.xi + 1  # the communication rate alone
        self.t = self.xi + 2  # the smallest effective rate among peers able to reduce
        self.count = self.xi + 3
        self.size = size
        self.batch = batch if batch and sum(p.compute for p in peers) > 0 else None

    def a(self, i: int, j: int) -> int:
        return self.a0 + i * self.n + j

    def g(self, i: int, j: int) -> int:
        return self.g0 + i * self.n + j

    def receivers(self) -> list[int]:
        return [j for j, p in enumerate(self.peers) if not p.auxiliary]

    def able(self) -> list[int]:
        return [i for i, p in enumerate(self.peers) if not p.client]

    def constraints(self) -> tuple[list[dict[int, float]], list[float]]:
        n, peers = self.n, self.peers
        rows: list[dict[int, float]] = []
        bounds: list[float] = []
        if self.batch is not None:  # xi <= sum_i s_i c_i / B
            rows.append(
                {
                    self.xi: 1.0,
                    **{self.c0 + i: -p.compute / self.batch for i, p in enumerate(peers)},
                }
            )
            bounds.append(0.0)
        receivers = self.receivers()
        rows.append({self.xi: 1.0, self.xc: -1.0})  # xi <= xc
        bounds.append(0.0)
        for i in receivers:  # xc <= sum_j g[j][i] / P (g[i][i], the part i reduces itself, is free)
            rows.append({self.xc: 1.0, **{self.g(j, i): -1.0 / self.size for j in range(n)}})
            bounds.append(0.0)
        for i in self.able():  # t <= r_i
            rows.append({self.t: 1.0, self.r0 + i: -1.0})
            bounds.append(0.0)
        for i, p in enumerate(peers):
            up = {self.a(i, j): 1.0 for j in range(n) if j != i}
            up.update({self.g(i, j): 1.0 for j in range(n) if j != i})
            rows.append(up)
            bounds.append(max(p.upload, 0.0))
            down = {self.a(j, i): 1.0 for j in range(n) if j != i}
            down.update({self.g(j, i): 1.0 for j in range(n) if j != i})
            rows.append(down)
            bounds.append(max(p.download, 0.0))
        for i, p in enumerate(peers):
            d = max(p.download, 0.0)
            for k in range(n):  # m_i <= a[k][i] + d_i (1 - c_k)
                if k != i:
                    rows.append({self.m0 + i: 1.0, self.a(k, i): -1.0, self.c0 + k: d})
                    bounds.append(d)
            for j in receivers:  # g[i][j] <= m_i, and r_i <= g[i][j] (r_i is min_j g[i][j])
                rows.append({self.g(i, j): 1.0, self.m0 + i: -1.0})
                bounds.append(0.0)
                rows.append({self.r0 + i: 1.0, self.g(i, j): -1.0})
                bounds.append(0.0)
        return rows, bounds

    def variable_bounds(self) -> list[tuple[float, float | None]]:
        n, peers = self.n, self.peers
        limits: list[tuple[float, float | None]] = [(0.0, None)] * self.count
        for i in range(n):
            for j in range(n):
                # a peer that cannot be dialed receives no parts and returns none as a reducer
                if i == j or peers[j].client:
                    limits[self.a(i, j)] = (0.0, 0.0)
                if peers[i].client or peers[j].auxiliary:
                    limits[self.g(i, j)] = (0.0, 0.0)
            if peers[i].auxiliary or (peers[i].compute <= 0 and self.batch is not None):
                limits[self.c0 + i] = (0.0, 0.0)
            elif self.batch is None:
                limits[self.c0 + i] = (1.0, 1.0)  # plain averaging: every member with data sends it
            else:
                limits[self.c0 + i] = (0.0, 1.0)
            limits[self.m0 + i] = (0.0, 0.0) if peers[i].client else (0.0, None)
            limits[self.r0 + i] = (0.0, 0.0) if peers[i].client else (0.0, None)
        return limits

    def _matrix(self, rows: list[dict[int, float]], width: int) -> np.ndarray:
        matrix = np.zeros((len(rows), width))
        for index, terms in enumerate(rows):
            for column, value in terms.items():
                matrix[index, column] += value
        return matrix

    def utilization(self) -> np.ndarray:
        """Objective: the sum over peers of their traffic as fractions of their link speeds."""
        n, peers = self.n, self.peers
        cost = np.zeros(self.count)
        for i, p in enumerate(peers):
            for j in range(n):
                if i == j:
                    continue
                if p.upload > 0:  # i sends to j
                    cost[self.a(i, j)] += 1.0 / p.upload
                    cost[self.g(i, j)] += 1.0 / p.upload
                if p.download > 0:  # i receives from j
                    cost[self.a(j, i)] += 1.0 / p.download
                    cost[self.g(j, i)] += 1.0 / p.download
        return cost

    def solve(self) -> Plan | None:
        """Four solves, each keeping the optimum of the ones before: the fastest rounds (the paper's
        objective); then the fastest communication (it matters for latency even when compute is the
        bottleneck); then the least use of everyone's links (when the slowest links set the pace, many
        plans tie, and this one hands the work to the peers with the most capacity to spare, such as
        an auxiliary peer on a fast link); then the most even split of the reduction."""
        rows, bounds = self.constraints()
        matrix = self._matrix(rows, self.count)
        b = np.asarray(bounds, dtype=float)
        limits = self.variable_bounds()
        x: np.ndarray | None = None
        best_xi = 0.0
        goals: list[tuple[np.ndarray, bool]] = []
        for index in (self.xi, self.xc):
            goal = np.zeros(self.count)
            goal[index] = -1.0
            goals.append((goal, False))
        goals.append((self.utilization(), True))
        last = np.zeros(self.count)
        last[self.t] = -1.0
        goals.append((last, False))
        for number, (objective, minimizing) in enumerate(goals):
            result = linprog(objective, A_ub=matrix, b_ub=b, bounds=limits, method="highs")
            if result.status != 0 or result.x is None:
                break
            x = np.asarray(result.x)
            value = float(objective @ x)
            if number == 0:
                if -value <= 0:
                    return None
                best_xi = -value
            # keep this optimum (give or take a hair for round-off) while optimising the next goal
            slack = abs(value) * 1e-7 + (1e-12 if minimizing else 0.0)
            matrix = np.vstack([matrix, objective])
            b = np.append(b, value + slack)
        if x is None:
            return None
        return self._plan(x, best_xi)

    def _plan(self, x: np.ndarray, xi: float) -> Plan:
        receivers = self.receivers()
        rates = []
        for i in range(self.n):
            returns = [x[self.g(i, j)] for j in receivers]
            rates.append(max(0.0, float(min(returns))) if returns else 0.0)
        total = sum(rates)
        if total <= 0:
            return equal_plan(self.peers)
        # slivers are round-off let through by the tolerance each stage keeps, not real work
        rates = [rate if rate >= SLIVER * total else 0.0 for rate in rates]
        total = sum(rates)
        shares = tuple(rate / total for rate in rates)
        contributes = tuple(float(x[self.c0 + i]) for i in range(self.n))
        return Plan(shares, contributes, xi)


def split(total: int, shares: Sequence[float], min_part: int = 0) -> list[int]:
    """Whole-element part sizes from shares (largest remainder; shares below ``min_part`` drop to 0)."""
    raw = [total * s for s in shares]
    sizes = [math.floor(r) for r in raw]
    if min_part:
        for i, size in enumerate(sizes):
            if 0 < size < min_part:
                sizes[i] = 0
    remainder = total - sum(sizes)
    order = sorted(range(len(shares)), key=lambda i: (-(raw[i] - math.floor(raw[i])), i))
    eligible = [i for i in order if shares[i] > 0] or list(range(len(shares)))
    k = 0
    while remainder > 0:
        sizes[eligible[k % len(eligible)]] += 1
        remainder -= 1
        k += 1
    return sizes
