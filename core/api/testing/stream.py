"""EventStream: the fake engine's event stream, numbered, the newest kept for late joiners.

Any thread may publish (a test scripts the fake from the Qt thread while the GUI's bridge reads on
its asyncio thread); each subscriber is fed on its own loop through ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

from core.api.events import Event, EventData
from core.util.clock import Clock


@dataclass
class Subscription:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Event | None]
    """Events in order; None when the stream ended."""


class EventStream:
    def __init__(self, clock: Clock, *, keep: int = 500) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._keep = keep
        self._seq = 0
        self._recent: list[Event] = []
        self._subscribers: list[Subscription] = []

    @property
    def recent(self) -> list[Event]:
        """The kept events, oldest first."""
        with self._lock:
            return list(self._recent)

    def publish(self, data: EventData, when: float | None = None) -> Event:
        """Number ``data`` and send it to every subscriber; ``when`` backdates it."""
        with self._lock:
            self._seq += 1
            event = Event(self._seq, self._clock.time() if when is None else when, data)
            self._recent = [*self._recent[-(self._keep - 1) :], event]
            for sub in self._subscribers:
                sub.loop.call_soon_threadsafe(sub.queue.put_nowait, event)
            return event

    def subscribe(self, since: int | None) -> Subscription:
        """A subscriber on the running loop; with ``since``, the kept events after it come first."""
        sub = Subscription(asyncio.get_running_loop(), asyncio.Queue())
        with self._lock:
            if since is not None:
                for kept in self._recent:
                    if kept.seq > since:
                        sub.queue.put_nowait(kept)
            self._subscribers.append(sub)
        return sub

    async def read(self, sub: Subscription) -> AsyncIterator[Event]:
        """``sub``'s events until the stream ends (or the reader stops)."""
        try:
            while True:
                event = await sub.queue.get()
                if event is None:
                    return
                yield event
        finally:
            with self._lock:
                if sub in self._subscribers:
                    self._subscribers.remove(sub)

    def end(self) -> None:
        """End every subscriber's stream, as an engine that stops does."""
        with self._lock:
            for sub in self._subscribers:
                sub.loop.call_soon_threadsafe(sub.queue.put_nowait, None)
            self._subscribers = []
