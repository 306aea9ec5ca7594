"""Sharing the full state (tensors plus metadata) so that a peer that fell behind can catch up.

Donors announce themselves in the DHT with the version (epoch) of their state. A downloader picks the
newest version, asks its donors for the state's layout, splits the bytes into ranges and fetches them
from several donors at once (so that late joiners do not all load one donor). A donor that fails
mid-range costs only the rest of that range, which another donor serves: the download resumes where it
stopped. Each donor serves a snapshot taken when the version was first asked for, so the bytes of one
version never change under a download.

A downloader asks for a state newer than its own: the newest version first, and when every donor of
that version fails (a trainer that left without withdrawing its announcement), the next newest, so
that a live donor with an older state (a backbone) still serves, while one no newer than the
downloader's own state is never used (nobody is rolled back). Announcements live ``STATE_TTL``
seconds; donors renew them every ``ANNOUNCE_EVERY`` and withdraw them when they stop.

Nothing is taken on one donor's word. Every header lists the digests of its state's blocks
(``digest``); the downloader asks every donor of a version for its header and loads a state only
when enough donors vouch for it (``vouching``). Each range is fetched whole from one donor and its
blocks checked on arrival, so a donor that sends other bytes than its header lists is caught,
accused (``DownloadedState.accused``) and not asked again, and the range is fetched elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.averaging.messages import STATE_HEADER, STATE_RANGE, Empty, StateHeader, StateRequest
from core.averaging.sharing.digest import (
    BLOCK_BYTES,
    DIGEST_BYTES,
    block_count,
    block_digests,
    state_digest,
)
from core.averaging.sharing.vouching import Offer, Vouching, choose, network_of
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
    blocks: list[bytes] | None = None
    """``digest.block_digests([data], block_bytes)``, made where the state was packed (None: the
    sharing hashes it, on the event loop)."""
    block_bytes: int = BLOCK_BYTES


PackedProvider = Callable[[], Awaitable[PackedState]]
"""Packs the current state (awaited when a downloader first asks for a version)."""


@dataclass
class Refused:
    """Donors a download skipped or caught, for the caller to know (and accuse)."""

    skipped: dict[PeerID, str] = field(default_factory=dict)
    """Not used, and why (another state of the version, a malformed header)."""
    accused: dict[PeerID, str] = field(default_factory=dict)
    """Caught serving another state than they claimed: evidence for the caller to sign."""


@dataclass
class DownloadedState:
    version: int
    metadata: dict[str, Any]
    tensors: list[np.ndarray]
    donors: list[PeerID]
    digest: str = ""
    """``digest.state_digest`` of what was loaded."""
    vouched: str = ""
    """How the state was vouched for (``vouching.Verdict.reason``)."""
    refused: Refused = field(default_factory=Refused)
    """Donors the download did not use, or caught."""


class StateDownloadError(BarnraiseError):
    """No donor could provide the state (``refused``: whom the attempt skipped or caught)."""

    def __init__(self, message: str, refused: Refused | None = None) -> None:
        super().__init__(message)
        self.refused = refused or Refused()


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

    def wrap_packed(self, wrap: Callable[[PackedProvider], PackedProvider]) -> None:
        """Serve what ``wrap`` makes of the packer ``serve_packed`` was given, from the next
        request on: only a peer misbehaving on purpose does (``core.swarm.byzantine``)."""
        if self._packed is None:
            raise RuntimeError("nothing packed is served")
        version, pack = self._packed
        self._packed = (version, wrap(pack))
        self._snapshot = None

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

    async def served_header(self) -> StateHeader:
        """The header this peer gives a downloader for its current state (the version, layout and
        block digests it vouches for), made as a downloader's first request makes it."""
        return (await self._current()).header

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
            BLOCK_BYTES,
            block_digests([data], BLOCK_BYTES),
        )
        self._snapshot = _Snapshot(header, data, time.monotonic())
        return self._snapshot

    async def _current_packed(self, version: Callable[[], int], pack: PackedProvider) -> _Snapshot:
        async with self._packing:
            held = self._held(version())
            if held is not None:
                return held
            packed = await pack()
            block_bytes = packed.block_bytes if packed.blocks is not None else BLOCK_BYTES
            blocks = packed.blocks or block_digests([packed.data], block_bytes)
            header = StateHeader(
                packed.version,
                packed.metadata,
                packed.shapes,
                packed.dtypes,
                int(packed.data.size),
                block_bytes,
                blocks,
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
        return await self.served_header()

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
        vouching: Vouching | None = None,
    ) -> DownloadedState:
        """The newest state newer than ``newer_than`` that donors vouch for (``vouching``; by
        default, donors of two networks offering the same bytes), fetched from up to
        ``max_donors`` of them at once. ``accept`` (given the metadata a donor's header names)
        may refuse states of a kind the caller must not load. A version whose donors vouch for
        nothing, or all fail, gives way to the next older one."""
        refused = Refused()
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
            vouching = vouching or Vouching()
            for version in reversed(versions):
                if not vouching.considers(version):
                    reasons.append(f"epoch {version}: not confirmed")
                    continue
                candidates = [(peer, addresses) for v, peer, addresses in donors if v == version]
                for peer, addresses in candidates[:MAX_ASKED]:
                    if addresses:
                        self._host.add_addresses(peer, addresses)
                try:
                    got = await self._fetch(
                        version,
                        [peer for peer, _ in candidates[:MAX_ASKED]],
                        max_donors=max(1, max_donors),
                        range_bytes=range_bytes,
                        accept=accept,
                        vouching=vouching,
                        refused=refused,
                    )
                except StateDownloadError as exc:
                    reasons.append(f"epoch {version}: {exc}")
                    continue
                got.refused = refused
                return got
            raise StateDownloadError("; ".join(reasons), refused)

    async def _fetch(
        self,
        version: int,
        candidates: list[PeerID],
        *,
        max_donors: int,
        range_bytes: int,
        accept: Callable[[dict[str, Any]], bool] | None,
        vouching: Vouching,
        refused: Refused,
    ) -> DownloadedState:
        headers, offers, reasons = {}, [], []
        answers = await asyncio.gather(
            *(self._host.call(peer, STATE_HEADER, Empty()) for peer in candidates),
            return_exceptions=True,
        )
        for peer, answer in zip(candidates, answers, strict=True):
            if isinstance(answer, NetError):
                reasons.append(f"{peer.short()}: {answer}")
                continue
            if isinstance(answer, BaseException):
                raise answer
            problem = header_problem(answer, version)
            if problem is None and accept is not None and not accept(dict(answer.metadata)):
                problem = "its state is not one to load"
            if problem is not None:
                refused.skipped[peer] = problem
                reasons.append(f"{peer.short()}: {problem}")
                continue
            headers[peer] = answer
            anchor = answer.metadata.get(ANCHOR_KEY)
            offers.append(
                Offer(
                    peer,
                    digest_of(answer),
                    network_of(self._remote(peer)),
                    anchor if isinstance(anchor, str) else "",
                )
            )
        if not offers:
            raise StateDownloadError("no donor answered: " + "; ".join(reasons))
        verdict = choose(offers, vouching, version)
        refused.skipped.update(verdict.skipped)
        refused.accused.update(verdict.accused)
        if verdict.digest is None:
            raise StateDownloadError(verdict.reason)
        header = headers[verdict.vouchers[0]]
        job = _Download(self._host, header, range_bytes, refused)
        await job.run(verdict.vouchers[:max_donors], verdict.vouchers[max_donors:])
        return DownloadedState(
            header.version,
            dict(header.metadata),
            job.tensors(),
            job.used,
            verdict.digest,
            verdict.reason,
        )

    def _remote(self, peer: PeerID) -> tuple[str, int] | None:
        """Where our connection to ``peer`` goes (its network's evidence)."""
        for connection in self._host.connections(peer):
            if connection.remote_address is not None:
                return connection.remote_address
        return None


