"""Sharing the full state (tensors plus metadata) so that a peer that fell behind can catch up.

Donors announce themselves in the DHT with the version (epoch) of their state. A downloader picks the
newest version, asks its donors for the state's layout, splits the bytes into ranges and fetches them
from several donors at once (so that late joiners do not all load one donor). A donor that fails
mid-range costs only the rest of that range, which another donor serves: the download resumes where it
stopped. Each donor serves a snapshot taken when the version was first asked for, so the bytes of one
version never change under a download.

A downloader asks for a state newer than its own: the newest version first, and when every donor of
that version fails (a trainer that left without withdrawing its announcement), the next newest, so
that a live donor with an older state (an auxiliary peer) still serves, while one no newer than the
downloader's own state is never used (nobody is rolled back). Announcements live ``STATE_TTL``
seconds; donors renew them every ``ANNOUNCE_EVERY`` and withdraw them when they stop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.averaging.messages import STATE_HEADER, STATE_RANGE, Empty, StateHeader, StateRequest
from core.dht import DHTNode, owner_marker
from core.dht.records import InvalidRecord, owner_of
from core.dht.validation import RecordSchema, renewal_bound
from core.net.errors import NetError, NotFoundError
from core.net.host.address import PeerAddress
from core.net.host.host import Host
from core.net.wire.rpc import CallContext
from core.net.wire.stream import Stream
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)

STATE_TTL = 20.0
"""Seconds a donor's announcement lives unless renewed."""
ANNOUNCE_EVERY = 5.0
"""Seconds between a donor's renewals: several per ``STATE_TTL``."""

StateProvider = Callable[[], tuple[int, dict[str, Any], Sequence[Any]]]
"""Returns (version, metadata, tensors) of the current state."""


@dataclass(frozen=True)
class PackedState:
    """A state laid out as it travels: every tensor's bytes one after another in ``data``.

    A donor whose state is large packs it where its tensors live (a training thread), once per
    version and only when asked, rather than have every version copied on the event loop."""

    version: int
    metadata: dict[str, Any]
    shapes: list[list[int]]
    dtypes: list[str]
    data: np.ndarray
    """uint8, ``sum(prod(shape) * itemsize)`` bytes."""


PackedProvider = Callable[[], Awaitable[PackedState]]
"""Packs the current state (awaited when a downloader first asks for a version)."""


class StateDownloadError(BarnraiseError):
    """No donor could provide the state."""


@dataclass
class DownloadedState:
    version: int
    metadata: dict[str, Any]
    tensors: list[np.ndarray]
    donors: list[PeerID]


@dataclass
class _Snapshot:
    header: StateHeader
    data: np.ndarray  # uint8, the tensors' bytes one after another
    last_used: float


