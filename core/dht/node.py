"""A DHT node: the engine-facing API (store, get and their batched forms) over Kademlia.

Stores go to the ``replicas`` nodes nearest to the key (found by one shared lookup for the whole batch).
Gets stop at the first valid value, or with ``latest=True`` ask every node near the key and keep the
freshest; a value found is cached on the nearest node that lacked it and locally. Owners republish their
records, buckets nobody looked through get refreshed, contacts that stop answering are evicted, and
nodes that answer garbage are ignored for a while.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.dht.batching import Coalescer
from core.dht.config import DHTConfig
from core.dht.ids import id_from_bytes, id_to_bytes, key_id, node_id, random_id_between
from core.dht.maintenance import Penalties
from core.dht.messages import (
    FindRequest,
    FindResponse,
    FindResult,
    FoundRecord,
    NodeRef,
    PingRequest,
    PingResponse,
    StoreItem,
    StoreRequest,
    StoreResponse,
    WireSubkey,
    WireValue,
)
from core.dht.records import (
    InvalidRecord,
    StoredValue,
    ValueWithExpiration,
    check_subkey,
    required_signer,
    signing_payload,
)
from core.dht.routing import Contact, RoutingTable
from core.dht.storage import Record, RecordStore
from core.dht.transport import Caller, DHTTransport
from core.dht.traversal import Answer, QueryFailed, Search, run_searches
from core.dht.validation import Limits, RecordRules, RecordSchema
from core.net.address import PeerAddress
from core.net.errors import AddressError, InvalidRequestError, MalformedResponseError, NetError
from core.net.peer_id import PeerID
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import pack, unpack
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

MAX_KEYS_PER_REQUEST = 256
MAX_ITEMS_PER_STORE = 256


class DHTError(BarnraiseError):
    """The DHT could not do what was asked (for example, no initial peer answered)."""


@dataclass
class _Published:
    key: Any
    subkey: Any
    value: StoredValue
    last_sent: float


@dataclass
class DHTStats:
    """Counters since the node started."""

    served: dict[str, int]
    sent: dict[str, int]
    failed_requests: int = 0
    refused_records: int = 0
    garbage_answers: int = 0


class DHTNode:
    """One node of the swarm's DHT, running in the engine's event loop."""

    def __init__(
        self,
        transport: DHTTransport,
        config: DHTConfig | None = None,
        *,
        clock: Clock | None = None,
        schemas: Sequence[RecordSchema] = (),
    ) -> None:
        self.transport = transport
        self.config = config = config or DHTConfig()
        self.clock = clock or SystemClock()
        self.identity = transport.identity
        self.peer_id = self.identity.peer_id
        self.node_id = node_id(self.peer_id)
        self.table = RoutingTable(self.node_id, config.k, config.depth_modulo)
        self.storage = RecordStore(self.clock, config.storage_capacity)
        self.cache = RecordStore(self.clock, config.cache_capacity)
        limits = Limits(config.max_key_bytes, config.max_value_bytes, config.max_expiration_ahead)
        self.rules = RecordRules(limits, schemas)
        self.penalties = Penalties(self.table, self.clock, config)
        self.stats = DHTStats(
            served={"ping": 0, "find": 0, "store": 0}, sent={"find": 0, "store": 0}
        )
        self._published: dict[tuple[int, Any], _Published] = {}
        self._tasks = BackgroundTasks(f"dht-{self.peer_id.short()}")
        self._evicting: set[PeerID] = set()
        self._bootstrapped = asyncio.Event()
        self._stores: Coalescer[tuple[int, Any, Any, StoredValue], bool] = Coalescer(
            "store-batch", self._store_prepared, self._tasks
        )
        self._gets: dict[bool, Coalescer[Any, ValueWithExpiration | None]] = {
            latest: Coalescer("get-batch", self._get_batch(latest), self._tasks)
            for latest in (False, True)
        }

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self, initial_peers: Sequence[PeerAddress | str] = ()) -> None:
        """Serve requests (unless a client), join through ``initial_peers``, start maintenance.

        Returns once an initial peer has answered (``DHTError`` if none does); the lookup of our own id,
        which fills the nearby buckets and makes our neighbours learn of us, goes on in the background
        (``wait_bootstrapped`` waits for it).
        """
        if not self.config.client_mode:
            self.transport.serve(self)
        await self.bootstrap(initial_peers)
        self._tasks.spawn("maintenance", self._maintain())

    async def wait_bootstrapped(self) -> None:
        await self._bootstrapped.wait()

    async def close(self) -> None:
        if not self.config.client_mode:
            self.transport.unserve()
        await self._tasks.close()

    async def bootstrap(self, initial_peers: Sequence[PeerAddress | str]) -> None:
        """Ping the initial peers, then (in the background) look ourselves up to fill nearby buckets."""
        if not initial_peers:
            self._bootstrapped.set()
            return
        addresses = [PeerAddress.parse(a) if isinstance(a, str) else a for a in initial_peers]
        for address in addresses:
            if address.peer_id is None:
                raise AddressError(f"initial peer {address} names no PeerID; add /p2p/<PeerID>")
        outcomes = await asyncio.gather(*(self._ping(address) for address in addresses))
        failures = [reason for reason in outcomes if reason is not None]
        if len(failures) == len(addresses):
            raise DHTError("could not reach any initial peer: " + "; ".join(failures))
        for reason in failures:
            log.warning("initial peer unreachable: %s", reason)
        self._tasks.spawn("self-lookup", self._self_lookup())

    async def _self_lookup(self) -> None:
        try:
            await self.find_nodes(self.node_id)
        finally:
            self._bootstrapped.set()

    async def _ping(self, address: PeerAddress) -> str | None:
        assert address.peer_id is not None
        contact = self._contact(address.peer_id, (address,))
        try:
            response = await self.transport.ping(
                contact, PingRequest(self.config.client_mode), self.config.rpc_timeout
            )
        except NetError as exc:
            return f"{address}: {exc}"
        if response.client:
            return f"{address}: it is a DHT client and cannot route"
        contact.last_seen = self.clock.monotonic()
        self._add_contact(contact)
        return None

    # ---- the API ---------------------------------------------------------------------------------

    async def store(self, key: Any, value: Any, expiration: float, subkey: Any = None) -> bool:
        """Store ``value`` under ``key`` (and ``subkey``) until ``expiration`` (Unix time).

        True when at least one node accepted it (or already held exactly this value). Owned keys and
        subkeys (``[owner:<our PeerID>]``) are signed with our identity; storing under another peer's
        owner marker raises ``InvalidRecord``, as does anything the DHT's rules would refuse.
        """
        return await self._stores.submit(self._prepare(key, value, expiration, subkey))

    async def store_many(self, items: Iterable[tuple[Any, ...]]) -> list[bool]:
        """Store ``(key, value, expiration)`` or ``(key, value, expiration, subkey)`` tuples together."""
        return await self._store_prepared([self._prepare(*item) for item in items])

    async def _store_prepared(
        self, prepared: list[tuple[int, Any, Any, StoredValue]]
    ) -> list[bool]:
        if not prepared:
            return []
        results = await self._replicate(prepared)
        now = self.clock.monotonic()
        for (kid, key, subkey, value), ok in zip(prepared, results, strict=True):
            if ok:
                self._published[(kid, subkey)] = _Published(key, subkey, value, now)
        return results

    async def get(self, key: Any, latest: bool = False) -> ValueWithExpiration | None:
        """The value under ``key``, or None. ``latest`` searches for the freshest copy."""
        if not latest:
            kid = key_id(key)
            local = self._merge_into(
                self._merge_into(None, self.storage.get(kid)), self.cache.get(kid)
            )
            if local is not None:
                return self._result(local, kid)
        return await self._gets[latest].submit(key)

    def _get_batch(
        self, latest: bool
    ) -> Callable[[list[Any]], Awaitable[list[ValueWithExpiration | None]]]:
        async def run(keys: list[Any]) -> list[ValueWithExpiration | None]:
            return await self.get_many(keys, latest=latest)

        return run

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]:
        """Values for several keys, found with one shared lookup."""
        kids = [key_id(key) for key in keys]
        by_id = dict(zip(kids, keys, strict=True))
        merged: dict[int, RecordStore] = {}
        wanted: list[int] = []
        for kid in dict.fromkeys(kids):
            local = self._merge_into(None, self.storage.get(kid))
            local = self._merge_into(local, self.cache.get(kid))
            if local is not None:
                merged[kid] = local
            if latest or local is None:
                wanted.append(kid)
        if wanted:
            searches = await self._lookup(
                wanted, want_values=True, stop_on_value=not latest, keys=by_id
            )
            for search in searches:
                for found, _ in search.records:
                    merged[search.target] = self._merge_found(
                        merged.get(search.target), by_id, search.target, found
                    )
                if search.records and not latest:
                    self._cache_along_path(by_id[search.target], search, merged[search.target])
        return [self._result(merged.get(kid), kid) for kid in kids]

    async def find_nodes(self, target: int) -> Search:
        """The nodes nearest to an id (a Kademlia node lookup), with its hop count."""
        return (await self._lookup([target], want_values=False, stop_on_value=False))[0]

    def stats_snapshot(self) -> dict[str, Any]:
        """Figures for logs and the control API."""
        return {
            "peer_id": str(self.peer_id),
            "client_mode": self.config.client_mode,
            "routing_table_size": len(self.table),
            "buckets": len(self.table.buckets),
            "records": len(self.storage),
            "cached_records": len(self.cache),
            "published_records": len(self._published),
            "banned_peers": self.penalties.banned_count(),
            "requests_served": dict(self.stats.served),
            "requests_sent": dict(self.stats.sent),
            "failed_requests": self.stats.failed_requests,
            "refused_records": self.stats.refused_records,
            "garbage_answers": self.stats.garbage_answers,
        }

    # ---- storing ---------------------------------------------------------------------------------

    def _prepare(
        self, key: Any, value: Any, expiration: float, subkey: Any = None
    ) -> tuple[int, Any, Any, StoredValue]:
        check_subkey(subkey)
        try:
            data = pack(value)
            kid = key_id(key)
        except TypeError as exc:
            raise InvalidRecord(f"keys and values must be msgpack-serializable: {exc}") from None
        expiration = float(expiration)
        signer = required_signer(key, subkey)
        signature = None
        if signer is not None:
            if signer != self.peer_id:
                raise InvalidRecord(f"the key belongs to {signer}; only that peer can store it")
            signature = self.identity.sign(signing_payload(key, subkey, data, expiration))
        value_ = StoredValue(data, expiration, signature)
        now = self.clock.time()
        if expiration <= now:
            raise InvalidRecord("the expiration time has already passed")
        self.rules.check(key, subkey, value_, now)
        return kid, key, subkey, value_

    async def _replicate(self, prepared: list[tuple[int, Any, Any, StoredValue]]) -> list[bool]:
        """Send each record to the ``replicas`` nodes nearest its key (and keep it, if we are one)."""
        targets = list(dict.fromkeys(kid for kid, *_ in prepared))
        lookups = await self._lookup(targets, want_values=False, stop_on_value=False, locate=True)
        searches = {search.target: search for search in lookups}
        accepted = [False] * len(prepared)
        # per key: the nodes still to try, nearest first, and how many copies are still wanted
        queue = {kid: [c.contact for c in searches[kid].nearest_known()] for kid in targets}
        wanted = dict.fromkeys(targets, self.config.replicas)
        self._keep_locally(prepared, queue, wanted, accepted)
        tried: set[tuple[int, PeerID]] = set()
        for _ in range(3):  # the nodes that fail are replaced by the next ones, at most twice
            plan = _plan_stores(prepared, queue, wanted, tried)
            if not plan:
                break
            sends = [
                self._send_store(contact, indices, prepared) for contact, indices in plan.values()
            ]
            outcomes = await asyncio.gather(*sends)
            failed: set[PeerID] = set()
            for (contact, indices), answers in zip(plan.values(), outcomes, strict=True):
                if answers is None:
                    failed.add(contact.peer_id)
                    continue
                for index, ok in zip(indices, answers, strict=True):
                    accepted[index] = accepted[index] or ok
                    tried.add((prepared[index][0], contact.peer_id))
            if not failed:
                break
            for kid in targets:
                queue[kid] = [c for c in queue[kid] if c.peer_id not in failed]
        return accepted

    def _keep_locally(
        self,
        prepared: list[tuple[int, Any, Any, StoredValue]],
        queue: dict[int, list[Contact]],
        wanted: dict[int, int],
        accepted: list[bool],
    ) -> None:
        if self.config.client_mode:
            return
        for index, (kid, key, subkey, value) in enumerate(prepared):
            if self._belongs_here(kid, queue[kid]):
                accepted[index] = self.storage.store(kid, key, subkey, value) or accepted[index]
                wanted[kid] = self.config.replicas - 1

    def _belongs_here(self, kid: int, nearest: list[Contact]) -> bool:
        """Whether we are among the ``replicas`` nodes closest to ``kid``."""
        if len(nearest) < self.config.replicas:
            return True
        return (self.node_id ^ kid) < (nearest[self.config.replicas - 1].node_id ^ kid)

    async def _send_store(
        self,
        contact: Contact,
        indices: list[int],
        prepared: Sequence[tuple[int, Any, Any, StoredValue]],
        *,
        in_cache: bool = False,
    ) -> list[bool] | None:
        """Ask one node to keep some records; None when it did not answer usefully."""
        results: list[bool] = []
        for start in range(0, len(indices), MAX_ITEMS_PER_STORE):
            chunk = indices[start : start + MAX_ITEMS_PER_STORE]
            items = [
                StoreItem(prepared[i][1], prepared[i][2], WireValue.of(prepared[i][3]), in_cache)
                for i in chunk
            ]
            self.stats.sent["store"] += 1
            try:
                response = await self.transport.store(
                    contact, StoreRequest(items, self.config.client_mode), self.config.rpc_timeout
                )
            except MalformedResponseError as exc:
                self._garbage(contact, str(exc))
                return None
            except NetError as exc:
                self._failed(contact, exc)
                return None
            if len(response.accepted) != len(chunk):
                self._garbage(contact, "a store answer of the wrong length")
                return None
            self._alive(contact)
            results.extend(response.accepted)
        return results

    # ---- looking up ------------------------------------------------------------------------------

    async def _lookup(
        self,
        targets: list[int],
        *,
        want_values: bool,
        stop_on_value: bool,
        keys: dict[int, Any] | None = None,
        locate: bool = False,
    ) -> list[Search]:
        config = self.config
        searches = [Search(t, config.k, config.alpha, stop_on_value, locate) for t in targets]
        seeds: dict[PeerID, Contact] = {}
        now = self.clock.monotonic()
        for target in targets:
            self.table.touch(target, now)
            for contact in self.table.nearest(target, config.k):
                seeds[contact.peer_id] = contact

        async def query(contact: Contact, batch: list[int]) -> list[Answer]:
            return await self._query(contact, batch, want_values)

        def accept(target: int, record: FoundRecord) -> FoundRecord | None:
            assert keys is not None
            return self._validated(keys[target], record)

        await run_searches(
            searches, list(seeds.values()), query, accept if keys else None, config.lookup_timeout
        )
        return searches

    async def _query(self, contact: Contact, targets: list[int], want_values: bool) -> list[Answer]:
        request = FindRequest(
            [id_to_bytes(t) for t in targets], want_values, self.config.client_mode
        )
        self.stats.sent["find"] += 1
        try:
            response = await self.transport.find(contact, request, self.config.rpc_timeout)
        except MalformedResponseError as exc:
            self._garbage(contact, str(exc))
            raise QueryFailed from None
        except NetError as exc:
            self._failed(contact, exc)
            raise QueryFailed from None
        if len(response.results) != len(targets):
            self._garbage(contact, "a find answer of the wrong length")
            raise QueryFailed
        self._alive(contact)
        answers: list[Answer] = []
        for result in response.results:
            nearest = []
            for ref in result.nearest[: self.config.k]:
                peer_contact = self._contact_from_ref(ref)
                if peer_contact is not None:
                    nearest.append(peer_contact)
            answers.append((result.record if want_values else None, nearest))
        return answers

    def _contact_from_ref(self, ref: NodeRef) -> Contact | None:
        if ref.peer == self.peer_id or self.penalties.is_banned(ref.peer):
            return None
        known = self.table.get(ref.peer)
        if known is not None:
            return known
        addresses = []
        for text in ref.addresses[:8]:
            try:
                address = PeerAddress.parse(text)
            except AddressError:
                continue
            if address.peer_id == ref.peer:
                addresses.append(address)
        return self._contact(ref.peer, tuple(addresses)) if addresses else None

    def _validated(self, key: Any, found: FoundRecord) -> FoundRecord | None:
        """``found`` if every value in it passes the rules for ``key``; None (a liar) otherwise."""
        now = self.clock.time()
        try:
            if found.plain is not None and found.plain.expiration > now:
                self.rules.check(key, None, found.plain.stored(), now)
            for entry in found.subkeys:
                if entry.value.expiration > now:
                    self.rules.check(key, entry.subkey, entry.value.stored(), now)
        except InvalidRecord as exc:
            self.stats.refused_records += 1
            log.info("a node returned an invalid record for %r: %s", key, exc)
            return None
        return found

    def _merge_into(self, merged: RecordStore | None, record: Record | None) -> RecordStore | None:
        if record is None:
            return merged
        merged = merged or RecordStore(self.clock, capacity=1)
        kid = key_id(record.key)
        if record.plain is not None:
            merged.store(kid, record.key, None, record.plain)
        for subkey, value in record.subkeys.items():
            merged.store(kid, record.key, subkey, value)
        return merged

    def _merge_found(
        self, merged: RecordStore | None, keys: dict[int, Any], kid: int, found: FoundRecord
    ) -> RecordStore:
        merged = merged or RecordStore(self.clock, capacity=1)
        key = keys[kid]
        if found.plain is not None:
            merged.store(kid, key, None, found.plain.stored())
        for entry in found.subkeys:
            try:
                check_subkey(entry.subkey)
            except InvalidRecord:
                continue
            merged.store(kid, key, entry.subkey, entry.value.stored())
        return merged

    def _result(self, merged: RecordStore | None, kid: int) -> ValueWithExpiration | None:
        record = merged.get(kid) if merged is not None else None
        if record is None:
            return None
        if record.plain is not None:
            return ValueWithExpiration(unpack(record.plain.data), record.plain.expiration)
        return ValueWithExpiration(
            {
                s: ValueWithExpiration(unpack(v.data), v.expiration)
                for s, v in record.subkeys.items()
            },
            record.expiration,
        )

    def _cache_along_path(self, key: Any, search: Search, merged: RecordStore) -> None:
        record = merged.get(search.target)
        if record is None:
            return
        values: list[tuple[int, Any, Any, StoredValue]] = []
        if record.plain is not None:
            values.append((search.target, key, None, record.plain))
        values.extend((search.target, key, s, v) for s, v in record.subkeys.items())
        for entry in values:
            self.cache.store(*entry)
        holders = {c.contact.peer_id for _, c in search.records}
        lacking = [c for c in search.without_value if c.contact.peer_id not in holders]
        if lacking:
            nearest = min(lacking, key=lambda c: c.distance)
            indices = list(range(len(values)))
            self._tasks.spawn(
                f"cache-{nearest.contact.peer_id.short()}",
                self._send_store(nearest.contact, indices, values, in_cache=True),
            )

    # ---- serving ---------------------------------------------------------------------------------

    async def on_ping(self, caller: Caller, request: PingRequest) -> PingResponse:
        self.stats.served["ping"] += 1
        self._saw(caller, request.client)
        return PingResponse(self.config.client_mode, self.clock.time())

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse:
        self.stats.served["find"] += 1
        if len(request.keys) > MAX_KEYS_PER_REQUEST:
            raise InvalidRequestError(f"at most {MAX_KEYS_PER_REQUEST} keys per find")
        self._saw(caller, request.client)
        results = []
        for raw in request.keys:
            try:
                target = id_from_bytes(raw)
            except ValueError as exc:
                raise InvalidRequestError(str(exc)) from None
            found = None
            if request.want_values:
                found = _found_record(self.storage.get(target), self.cache.get(target))
            nearest = [
                NodeRef(c.peer_id, [str(a) for a in c.addresses])
                for c in self.table.nearest(target, self.config.k, exclude=caller.peer)
            ]
            results.append(FindResult(found, nearest))
        return FindResponse(results)

    async def on_store(self, caller: Caller, request: StoreRequest) -> StoreResponse:
        self.stats.served["store"] += 1
        if len(request.items) > MAX_ITEMS_PER_STORE:
            raise InvalidRequestError(f"at most {MAX_ITEMS_PER_STORE} records per store")
        self._saw(caller, request.client)
        now = self.clock.time()
        accepted = []
        for item in request.items:
            value = item.value.stored()
            try:
                self.rules.check(item.key, item.subkey, value, now)
                kid = key_id(item.key)
            except (InvalidRecord, TypeError) as exc:
                self.stats.refused_records += 1
                log.debug("refused a record from %s: %s", caller.peer, exc)
                accepted.append(False)
                continue
            target = self.cache if item.in_cache else self.storage
            accepted.append(target.store(kid, item.key, item.subkey, value))
        return StoreResponse(accepted)

    # ---- contacts and penalties ------------------------------------------------------------------

    def _contact(self, peer: PeerID, addresses: tuple[PeerAddress, ...]) -> Contact:
        return Contact(peer, node_id(peer), addresses, self.clock.monotonic())

    def _saw(self, caller: Caller, client: bool) -> None:
        """A request is proof of life: servers that can be dialed back enter the routing table."""
        if client or not caller.addresses or self.penalties.is_banned(caller.peer):
            return
        self._add_contact(self._contact(caller.peer, caller.addresses))

    def _add_contact(self, contact: Contact) -> None:
        oldest = self.table.add(contact)
        if oldest is not None and oldest.peer_id not in self._evicting and not self._tasks.closed:
            self._evicting.add(oldest.peer_id)
            self._tasks.spawn(f"check-{oldest.peer_id.short()}", self._check_oldest(oldest))

    async def _check_oldest(self, contact: Contact) -> None:
        """A full bucket met a newcomer: keep the oldest contact if it still answers."""
        try:
            await self.transport.ping(
                contact, PingRequest(self.config.client_mode), self.config.rpc_timeout
            )
        except NetError:
            self.table.remove(contact.peer_id)
        else:
            self._alive(contact)
        finally:
            self._evicting.discard(contact.peer_id)

    def _alive(self, contact: Contact) -> None:
        """It answered: it belongs in the routing table (or moves to the fresh end of its bucket)."""
        contact.failures = 0
        contact.last_seen = self.clock.monotonic()
        if not self.penalties.is_banned(contact.peer_id):
            self._add_contact(contact)

    def _failed(self, contact: Contact, exc: Exception) -> None:
        self.stats.failed_requests += 1
        self.penalties.failed(contact, exc)

    def _garbage(self, contact: Contact, reason: str) -> None:
        self.stats.garbage_answers += 1
        self.penalties.garbage(contact.peer_id, reason)

    # ---- maintenance -----------------------------------------------------------------------------

    async def _maintain(self) -> None:
        config = self.config
        interval = max(0.05, min(config.refresh_interval, config.republish_interval) / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                await self._maintenance_round()
            except BarnraiseError as exc:
                log.warning("DHT maintenance round failed: %s", exc)

    async def _maintenance_round(self) -> None:
        self.storage.expire()
        self.cache.expire()
        self.penalties.forget_expired()
        now = self.clock.monotonic()
        for bucket in self.table.stale_buckets(now, self.config.refresh_interval):
            if len(self.table):
                await self.find_nodes(random_id_between(bucket.lower, bucket.upper))
            bucket.last_lookup = now
        await self._republish()

    async def _republish(self) -> None:
        wall, now = self.clock.time(), self.clock.monotonic()
        due = []
        for slot, published in list(self._published.items()):
            if published.value.expiration <= wall:
                del self._published[slot]
            elif now - published.last_sent >= self.config.republish_interval:
                due.append((slot, published))
        if not due or not len(self.table):
            return
        prepared = [(slot[0], p.key, p.subkey, p.value) for slot, p in due]
        await self._replicate(prepared)
        for _, published in due:
            published.last_sent = now


def _plan_stores(
    prepared: list[tuple[int, Any, Any, StoredValue]],
    queue: dict[int, list[Contact]],
    wanted: dict[int, int],
    tried: set[tuple[int, PeerID]],
) -> dict[PeerID, tuple[Contact, list[int]]]:
    """Which records to send to which node in this round (one request per node)."""
    plan: dict[PeerID, tuple[Contact, list[int]]] = {}
    for index, (kid, *_) in enumerate(prepared):
        for contact in queue[kid][: wanted[kid]]:
            if (kid, contact.peer_id) not in tried:
                plan.setdefault(contact.peer_id, (contact, []))[1].append(index)
    return plan


def _found_record(*records: Record | None) -> FoundRecord | None:
    """The wire form of what we hold for a key (storage first, then cache, freshest per subkey)."""
    plain: StoredValue | None = None
    subkeys: dict[Any, StoredValue] = {}
    for record in records:
        if record is None:
            continue
        if record.plain is not None and (
            plain is None or record.plain.expiration > plain.expiration
        ):
            plain = record.plain
        for subkey, value in record.subkeys.items():
            held = subkeys.get(subkey)
            if held is None or value.expiration > held.expiration:
                subkeys[subkey] = value
    if plain is None and not subkeys:
        return None
    return FoundRecord(
        WireValue.of(plain) if plain is not None else None,
        [WireSubkey(s, WireValue.of(v)) for s, v in subkeys.items()],
    )
