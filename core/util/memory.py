"""Handing freed memory back to the operating system after churn, without stalling the event loop.

glibc keeps memory that Python freed inside its heaps for reuse, so after thousands of short-lived
connections (a flood, a crowd of newcomers) the process stays as large as at the peak although
nothing uses that memory. ``malloc_trim`` returns the free pages. Other C libraries (macOS, Windows,
musl) return memory on their own terms and have no such call: there the trim does nothing.

A release has two parts, each where it cannot stall the loop a peer's rounds depend on:

- on the loop, a collection of the young generations only (``collect_young_garbage``): it frees
  the cycles of connections that opened and closed since the interpreter's last young collections
  (counted in allocations, so in a quiet process a burst's), and costs what the young objects do,
  about a millisecond whatever the heap's size. A full collection costs the whole heap instead
  (seconds for a trainer holding a model on a busy machine) and cannot leave the loop: the
  collector holds the GIL throughout, and runs finalizers on whichever thread collects. The old
  generation is left to the interpreter's own full passes, which come once it has grown by a
  quarter: that bounds the cycles of long-lived connections at a share of the heap.
- on a worker thread, the trim (``trim_free_heap``): a ctypes call, which releases the GIL, so the
  loop runs on while glibc walks its heaps.

``ReleaseSchedule`` says when churn has been enough to be worth it, at a bounded cost.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable

YOUNG = 1
"""The oldest generation the loop collects (generation 1 and, with it, generation 0)."""


def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    # at the first release, not in every process that imports a Host
    import ctypes  # noqa: PLC0415
    import ctypes.util  # noqa: PLC0415

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


def collect_young_garbage() -> None:
    """Collect the cyclic garbage of the young generations: cheap enough for the event loop.

    Connections are cycles of objects that only the cyclic collector frees; collected before the
    trim, a burst's young ones give their pages back with it."""
    gc.collect(YOUNG)


def trim_free_heap() -> bool:
    """Return free heap pages to the OS; False where the C library cannot. Blocks for as long as
    glibc walks its heaps (milliseconds to a few hundred for a large heap) with the GIL released:
    call it on a worker thread."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class ReleaseSchedule:
    """When to release free memory: after ``after_events`` events of churn (connections closed,
    handshakes dropped), at most once per ``min_interval`` seconds and never more than ``max_share``
    of the time, counting both parts of a release (the collection on the loop and the trim on its
    thread: both take the machine's time).

    Why at all: a connection's objects form reference cycles that only the cyclic collector frees,
    and a quiet process collects rarely, so a node serving a stream of newcomers would keep their
    memory and return nothing to the OS (``benchmarks/net/flood.py``'s control scenario).

    ``collect``, ``trim`` and ``timer`` are the two parts and the clock their cost is measured on:
    a test gives fakes, since what they take on a busy machine is anyone's guess."""

    def __init__(
        self,
        *,
        after_events: int = 64,
        min_interval: float = 10.0,
        max_share: float = 0.01,
        collect: Callable[[], object] = collect_young_garbage,
        trim: Callable[[], object] = trim_free_heap,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if after_events < 1 or min_interval <= 0 or not 0 < max_share <= 1:
            raise ValueError("after_events >= 1, min_interval > 0 and 0 < max_share <= 1 required")
        self.after_events = after_events
        self.min_interval = min_interval
        self.max_share = max_share
        self._collect = collect
        self._trim = trim
        self._timer = timer
        self._events_at_last = 0
        self._next_allowed = float("-inf")
        self._releasing = False
        self.releases = 0

    def due(self, events: int, now: float) -> bool:
        """Whether to release now, given the running count of churn ``events`` (monotonic); never
        while a release is still trimming."""
        return (
            not self._releasing
            and events - self._events_at_last >= self.after_events
            and now >= self._next_allowed
        )

    async def release(self, events: int, now: float) -> None:
        """Collect the young garbage, trim on a worker thread (the loop runs on meanwhile), then
        schedule the earliest next release from what both took. Run it as a task of its own:
        only its awaiter waits for the trim."""
        self._releasing = True
        try:
            started = self._timer()
            self._collect()
            took = self._timer() - started
            # the default executor: malloc_trim always returns, so none of its threads is held
            # for good (the weakness ``core.util.blocking`` guards against), and a Host runs in
            # processes that have no pool of their own (a DHT node, a coordinator)
            took += await asyncio.to_thread(self._timed_trim)
        finally:
            self._releasing = False
        self._events_at_last = events
        self._next_allowed = now + max(self.min_interval, took / self.max_share)
        self.releases += 1

    def _timed_trim(self) -> float:
        """On the worker thread: the trim, and the seconds it took."""
        started = self._timer()
        self._trim()
        return self._timer() - started
