"""EventBus: the engine's typed events, numbered, kept for a while, fanned out to subscribers.

Publishing is synchronous and happens on the loop, so every subscriber sees events in the order they
happened. Each subscriber has a bounded queue; one that stops reading is dropped (its stream ends)
rather than letting the engine's memory grow. Recent events are kept for late joiners (the GUI's
event log, a reconnecting client asking ``since=seq``).
"""

from __future__ import annotations

import asyncio
import collections
import logging

from core.api.events import Event, EventData
from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


class Subscription:
    def __init__(self, bus: EventBus, limit: int) -> None:
        self._bus = bus
        self.queue: asyncio.Queue[Event | None] = asyncio.Queue(limit)
        self.dropped = False

    async def next(self) -> Event | None:
        """The next event, or None when the subscription ended (closed or too slow)."""
        return await self.queue.get()

    def close(self) -> None:
        self._bus.unsubscribe(self)


class EventBus:
    def __init__(
        self, *, keep: int = 500, queue_limit: int = 1000, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._seq = 0
        self._recent: collections.deque[Event] = collections.deque(maxlen=keep)
        self._subscribers: set[Subscription] = set()
        self._queue_limit = queue_limit
        self._clock = clock

    @property
    def last_seq(self) -> int:
        return self._seq

    def publish(self, data: EventData) -> Event:
        self._seq += 1
        event = Event(self._seq, self._clock.time(), data)
        self._recent.append(event)
        for sub in list(self._subscribers):
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                log.warning("an event subscriber fell %d events behind: dropped", self._queue_limit)
                sub.dropped = True
                self._end(sub)
        return event

    def recent(self, since: int = 0) -> list[Event]:
        return [e for e in self._recent if e.seq > since]

    def subscribe(self, since: int | None = None) -> Subscription:
        """A new subscriber; with ``since``, the kept events after that seq come first."""
        sub = Subscription(self, self._queue_limit + len(self._recent))
        if since is not None:
            for event in self.recent(since):
                sub.queue.put_nowait(event)
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        if sub in self._subscribers:
            self._end(sub)

    def close(self) -> None:
        for sub in list(self._subscribers):
            self._end(sub)

    def _end(self, sub: Subscription) -> None:
        self._subscribers.discard(sub)
        # make room for the end marker if the queue is full: the subscriber is being dropped anyway
        while sub.queue.full():
            sub.queue.get_nowait()
        sub.queue.put_nowait(None)
