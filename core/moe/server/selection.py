"""Which experts a server hosts: the uids it is told, a glob over the grid, or free slots.

``expand_uids`` turns what a person wrote (``ffn.0.3``, ``ffn.0.*``, ``ffn.[12].?``) into uids of
the grid, refusing a uid off the grid or a pattern that matches nothing. ``free_uids`` picks slots
that nobody announces yet, looked up in the DHT in chunks, in random order so that volunteers
starting together rarely pick the same ones; slots that already have a checkpoint here are
preferred (a volunteer who comes back takes its experts over again, if nobody else did meanwhile).
When the grid has fewer free slots than asked for, the rest are taken among announced ones: a
second server of an expert, found when the first leaves (two servers of one uid do not share
updates; trainers reach whichever announced last, see ``core.moe.announce``).
"""

from __future__ import annotations

import fnmatch
import logging
import random
from collections.abc import Sequence

from core.moe.announce import ExpertStore, get_experts
from core.moe.grid import ExpertGrid, GridError

log = logging.getLogger(__name__)

LOOKUP_CHUNK = 64
"""Uids asked for in one ``get_many`` while looking for free slots."""
_GLOB = frozenset("*?[")


def expand_uids(grid: ExpertGrid, patterns: Sequence[str]) -> list[str]:
    """The uids that ``patterns`` name, in the order first named, each once.

    A pattern with ``*``, ``?`` or ``[...]`` matches uids of the grid (``fnmatch``: ``*`` also
    crosses dots); any other is one uid, checked against the grid (``GridError`` says why not)."""
    uids: dict[str, None] = {}
    for pattern in patterns:
        if _GLOB.isdisjoint(pattern):
            grid.parse(pattern)
            uids[pattern] = None
            continue
        matched = [uid for uid in grid.all_uids() if fnmatch.fnmatchcase(uid, pattern)]
        if not matched:
            raise GridError(f"{pattern!r} matches no expert of grid {grid.prefix!r} {grid.shape}")
        uids.update(dict.fromkeys(matched))
    return list(uids)


async def free_uids(
    dht: ExpertStore,
    grid: ExpertGrid,
    count: int,
    *,
    prefer: Sequence[str] = (),
    rng: random.Random | None = None,
) -> list[str]:
    """``count`` uids of ``grid`` (all of it if smaller): unannounced ones first, ``prefer``red
    ones before the others."""
    if count < 1:
        raise GridError(f"a server hosts at least one expert, not {count}")
    count = min(count, grid.size)
    rng = rng or random.Random()
    preferred = [uid for uid in dict.fromkeys(prefer) if _on(grid, uid)]
    chosen = set(preferred)
    others = [uid for uid in grid.all_uids() if uid not in chosen]
    rng.shuffle(others)
    candidates = preferred + others
    free: list[str] = []
    taken: list[str] = []
    for start in range(0, len(candidates), LOOKUP_CHUNK):
        chunk = candidates[start : start + LOOKUP_CHUNK]
        announced = await get_experts(dht, chunk)
        for uid in chunk:
            (taken if uid in announced else free).append(uid)
        if len(free) >= count:
            return free[:count]
    extra = taken[: count - len(free)]
    if extra:
        log.warning(
            "grid %s has %d free slots of the %d asked for: also hosting %s, which others serve",
            grid.prefix,
            len(free),
            count,
            ", ".join(extra),
        )
    return free + extra


def _on(grid: ExpertGrid, uid: str) -> bool:
    try:
        grid.parse(uid)
    except GridError:
        return False
    return True