class StateSharing:
    def __init__(
        self,
        host: Host,
        dht: DHTNode,
        prefix: str,
        *,
        keep_seconds: float = 120.0,
        refuse: Callable[[PeerID], bool] | None = None,
    ) -> None:
        self._host = host
        self._dht = dht
        self._refuse = refuse
        """Donors never to load from: the averager's ban list (a reducer caught lying would go on
        announcing the state it trained alone on its lies)."""
        self._key = f"{prefix}.state"
        # announcements are renewed every few seconds: a day-long one would offer a donor that
        # left long ago
        dht.rules.add_schema(
            RecordSchema("state", self._key, subkeys="owned", max_ahead=renewal_bound(STATE_TTL))
        )
        self._provider: StateProvider | None = None
        self._packed: tuple[Callable[[], int], PackedProvider] | None = None
        self._snapshot: _Snapshot | None = None
        self._packing = asyncio.Lock()
        """One packing at a time: downloaders asking together share it."""
        self._keep = keep_seconds

    # ---- donor side ------------------------------------------------------------------------------

    def serve(self, provider: StateProvider) -> None:
        """Serve what ``provider`` returns, copied on the event loop when a version is first
        asked for (small states)."""
        self._provider = provider
        self._host.router.add(STATE_HEADER, self._on_header)
        self._host.router.add_stream(STATE_RANGE, self._on_range)

    def serve_packed(self, version: Callable[[], int], pack: PackedProvider) -> None:
        """Serve what ``pack`` makes when a downloader first asks for ``version()``: a large
        state's owner packs it off the event loop (``PackedState``), and nothing is copied for
        a version nobody asks for."""
        self._packed = (version, pack)
        self._host.router.add(STATE_HEADER, self._on_header)
        self._host.router.add_stream(STATE_RANGE, self._on_range)

    def stop_serving(self) -> None:
        self._provider = None
        self._packed = None
        self._snapshot = None
        self._host.router.remove(STATE_HEADER.name)
        self._host.router.remove(STATE_RANGE.name)

    async def announce(self, version: int, ttl: float = STATE_TTL) -> bool:
        """Tell the DHT we can give state ``version``; call again before ``ttl`` runs out."""
        value = [version, [str(a) for a in self._host.addresses]]
        return await self._dht.store(
            self._key, value, time.time() + ttl, subkey=owner_marker(self._host.peer_id)
        )

    async def keep_announced(
        self, version: Callable[[], int | None], every: float = ANNOUNCE_EVERY
    ) -> None:
        """Renew our announcement every ``every`` seconds with ``version()`` (None: nothing to
        give now, so no renewal), until cancelled."""
        while True:
            await asyncio.sleep(every)
            current = version()
            if current is None:
                continue
            try:
                await self.announce(current)
            except BarnraiseError as exc:
                log.debug("renewing the state announcement failed: %s", exc)

    async def withdraw(self, ttl: float = STATE_TTL) -> bool:
        """Replace our announcement with one that names no state (downloaders skip it)."""
        return await self._dht.store(
            self._key, [-1, []], time.time() + ttl, subkey=owner_marker(self._host.peer_id)
        )

    async def _current(self) -> _Snapshot:
        if self._packed is not None:
            return await self._current_packed(*self._packed)
        if self._provider is None:
            raise NotFoundError("this peer shares no state")
        version, metadata, tensors = self._provider()
        held = self._held(version)
        if held is not None:
            return held
        arrays = [_as_array(t) for t in tensors]
        data = (
            np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])
            if arrays
            else np.zeros(0, np.uint8)
        )
        header = StateHeader(
            version,
            metadata,
            [list(a.shape) for a in arrays],
            [a.dtype.str for a in arrays],
            int(data.size),
        )
        self._snapshot = _Snapshot(header, data, time.monotonic())
        return self._snapshot

    async def _current_packed(self, version: Callable[[], int], pack: PackedProvider) -> _Snapshot:
        async with self._packing:
            held = self._held(version())
            if held is not None:
                return held
            packed = await pack()
            header = StateHeader(
                packed.version, packed.metadata, packed.shapes, packed.dtypes, int(packed.data.size)
            )
            self._snapshot = _Snapshot(header, packed.data, time.monotonic())
            return self._snapshot

    def _held(self, version: int) -> _Snapshot | None:
        """The snapshot of ``version`` already made, unless nobody used it for ``_keep`` s."""
        held, now = self._snapshot, time.monotonic()
        if held is None or held.header.version != version or now - held.last_used >= self._keep:
            return None
        held.last_used = now
        return held

    async def _on_header(self, ctx: CallContext, request: Empty) -> StateHeader:
        return (await self._current()).header

    async def _on_range(self, ctx: CallContext, request: StateRequest, stream: Stream) -> Empty:
        snapshot = self._snapshot or await self._current()
        if not 0 <= request.start <= request.end <= snapshot.data.size:
            raise NotFoundError("that range is outside the state")
        snapshot.last_used = time.monotonic()
        await stream.send_data(snapshot.data[request.start : request.end].data)
        return Empty()

    # ---- downloader side -------------------------------------------------------------------------

    async def donors(self) -> list[tuple[int, PeerID, list[PeerAddress]]]:
        """Donors from the DHT, newest version first."""
        found = await self._dht.get(self._key, latest=True)
        donors = []
        if found is not None and isinstance(found.value, dict):
            for subkey, entry in found.value.items():
                try:
                    peer = owner_of(subkey)
                except InvalidRecord:
                    continue
                value = entry.value
                if (
                    peer is None
                    or peer == self._host.peer_id
                    or (self._refuse is not None and self._refuse(peer))
                    or not isinstance(value, list)
                    or len(value) != 2
                ):
                    continue
                version, addresses = value
                if isinstance(version, int) and version >= 0 and isinstance(addresses, list):
                    donors.append(
                        (
                            version,
                            peer,
                            PeerAddress.of_peer(peer, [a for a in addresses if isinstance(a, str)]),
                        )
                    )
        donors.sort(key=lambda d: (-d[0], d[1].to_bytes()))
        return donors

    async def download(
        self,
        *,
        newer_than: int = -1,
        timeout: float = 60.0,
        max_donors: int = 3,
        range_bytes: int = 8 << 20,
        accept: Callable[[dict[str, Any]], bool] | None = None,
    ) -> DownloadedState:
        """The newest state newer than ``newer_than`` that a donor can give, fetched from up to
        ``max_donors`` donors of that version at once. ``accept`` (given the metadata a donor's
        header names) may refuse states of a kind the caller must not load: the next older
        version is tried then."""
        async with asyncio.timeout(timeout):
            donors = await self.donors()
            if not donors:
                raise StateDownloadError("no peer announces a state to download")
            versions = sorted({version for version, _, _ in donors if version > newer_than})
            if not versions:
                raise StateDownloadError(
                    f"no donor has a state newer than epoch {newer_than} "
                    f"(the newest announced is {donors[0][0]})"
                )
            reasons = []
            for version in reversed(versions):
                candidates = [(peer, addresses) for v, peer, addresses in donors if v == version]
                for peer, addresses in candidates:
                    if addresses:
                        self._host.add_addresses(peer, addresses)
                try:
                    return await self._fetch(
                        version, candidates[: max(1, max_donors)], candidates, range_bytes, accept
                    )
                except StateDownloadError as exc:
                    reasons.append(f"epoch {version}: {exc}")
            raise StateDownloadError("; ".join(reasons))

    async def _fetch(
        self,
        version: int,
        chosen: list[tuple[PeerID, list[PeerAddress]]],
        everyone: list[tuple[PeerID, list[PeerAddress]]],
        range_bytes: int,
        accept: Callable[[dict[str, Any]], bool] | None = None,
    ) -> DownloadedState:
        header, reasons = None, []
        for peer, _ in everyone:
            try:
                header = await self._host.call(peer, STATE_HEADER, Empty())
            except NetError as exc:
                reasons.append(f"{peer.short()}: {exc}")
                continue
            if header.version == version and (accept is None or accept(dict(header.metadata))):
                break
            if header.version == version:
                reasons.append(f"{peer.short()}: its state is not one to load")
            header = None
        if header is None:
            raise StateDownloadError("no donor answered: " + "; ".join(reasons))
        job = _Download(self._host, header, range_bytes)
        chosen_peers = [peer for peer, _ in chosen]
        await job.run(chosen_peers, [peer for peer, _ in everyone if peer not in chosen_peers])
        return DownloadedState(header.version, dict(header.metadata), job.tensors(), job.used)


