"""Handing freed memory back to the operating system after churn (glibc only; elsewhere a no-op).

glibc keeps memory that Python freed inside its heaps for reuse, so after thousands of short-lived
connections (a flood, a crowd of newcomers) the process stays as large as at the peak although
nothing uses that memory. ``malloc_trim`` returns the free pages. Other C libraries (macOS, Windows,
musl) return memory on their own terms and have no such call: there this does nothing.
``ReleaseSchedule`` says when churn has been enough to be worth it, at a bounded cost.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable


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


def release_free_memory() -> bool:
    """Collect cyclic garbage, then return free heap pages to the OS; False where the C library
    cannot (the garbage is collected anyway).

    Connections are cycles of objects that only the cyclic collector frees, and it runs rarely in a
    quiet process, so a burst's connections would hold their memory for minutes without it. Takes
    some milliseconds to a few hundred (a large heap): call it after bursts, not in loops."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class ReleaseSchedule:
    """When to ``release_free_memory``: after ``after_events`` events of churn (connections closed,
    handshakes dropped), at most once per ``min_interval`` seconds and never more than ``max_share``
    of the time (a full collection of a trainer's large heap takes far longer than a DHT node's).

    Why at all: a connection's objects form reference cycles that only the cyclic collector frees,
    and its full passes are rare, so a node serving a stream of newcomers keeps growing between them
    and returns nothing to the OS (``benchmarks/flood.py``'s control scenario).

    ``releaser`` and ``timer`` are the release and the clock its cost is measured on: a test gives
    fakes, since a full collection of a large heap on a busy machine can take seconds."""

    def __init__(
        self,
        *,
        after_events: int = 64,
        min_interval: float = 10.0,
        max_share: float = 0.01,
        releaser: Callable[[], object] = release_free_memory,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if after_events < 1 or min_interval <= 0 or not 0 < max_share <= 1:
            raise ValueError("after_events >= 1, min_interval > 0 and 0 < max_share <= 1 required")
        self.after_events = after_events
        self.min_interval = min_interval
        self.max_share = max_share
        self._releaser = releaser
        self._timer = timer
        self._events_at_last = 0
        self._next_allowed = float("-inf")
        self.releases = 0

    def due(self, events: int, now: float) -> bool:
        """Whether to release now, given the running count of churn ``events`` (monotonic)."""
        return events - self._events_at_last >= self.after_events and now >= self._next_allowed

    def release(self, events: int, now: float) -> None:
        """Release free memory now and schedule the earliest next time from what this one took."""
        started = self._timer()
        self._releaser()
        took = self._timer() - started
        self._events_at_last = events
        self._next_allowed = now + max(self.min_interval, took / self.max_share)
        self.releases += 1
