"""A DHT node: the engine-facing API (store, get and their batched forms) over Kademlia.

Stores go to the ``replicas`` nodes nearest to the key (found by one shared lookup for the whole batch).
Gets stop at the first valid value, or with ``latest=True`` ask every node near the key and keep the
freshest; a value found is cached on the nearest node that lacked it and locally. Owners republish their
records, buckets nobody looked through get refreshed, contacts that stop answering are evicted, and
nodes that answer garbage are ignored for a while.

The work is split among ``ContactBook`` (routing-table upkeep), ``Lookups``, ``Replicator`` and
``RequestServer``, which share one ``NodeState``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from core.dht.batching import Coalescer
from core.dht.config import DHTConfig
from core.dht.contacts import ContactBook
from core.dht.ids import key_id, node_id, random_id_between
from core.dht.lookups import Lookups
from core.dht.merging import merge_found, merge_record, to_result
from core.dht.messages import PingRequest
from core.dht.quotas import Quotas
from core.dht.records import (
    InvalidRecord,
    StoredValue,
    ValueWithExpiration,
    check_subkey,
    required_signer,
    signing_payload,
)
from core.dht.replication import Prepared, Replicator
from core.dht.routing import RoutingTable
from core.dht.serving import RequestServer
from core.dht.state import NodeState
from core.dht.storage import RecordStore
from core.dht.transport import DHTTransport
from core.dht.traversal import Search
from core.dht.validation import Limits, RecordRules, RecordSchema
from core.net.errors import AddressError, DeadlineExceededError, NetError
from core.net.host.address import PeerAddress
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError
from core.util.msgpack_codec import pack
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


class DHTError(BarnraiseError):
    """The DHT could not do what was asked (for example, no initial peer answered)."""


@dataclass
class _Published:
    key: Any
    subkey: Any
    value: StoredValue
    last_sent: float


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
        config = config or DHTConfig()
        clock = clock or SystemClock()
        identity = transport.identity
        own_id = node_id(identity.peer_id)
        limits = Limits(config.max_key_bytes, config.max_value_bytes, config.max_expiration_ahead)
        quotas = Quotas(
            config.peer_quota_bytes,
            config.peer_quota_values,
            config.network_quota_bytes,
            config.network_quota_values,
        )

        def records(capacity: int, max_bytes: int) -> RecordStore:
            per_key = config.max_values_per_key
            return RecordStore(clock, capacity, per_key, max_bytes=max_bytes, quotas=quotas)

        self.state = state = NodeState(
            transport=transport,
            config=config,
            clock=clock,
            identity=identity,
            node_id=own_id,
            table=RoutingTable(own_id, config.k, config.depth_modulo),
            storage=records(config.storage_capacity, config.storage_bytes),
            cache=records(config.cache_capacity, config.cache_bytes),
            rules=RecordRules(limits, schemas),
            tasks=BackgroundTasks(f"dht-{identity.peer_id.short()}"),
        )
        self.peer_id = identity.peer_id
        self.contacts = ContactBook(state)
        self.lookups = Lookups(state, self.contacts)
        self.replicator = Replicator(state, self.contacts, self.lookups)
        self.server = RequestServer(state, self.contacts)
        self._published: dict[tuple[int, Any], _Published] = {}
        self._bootstrapped = asyncio.Event()
        self._stores: Coalescer[Prepared, bool] = Coalescer(
            "store-batch", self._store_prepared, state.tasks
        )
        self._gets: dict[bool, Coalescer[Any, ValueWithExpiration | None]] = {
            latest: Coalescer("get-batch", self._get_batch(latest), state.tasks)
            for latest in (False, True)
        }

    @property
    def config(self) -> DHTConfig:
        return self.state.config

    @property
    def table(self) -> RoutingTable:
        return self.state.table

    @property
    def storage(self) -> RecordStore:
        return self.state.storage

    @property
    def rules(self) -> RecordRules:
        return self.state.rules

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self, initial_peers: Sequence[PeerAddress | str] = ()) -> None:
        """Serve requests (unless a client), join through ``initial_peers``, start maintenance.

        Returns once an initial peer has answered (``DHTError`` if none does); the lookup of our own id,
        which fills the nearby buckets and makes our neighbours learn of us, goes on in the background
        (``wait_bootstrapped`` waits for it).
        """
        if not self.config.client_mode:
            self.state.transport.serve(self.server)
        await self.bootstrap(initial_peers)
        self.state.tasks.spawn("maintenance", self._maintain())

    async def wait_bootstrapped(self) -> None:
        await self._bootstrapped.wait()

    async def close(self) -> None:
        if not self.config.client_mode:
            self.state.transport.unserve()
        await self.state.tasks.close()

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
        self.state.tasks.spawn("self-lookup", self._self_lookup())

    async def _self_lookup(self) -> None:
        try:
            await self.find_nodes(self.state.node_id)
        finally:
            self._bootstrapped.set()

    async def _ping(self, address: PeerAddress) -> str | None:
        """None once ``address`` answered as a DHT server, else why it did not.

        A ping that ran out of time is sent again until a lookup's time is spent: its timeout covers
        connecting too, and on a busy machine the first TLS handshake can outlast one RPC's timeout
        while the connection goes on being made, which the next ping then finds. A refusal or a
        failed dial is final at once.
        """
        assert address.peer_id is not None
        state = self.state
        contact = self.contacts.make(address.peer_id, (address,))
        config = state.config
        tries = max(1, int(config.lookup_timeout // config.rpc_timeout))
        tried = 0
        while True:
            tried += 1
            state.stats.sent["ping"] += 1
            try:
                response = await state.transport.ping(
                    contact, PingRequest(config.client_mode), config.rpc_timeout
                )
            except DeadlineExceededError as exc:
                if tried < tries:
                    continue
                return f"{address}: {exc} ({tries} tries)"
            except NetError as exc:
                return f"{address}: {exc}"
            if response.client:
                return f"{address}: it is a DHT client and cannot route"
            self.contacts.alive(contact)
            return None

    # ---- the API ---------------------------------------------------------------------------------

    async def store(self, key: Any, value: Any, expiration: float, subkey: Any = None) -> bool:
        """Store ``value`` under ``key`` (and ``subkey``) until ``expiration`` (Unix time).

        True when at least one node accepted it (or already held exactly this value). Owned keys and
        subkeys (``[owner:<our PeerID>]``) are signed with our identity; storing under another peer's
        owner marker raises ``InvalidRecord``, as does anything the DHT's rules would refuse. Calls made
        together are served by one shared lookup.
        """
        return await self._stores.submit(self._prepare(key, value, expiration, subkey))

    async def store_many(self, items: Iterable[tuple[Any, ...]]) -> list[bool]:
        """Store ``(key, value, expiration)`` or ``(key, value, expiration, subkey)`` tuples together."""
        return await self._store_prepared([self._prepare(*item) for item in items])

    async def _store_prepared(self, prepared: list[Prepared]) -> list[bool]:
        if not prepared:
            return []
        results = await self.replicator.replicate(prepared)
        now = self.state.clock.monotonic()
        for (kid, key, subkey, value), ok in zip(prepared, results, strict=True):
            if ok:
                self._published[(kid, subkey)] = _Published(key, subkey, value, now)
        return results

    async def get(self, key: Any, latest: bool = False) -> ValueWithExpiration | None:
        """The value under ``key``, or None. ``latest`` searches for the freshest copy."""
        if not latest:
            local = self._local(key_id(key))
            if local is not None:
                return to_result(local, key_id(key))
        return await self._gets[latest].submit(key)

    def _get_batch(
        self, latest: bool
    ) -> Callable[[list[Any]], Awaitable[list[ValueWithExpiration | None]]]:
        async def run(keys: list[Any]) -> list[ValueWithExpiration | None]:
            return await self.get_many(keys, latest=latest)

        return run

    def _local(self, kid: int) -> RecordStore | None:
        state = self.state
        return merge_record(
            state.clock,
            merge_record(state.clock, None, state.storage.get(kid)),
            state.cache.get(kid),
        )

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]:
        """Values for several keys, found with one shared lookup."""
        clock = self.state.clock
        kids = [key_id(key) for key in keys]
        by_id = dict(zip(kids, keys, strict=True))
        merged: dict[int, RecordStore] = {}
        wanted: list[int] = []
        for kid in dict.fromkeys(kids):
            local = self._local(kid)
            if local is not None:
                merged[kid] = local
            if latest or local is None:
                wanted.append(kid)
        if wanted:
            searches = await self.lookups.run(
                wanted, want_values=True, stop_on_value=not latest, keys=by_id
            )
            for search in searches:
                kid = search.target
                for found, _ in search.records:
                    merged[kid] = merge_found(clock, merged.get(kid), by_id[kid], kid, found)
                if search.records and not latest:
                    self.replicator.cache_along_path(by_id[kid], search, merged[kid])
        return [to_result(merged.get(kid), kid) for kid in kids]

    async def find_nodes(self, target: int) -> Search:
        """The nodes nearest to an id (a Kademlia node lookup), with its hop count."""
        return (await self.lookups.run([target], want_values=False, stop_on_value=False))[0]

    def stats_snapshot(self) -> dict[str, Any]:
        """Figures for logs and the control API."""
        state = self.state
        return {
            "peer_id": str(self.peer_id),
            "client_mode": state.config.client_mode,
            "routing_table_size": len(state.table),
            "buckets": len(state.table.buckets),
            "records": len(state.storage),
            "cached_records": len(state.cache),
            "stored_bytes": state.storage.bytes_held,
            "cached_bytes": state.cache.bytes_held,
            "published_records": len(self._published),
            "banned_peers": self.contacts.penalties.banned_count(),
            "requests_served": dict(state.stats.served),
            "requests_sent": dict(state.stats.sent),
            "failed_requests": state.stats.failed_requests,
            "refused_records": state.stats.refused_records,
            "quota_refusals": state.stats.quota_refusals,
            "evicted_for_room": state.storage.evicted + state.cache.evicted,
            "garbage_answers": state.stats.garbage_answers,
        }

    def _prepare(self, key: Any, value: Any, expiration: float, subkey: Any = None) -> Prepared:
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
            signature = self.state.identity.sign(signing_payload(key, subkey, data, expiration))
        stored = StoredValue(data, expiration, signature)
        now = self.state.clock.time()
        if expiration <= now:
            raise InvalidRecord("the expiration time has already passed")
        self.state.rules.check(key, subkey, stored, now)
        return kid, key, subkey, stored

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
        state = self.state
        state.storage.expire()
        state.cache.expire()
        self.contacts.penalties.forget_expired()
        now = state.clock.monotonic()
        for bucket in state.table.stale_buckets(now, state.config.refresh_interval):
            if len(state.table):
                await self.find_nodes(random_id_between(bucket.lower, bucket.upper))
            bucket.last_lookup = now
        await self._republish()

    async def _republish(self) -> None:
        state = self.state
        wall, now = state.clock.time(), state.clock.monotonic()
        due = []
        for slot, published in list(self._published.items()):
            if published.value.expiration <= wall:
                del self._published[slot]
            elif now - published.last_sent >= state.config.republish_interval:
                due.append((slot, published))
        if not due or not len(state.table):
            return
        await self.replicator.replicate([(slot[0], p.key, p.subkey, p.value) for slot, p in due])
        for _, published in due:
            published.last_sent = now
