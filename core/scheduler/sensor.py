"""What every sensor shares: a reading is a value, or ``None`` with a note saying why not.

``IdleSensor`` is the protocol the sampler polls for keyboard and mouse idleness.
``PolledIdleSensor`` builds one from a single ``read`` method and makes sure a failing platform
call becomes a note instead of an exception in the engine's loop. Sensors expect one polling
thread (the engine's); only ``ScriptedIdleSensor`` is meant to be driven from others.
"""

from __future__ import annotations

import abc
import logging
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

T = TypeVar("T")

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading(Generic[T]):
    value: T | None
    note: str | None = None
    """Why ``value`` is ``None`` ("$DISPLAY is not set"); ``None`` when the sensor could tell."""


class IdleSensor(Protocol):
    def idle_seconds(self) -> float | None:
        """Seconds since the last keyboard or mouse input; ``None`` when it cannot tell."""
        ...

    @property
    def note(self) -> str | None:
        """Why the last ``idle_seconds`` was ``None``."""
        ...

    def close(self) -> None:
        """Free what the sensor holds (a display connection); it may not be used again."""
        ...


class PolledIdleSensor(abc.ABC):
    """An ``IdleSensor`` on top of ``read``; usable as a context manager."""

    def __init__(self) -> None:
        self._note: str | None = None

    @abc.abstractmethod
    def read(self) -> Reading[float]:
        """One measurement."""

    def idle_seconds(self) -> float | None:
        try:
            reading = self.read()
        except Exception as exc:
            # a sensor must never stop the engine; the user sees the note instead
            _log.debug("%s failed", type(self).__name__, exc_info=True)
            reading = Reading(None, f"{type(self).__name__} failed: {exc}")
        self._note = reading.note if reading.value is None else None
        return reading.value

    @property
    def note(self) -> str | None:
        return self._note

    def close(self) -> None:  # noqa: B027 - most sensors hold nothing; those that do override it
        """Nothing to free unless a subclass holds something."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
