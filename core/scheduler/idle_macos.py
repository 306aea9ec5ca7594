"""Keyboard and mouse idleness on macOS: ``HIDIdleTime`` from ``ioreg -c IOHIDSystem``.

``ioreg`` is a subprocess (some milliseconds), so a reading is reused for about a second and
aged by the time since it was taken.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from core.scheduler.sensor import PolledIdleSensor, Reading
from core.util.clock import SYSTEM_CLOCK, Clock

_HID_IDLE = re.compile(r'"HIDIdleTime"\s*=\s*(\d+)')


def parse_hid_idle_time(output: str) -> float | None:
    """Idle seconds from ``ioreg`` output (HIDIdleTime is in nanoseconds); ``None`` if absent."""
    match = _HID_IDLE.search(output)
    return int(match.group(1)) / 1e9 if match else None


class MacIdleSensor(PolledIdleSensor):
    def __init__(
        self,
        *,
        cache_seconds: float = 1.0,
        timeout: float = 2.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__()
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._clock = clock
        self._taken_at = -float("inf")
        self._last: Reading[float] = Reading(None, "not asked yet")

    def read(self) -> Reading[float]:
        # if/else rather than an early return: type checkers skip the other platform's branch
        if sys.platform == "darwin":
            now = self._clock.monotonic()
            age = now - self._taken_at
            if age >= self._cache_seconds:
                self._last = self._query()
                self._taken_at, age = now, 0.0
            if self._last.value is None:
                return self._last
            # the user may have touched nothing since; if they did, the next query shows it
            return Reading(self._last.value + age)
        else:
            return Reading(None, "HIDIdleTime exists only on macOS")

    def _query(self) -> Reading[float]:
        ioreg = shutil.which("ioreg")
        if ioreg is None:
            return Reading(None, "ioreg is not available")
        try:
            done = subprocess.run(
                [ioreg, "-c", "IOHIDSystem", "-d", "4"],
                capture_output=True,
                text=True,
                timeout=self._timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Reading(None, f"ioreg failed: {exc}")
        idle = parse_hid_idle_time(done.stdout)
        if idle is None:
            return Reading(None, "ioreg did not report HIDIdleTime")
        return Reading(idle)
