"""What expert servers write into the DHT so that trainers can find them (Appendix C's table), and
why nobody else can rewrite it.

For an expert ``ffn.3.17`` served at address A until time T by the server with PeerID S:

- ``"ffn.3.17"`` subkey ``[owner:S]`` -> A: where S serves the expert;
- ``"ffn"`` subkey ``3`` -> ``ACTIVE``: for every upper prefix, the next index that is active under
  it (the same value from every server);
- ``"ffn.3"`` subkey ``17[owner:S]`` -> A: the deepest prefix's entries carry the server's address.

The prefix records are dictionaries, so every server adds its own entries to the same key. The beam
search reads one prefix record to learn all active children of a prefix; the last level's values
already carry the servers' addresses, so finding the experts needs no extra lookup.

**Ownership.** Every entry that carries an address is an owned subkey: the DHT keeps it only with S's
signature, so no other peer can replace it (a later expiration from someone else is simply another
entry). ``expert_schema`` adds what the signature alone does not say: the address must be S's own
(its PeerID is S), so a stranger can announce an expert only at an address of its own, never point
trainers at a dead one in S's name; expirations may lie at most ``renewal_bound(ttl)`` in the future, so
an entry nobody refreshes is gone within minutes, not a day; upper entries hold ``ACTIVE`` and
nothing else, and cannot be shortened (a store that expires sooner is refused), so an attacker can at
worst keep an empty prefix looking active, which costs a trainer one lookup. When several servers
announce one expert, readers take the freshest entry whose server has not failed them
(``Candidates``), so a stranger's entry for a live expert costs at most one failed call.

Entries expire on their own: a server that leaves stops refreshing them, and after ``ttl`` seconds
trainers stop seeing its experts. ``Announcer`` refreshes every ``ttl / 3`` so a lost store or two
never lets a live expert vanish.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from core.dht.records import InvalidRecord, ValueWithExpiration, owner_marker, owner_of
from core.dht.validation import RecordSchema, renewal_bound
from core.moe.grid import ExpertGrid, GridError
from core.net.errors import AddressError
from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import unpack
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

ACTIVE = 1
"""The value of an upper prefix entry: the index below is active (who serves it is found deeper)."""


class ExpertStore(Protocol):
    """The part of ``DHTNode`` that announcing and finding experts use."""

    @property
    def peer_id(self) -> PeerID: ...

    async def store_many(self, items: Sequence[tuple[Any, ...]]) -> list[bool]: ...

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]: ...


def announcement(
    grid: ExpertGrid, uids: Sequence[str], address: str, expiration: float, owner: PeerID
) -> list[tuple[Any, ...]]:
    """The DHT items (``key, value, expiration, subkey``) by which ``owner`` announces ``uids`` at
    ``address``."""
    mine = owner_marker(owner)
    items: dict[tuple[str, Any], tuple[Any, ...]] = {}
    for uid in uids:
        coords = grid.parse(uid)
        items[(uid, mine)] = (uid, address, expiration, mine)
        for depth in range(grid.depth - 1):
            # above the last level an entry only says "active", so servers share it
            key = grid.key(coords[:depth])
            items[(key, coords[depth])] = (key, ACTIVE, expiration, coords[depth])
        last = grid.key(coords[:-1])
        subkey = f"{coords[-1]}{mine}"
        items[(last, subkey)] = (last, address, expiration, subkey)
    return list(items.values())


def suffix_index(subkey: Any) -> tuple[int, PeerID] | None:
    """The index and owner of a last-level prefix entry's subkey (``17[owner:S]``), or None."""
    if not isinstance(subkey, str):
        return None
    head, sep, _ = subkey.partition("[")
    if not sep or not head.isascii() or not head.isdigit() or len(head) > 9:
        return None
    if head != str(int(head)):  # one spelling per index, as the servers write it
        return None
    try:
        owner = owner_of(subkey)
    except InvalidRecord:
        return None
    if owner is None or subkey != f"{head}{owner_marker(owner)}":
        return None
    return int(head), owner


def address_owner(address: Any) -> PeerID | None:
    """The PeerID an announced address reaches, or None when it is not an address."""
    if not isinstance(address, str) or not address:
        return None
    try:
        return PeerAddress.parse(address).peer_id
    except AddressError:
        return None