class _Download:
    """One download: byte ranges handed to donors, and handed back when a donor fails."""

    def __init__(self, host: Host, header: StateHeader, range_bytes: int) -> None:
        self._host = host
        self.header = header
        self.data = np.empty(header.total_bytes, dtype=np.uint8)
        self.ranges: deque[tuple[int, int]] = deque(
            (start, min(start + range_bytes, header.total_bytes))
            for start in range(0, header.total_bytes, range_bytes)
        )
        self.used: list[PeerID] = []
        self.failed: set[PeerID] = set()
        self.reasons: list[str] = []

    async def run(self, active: list[PeerID], spare: list[PeerID]) -> None:
        while self.ranges:
            await asyncio.gather(*(self._worker(peer) for peer in active))
            if not self.ranges:
                return
            active = [peer for peer in active if peer not in self.failed]
            if not active:
                if not spare:
                    raise StateDownloadError("every donor failed: " + "; ".join(self.reasons))
                active = [spare.pop(0)]

    def _failed(self, peer: PeerID, reason: str) -> None:
        self.failed.add(peer)
        self.reasons.append(f"{peer.short()}: {reason}")

    async def _worker(self, peer: PeerID) -> None:
        try:
            theirs = await self._host.call(peer, STATE_HEADER, Empty())
        except NetError as exc:
            self._failed(peer, str(exc))
            return
        if theirs != self.header:  # another snapshot: its bytes would not fit ours
            self._failed(peer, "its state differs")
            return
        while self.ranges:
            start, end = self.ranges.popleft()
            got = 0
            try:
                async with self._host.open_stream(
                    peer, STATE_RANGE, StateRequest(start, end)
                ) as call:
                    while start + got < end:
                        chunk = await call.stream.recv_data()
                        self.data[start + got : start + got + len(chunk)] = np.frombuffer(
                            chunk, np.uint8
                        )
                        got += len(chunk)
                    await call.result()
            except NetError as exc:
                self.ranges.appendleft((start + got, end))  # resume where this donor stopped
                self._failed(peer, str(exc))
                log.info("state donor %s failed after %d bytes: %s", peer, got, exc)
                return
            if peer not in self.used:
                self.used.append(peer)

    def tensors(self) -> list[np.ndarray]:
        out = []
        offset = 0
        for shape, dtype in zip(self.header.shapes, self.header.dtypes, strict=True):
            count = int(np.prod(shape)) if shape else 1
            size = count * np.dtype(dtype).itemsize
            out.append(
                self.data[offset : offset + size].view(np.dtype(dtype)).reshape(shape).copy()
            )
            offset += size
        return out


def _as_array(tensor: Any) -> np.ndarray:
    array = tensor if isinstance(tensor, np.ndarray) else tensor.detach().to("cpu").numpy()
    # not np.ascontiguousarray: it turns 0-d arrays (e.g. an optimizer's step count) into 1-d ones
    return array if array.flags.c_contiguous else array.copy(order="C")
