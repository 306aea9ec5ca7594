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
from core.dht.quotas import LOCAL
from core.dht.records import StoredValue
from core.dht.routing import Contact
from core.dht.state import NodeState
from core.dht.storage import RecordStore
from core.dht.traversal import Search
from core.net.errors import MalformedResponseError, NetError
from core.trust.peer_id import PeerID

Prepared = tuple[int, Any, Any, StoredValue]
"""(key id, key, subkey, value) of one record ready to send."""


class Replicator:
    def __init__(self, state: NodeState, contacts: ContactBook, lookups: Lookups) -> None:
        self._state = state
        self._contacts = contacts
        self._lookups = lookups

    async def replicate(self, prepared: list[Prepared]) -> list[bool]:
        """Send each record to the nodes nearest its key (and keep it, if we are one of them).

        Returns once every record is held by ``store_quorum`` nodes, or once all attempts are over;
        the remaining copies keep going out in the background.
        """
        state = self._state
        targets = list(dict.fromkeys(kid for kid, *_ in prepared))
        lookups = await self._lookups.run(
            targets, want_values=False, stop_on_value=False, locate=True
        )
        searches = {search.target: search for search in lookups}
        # per key: the nodes still to try, nearest first, and how many copies are still wanted
        queue = {kid: [c.contact for c in searches[kid].nearest_known()] for kid in targets}
        wanted = dict.fromkeys(targets, state.config.replicas)
        progress = _Progress(len(prepared), min(state.config.store_quorum, state.config.replicas))
        self._keep_locally(prepared, queue, wanted, progress)
        if progress.decided.done():
            return progress.accepted
        placing = state.tasks.spawn("replicate", self._place(prepared, queue, wanted, progress))
        try:
            await asyncio.shield(progress.decided)
        except asyncio.CancelledError:
            if not placing.done():
                placing.cancel()
            raise
        return list(progress.accepted)

    async def _place(
        self,
        prepared: list[Prepared],
        queue: dict[int, list[Contact]],
        wanted: dict[int, int],
        progress: _Progress,
    ) -> None:
        try:
            tried: set[tuple[int, PeerID]] = set()
            for _ in range(3):  # the nodes that fail are replaced by the next ones, at most twice
                plan = _plan(prepared, queue, wanted, tried)
                if not plan:
                    return
                failed: set[PeerID] = set()
                await asyncio.gather(
                    *(
                        self._send_and_count(
                            contact,
                            indices,
                            prepared,
                            progress=progress,
                            tried=tried,
                            failed=failed,
                        )
                        for contact, indices in plan.values()
                    )
                )
                if not failed:
                    return
                for kid, contacts in list(queue.items()):
                    queue[kid] = [c for c in contacts if c.peer_id not in failed]
        finally:
            progress.finish()

    async def _send_and_count(
        self,
        contact: Contact,
        indices: list[int],
        prepared: list[Prepared],
        *,
        progress: _Progress,
        tried: set[tuple[int, PeerID]],
        failed: set[PeerID],
    ) -> None:
        answers = await self.send(contact, indices, prepared)
        if answers is None:
            failed.add(contact.peer_id)
            return
        for index, ok in zip(indices, answers, strict=True):
            tried.add((prepared[index][0], contact.peer_id))
            if ok:
                progress.held(index)

    def _keep_locally(
        self,
        prepared: list[Prepared],
        queue: dict[int, list[Contact]],
        wanted: dict[int, int],
        progress: _Progress,
    ) -> None:
        state = self._state
        if state.config.client_mode:
            return
        for index, (kid, key, subkey, value) in enumerate(prepared):
            if self._belongs_here(kid, queue[kid]):
                if state.storage.store(kid, key, subkey, value, LOCAL):
                    progress.held(index)
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
            state.cache.store(*entry, LOCAL)
        holders = {c.contact.peer_id for _, c in search.records}
        lacking = [c for c in search.without_value if c.contact.peer_id not in holders]
        if lacking and not state.tasks.closed:
            nearest = min(lacking, key=lambda c: c.distance)
            state.tasks.spawn(
                f"cache-{nearest.contact.peer_id.short()}",
                self.send(nearest.contact, list(range(len(values))), values, in_cache=True),
            )


class _Progress:
    """How many nodes hold each record of a batch, and whether the caller may stop waiting."""

    def __init__(self, count: int, quorum: int) -> None:
        self.accepted = [False] * count
        self._copies = [0] * count
        self._short = count  # records still below the quorum
        self._quorum = quorum
        self.decided: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def held(self, index: int) -> None:
        self.accepted[index] = True
        self._copies[index] += 1
        if self._copies[index] == self._quorum:
            self._short -= 1
            if self._short == 0:
                self.finish()

    def finish(self) -> None:
        if not self.decided.done():
            self.decided.set_result(None)


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
