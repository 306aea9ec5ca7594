"""Rounds this peer takes part in, by group id, so that incoming part streams find their reducer.

A member learns its group at the end of matchmaking, but its all-reduce may start a little later (the
step-by-step form waits for a trigger), and the leader's answer may reach it a moment after it reached
a fellow member; so streams from faster members wait here for it, briefly, known or not.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from core.net.errors import NotFoundError

if TYPE_CHECKING:
    from core.averaging.allreduce import AllReduce


class RoundRegistry:
    def __init__(self) -> None:
        self._rounds: dict[bytes, asyncio.Future[AllReduce]] = {}
        # rounds that ended (or were cancelled) here, so that late streams are told at once
        self._ended: deque[bytes] = deque(maxlen=256)

    def expect(self, group_id: bytes) -> None:
        if group_id not in self._rounds:
            self._rounds[group_id] = asyncio.get_running_loop().create_future()

    def start(self, group_id: bytes, runner: AllReduce) -> None:
        self.expect(group_id)
        future = self._rounds[group_id]
        if not future.done():
            future.set_result(runner)

    def end(self, group_id: bytes) -> None:
        self._ended.append(group_id)
        future = self._rounds.pop(group_id, None)
        if future is not None and not future.done():
            future.cancel()

    async def wait(self, group_id: bytes, timeout: float) -> AllReduce:
        """The round ``group_id`` once it starts here. A group not known yet is waited for too:
        the leader's answer may reach a fellow member a moment after it reached us."""
        future = self._rounds.get(group_id)
        unknown = future is None
        if future is None and group_id in self._ended:
            raise NotFoundError("that round is over here")
        if future is None:
            self.expect(group_id)
            future = self._rounds[group_id]
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            if unknown and not future.done() and self._rounds.get(group_id) is future:
                del self._rounds[group_id]  # never ours: forget it (bounded by the timeout)
                raise NotFoundError("no such averaging group here") from None
            raise NotFoundError("this peer did not start that round in time") from None
        except asyncio.CancelledError:
            if future.cancelled():  # the round ended here; our own cancellation propagates
                raise NotFoundError("that round is over here") from None
            raise

    def __len__(self) -> int:
        return len(self._rounds)
