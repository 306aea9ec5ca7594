"""Rounds whose inputs verifiers may still fetch: while they run, and ``timeout`` seconds after.

Keeping them here, not in the round, lets a member that checks nothing return from its round at
once: the copies it kept stay reachable through the averager's ``avg.verify`` handler until the
timer drops them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.averaging.verified.verified_round import RoundVerification


class RetainedRounds:
    """Rounds whose inputs verifiers may still fetch: while they run, and ``timeout`` after."""

    def __init__(self) -> None:
        self._rounds: dict[bytes, RoundVerification] = {}
        self._timers: dict[bytes, asyncio.TimerHandle] = {}

    def running(self, group_id: bytes, verification: RoundVerification) -> None:
        self._rounds[group_id] = verification

    def ended(self, group_id: bytes) -> None:
        """Keep the round ``timeout`` seconds more, then drop its copies."""
        verification = self._rounds.get(group_id)
        if verification is not None and group_id not in self._timers:
            self._timers[group_id] = asyncio.get_running_loop().call_later(
                verification.config.timeout, self._drop, group_id
            )

    def get(self, group_id: bytes) -> RoundVerification | None:
        return self._rounds.get(group_id)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for group_id in list(self._rounds):
            self._drop(group_id)

    def _drop(self, group_id: bytes) -> None:
        self._timers.pop(group_id, None)
        verification = self._rounds.pop(group_id, None)
        if verification is not None:
            verification.release()

    def __len__(self) -> int:
        return len(self._rounds)
