"""Which UTC hour, local day or local month a moment belongs to.

The ledger stores one row per UTC hour, keyed by the unix time at which the hour starts. Days and
months are local to the person reading them, given as a fixed offset from UTC; an hour belongs to
the local day in which it starts (this matters only for offsets that are not whole hours, such as
India's +5:30). A fixed offset cannot follow a daylight-saving change inside the range asked for;
callers pass the offset in force now, which is exact except around the change itself.
"""

from __future__ import annotations

import math
from datetime import date, timedelta

from core.stats.errors import LedgerError

HOUR = 3600
DAY = 86400
_EPOCH = date(1970, 1, 1)


def require_finite(when: float, what: str) -> None:
    """Raise ``LedgerError`` unless ``when`` is a finite number of seconds."""
    if isinstance(when, bool) or not isinstance(when, int | float) or not math.isfinite(when):
        raise LedgerError(f"{what} must be a finite unix time, not {when!r}")


def require_offset(utc_offset_seconds: int) -> None:
    """Raise ``LedgerError`` unless the offset is a whole number of seconds less than a day."""
    if not isinstance(utc_offset_seconds, int) or not -DAY < utc_offset_seconds < DAY:
        raise LedgerError(
            f"a UTC offset must be whole seconds within a day, not {utc_offset_seconds!r}"
        )


def hour_start(when: float) -> int:
    """Unix time of the start of the UTC hour containing ``when``."""
    return math.floor(when) // HOUR * HOUR


def local_day(when: float, utc_offset_seconds: int) -> int:
    """Days since 1970-01-01 of the local date containing ``when``."""
    return (math.floor(when) + utc_offset_seconds) // DAY


def day_start(day: int, utc_offset_seconds: int) -> int:
    """Unix time of local midnight starting ``day`` (days since 1970-01-01)."""
    return day * DAY - utc_offset_seconds


def day_label(day: int) -> str:
    """The ISO date ("YYYY-MM-DD") of ``day`` (days since 1970-01-01)."""
    return (_EPOCH + timedelta(days=day)).isoformat()


def month_start(when: float, utc_offset_seconds: int) -> int:
    """Unix time of local midnight on the first day of the local month containing ``when``."""
    today = _EPOCH + timedelta(days=local_day(when, utc_offset_seconds))
    first = (today.replace(day=1) - _EPOCH).days
    return day_start(first, utc_offset_seconds)
