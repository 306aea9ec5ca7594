"""ExcludedCpu: the CPU time of processes that are not "other programs" to the scheduler.

The scheduler waits while other programs keep the machine busy. A demo swarm started on this
computer (``barnraise swarm``) is such a program by the numbers, yet it is the very collaboration
the engine wants to join: counting it, the engine would wait for itself forever. The engine names
those processes through a provider of pids; their CPU time, and that of their descendants, is
subtracted from the machine's busy time.

The result is one cumulative counter of CPU-seconds, read at every sensor reading. Processes come
and go inside the averaging window (a trainer exits, a data worker starts), so only what a process
used *between two readings in which it existed both times* is added: a process seen for the first
time adds nothing yet (its lifetime total is not ours to subtract from this window), and one that
is gone adds nothing more. A process is known by its pid and its start time, so a pid the system
has given to another process meanwhile is a new, unrelated process.

The provider is asked, and the process tree walked, only every ``refresh_every`` seconds; the
readings in between only read the CPU times of the processes already known (cheap: the engine
reads its sensors several times a second).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import Protocol

import psutil

from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

ProcessKey = tuple[int, float]
"""A process: its pid and its start time."""

START_TIME_TOLERANCE = 1.0
"""Seconds two readings of a process's start time may differ (see ``core.swarm.record``)."""


class ProcessTable(Protocol):
    def expand(self, pids: Iterable[int]) -> list[ProcessKey]:
        """These processes and all their descendants, as they run now (missing ones left out)."""
        ...

    def cpu_seconds(self, key: ProcessKey) -> float | None:
        """User plus system CPU-seconds of that very process so far; None once it is gone."""
        ...


class PsutilProcesses:
    """The system's processes, through psutil."""

    def __init__(self) -> None:
        self._known: dict[ProcessKey, psutil.Process] = {}

    def expand(self, pids: Iterable[int]) -> list[ProcessKey]:
        found: dict[ProcessKey, psutil.Process] = {}
        for pid in pids:
            try:
                root = psutil.Process(pid)
                family = [root, *root.children(recursive=True)]
            except psutil.Error:
                continue  # exited since it was named
            for process in family:
                try:
                    found[(process.pid, process.create_time())] = process
                except psutil.Error:
                    continue
        self._known = found
        return list(found)

    def cpu_seconds(self, key: ProcessKey) -> float | None:
        process = self._known.get(key)
        if process is None:
            return None
        try:
            with process.oneshot():  # one read of the process's status for both values
                if abs(process.create_time() - key[1]) > START_TIME_TOLERANCE:
                    return None  # the pid belongs to another process now
                times = process.cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)


class ExcludedCpu:
    def __init__(
        self,
        provider: Callable[[], Iterable[int]],
        *,
        refresh_every: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        table: ProcessTable | None = None,
        own_pid: int | None = None,
    ) -> None:
        self._provider = provider
        self._every = refresh_every
        self._clock = clock
        self._table = table or PsutilProcesses()
        self._own_pid = os.getpid() if own_pid is None else own_pid
        self._refreshed_at = -float("inf")
        self._keys: list[ProcessKey] = []
        self._last: dict[ProcessKey, float] = {}
        self._problem: str | None = None
        self.total = 0.0
        """CPU-seconds of the excluded processes counted so far (only ever grows)."""

    def sample(self) -> float:
        """Read the processes' CPU times now; returns the updated ``total``."""
        now = self._clock.monotonic()
        if now - self._refreshed_at >= self._every or now < self._refreshed_at:
            self._refreshed_at = now
            self._refresh()
        current: dict[ProcessKey, float] = {}
        for key in self._keys:
            seconds = self._table.cpu_seconds(key)
            if seconds is not None:
                current[key] = seconds
        for key, seconds in current.items():
            before = self._last.get(key)
            if before is not None and seconds > before:
                self.total += seconds - before
        self._last = current
        return self.total

    def _refresh(self) -> None:
        try:
            pids = [pid for pid in self._provider() if pid != self._own_pid]
        except Exception as exc:  # the engine's provider reads files; keep the last answer
            problem = str(exc) or type(exc).__name__
            if problem != self._problem:
                log.warning("cannot tell which processes to leave out of the CPU load: %s", problem)
            self._problem = problem
            return
        self._problem = None
        # our own time is counted as ours already; a child of a named process may be us
        self._keys = [key for key in self._table.expand(pids) if key[0] != self._own_pid]