MAX_ASKED = 16
"""Donors of one version asked for their header (all at once)."""
ANCHOR_KEY = "anchor"
"""A state's metadata may name it (diloco: the digest of its outer parameters): ``Offer.anchor``."""


def digest_of(header: StateHeader) -> str:
    return state_digest(header.shapes, header.dtypes, header.block_bytes, header.blocks)


def header_problem(header: StateHeader, version: int) -> str | None:
    """Why a donor's header cannot be loaded from (None: it can): another version, a layout that
    does not add up to its size, or block digests that do not cover it."""
    if header.version != version:
        return f"it announced epoch {version} but offers epoch {header.version}"
    problem = _layout_problem(header)
    if problem is not None:
        return problem
    if header.block_bytes <= 0 or not header.blocks:
        return "its header lists no block digests: it commits to nothing"
    if len(header.blocks) != block_count(header.total_bytes, header.block_bytes) or any(
        len(b) != DIGEST_BYTES for b in header.blocks
    ):
        return "its block digests do not cover its state"
    return None


def _layout_problem(header: StateHeader) -> str | None:
    if len(header.shapes) != len(header.dtypes):
        return "its header lists shapes and dtypes of different counts"
    total = 0
    for shape, dtype in zip(header.shapes, header.dtypes, strict=True):
        try:
            size = np.dtype(dtype).itemsize
        except TypeError:
            return f"its header names a dtype numpy does not know: {dtype[:40]!r}"
        if any(d < 0 for d in shape):
            return "its header lists a negative dimension"
        total += int(np.prod(shape, dtype=np.int64)) * size if shape else size
    if total != header.total_bytes:
        return f"its layout adds up to {total} bytes, not the {header.total_bytes} it states"
    return None


