"""What expert servers write into the DHT so that trainers can find them (Appendix C's table).

For an expert ``ffn.3.17`` served at address A until time T, the server stores:

- ``"ffn.3.17"`` -> A (a plain value): where to call the expert;
- ``"ffn"`` subkey ``3`` -> ``ACTIVE`` and ``"ffn.3"`` subkey ``17`` -> A: for every proper prefix,
  the next index that is active under it; the deepest prefix's entries carry the server's address.

The prefix records are dictionaries with one subkey per next index, so every server adds its own
entries to the same key and the record's size is bounded by the grid's width, not by the number of
servers. The beam search reads one prefix record to learn all active children of a prefix; the last
level's values already carry the servers' addresses, so finding the experts needs no extra lookup.

The subkeys are plain integers, not owned (``[owner:<PeerID>]``) ones. An owned subkey must be signed
by its owner, so it would have to name the server (``"17[owner:…]"``): records would then grow with
every server hosting the same slot and readers would parse owner markers. The price of plain subkeys
is that any peer may overwrite an entry (newer expiration wins) with another address; trainers then
call a wrong server, which answers "unknown expert" and gets excluded from the mixture.

Entries expire on their own: a server that leaves stops refreshing them, and after ``ttl`` seconds
trainers stop seeing its experts. ``Announcer`` refreshes every ``ttl / 3`` so a lost store or two
never lets a live expert vanish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from core.dht.records import ValueWithExpiration
from core.moe.grid import ExpertGrid, GridError
from core.net.host.address import PeerAddress
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

ACTIVE = 1
"""The value of an upper prefix entry: the index below is active (who serves it is found deeper)."""


class ExpertStore(Protocol):
    """The part of ``DHTNode`` that announcing and finding experts use."""

    async def store_many(self, items: Sequence[tuple[Any, ...]]) -> list[bool]: ...

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]: ...


def announcement(
    grid: ExpertGrid, uids: Sequence[str], address: str, expiration: float
) -> list[tuple[Any, ...]]:
    """The DHT items (``key, value, expiration[, subkey]``) that announce ``uids`` at ``address``."""
    items: dict[tuple[str, int | None], tuple[Any, ...]] = {}
    for uid in uids:
        coords = grid.parse(uid)
        items[(uid, None)] = (uid, address, expiration)
        for depth in range(grid.depth):
            key = grid.key(coords[:depth])
            # one entry per (prefix, next index), shared by every expert below it; above the last
            # level it only says "active", so servers sharing it store identical data
            value = address if depth == grid.depth - 1 else ACTIVE
            items[(key, coords[depth])] = (key, value, expiration, coords[depth])
    return list(items.values())


async def declare_experts(
    dht: ExpertStore,
    grid: ExpertGrid,
    uids: Sequence[str],
    address: PeerAddress | str,
    expiration: float,
) -> dict[str, bool]:
    """Announce that ``uids`` are served at ``address`` until ``expiration`` (Unix time).

    Returns, per uid, whether its own record and its last-level prefix entry were accepted by at
    least one DHT node. Upper prefix entries are shared with other servers: nodes refuse ours when
    they hold one that expires later, which keeps the index active at least as long, so they do not
    count. A uid that is not on ``grid`` is a ``GridError`` and nothing is stored.
    """
    text = str(address)
    if not text:
        raise BarnraiseError("an expert server's address cannot be empty")
    uids = list(dict.fromkeys(uids))
    items = announcement(grid, uids, text, expiration)
    results = await dht.store_many(items)
    stored = {
        (item[0], item[3] if len(item) > 3 else None): ok
        for item, ok in zip(items, results, strict=True)
    }
    report = {}
    for uid in uids:
        coords = grid.parse(uid)
        report[uid] = stored[(uid, None)] and stored[(grid.key(coords[:-1]), coords[-1])]
    return report


async def get_experts(dht: ExpertStore, uids: Sequence[str]) -> dict[str, str]:
    """The addresses of those ``uids`` that are announced and not expired; absent ones are left out."""
    for uid in uids:
        if not isinstance(uid, str) or not uid:
            raise GridError(f"an expert uid is non-empty text, not {uid!r}")
    wanted = list(dict.fromkeys(uids))
    found = await dht.get_many(wanted)
    alive = {}
    for uid, record in zip(wanted, found, strict=True):
        # a dictionary or a non-text value here is someone else's junk under the uid's key
        if record is not None and isinstance(record.value, str) and record.value:
            alive[uid] = record.value
    return alive


class Announcer:
    """Keeps a server's experts announced: once at ``start``, then every ``ttl / 3`` seconds.

    ``address`` may be a function giving the server's best address at each round: behind a home
    router that changes (a relay address once a reservation is held, a direct one after a port
    mapping is confirmed), and trainers must always be sent where they can reach us now.
    """

    def __init__(
        self,
        dht: ExpertStore,
        grid: ExpertGrid,
        uids: Sequence[str],
        address: PeerAddress | str | Callable[[], PeerAddress | str],
        ttl: float,
        *,
        clock: Clock | None = None,
    ) -> None:
        if not ttl > 0:
            raise BarnraiseError(f"an announcement's time to live must be positive, not {ttl}")
        for uid in uids:
            grid.parse(uid)  # refuse bad uids now, not in the background task
        self.dht = dht
        self.grid = grid
        self.uids = list(uids)
        self._address = address
        self.ttl = float(ttl)
        self.clock = clock or SystemClock()
        self.rounds = 0
        self.last_report: dict[str, bool] = {}
        self._tasks = BackgroundTasks(f"announcer-{grid.prefix}")

    @property
    def address(self) -> str:
        """The address announced now."""
        address = self._address
        return str(address() if callable(address) else address)

    async def announce_once(self) -> dict[str, bool]:
        """Store every uid with an expiration ``ttl`` from now."""
        expiration = self.clock.time() + self.ttl
        self.last_report = await declare_experts(
            self.dht, self.grid, self.uids, self.address, expiration
        )
        self.rounds += 1
        missed = [uid for uid, ok in self.last_report.items() if not ok]
        if missed:
            log.warning("%d of %d experts were not announced", len(missed), len(self.uids))
        return self.last_report

    async def start(self) -> None:
        """Announce once (errors reach the caller), then keep refreshing in the background."""
        await self.announce_once()
        self._tasks.spawn("refresh", self._refresh_forever())

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                await self.announce_once()
            except (BarnraiseError, OSError) as exc:
                # the next round retries; the entries stored last time live for two more periods
                log.warning("announcing experts failed: %s", exc)

    async def close(self) -> None:
        """Stop refreshing; entries already stored expire on their own."""
        await self._tasks.close()
