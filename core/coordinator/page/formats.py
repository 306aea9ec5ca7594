"""How the page writes numbers, durations and times: one place, so that the server-rendered page
and the script's updates (which set text the server wrote, ``stats``) always look the same."""

from __future__ import annotations

import datetime

from core.util.amounts import floor_gap

NOTHING = "—"


def count(value: int | None) -> str:
    return NOTHING if value is None else f"{value:,}"


def speed(value: float | None) -> str:
    return NOTHING if value is None else f"{value:,.1f}"


def loss(value: float | None) -> str:
    return NOTHING if value is None else f"{value:.4g}"


def beside_floor(loss: float, floor: float | None) -> str:
    """A held-out loss against the unigram floor, in words ("" without a floor)."""
    if floor is None:
        return ""
    return f"{floor_gap(loss, floor)}: what a model that only counts words scores"


def share(value: float) -> str:
    """A share from 0 to 1 as a percentage."""
    return f"{100 * value:.1f}%"


def size(count: int) -> str:
    """A file's size in bytes as people read it (decimal units, as downloads show them)."""
    if count < 1000:
        return f"{count} bytes"
    value = float(count)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000:
            return f"{value:.1f} {unit}"
    return f"{value / 1000:,.1f} TB"


def compute_time(seconds: float) -> str:
    """Compute time in the unit that reads best: seconds, minutes, hours, days."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400 * 3:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:,.1f} days"


def ago(seconds: float) -> str:
    """How long ago, roughly; a clock ahead of ours reads as now."""
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min ago"
    if seconds < 86400 * 2:
        return f"{seconds // 3600:.0f} h ago"
    return f"{seconds // 86400:,.0f} days ago"


def utc(when: float) -> str:
    """A Unix time as a UTC date and minute."""
    moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M UTC")
