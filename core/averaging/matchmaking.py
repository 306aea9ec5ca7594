"""Forming groups through the DHT.

Every peer looking for a group declares itself under the round's key, in a subkey only it can write
(``[owner:<PeerID>]``), with the time it stops waiting. Peers are ordered by (that time, PeerID): each
one tries to join the best candidate strictly better than itself, and leads (waits for followers) when
there is none. Because the order is total and everyone only ever waits on someone better, two leaders
never wait on each other. A leader that discovers a better one sends its followers there and follows it
too. A leader closes its group when it reaches the target size, or at its deadline with at least the
minimum size; it draws a random group id and sends every member the same ordered member list.

How long a leader waits adapts: twice the recent time groups took to form, between the configured bounds.
A peer still looking past its deadline keeps its declaration alive in the DHT with the same place in
the order (one that changed mid-search would let two peers chase each other), and others keep
counting it as a candidate until the DHT drops it: on a loaded machine declarations can arrive
after their deadline.
Different rounds use different keys, and group ids keep rounds apart on the wire.

A caller that planned the round's groups (diloco: each member works the groups out from the
progress records) gives each searcher a *rank* in its group, and ranked peers are ordered by rank
instead, ahead of any unranked one: the group gathers at its planned leader (rank 0) as soon as
each member has read its declaration once, instead of at whoever came first, whose followers are
redirected whenever a better one turns up. Rank 0 expects nobody better: it reads the others'
declarations only now and then (views a member apart may have planned another leader), and a
member joining it does not make it read them again. In a swarm of many groups such reads are
most of the DHT's load at a round's end.

A caller that knows how much weight makes the round worth closing (a collaborative step's target
batch) says so: then a leader whose group holds less keeps waiting past its patience for the members
the caller expects, up to the whole timeout. Patience learned from past rounds says nothing about a
late member: the peer that arrives last has the shortest searches, and when it leads next time it
would close before the others finish the microbatch they were computing when the target was reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from core.averaging.config import AveragerConfig
from core.averaging.messages import JOIN, GroupSpec, JoinRequest, JoinResponse, MemberInfo
from core.averaging.registry import RoundRegistry
from core.dht import DHTNode, owner_marker
from core.dht.records import InvalidRecord, owner_of
from core.net.errors import NetError, PermissionDeniedError
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


NOT_LOOKING = "not looking for a group for that round"
FULL = "the group is full"
FINAL = frozenset((NOT_LOOKING, FULL))
"""Refusals that stand for the rest of a round: that peer is in a group already, or leads a full
one. Another refusal (it follows someone, it is about to give up) may not hold a moment later."""
TAKEN = "taken"
"""In a declaration's place of the client flag: that peer is in a group for the round already
(readers of any release skip it, as they skip a client's)."""
BUSY_RETRY = 0.5
"""Seconds before a candidate that refused for a passing reason is tried again."""
POLL_CAP = 0.5
"""The longest wait between two reads of the declarations while looking (they start quicker)."""
FIRST_POLL_CAP = 2.0
"""The same for a planned leader (rank 0), which expects nobody better than itself."""
MAX_RANK = 1 << 16

Order = tuple[int, float, bytes]
"""Searchers' order, best first: (0, rank, PeerID) for a ranked one, (1, deadline, PeerID)
otherwise."""


class MatchmakingError(BarnraiseError):
    """No group with enough members formed in time."""


@dataclass
class _Candidate:
    order: Order
    peer: PeerID
    addresses: list[PeerAddress]


@dataclass
class _Follower:
    info: MemberInfo
    answer: asyncio.Future[JoinResponse]


@dataclass
class _Search:
    round_key: str
    deadline: float
    """Wall-clock time this peer stops waiting as a leader."""
    order: Order
    rank: int | None = None
    """Our place in a group the caller planned (None: by our deadline)."""
    followers: list[_Follower] = field(default_factory=list)
    following: PeerID | None = None
    group: GroupSpec | None = None
    closed: bool = False
    expires: float = 0.0
    """When our declaration leaves the DHT (extended while we keep looking)."""
    target: int | None = None
    """Close at this many members (the config's target, or fewer when the caller knows better)."""
    weight: float = 0.0
    """What this peer brings to the round."""
    enough: float | None = None
    """The weight with which a group may close at ``patient_until``; short of it a leader waits
    until ``deadline`` (None: close at the deadline, which is then the patience)."""
    patient_until: float = 0.0
    answer_by: float = 0.0
    """When a leader with followers closes at the latest: before those who started with it give
    up (``deadline`` is when a leader alone stops waiting)."""
    slots: tuple[int, int] = (0, 0)
    """(slots, groups): in a round of more than one group, the group deals the round's vector in
    ``slots`` (its reducers then average it with the other groups')."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class Matchmaker:
    def __init__(
        self,
        host: Host,
        dht: DHTNode,
        prefix: str,
        config: AveragerConfig,
        *,
        registry: RoundRegistry,
        info: Callable[[], MemberInfo],
        banned: Callable[[PeerID], bool] | None = None,
    ) -> None:
        """``banned`` names peers this one refuses to group with (it neither follows nor admits
        them; see ``bans``)."""
        self._host = host
        self._dht = dht
        self._prefix = prefix
        self._config = config
        self._registry = registry
        self._info = info
        self._banned = banned or (lambda peer: False)
        self._searches: dict[str, _Search] = {}
        self._tasks = BackgroundTasks(f"matchmaking/{host.peer_id.short()}")
        self._typical: float | None = None  # moving average of how long groups took to form
        if not config.client_mode:
            host.router.add(JOIN, self._on_join)

    def reconfigure(self, config: AveragerConfig) -> None:
        """Take a new config (a role change between rounds): serve joins only when not a client.

        Ignored while a search is under way (it keeps the role it declared); the next one applies it.
        """
        if self._searches:
            return
        if config.client_mode != self._config.client_mode:
            if config.client_mode:
                self._host.router.remove(JOIN.name)
            else:
                self._host.router.add(JOIN, self._on_join)
        self._config = config

    async def close(self) -> None:
        if not self._config.client_mode:
            self._host.router.remove(JOIN.name)
        for search in list(self._searches.values()):
            self._disband(search, "the peer is shutting down", None)
        await self._tasks.close()

    def patience(self) -> float:
        """How long a leader waits for a full group, from how long groups have been taking."""
        config = self._config
        if self._typical is None:
            return config.min_matchmaking_time
        return min(config.max_matchmaking_time, max(config.min_matchmaking_time, 2 * self._typical))

    def _join_margin(self) -> float:
        return min(0.5, self._config.request_timeout / 4)

    def _key(self, round_key: str) -> str:
        return f"{self._prefix}.group.{round_key}"

    async def form_group(
        self,
        round_key: str,
        timeout: float,
        target_size: int | None = None,
        *,
        weight: float = 0.0,
        enough: float | None = None,
        uncapped: bool = False,
        slots: tuple[int, int] = (0, 0),
        rank: int | None = None,
    ) -> GroupSpec:
        """Find a group for ``round_key`` within ``timeout`` seconds; ``MatchmakingError`` otherwise.

        ``uncapped``: ``target_size`` may exceed the configured target (a column of groups, whose
        members each bring a small slot). ``slots`` (slots, groups): if we lead a group of a round
        of more than one, it deals the vector in ``slots`` (``GroupSpec.slots``).

        ``rank``: our place in the group the caller planned (0: its leader; see the module's
        docstring); None orders us by our deadline. ``target_size`` lowers the configured target
        for this round (e.g. to the number of peers known to be ready), so that a leader closes
        as soon as they have all joined. ``weight`` is what this peer brings (told to the
        leader); with ``enough``, a leader closes at its patience only when its members' weights
        add up to that much, and otherwise waits for ``target_size`` members until ``timeout``.
        """
        if round_key in self._searches:
            raise MatchmakingError(f"already looking for a group for {round_key!r}")
        loop = asyncio.get_running_loop()
        started = loop.time()
        clock = self._dht.state.clock
        now = clock.time()
        patient_until = now + min(timeout, self.patience())
        # told what is enough, a leader may wait almost its whole timeout. With followers it
        # closes two margins before it either way, ahead of the answer "no group" that a
        # follower who started with it gets one margin before its own timeout (``_on_join``): a
        # caller whose members share one deadline (diloco's rounds) would otherwise lose every
        # group whose leader came last
        waits = now + timeout - 2 * self._join_margin()
        deadline = patient_until if enough is None else max(patient_until, waits)
        me = self._host.peer_id
        if rank is not None and not 0 <= rank < MAX_RANK:
            raise ValueError(f"a rank is between 0 and {MAX_RANK - 1}")
        order = (1, deadline, me.to_bytes()) if rank is None else (0, float(rank), me.to_bytes())
        search = _Search(round_key, deadline, order, rank)
        search.weight, search.enough, search.patient_until = weight, enough, patient_until
        search.answer_by = waits
        target = self._config.target_group_size
        if target_size is not None:
            cap = target_size if uncapped else (target or target_size)
            target = max(self._config.min_group_size, min(cap, target_size))
        search.target = target
        search.slots = slots
        self._searches[round_key] = search
        info = replace(self._info(), weight=weight)
        try:
            await self._declare(search, info)
            group = await self._find(search, info, started + timeout)
        finally:
            search.closed = True
            if search.group is None:
                self._disband(search, "the leader gave up", None)
            del self._searches[round_key]
        took = loop.time() - started
        self._typical = took if self._typical is None else 0.7 * self._typical + 0.3 * took
        self._registry.expect(group.group_id)
        if not self._config.client_mode:
            self._tasks.spawn(f"taken-{round_key}", self._taken(search))
        return group

    async def _taken(self, search: _Search) -> None:
        """We are in a group: our declaration says so, and nobody tries to join us any more. When
        a round holds more peers than a group, those left over would otherwise spend their whole
        wait being refused by the members of full groups, one after another, and never meet."""
        with contextlib.suppress(BarnraiseError):
            await self._dht.store(
                self._key(search.round_key),
                [search.deadline, TAKEN, []],
                search.expires,
                subkey=owner_marker(self._host.peer_id),
            )

    async def _declare(self, search: _Search, info: MemberInfo) -> None:
        """Publish (or extend) our declaration; the deadline and rank in it, and so our place in
        the order, never change."""
        now = self._dht.state.clock.time()
        search.expires = max(search.deadline, now) + 2 * self._config.request_timeout
        value: list[Any] = [search.deadline, self._config.client_mode, info.addresses]
        if search.rank is not None:
            value.append(search.rank)
        await self._dht.store(
            self._key(search.round_key),
            value,
            search.expires,
            subkey=owner_marker(self._host.peer_id),
        )

    async def _find(self, search: _Search, info: MemberInfo, give_up: float) -> GroupSpec:
        """Join the best better candidate, or lead; until a group forms or ``give_up``.

        Ranks are fixed for the whole search, so the peer ranked first never follows anyone and
        everyone converges on it (or on whoever it follows). A candidate that refused us is tried again
        a little later: it may have been busy following someone and be leading again. One we could not
        reach is not tried again in this search. The declarations are read again when the last
        read's candidates are all tried; a planned leader reads them on its poll's timer only, not
        each time a member joins it.
        """
        loop = asyncio.get_running_loop()
        clock = self._dht.state.clock
        tried: dict[PeerID, float] = {}
        hint: PeerID | None = None
        poll = 0.02
        first = search.rank == 0
        cap = FIRST_POLL_CAP if first else POLL_CAP
        read_at = loop.time()
        better: list[_Candidate] = []
        while search.group is None and loop.time() < give_up:
            now = loop.time()
            tried = {peer: until for peer, until in tried.items() if until > now}
            # the next candidate of the last read before reading again: a late joiner would
            # otherwise read once for each member of a group that has closed
            better = [c for c in better if c.peer not in tried]
            if hint is not None and all(c.peer != hint for c in better):
                better = []
            if not better and (not first or now >= read_at):
                better = await self._better_candidates(search, set(tried))
                read_at = now + poll
            if hint is not None:
                better.sort(key=lambda c: c.peer != hint)
                hint = None
            if better:
                leader = better[0]
                if search.followers:
                    self._disband(search, "a better leader was found", leader.peer)
                answer = await self._join(search, info, leader, give_up)
                log.debug(
                    "%s %s: join %s -> %s",
                    self._host.peer_id.short(),
                    search.round_key,
                    leader.peer.short(),
                    "group" if answer and answer.group else (answer.reason if answer else "failed"),
                )
                if answer is not None and answer.group is not None and search.group is None:
                    return answer.group
                # one we could not reach is most likely gone (killed with its declaration still
                # in the DHT), and one in a group already or leading a full one stays so this
                # round: trying them again would disband our followers each time, for nothing.
                # One that refused in passing (it was following someone, say while it tried a
                # better peer itself) may lead a moment later: when a round holds more peers than
                # a group, the peers left over gather on the best of them
                final = answer is None or answer.reason in FINAL
                tried[leader.peer] = give_up if final else loop.time() + BUSY_RETRY
                if answer is not None and answer.redirect is not None:
                    hint = answer.redirect
                    tried.pop(answer.redirect, None)
                continue
            if self._ready_to_close(search):
                return self._close_group(search, info)
            if (
                not self._config.client_mode
                and clock.time() > search.expires - self._config.request_timeout
            ):
                # still looking past our deadline: stay visible (same place) until we give up
                await self._declare(search, info)
            wait = max(0.0, read_at - loop.time()) if first else poll
            if not await self._changed(search, wait, give_up):
                poll = min(poll * 1.5, cap)
        if search.group is not None:
            return search.group
        found = 1 + len(search.followers)
        raise MatchmakingError(
            f"found {found} of the {self._config.min_group_size} peers needed for "
            f"{search.round_key!r} in time"
        )

    async def _changed(self, search: _Search, wait: float, give_up: float) -> bool:
        """Wait up to ``wait`` seconds for the search to change (a member joined); False when
        nothing did. We wake at our deadlines and at the end of our patience, not a poll later."""
        search.changed.clear()
        now = self._dht.state.clock.time()
        times = (search.patient_until, search.deadline, search.answer_by)
        due = [t - now for t in times if t > now]
        left = max(0.0, give_up - asyncio.get_running_loop().time())
        try:
            async with asyncio.timeout(min(wait, *due, left)):
                await search.changed.wait()
        except TimeoutError:
            return False
        return True

    async def _better_candidates(self, search: _Search, tried: set[PeerID]) -> list[_Candidate]:
        """Candidates to follow, best first: strictly better ones, or any at all for a client
        (a client cannot be dialed, so it never leads)."""
        client = self._config.client_mode
        candidates = await self._candidates(search)
        return [
            c
            for c in candidates
            if (client or c.order < search.order)
            and c.peer not in tried
            and not self._banned(c.peer)
        ]

    def _ready_to_close(self, search: _Search) -> bool:
        if self._config.client_mode:
            return False
        size = 1 + len(search.followers)
        target = search.target
        if target is not None and size >= target:
            return True
        if size < self._config.min_group_size:
            return False
        now = self._dht.state.clock.time()
        if now >= search.deadline or (search.followers and now >= search.answer_by):
            return True
        if search.enough is None or now < search.patient_until:
            return False
        held = search.weight + sum(f.info.weight for f in search.followers)
        return held >= search.enough

    async def _candidates(self, search: _Search) -> list[_Candidate]:
        found = await self._dht.get(self._key(search.round_key), latest=True)
        if found is None or not isinstance(found.value, dict):
            return []
        candidates = []
        for subkey, entry in found.value.items():
            candidate = _parse_declaration(subkey, entry.value)
            if candidate is not None and candidate.peer != self._host.peer_id:
                candidates.append(candidate)
        candidates.sort(key=lambda c: c.order)
        return candidates

    async def _join(
        self, search: _Search, info: MemberInfo, leader: _Candidate, give_up: float
    ) -> JoinResponse | None:
        loop = asyncio.get_running_loop()
        search.following = leader.peer
        try:
            if leader.addresses:
                self._host.add_addresses(leader.peer, leader.addresses)
            remaining = max(0.05, give_up - loop.time())
            request = JoinRequest(search.round_key, info, self._dht.state.clock.time() + remaining)
            # the leader answers a margin before our deadline (see _on_join), so we wait that much
            # longer than the deadline: a group that includes us always reaches us
            return await self._host.call(
                leader.peer, JOIN, request, timeout=remaining + self._join_margin()
            )
        except NetError as exc:
            log.debug("joining %s failed: %s", leader.peer, exc)
            return None
        finally:
            search.following = None

    def _close_group(self, search: _Search, info: MemberInfo) -> GroupSpec:
        search.followers = [f for f in search.followers if not f.answer.done()]
        members = [info] + [f.info for f in search.followers]
        slots, groups = search.slots
        dealt = slots if slots and groups > 1 else 0
        group = GroupSpec(os.urandom(16), search.round_key, members, dealt)
        self._registry.expect(group.group_id)
        search.group = group
        for follower in search.followers:
            if not follower.answer.done():
                follower.answer.set_result(JoinResponse(group))
        search.followers = []
        search.changed.set()
        return group

    def _disband(self, search: _Search, reason: str, redirect: PeerID | None) -> None:
        for follower in search.followers:
            if not follower.answer.done():
                follower.answer.set_result(JoinResponse(None, reason, redirect))
        search.followers = []

    async def _on_join(self, ctx: CallContext, request: JoinRequest) -> JoinResponse:
        if request.info.peer != ctx.peer:
            raise PermissionDeniedError("a peer may only join as itself")
        if self._banned(ctx.peer):
            return JoinResponse(
                None, "this peer caught you lying in a round and does not group with you for now"
            )
        search = self._searches.get(request.round_key)
        if search is None or search.closed or search.group is not None:
            return JoinResponse(None, NOT_LOOKING)
        if search.following is not None:
            return JoinResponse(None, "following another leader", search.following)
        target = search.target
        if target is not None and 1 + len(search.followers) >= target:
            return JoinResponse(None, FULL)
        follower = _Follower(request.info, asyncio.get_running_loop().create_future())
        search.followers.append(follower)
        search.changed.set()
        # answer "no group" a margin before the follower gives up: a follower that timed out on its
        # side but was still counted here would be put in a group it never hears of
        wait = max(0.0, request.deadline - self._dht.state.clock.time() - self._join_margin())
        try:
            async with asyncio.timeout(wait):
                return await follower.answer
        except TimeoutError:
            if follower in search.followers:
                search.followers.remove(follower)
            return JoinResponse(None, "no group formed before the follower's deadline")
        except asyncio.CancelledError:
            if follower in search.followers:
                search.followers.remove(follower)
            raise


def _parse_declaration(subkey: Any, value: Any) -> _Candidate | None:
    """A peer's declaration, or None if it is malformed or from a client (who cannot lead):
    ``[deadline, client, addresses]``, then the peer's rank when it has one.

    A declaration whose deadline has passed still counts until the DHT drops it: its peer is most
    likely still looking (it renews), and a slow DHT must not hide every peer from every other.
    Joining one that has given up costs one quick refusal.
    """
    try:
        peer = owner_of(subkey)
    except InvalidRecord:
        return None
    if peer is None or not (isinstance(value, list) and len(value) in (3, 4)):
        return None
    deadline, client, addresses = value[:3]
    if not isinstance(deadline, int | float) or client is not False:
        return None
    if not isinstance(addresses, list):
        return None
    order: Order = (1, float(deadline), peer.to_bytes())
    if len(value) == 4:
        rank = value[3]
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < MAX_RANK:
            return None
        order = (0, float(rank), peer.to_bytes())
    return _Candidate(
        order,
        peer,
        PeerAddress.of_peer(peer, [a for a in addresses if isinstance(a, str)]),
    )
