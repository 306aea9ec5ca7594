"""Placing copies: each record goes to the ``replicas`` nodes nearest its key, and found values are cached.

One lookup (in *locate* mode) serves every record of a batch; each node then gets one request with all
the records it should keep. Nodes that fail are replaced by the next nearest, at most twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from core.dht.contacts import ContactBook
from core.dht.lookups import Lookups
from core.dht.messages import MAX_ITEMS_PER_STORE, StoreItem, StoreRequest, WireValue
from core.dht.records import StoredValue
from core.dht.routing import Contact
from core.dht.state import NodeState
from core.dht.storage import RecordStore
from core.dht.traversal import Search
from core.net.errors import MalformedResponseError, NetError
from core.net.peer_id import PeerID

Prepared = tuple[int, Any, Any, StoredValue]
"""(key id, key, subkey, value) of one record ready to send."""


class Replicator:
    def __init__(self, state: NodeState, contacts: ContactBook, lookups: Lookups) -> None:
        self._state = state
        self._contacts = contacts
        self._lookups = lookups

    async def replicate(self, prepared: list[Prepared]) -> list[bool]:
        """Send each record to the nodes nearest its key (and keep it, if we are one of them)."""
        state = self._state
        targets = list(dict.fromkeys(kid for kid, *_ in prepared))
        lookups = await self._lookups.run(
            targets, want_values=False, stop_on_value=False, locate=True
        )
        searches = {search.target: search for search in lookups}
        accepted = [False] * len(prepared)
        # per key: the nodes still to try, nearest first, and how many copies are still wanted
        queue = {kid: [c.contact for c in searches[kid].nearest_known()] for kid in targets}
        wanted = dict.fromkeys(targets, state.config.replicas)
        self._keep_locally(prepared, queue, wanted, accepted)
        tried: set[tuple[int, PeerID]] = set()
        for _ in range(3):  # the nodes that fail are replaced by the next ones, at most twice
            plan = _plan(prepared, queue, wanted, tried)
            if not plan:
                break
            sends = [self.send(contact, indices, prepared) for contact, indices in plan.values()]
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
        prepared: list[Prepared],
        queue: dict[int, list[Contact]],
        wanted: dict[int, int],
        accepted: list[bool],
    ) -> None:
        state = self._state
        if state.config.client_mode:
            return
        for index, (kid, key, subkey, value) in enumerate(prepared):
            if self._belongs_here(kid, queue[kid]):
                accepted[index] = state.storage.store(kid, key, subkey, value) or accepted[index]
                wanted[kid] = state.config.replicas - 1

    def _belongs_here(self, kid: int, nearest: list[Contact]) -> bool:
        """Whether we are among the ``replicas`` nodes closest to ``kid``."""
        replicas = self._state.config.replicas
        if len(nearest) < replicas:
            return True
        return (self._state.node_id ^ kid) < (nearest[replicas - 1].node_id ^ kid)

    async def send(
        self,
        contact: Contact,
        indices: list[int],
        prepared: Sequence[Prepared],
        *,
        in_cache: bool = False,
    ) -> list[bool] | None:
        """Ask one node to keep some records; None when it did not answer usefully."""
        state = self._state
        results: list[bool] = []
        for start in range(0, len(indices), MAX_ITEMS_PER_STORE):
            chunk = indices[start : start + MAX_ITEMS_PER_STORE]
            items = [
                StoreItem(prepared[i][1], prepared[i][2], WireValue.of(prepared[i][3]), in_cache)
                for i in chunk
            ]
            state.stats.sent["store"] += 1
            try:
                response = await state.transport.store(
                    contact, StoreRequest(items, state.config.client_mode), state.config.rpc_timeout
                )
            except MalformedResponseError as exc:
                self._contacts.garbage(contact, str(exc))
                return None
            except NetError as exc:
                self._contacts.failed(contact, exc)
                return None
            if len(response.accepted) != len(chunk):
                self._contacts.garbage(contact, "a store answer of the wrong length")
                return None
            self._contacts.alive(contact)
            results.extend(response.accepted)
        return results

    def cache_along_path(self, key: Any, search: Search, merged: RecordStore) -> None:
        """Keep a found value in our cache and on the nearest node that was asked and lacked it."""
        state = self._state
        record = merged.get(search.target)
        if record is None:
            return
        values: list[Prepared] = []
        if record.plain is not None:
            values.append((search.target, key, None, record.plain))
        values.extend((search.target, key, s, v) for s, v in record.subkeys.items())
        for entry in values:
            state.cache.store(*entry)
        holders = {c.contact.peer_id for _, c in search.records}
        lacking = [c for c in search.without_value if c.contact.peer_id not in holders]
        if lacking and not state.tasks.closed:
            nearest = min(lacking, key=lambda c: c.distance)
            state.tasks.spawn(
                f"cache-{nearest.contact.peer_id.short()}",
                self.send(nearest.contact, list(range(len(values))), values, in_cache=True),
            )


def _plan(
    prepared: list[Prepared],
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
