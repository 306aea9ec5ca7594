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
shares the same way. Among optimal strategies it prefers, in order, the fastest communication and then
the split that gives every peer able to help the same fraction of what it could reduce alone (see
``_Program.solve``), so equal peers get equal parts and spare capacity is used, not one peer loaded.
Without a batch size (plain averaging) every non-reduce-only member contributes (``c_i = 1``) and the
compute constraint is left out; reduce-only members never contribute and need no result.

A group of 16 takes about 0.3 s to solve here, inside the event loop; ``PlanCache`` keeps recent plans,
since a collaboration's members announce the same capacities round after round.
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
    """Samples per second it can process (0 for reduce-only members)."""
    upload: float
    """Bytes per second it can send."""
    download: float
    """Bytes per second it can receive."""
    client: bool = False
    """It accepts no incoming connections (behind NAT): it sends and receives, reduces nothing."""
    reduce_only: bool = False
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
        self.t = self.xi + 2  # the max-min level of the final split
        self.count = self.xi + 3
        self.size = size
        self.batch = batch if batch and sum(p.compute for p in peers) > 0 else None

    def a(self, i: int, j: int) -> int:
        return self.a0 + i * self.n + j

    def g(self, i: int, j: int) -> int:
        return self.g0 + i * self.n + j

    def receivers(self) -> list[int]:
        return [j for j, p in enumerate(self.peers) if not p.reduce_only]

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
                if peers[i].client or peers[j].reduce_only:
                    limits[self.g(i, j)] = (0.0, 0.0)
            if peers[i].reduce_only or (peers[i].compute <= 0 and self.batch is not None):
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
        cost = np.zeros(self.count)
        for i, p in enumerate(self.peers):
            for j in range(self.n):
                if i == j:
                    continue
                if p.upload > 0:  # i sends to j
                    cost[self.a(i, j)] += 1.0 / p.upload
                    cost[self.g(i, j)] += 1.0 / p.upload
                if p.download > 0:  # i receives from j
                    cost[self.a(j, i)] += 1.0 / p.download
                    cost[self.g(j, i)] += 1.0 / p.download
        return cost

    def _optimum(
        self,
        matrix: np.ndarray,
        bounds: np.ndarray,
        limits: list[tuple[float, float | None]],
        objective: np.ndarray,
    ) -> np.ndarray | None:
        result = linprog(objective, A_ub=matrix, b_ub=bounds, bounds=limits, method="highs")
        if result.status != 0 or result.x is None:
            return None
        return np.asarray(result.x)

    def solve(self) -> Plan | None:
        """The paper's objective, then tie-breaks, each solve keeping the optima before it:

        1. the fastest rounds (``xi``);
        2. the fastest communication (it matters for latency even when compute is the bottleneck);
        3. the least use of everyone's links, each counted as a fraction of its speed: when the
           slowest links set the pace many plans tie, and this one sends the work where it costs the
           least, usually to one fast peer. (Spreading it over every peer with spare capacity is as
           fast in the program, but measured 4-11 % slower: each extra reducer adds its own
           pipeline fill and drain on the slow links; ``benchmarks/net/load_balancing.py``);
        4. for each peer able to reduce, the most it could reduce on its own (one solve each), then
           the split that gives each of them the same fraction of that, as large as possible
           (max-min): equal peers get equal shares whatever their order.
        """
        rows, bound_list = self.constraints()
        matrix = self._matrix(rows, self.count)
        bounds = np.asarray(bound_list, dtype=float)
        limits = self.variable_bounds()
        best_xi = 0.0
        x: np.ndarray | None = None
        for number, index in enumerate((self.xi, self.xc)):
            objective = np.zeros(self.count)
            objective[index] = -1.0
            found = self._optimum(matrix, bounds, limits, objective)
            if found is None:
                break
            x = found
            value = float(x[index])
            if number == 0:
                if value <= 0:
                    return None
                best_xi = value
            # keep this optimum (less a hair for round-off) while optimising the next goal
            low, high = limits[index]
            limits[index] = (max(low, value * (1 - 1e-7)), high)
        if x is None:
            return None
        usage = self.utilization()
        found = self._optimum(matrix, bounds, limits, usage)
        if found is not None:
            x = found
            least = float(usage @ x)
            matrix = np.vstack([matrix, usage])
            bounds = np.append(bounds, least * (1 + 1e-7) + 1e-12)
        alone: dict[int, float] = {}
        for i in self.able():
            objective = np.zeros(self.count)
            objective[self.r0 + i] = -1.0
            found = self._optimum(matrix, bounds, limits, objective)
            alone[i] = float(found[self.r0 + i]) if found is not None else 0.0
        top = max(alone.values(), default=0.0)
        helpers = {i: rate / top for i, rate in alone.items() if top > 0 and rate > SLIVER * top}
        if helpers:
            rows_t = []
            for i, weight in helpers.items():  # t * weight_i <= r_i
                row = np.zeros(self.count)
                row[self.t] = weight
                row[self.r0 + i] = -1.0
                rows_t.append(row)
            objective = np.zeros(self.count)
            objective[self.t] = -1.0
            found = self._optimum(
                np.vstack([matrix, *rows_t]),
                np.concatenate([bounds, np.zeros(len(rows_t))]),
                limits,
                objective,
            )
            if found is not None:
                x = found
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


class PlanCache:
    """The last few plans, by their inputs (an Averager holds one)."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._plans: dict[tuple[tuple[PeerCapacity, ...], float, float | None], Plan] = {}

    def plan(
        self, peers: Sequence[PeerCapacity], vector_bytes: float, batch_size: float | None = None
    ) -> Plan:
        key = (tuple(peers), float(vector_bytes), batch_size)
        found = self._plans.pop(key, None)
        if found is None:
            known = any(p.upload > 0 or p.download > 0 for p in peers)
            found = solve(peers, vector_bytes, batch_size) if known else equal_plan(peers)
        self._plans[key] = found  # most recent last
        while len(self._plans) > self._size:
            del self._plans[next(iter(self._plans))]
        return found


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
