"""Numbers and times in the plain words the scheduler's reasons use ("14:30", "tomorrow 07:00")."""

from __future__ import annotations

import datetime as _dt


def number_text(value: float) -> str:
    """A quantity without noise: 1234 → "1234", 2.5 → "2.5", 0.25 → "0.3"."""
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}".removesuffix(".0")


def local_time(timestamp: float, now: _dt.datetime) -> _dt.datetime:
    """``timestamp`` in ``now``'s time zone, or in the system's local time when ``now`` is naive."""
    if now.tzinfo is None:
        return _dt.datetime.fromtimestamp(timestamp)
    return _dt.datetime.fromtimestamp(timestamp, tz=now.tzinfo)


def moment_text(moment: _dt.datetime, now: _dt.datetime) -> str:
    """When ``moment`` is, relative to ``now``: "14:30", "tomorrow 14:30" or "Mon 3 Mar 14:30"."""
    clock = moment.strftime("%H:%M")
    days = (moment.date() - now.date()).days
    if days == 0:
        return clock
    if days == 1:
        return f"tomorrow {clock}"
    return f"{moment.strftime('%a')} {moment.day} {moment.strftime('%b')} {clock}"
