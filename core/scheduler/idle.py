"""Choosing the idle sensor for this platform, and idle sensors for tests and benchmarks.

- ``default_idle_sensor``  Windows and macOS have one way; Linux tries X11, then logind.
- ``FallbackIdleSensor``   asks several sensors in order, each time, and takes the first answer.
- ``FixedIdleSensor``      always the same answer.
- ``ScriptedIdleSensor``   a simulated user whom another thread can make type or walk away.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

from core.scheduler.idle_logind import LogindIdleSensor
from core.scheduler.idle_macos import MacIdleSensor
from core.scheduler.idle_windows import WindowsIdleSensor
from core.scheduler.idle_x11 import X11IdleSensor
from core.scheduler.sensor import IdleSensor
from core.util.clock import SYSTEM_CLOCK, Clock


def default_idle_sensor() -> IdleSensor:
    # if/elif/else rather than early returns: type checkers skip the other platforms' branches
    if sys.platform == "win32":
        return WindowsIdleSensor()
    elif sys.platform == "darwin":
        return MacIdleSensor()
    else:
        return FallbackIdleSensor([X11IdleSensor(), LogindIdleSensor()])


class FallbackIdleSensor:
    def __init__(self, sensors: Sequence[IdleSensor]) -> None:
        if not sensors:
            raise ValueError("a fallback needs at least one sensor")
        self._sensors = tuple(sensors)
        self._note: str | None = None

    def idle_seconds(self) -> float | None:
        # every call starts from the first sensor, so X11 is used again once it comes back
        notes = []
        for sensor in self._sensors:
            seconds = sensor.idle_seconds()
            if seconds is not None:
                self._note = None
                return seconds
            notes.append(sensor.note or f"{type(sensor).__name__} cannot tell")
        self._note = "; ".join(notes)
        return None

    @property
    def note(self) -> str | None:
        return self._note

    def close(self) -> None:
        for sensor in self._sensors:
            sensor.close()


class FixedIdleSensor:
    """Always ``seconds``; with ``None``, always "cannot tell" with ``note``."""

    def __init__(
        self, seconds: float | None, note: str = "a fixed sensor that cannot tell"
    ) -> None:
        self._seconds = seconds
        self._note = note

    def idle_seconds(self) -> float | None:
        return self._seconds

    @property
    def note(self) -> str | None:
        return self._note if self._seconds is None else None

    def close(self) -> None:
        """Holds nothing."""


class ScriptedIdleSensor:
    """Idle time that grows with ``clock`` from the last simulated input; safe across threads."""

    def __init__(self, idle_seconds: float = 0.0, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last_input = clock.monotonic() - idle_seconds
        self._unknown: str | None = None
        self._inputs: list[float] = []

    def set_idle(self, seconds: float) -> None:
        """As if the last input was ``seconds`` ago; also ends ``set_unknown``."""
        with self._lock:
            self._last_input = self._clock.monotonic() - seconds
            self._unknown = None

    def user_input(self) -> None:
        """The user touched the keyboard or mouse now."""
        with self._lock:
            now = self._clock.monotonic()
            self._last_input = now
            self._inputs.append(now)
            self._unknown = None

    def set_unknown(self, note: str) -> None:
        """From now on the sensor cannot tell, because of ``note``."""
        with self._lock:
            self._unknown = note

    @property
    def inputs(self) -> tuple[float, ...]:
        """Clock times of every ``user_input``."""
        with self._lock:
            return tuple(self._inputs)

    def idle_seconds(self) -> float | None:
        with self._lock:
            if self._unknown is not None:
                return None
            return max(0.0, self._clock.monotonic() - self._last_input)

    @property
    def note(self) -> str | None:
        with self._lock:
            return self._unknown

    def close(self) -> None:
        """Holds nothing."""
