"""Rounds this peer takes part in, by group id, so that incoming part streams find their reducer.

A member learns its group at the end of matchmaking, but its all-reduce may start a little later (the
step-by-step form waits for a trigger), and the leader's answer may reach it a moment after it reached
a fellow member; so streams from faster members wait here for it, briefly, known or not.

A round nobody starts is forgotten: one a stream asked for (any peer can name any group id) once
that stream's wait is over, and one of ours (a prepared round dropped without ``cancel``) after
``UNSTARTED_TTL``. Rounds that started leave when they end.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from core.net.errors import NotFoundError
from core.util.clock import SYSTEM_CLOCK, Clock

if TYPE_CHECKING:
    from core.averaging.allreduce import AllReduce

UNSTARTED_TTL = 3600.0
"""Seconds a round of ours may wait to be started: its fellow members give up within their
reducer timeout, so this only bounds rounds that were prepared and then dropped."""

_GRACE = 1.0
"""A round a stream asked for outlives that stream's wait by this much, so that its own timeout,
not the sweep, decides what it is told."""

_SWEEP_EVERY = 1.0
"""Seconds between sweeps: each looks at every round not started, so not at every call."""


class RoundRegistry:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._rounds: dict[bytes, asyncio.Future[AllReduce]] = {}
        # when each round not started yet is forgotten if it still is not
        self._unstarted: dict[bytes, float] = {}
        # rounds that ended (or were cancelled) here, so that late streams are told at once
        self._ended: deque[bytes] = deque(maxlen=256)
        self._swept_at = -float("inf")

    def _now(self) -> float:
        return self._clock.monotonic()

    def expect(self, group_id: bytes) -> None:
        now = self._now()
        self._sweep(now)
        self._expect(group_id, now + UNSTARTED_TTL)

    def _expect(self, group_id: bytes, due: float) -> None:
        """Make sure ``group_id`` has an entry; one not started yet is kept at least until ``due``."""
        if group_id not in self._rounds:
            self._rounds[group_id] = asyncio.get_running_loop().create_future()
        if not self._rounds[group_id].done():
            self._unstarted[group_id] = max(self._unstarted.get(group_id, due), due)

    def start(self, group_id: bytes, runner: AllReduce) -> None:
        self.expect(group_id)
        self._unstarted.pop(group_id, None)
        future = self._rounds[group_id]
        if not future.done():
            future.set_result(runner)

    def end(self, group_id: bytes) -> None:
        self._ended.append(group_id)
        self._unstarted.pop(group_id, None)
        future = self._rounds.pop(group_id, None)
        if future is not None and not future.done():
            future.cancel()

    async def wait(self, group_id: bytes, timeout: float) -> AllReduce:
        """The round ``group_id`` once it starts here. A group not known yet is waited for too:
        the leader's answer may reach a fellow member a moment after it reached us."""
        now = self._now()
        self._sweep(now)
        known = self._rounds.get(group_id)
        if known is None and group_id in self._ended:
            raise NotFoundError("that round is over here")
        if known is None or not known.done():
            # kept while someone waits for it, and no longer, even when the caller cancels
            self._expect(group_id, now + timeout + _GRACE)
        future = self._rounds[group_id]
        unknown = known is None
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            if unknown and not future.done() and self._rounds.get(group_id) is future:
                self._forget(group_id)  # never ours: forget it (bounded by the timeout)
                raise NotFoundError("no such averaging group here") from None
            raise NotFoundError("this peer did not start that round in time") from None
        except asyncio.CancelledError:
            if future.cancelled():  # the round ended here; our own cancellation propagates
                raise NotFoundError("that round is over here") from None
            raise

    def _sweep(self, now: float) -> None:
        """Forget the rounds that were due to start by now and did not."""
        if now - self._swept_at < _SWEEP_EVERY:
            return
        self._swept_at = now
        for group_id in [g for g, due in self._unstarted.items() if due <= now]:
            future = self._rounds.get(group_id)
            if future is not None and not future.done():
                future.cancel()  # anyone still waiting is told the round is over
            self._forget(group_id)

    def _forget(self, group_id: bytes) -> None:
        self._rounds.pop(group_id, None)
        self._unstarted.pop(group_id, None)

    def __len__(self) -> int:
        return len(self._rounds)