class _Download:
    """One download: byte ranges of whole blocks handed to donors, each range fetched whole from
    one donor and checked against the header's block digests, and handed back when a donor fails
    or lies."""

    def __init__(self, host: Host, header: StateHeader, range_bytes: int, refused: Refused) -> None:
        self._host = host
        self.header = header
        self.digest = digest_of(header)
        self.data = np.empty(header.total_bytes, dtype=np.uint8)
        block = header.block_bytes
        step = max(block, range_bytes // block * block)
        self.ranges: deque[tuple[int, int]] = deque(
            (start, min(start + step, header.total_bytes))
            for start in range(0, header.total_bytes, step)
        )
        self.used: list[PeerID] = []
        self.failed: set[PeerID] = set()
        self.reasons: list[str] = []
        self.refused = refused

    async def run(self, active: list[PeerID], spare: list[PeerID]) -> None:
        while self.ranges:
            await asyncio.gather(*(self._worker(peer) for peer in active))
            if not self.ranges:
                return
            active = [peer for peer in active if peer not in self.failed]
            if not active:
                if not spare:
                    raise StateDownloadError(
                        "every donor failed: " + "; ".join(self.reasons), self.refused
                    )
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
        if header_problem(theirs, self.header.version) or digest_of(theirs) != self.digest:
            self._failed(peer, "its state differs")  # another snapshot: its bytes would not fit
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
                        if len(chunk) > end - start - got:
                            raise NetError("it sent more bytes than the range holds")
                        self.data[start + got : start + got + len(chunk)] = np.frombuffer(
                            chunk, np.uint8
                        )
                        got += len(chunk)
                    await call.result()
            except NetError as exc:
                # the whole range again, from another donor: a range's blocks come from one donor,
                # so a bad one is that donor's
                self.ranges.appendleft((start, end))
                self._failed(peer, str(exc))
                log.info("state donor %s failed after %d bytes: %s", peer, got, exc)
                return
            bad = self._bad_block(start, end)
            if bad is not None:
                self.ranges.appendleft((start, end))
                reason = (
                    f"block {bad} of its state of epoch {self.header.version} is not the bytes "
                    "its header lists"
                )
                self.refused.accused[peer] = reason
                self._failed(peer, reason)
                log.warning("state donor %s: %s", peer, reason)
                return
            if peer not in self.used:
                self.used.append(peer)

    def _bad_block(self, start: int, end: int) -> int | None:
        """The first block of [start, end) whose bytes do not match the header's digest."""
        block = self.header.block_bytes
        for index in range(start // block, -(-end // block)):
            piece = self.data[index * block : min((index + 1) * block, self.header.total_bytes)]
            if block_digests([piece], block)[0] != self.header.blocks[index]:
                return index
        return None

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