def expert_schema(grid: ExpertGrid, ttl: float) -> RecordSchema:
    """The rules for ``grid``'s announcements (see the module's docstring), for a DHT node's
    ``rules`` (servers, trainers, and any node that keeps their records)."""

    def matches(key: Any) -> bool:
        if not isinstance(key, str):
            return False
        try:
            grid.parse_prefix(key)
        except GridError:
            return False
        return True

    def check(key: Any, subkey: Any, data: bytes, signer: PeerID | None) -> None:
        depth = len(grid.parse_prefix(key))
        value = unpack(data)
        if depth < grid.depth - 1:
            if isinstance(subkey, bool) or not isinstance(subkey, int):
                raise InvalidRecord(f"an upper prefix entry of {key!r} has an index as subkey")
            if not 0 <= subkey < grid.shape[depth] or value != ACTIVE:
                raise InvalidRecord(f"an upper prefix entry of {key!r} only says active")
            return
        if depth == grid.depth - 1:
            parsed = suffix_index(subkey)
            if parsed is None or not 0 <= parsed[0] < grid.shape[depth]:
                raise InvalidRecord(f"{key!r} holds <index>[owner:<PeerID>] subkeys only")
        elif subkey != (owner_marker(signer) if signer is not None else None):
            raise InvalidRecord(f"{key!r} holds one [owner:<PeerID>] subkey per server")
        if signer is None or address_owner(value) != signer:
            raise InvalidRecord(f"an entry of {key!r} must be its signer's own address")

    return RecordSchema(
        f"experts {grid.prefix}", matches, authorize_entry=check, max_ahead=renewal_bound(ttl)
    )


async def declare_experts(
    dht: ExpertStore,
    grid: ExpertGrid,
    uids: Sequence[str],
    address: PeerAddress | str,
    expiration: float,
) -> dict[str, bool]:
    """Announce that ``uids`` are served at ``address`` until ``expiration`` (Unix time).

    Returns, per uid, whether its own entry and its last-level prefix entry were accepted by at
    least one DHT node. Upper prefix entries are shared with other servers: nodes refuse ours when
    they hold one that expires later, which keeps the index active at least as long, so they do not
    count. A uid that is not on ``grid`` is a ``GridError`` and nothing is stored.
    """
    text = str(address)
    if not text:
        raise BarnraiseError("an expert server's address cannot be empty")
    uids = list(dict.fromkeys(uids))
    items = announcement(grid, uids, text, expiration, dht.peer_id)
    results = await dht.store_many(items)
    stored = {(item[0], item[3]): ok for item, ok in zip(items, results, strict=True)}
    mine = owner_marker(dht.peer_id)
    report = {}
    for uid in uids:
        coords = grid.parse(uid)
        report[uid] = stored[(uid, mine)] and stored[(grid.key(coords[:-1]), f"{coords[-1]}{mine}")]
    return report


def freshest(entries: Any, avoid: Callable[[str], bool] = lambda _: False) -> str | None:
    """Of a record's entries (subkey -> ``ValueWithExpiration``), the address expiring last that
    ``avoid`` does not rule out, or the one expiring last when it rules out all."""
    if not isinstance(entries, dict):
        return None
    found = sorted(
        (
            (entry.expiration, entry.value)
            for entry in entries.values()
            if isinstance(entry, ValueWithExpiration)
            and isinstance(entry.value, str)
            and entry.value
        ),
        reverse=True,
    )
    for _, address in found:
        if not avoid(address):
            return str(address)
    return str(found[0][1]) if found else None


async def get_experts(dht: ExpertStore, uids: Sequence[str]) -> dict[str, str]:
    """The addresses of those ``uids`` that are announced and not expired (the freshest entry of
    each); absent ones are left out."""
    wanted = list(dict.fromkeys(uids))
    for uid in wanted:
        if not isinstance(uid, str) or not uid:
            raise GridError(f"an expert uid is non-empty text, not {uid!r}")
    found = await dht.get_many(wanted)
    alive = {}
    for uid, record in zip(wanted, found, strict=True):
        address = freshest(record.value) if record is not None else None
        if address is not None:
            alive[uid] = address
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
