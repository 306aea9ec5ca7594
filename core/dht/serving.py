"""Answering other nodes: ping, find (nodes and values) and store, with limits on request sizes."""

from __future__ import annotations

import logging

from core.dht.contacts import ContactBook
from core.dht.ids import id_from_bytes, key_id
from core.dht.merging import found_record
from core.dht.messages import (
    MAX_ITEMS_PER_STORE,
    MAX_KEYS_PER_REQUEST,
    FindRequest,
    FindResponse,
    FindResult,
    NodeRef,
    PingRequest,
    PingResponse,
    StoreRequest,
    StoreResponse,
)
from core.dht.quotas import source_of
from core.dht.records import InvalidRecord
from core.dht.state import NodeState
from core.dht.transport import Caller
from core.net.errors import InvalidRequestError

log = logging.getLogger(__name__)


class RequestServer:
    """The DHT's request handlers (what ``DHTTransport.serve`` is given)."""

    def __init__(self, state: NodeState, contacts: ContactBook) -> None:
        self._state = state
        self._contacts = contacts

    async def on_ping(self, caller: Caller, request: PingRequest) -> PingResponse:
        state = self._state
        state.stats.served["ping"] += 1
        self._contacts.saw(caller, request.client)
        return PingResponse(state.config.client_mode, state.clock.time())

    async def on_find(self, caller: Caller, request: FindRequest) -> FindResponse:
        state = self._state
        state.stats.served["find"] += 1
        if len(request.keys) > MAX_KEYS_PER_REQUEST:
            raise InvalidRequestError(f"at most {MAX_KEYS_PER_REQUEST} keys per find")
        self._contacts.saw(caller, request.client)
        results = []
        for raw in request.keys:
            try:
                target = id_from_bytes(raw)
            except ValueError as exc:
                raise InvalidRequestError(str(exc)) from None
            found = None
            if request.want_values:
                found = found_record(state.storage.get(target), state.cache.get(target))
            nearest = [
                NodeRef(c.peer_id, [str(a) for a in c.addresses])
                for c in state.table.nearest(target, state.config.k, exclude=caller.peer)
            ]
            results.append(FindResult(found, nearest))
        return FindResponse(results)

    async def on_store(self, caller: Caller, request: StoreRequest) -> StoreResponse:
        state = self._state
        state.stats.served["store"] += 1
        if len(request.items) > MAX_ITEMS_PER_STORE:
            raise InvalidRequestError(f"at most {MAX_ITEMS_PER_STORE} records per store")
        self._contacts.saw(caller, request.client)
        now = state.clock.time()
        source = source_of(caller.peer, caller.ip)
        accepted = []
        for item in request.items:
            value = item.value.stored()
            try:
                state.rules.check(item.key, item.subkey, value, now)
                kid = key_id(item.key)
            except (InvalidRecord, TypeError) as exc:
                state.stats.refused_records += 1
                log.debug("refused a record from %s: %s", caller.peer, exc)
                accepted.append(False)
                continue
            target = state.cache if item.in_cache else state.storage
            refused = target.refused_for_room
            accepted.append(target.store(kid, item.key, item.subkey, value, source))
            state.stats.quota_refusals += target.refused_for_room - refused
        return StoreResponse(accepted)
