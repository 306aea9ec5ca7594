"""Group (Moshpit) averaging over a grid of keys, and choosing the group size (DeDLOC Appendix C).

Peers sit on a ``dims``-dimensional grid with ``size`` cells per side. In round r, peers that share every
coordinate except dimension ``r mod dims`` meet under the same key and average together; afterwards each
takes its position in that group as its new coordinate along that dimension, so the next round's groups
mix members of different earlier groups. With full groups, ``dims`` rounds give every peer the exact
global mean (16 peers on a 4x4 grid: 2 rounds). Weights stay exact too: after a round a member carries
its whole group's weight into the next. A failure only affects its own group.

Group size: with n peers and a per-round failure probability p per peer, a global average needs
``ceil(log_m n)`` rounds of groups of m, and a group round succeeds (is not restarted) with probability
``(1 - p)^m``; the size chosen minimises the expected number of rounds ``ceil(log_m n) / (1 - p)^m``,
the larger size winning ties. Without failures that is m = n, one group, as DeDLOC observed.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.averaging.averager import Averager
    from core.averaging.result import AveragingResult


def choose_group_size(peers: int, failure_rate: float, smallest: int = 2) -> int:
    """The group size minimising the expected number of rounds to reach the global average."""
    if not 0 <= failure_rate < 1:
        raise ValueError("failure_rate must be in [0, 1)")
    if peers <= smallest:
        return max(peers, 1)
    best_cost, best_size = math.inf, peers
    for size in range(smallest, peers + 1):
        rounds = math.ceil(math.log(peers) / math.log(size) - 1e-9)
        cost = rounds / (1 - failure_rate) ** size
        if cost < best_cost * (1 - 1e-12) or (cost <= best_cost * (1 + 1e-12) and size > best_size):
            best_cost, best_size = cost, size
    return best_size


@dataclass(frozen=True)
class Grid:
    dims: int
    size: int

    @classmethod
    def for_peers(cls, peers: int, group_size: int) -> Grid:
        dims = max(1, math.ceil(math.log(max(peers, 1)) / math.log(max(group_size, 2)) - 1e-9))
        return cls(dims, group_size)

    def key(self, base: str, round_index: int, coords: Sequence[int]) -> str:
        """The group key of a peer at ``coords`` in round ``round_index``."""
        if len(coords) != self.dims:
            raise ValueError(f"coordinates need {self.dims} dimensions, got {len(coords)}")
        dim = round_index % self.dims
        rest = ".".join(str(c) for i, c in enumerate(coords) if i != dim)
        # the grid's shape is part of the key: peers that chose different grids never mix
        return f"{base}.{self.dims}x{self.size}.d{dim}.{rest or 'all'}"

    def advance(self, coords: Sequence[int], round_index: int, position: int) -> tuple[int, ...]:
        """Coordinates after a round in which the peer had ``position`` in its group."""
        moved = list(coords)
        moved[round_index % self.dims] = position % self.size
        return tuple(moved)


@dataclass
class MoshpitOutcome:
    coords: tuple[int, ...]
    weight: float
    results: list[AveragingResult] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return bool(self.results) and all(r.complete for r in self.results)


def grid_for(peers: int, failure_rate: float) -> Grid:
    """The grid for ``peers`` peers whose groups have the size ``choose_group_size`` picks."""
    return Grid.for_peers(peers, choose_group_size(peers, min(failure_rate, 0.99)))


def starting_coords(grid: Grid, seed: bytes) -> tuple[int, ...]:
    """Initial coordinates from a peer's id: spread evenly, and the same every time for that peer."""
    digest = hashlib.sha256(seed).digest()
    return tuple(digest[i] % grid.size for i in range(grid.dims))


async def moshpit_average(
    averager: Averager,
    tensors: Sequence[Any],
    *,
    grid: Grid | None = None,
    coords: Sequence[int] | None = None,
    peers: int | None = None,
    weight: float = 1.0,
    base_key: str = "moshpit",
    rounds: int | None = None,
    timeout: float | None = None,
) -> MoshpitOutcome:
    """Average ``tensors`` in place over ``rounds`` (default ``grid.dims``) group rounds.

    Without a ``grid``, one is chosen for ``peers`` peers from the failure rate this averager has
    observed; without ``coords``, they come from the peer's id. Every peer of a run must use the same
    grid: pass one explicitly when peers may have seen different failure rates.
    """
    if grid is None:
        if peers is None:
            raise ValueError("moshpit_average needs a grid or the number of peers")
        grid = grid_for(peers, averager.failure_rate)
    if coords is None:
        coords = starting_coords(grid, averager.host.peer_id.to_bytes())
    outcome = MoshpitOutcome(tuple(coords), weight)
    for round_index in range(grid.dims if rounds is None else rounds):
        key = grid.key(base_key, round_index, outcome.coords)
        result = await averager.average(
            tensors, weight=outcome.weight, round_key=key, timeout=timeout
        )
        outcome.results.append(result)
        if result.complete:
            outcome.weight = result.group_weight
        outcome.coords = grid.advance(outcome.coords, round_index, result.index)
    return outcome
