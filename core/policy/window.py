"""The optional daily time window ("HH:MM" to "HH:MM", local wall-clock time) when work is allowed."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

MINUTES_PER_DAY = 24 * 60

_HHMM = re.compile(r"(\d{1,2}):(\d{2})")


def parse_hhmm(text: str) -> int:
    """Minute of the day for "HH:MM" (24-hour); ``ValueError`` if it is not such a time."""
    match = _HHMM.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a time as HH:MM: {text!r}")
    hour, minute = int(match.group(1)), int(match.group(2))
    if hour > 23 or minute > 59:
        raise ValueError(f"no such time of day: {text!r}")
    return hour * 60 + minute


def format_hhmm(minute_of_day: int) -> str:
    return f"{minute_of_day // 60:02d}:{minute_of_day % 60:02d}"


@dataclass(frozen=True)
class DailyWindow:
    """Work is allowed from ``start`` (inclusive) to ``end`` (exclusive), minutes of the day.

    ``start > end`` wraps midnight; ``start == end`` is the whole day.
    """

    start: int
    end: int

    @classmethod
    def parse(cls, start: str, end: str) -> DailyWindow | None:
        """The window for two "HH:MM" texts; ``None`` when both are empty (any time)."""
        if not start.strip() and not end.strip():
            return None
        return cls(parse_hhmm(start), parse_hhmm(end))

    @property
    def all_day(self) -> bool:
        return self.start == self.end

    def contains(self, now: _dt.datetime) -> bool:
        # boundaries are whole minutes, so the minute of ``now`` decides
        minute = now.hour * 60 + now.minute
        if self.all_day:
            return True
        if self.start < self.end:
            return self.start <= minute < self.end
        return minute >= self.start or minute < self.end

    def next_start(self, now: _dt.datetime) -> _dt.datetime:
        """The first moment after ``now`` when the window opens, in ``now``'s time zone."""
        candidate = now.replace(
            hour=self.start // 60, minute=self.start % 60, second=0, microsecond=0
        )
        if candidate <= now:
            # aware datetimes add wall-clock days, so a DST change keeps the opening at HH:MM
            candidate += _dt.timedelta(days=1)
        return candidate

    def label(self) -> str:
        """The window in the user's words: the two times joined by an en dash."""
        return f"{format_hhmm(self.start)}–{format_hhmm(self.end)}"
