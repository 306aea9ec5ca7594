"""Gate: background torch work gives way to the event loop's urgent work.

A thread that computes for long stretches (a backbone replaying a member's round) slows the loop of
its own process: the two share the interpreter's lock and the process's share of the cores, and a
loop that waits for each of its many small callbacks can miss its group's matchmaking. The loop
holds the gate while it does what must not be slowed (its own round's exchange); the thread
passes the gate between its units of work and waits while the gate is held. Holds nest: the gate
opens when the last one ends. Torch-free.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class Gate:
    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._holds = 0
        """Holds in force: counted on the event loop only (its one thread)."""

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """On the event loop: the gate is held until the block ends (and every other hold)."""
        self._holds += 1
        self._open.clear()
        try:
            yield
        finally:
            self._holds -= 1
            if self._holds == 0:
                self._open.set()

    def wait(self, limit: float) -> float:
        """On a worker thread: wait while the gate is held, at most ``limit`` seconds (a hold that
        outlasts it is let by: the work must not wait for ever); the seconds waited."""
        if limit < 0:
            raise ValueError(f"a wait at a gate is 0 seconds or more, not {limit}")
        if self._open.is_set():
            return 0.0
        began = time.monotonic()
        self._open.wait(limit)
        return time.monotonic() - began
