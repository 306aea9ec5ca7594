"""Algorithm 1 of Learning@home: find each input's best live experts with a beam search over prefixes.

The gate gives every input one score per index of every grid dimension; an expert's score is the sum
over its coordinates (``gating``). Walking the grid one dimension at a time, the search keeps, per input,
the ``beam_size`` best *active* prefixes: it extends each by the next indices that the DHT says are
active under it (``core.moe.announce``'s prefix records) and keeps the best of those. After
``depth`` steps the beam holds full uids, and the last prefix records already name their servers.

Batched: at each depth the union of all inputs' beam prefixes is looked up in one ``get_many``, so a
whole minibatch costs ``depth`` lookup rounds over at most ``min(batch · beam_size, prefixes at that
depth)`` distinct keys, instead of ``depth · beam_size`` keys per input. Prefix records are cached for a
few seconds (bounded), since consecutive minibatches ask for much the same prefixes.

Like every beam search this is exact only when a prefix's rank predicts its best live completion: it
is when the live experts form a product of per-dimension index sets, or when the beam is at least as
wide as the number of live prefixes at each depth. Otherwise an expert whose prefix fell out of the
beam can be missed, which is the trade the paper makes for O(d·k) lookups.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from core.dht.records import ValueWithExpiration
from core.moe.announce import freshest, suffix_index
from core.moe.grid import Coords, ExpertGrid, GridError
from core.util.clock import Clock, SystemClock
from core.util.errors import BarnraiseError

FAILED_SECONDS = 60.0
"""How long an address that failed a call is passed over for another server of the same expert."""
MAX_FAILED = 4096
"""Failed addresses remembered (the newest)."""


class BeamSearchError(BarnraiseError):
    """Scores or parameters that the beam search cannot use."""


class PrefixSource(Protocol):
    """The part of ``DHTNode`` the search reads."""

    async def get_many(
        self, keys: Sequence[Any], latest: bool = False
    ) -> list[ValueWithExpiration | None]: ...


@dataclass(frozen=True, slots=True)
class FoundExpert:
    """A live expert chosen for one input: its uid, grid indices, gate score and server address."""

    uid: str
    coords: Coords
    score: float
    address: str


class SuffixCache:
    """Prefix -> its active next indices (and their addresses), for ``ttl`` seconds, LRU-bounded.

    Dead prefixes are cached too (as empty), so a prefix nobody serves costs one lookup per ``ttl``.
    """

    def __init__(self, ttl: float, max_entries: int, clock: Clock) -> None:
        if ttl < 0 or max_entries < 0:
            raise BeamSearchError("the prefix cache's ttl and size cannot be negative")
        self.ttl = ttl
        self.max_entries = max_entries
        self.clock = clock
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Coords, tuple[float, dict[int, str]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, prefix: Coords) -> dict[int, str] | None:
        entry = self._entries.get(prefix)
        if entry is None or entry[0] <= self.clock.monotonic():
            self._entries.pop(prefix, None)
            self.misses += 1
            return None
        self._entries.move_to_end(prefix)
        self.hits += 1
        return entry[1]

    def drop(self, prefix: Coords) -> None:
        self._entries.pop(prefix, None)

    def put(self, prefix: Coords, suffixes: dict[int, str]) -> None:
        if self.max_entries == 0 or self.ttl == 0:
            return
        self._entries[prefix] = (self.clock.monotonic() + self.ttl, suffixes)
        self._entries.move_to_end(prefix)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class MoEBeamSearch:
    """Batched beam search over one grid's announced experts."""

    def __init__(
        self,
        dht: PrefixSource,
        grid: ExpertGrid,
        *,
        cache_ttl: float = 5.0,
        cache_size: int = 10_000,
        clock: Clock | None = None,
        complete_records: bool = False,
    ) -> None:
        self.dht = dht
        self.grid = grid
        self.complete_records = complete_records
        """Read prefix records whole: every replica near the key is asked and their subkeys merged
        (``latest=True``). By default a lookup stops at the first copy, as Algorithm 1 does: it may
        meet a replica that lacks some servers' entries (their stores reached slightly different
        nearest nodes) and then miss a live expert, but whole reads cost 2.4x the time and 5x the
        lookup requests on a 1,000-node DHT (``benchmarks/moe/beam.py --beam-reads``), and a prefix
        whose server failed a call is read whole anyway (``doubt``)."""
        self.cache = SuffixCache(cache_ttl, cache_size, clock or SystemClock())
        self.lookups = 0  # get_many rounds sent to the DHT
        self.keys_looked_up = 0
        # last-level prefixes whose server failed a call: asked for afresh (latest=True) next time
        self._doubted: set[Coords] = set()
        self._clock = self.cache.clock
        # addresses that failed a call, until when: another server's entry for the same expert
        # is preferred meanwhile (a stranger's entry for a live expert costs one call)
        self._failed: OrderedDict[str, float] = OrderedDict()

    async def active_suffixes(self, prefixes: Sequence[Coords]) -> dict[Coords, dict[int, str]]:
        """For each prefix, its active next indices -> server address; one DHT round for the misses."""
        result: dict[Coords, dict[int, str]] = {}
        missing: list[Coords] = []
        for prefix in dict.fromkeys(prefixes):
            cached = self.cache.get(prefix)
            if cached is None:
                missing.append(prefix)
            else:
                result[prefix] = cached
        # the first copy found will do, except for a doubted prefix: the copy a DHT node cached may
        # name a server that left, until it expires, so every replica near it is asked
        fresh = self.complete_records
        doubted = [prefix for prefix in missing if fresh or prefix in self._doubted]
        usual = [prefix for prefix in missing if not (fresh or prefix in self._doubted)]
        for asked, latest in ((usual, False), (doubted, True)):
            if not asked:
                continue
            self.lookups += 1
            self.keys_looked_up += len(asked)
            keys = [self.grid.key(prefix) for prefix in asked]
            records = await self.dht.get_many(keys, latest=latest)
            for prefix, record in zip(asked, records, strict=True):
                suffixes = self._parse(len(prefix), record)
                self.cache.put(prefix, suffixes)
                result[prefix] = suffixes
                self._doubted.discard(prefix)
        return result

    def doubt(self, uid: str, address: str | None = None) -> None:
        """The server of ``uid`` (at ``address``) failed a call: forget what we know of where
        ``uid`` is served, ask the DHT for the freshest record next time (a server that took the
        expert over has announced itself there; the copy the DHT node cached may still name the one
        that left), and prefer other servers' entries to ``address`` for ``FAILED_SECONDS``."""
        try:
            prefix = self.grid.parse(uid)[:-1]
        except GridError:
            return
        self.cache.drop(prefix)
        self._doubted.add(prefix)
        if address:
            self._failed[address] = self._clock.monotonic() + FAILED_SECONDS
            self._failed.move_to_end(address)
            while len(self._failed) > MAX_FAILED:
                self._failed.popitem(last=False)

    def _avoided(self, address: str) -> bool:
        until = self._failed.get(address)
        if until is None:
            return False
        if until <= self._clock.monotonic():
            del self._failed[address]
            return False
        return True

    def _parse(self, depth: int, record: ValueWithExpiration | None) -> dict[int, str]:
        """The valid entries of a prefix record; anything else there is other peers' junk, skipped.

        Upper levels map an index to ``""`` (active, server found deeper); the last to an address.
        """
        if record is None or not isinstance(record.value, dict):
            return {}
        size = self.grid.shape[depth]
        if depth < self.grid.depth - 1:
            return {
                index: ""
                for index, entry in record.value.items()
                if not isinstance(index, bool)
                and isinstance(index, int)
                and 0 <= index < size
                and isinstance(entry, ValueWithExpiration)
            }
        # the last level: one entry per server of each index (``<index>[owner:<PeerID>]``)
        servers: dict[int, dict[Any, ValueWithExpiration]] = {}
        for subkey, entry in record.value.items():
            parsed = suffix_index(subkey)
            if parsed is not None and 0 <= parsed[0] < size:
                servers.setdefault(parsed[0], {})[subkey] = entry
        suffixes = {}
        for index, entries in servers.items():
            address = freshest(entries, self._avoided)
            if address is not None:
                suffixes[index] = address
        return suffixes

    async def find_best_experts(
        self, dim_scores: Sequence[Tensor], k: int, beam_size: int | None = None
    ) -> list[list[FoundExpert]]:
        """Per input, up to ``k`` live experts with the highest scores, best first.

        ``dim_scores[i]`` is ``[batch, grid.shape[i]]`` (the gate's output). ``beam_size`` (default
        ``k``) is how many prefixes each input keeps per depth. An input gets fewer than ``k`` experts
        only when fewer are reachable from its beam.
        """
        beam_size = k if beam_size is None else beam_size
        if k < 1 or beam_size < k:
            raise BeamSearchError(f"need 1 <= k <= beam_size, got k={k}, beam_size={beam_size}")
        scores = self._score_lists(dim_scores)
        batch = len(scores[0])
        beams: list[list[tuple[float, Coords]]] = [[(0.0, ())] for _ in range(batch)]
        chosen: list[list[FoundExpert]] = [[] for _ in range(batch)]
        for depth in range(self.grid.depth):
            last = depth == self.grid.depth - 1
            active = await self.active_suffixes([c for beam in beams for _, c in beam])
            for row in range(batch):
                row_scores = scores[depth][row]
                candidates = [
                    (score + row_scores[index], (*coords, index))
                    for score, coords in beams[row]
                    for index in active[coords]
                ]
                width = k if last else beam_size
                # ties go to the smaller coordinates, so results do not depend on dict order
                beams[row] = heapq.nsmallest(width, candidates, key=lambda c: (-c[0], c[1]))
                if last:
                    chosen[row] = [
                        FoundExpert(
                            self.grid.key(coords), coords, score, active[coords[:-1]][coords[-1]]
                        )
                        for score, coords in beams[row]
                    ]
        return chosen

    def _score_lists(self, dim_scores: Sequence[Tensor]) -> list[list[list[float]]]:
        grid = self.grid
        if len(dim_scores) != grid.depth:
            raise BeamSearchError(
                f"{len(dim_scores)} score tensors for grid {grid.prefix!r} of depth {grid.depth}"
            )
        batch = dim_scores[0].shape[0] if dim_scores[0].dim() == 2 else -1
        for dim, (scores, size) in enumerate(zip(dim_scores, grid.shape, strict=True)):
            if scores.dim() != 2 or scores.shape != (batch, size):
                raise BeamSearchError(
                    f"scores of dimension {dim} have shape {list(scores.shape)}, "
                    f"expected [batch, {size}] with the same batch for every dimension"
                )
            if not scores.is_floating_point():
                raise BeamSearchError(f"scores of dimension {dim} are {scores.dtype}, not floats")
            if not bool(torch.isfinite(scores).all()):
                raise BeamSearchError(f"scores of dimension {dim} hold NaN or infinite values")
        lists: list[list[list[float]]] = [s.detach().double().cpu().tolist() for s in dim_scores]
        return lists
