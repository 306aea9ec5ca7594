"""Running lookups for a node: seeds from the routing table, requests, and checking what comes back."""

from __future__ import annotations

import logging
from typing import Any

from core.dht.contacts import ContactBook
from core.dht.ids import id_to_bytes
from core.dht.messages import FindRequest, FoundRecord, NodeRef
from core.dht.records import InvalidRecord, StoredValue
from core.dht.routing import Contact
from core.dht.state import NodeState
from core.dht.traversal import Answer, QueryFailed, Search, run_searches
from core.net.errors import MalformedResponseError, NetError
from core.net.host.address import PeerAddress
from core.trust.peer_id import PeerID

log = logging.getLogger(__name__)

PARSED_CACHE = 4096


class Lookups:
    def __init__(self, state: NodeState, contacts: ContactBook) -> None:
        self._state = state
        self._contacts = contacts
        self._parsed: dict[tuple[PeerID, tuple[str, ...]], tuple[PeerAddress, ...]] = {}
        """Addresses already parsed, by what a node sent: the same nodes come back in answer after
        answer, and parsing a multiaddr (base58 PeerID included) is most of a lookup's CPU time."""

    async def run(
        self,
        targets: list[int],
        *,
        want_values: bool,
        stop_on_value: bool,
        keys: dict[int, Any] | None = None,
        locate: bool = False,
    ) -> list[Search]:
        """Search for every target at once; ``keys`` (id -> key) lets found records be validated."""
        state, config = self._state, self._state.config
        freshest = want_values and not stop_on_value and not locate
        searches = [
            Search(t, config.k, config.alpha, stop_on_value, locate, freshest) for t in targets
        ]
        seeds: dict[Any, Contact] = {}
        now = state.clock.monotonic()
        for target in targets:
            state.table.touch(target, now)
            for contact in state.table.nearest(target, config.k):
                seeds[contact.peer_id] = contact

        async def query(contact: Contact, batch: list[int]) -> list[Answer]:
            return await self._query(contact, batch, want_values)

        def accept(target: int, record: FoundRecord, sender: Contact) -> FoundRecord | None:
            assert keys is not None
            checked = self._validated(keys[target], record)
            if checked is None:
                self._contacts.garbage(sender, "it returned a record that breaks the rules")
            return checked

        await run_searches(
            searches, list(seeds.values()), query, accept if keys else None, config.lookup_timeout
        )
        return searches

    async def _query(self, contact: Contact, targets: list[int], want_values: bool) -> list[Answer]:
        state = self._state
        request = FindRequest(
            [id_to_bytes(t) for t in targets], want_values, state.config.client_mode
        )
        state.stats.sent["find"] += 1
        try:
            response = await state.transport.find(contact, request, state.config.rpc_timeout)
        except MalformedResponseError as exc:
            self._contacts.garbage(contact, str(exc))
            raise QueryFailed from None
        except NetError as exc:
            self._contacts.failed(contact, exc)
            raise QueryFailed from None
        if len(response.results) != len(targets):
            self._contacts.garbage(contact, "a find answer of the wrong length")
            raise QueryFailed
        self._contacts.alive(contact)
        answers: list[Answer] = []
        for result in response.results:
            nearest = []
            for ref in result.nearest[: state.config.k]:
                peer_contact = self._contact_from_ref(ref)
                if peer_contact is not None:
                    nearest.append(peer_contact)
            answers.append((result.record if want_values else None, nearest))
        return answers

    def _contact_from_ref(self, ref: NodeRef) -> Contact | None:
        if ref.peer == self._state.identity.peer_id or self._contacts.penalties.is_banned(ref.peer):
            return None
        known = self._state.table.get(ref.peer)
        if known is not None:
            return known
        texts = tuple(ref.addresses[:8])
        addresses = self._parsed.get((ref.peer, texts))
        if addresses is None:
            if len(self._parsed) >= PARSED_CACHE:
                self._parsed.clear()  # bounded; the next lookups refill it with who is around now
            addresses = self._parsed[(ref.peer, texts)] = tuple(
                PeerAddress.of_peer(ref.peer, texts)
            )
        return self._contacts.make(ref.peer, addresses) if addresses else None

    def _validated(self, key: Any, found: FoundRecord) -> FoundRecord | None:
        """``found`` without the values our schemas refuse; None (a liar) if a value breaks the
        rules every node keeps.

        A value that only a schema refuses is dropped, and the node that returned it is not held
        to blame: a node without that schema (a plain DHT node, or one that has not seen a ban
        yet) stores such values in good faith, and ignoring it would let a stranger silence
        honest nodes with one bad store."""
        state = self._state
        rules = state.rules
        now = state.clock.time()
        plain = found.plain
        subkeys = []
        try:
            if plain is not None and plain.expiration > now:
                rules.check_common(key, None, plain.stored(), now)
                if not self._schemas_allow(key, None, plain.stored(), now):
                    plain = None
            for entry in found.subkeys:
                if entry.value.expiration <= now:
                    subkeys.append(entry)  # expired: ignored by the merge, checked by nobody
                    continue
                stored = entry.value.stored()
                rules.check_common(key, entry.subkey, stored, now)
                if self._schemas_allow(key, entry.subkey, stored, now):
                    subkeys.append(entry)
        except InvalidRecord as exc:
            state.stats.refused_records += 1
            log.info("a node returned an invalid record for %r: %s", key, exc)
            return None
        if plain is found.plain and len(subkeys) == len(found.subkeys):
            return found
        return FoundRecord(plain, subkeys)

    def _schemas_allow(self, key: Any, subkey: Any, value: StoredValue, now: float) -> bool:
        try:
            self._state.rules.check_schemas(key, subkey, value, now)
        except InvalidRecord as exc:
            self._state.stats.refused_records += 1
            log.debug("dropped a value our rules refuse from %r: %s", key, exc)
            return False
        return True
