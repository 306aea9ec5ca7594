"""What one peer did for one project: the amounts the ledger adds up.

``WorkDone`` is a plain value (counts and seconds, all zero by default) that can be added to
another. ``HourRow`` is one stored row: a project's total for one UTC hour. ``validate_amounts``
is the single check, shared by the ledger and the meter, that an amount can be stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.stats.errors import LedgerError

# SQLite integers are signed 64-bit; a larger Python int would fail at bind time with a less
# helpful message, so it is refused up front.
_MAX_INT = 2**63 - 1


@dataclass(frozen=True)
class WorkDone:
    """Amounts of work and traffic; a delta to add or a total that was read."""

    samples: int = 0
    compute_seconds: float = 0.0
    epochs: int = 0
    rounds: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def is_empty(self) -> bool:
        """True when every amount is zero (nothing worth writing)."""
        return (
            self.samples == 0
            and self.compute_seconds == 0.0
            and self.epochs == 0
            and self.rounds == 0
            and self.bytes_sent == 0
            and self.bytes_received == 0
        )

    def __add__(self, other: WorkDone) -> WorkDone:
        return WorkDone(
            samples=self.samples + other.samples,
            compute_seconds=self.compute_seconds + other.compute_seconds,
            epochs=self.epochs + other.epochs,
            rounds=self.rounds + other.rounds,
            bytes_sent=self.bytes_sent + other.bytes_sent,
            bytes_received=self.bytes_received + other.bytes_received,
        )


@dataclass(frozen=True)
class HourRow:
    """One project's amounts for the UTC hour starting at ``hour_start`` (unix seconds)."""

    project: str
    hour_start: int
    amounts: WorkDone


def validate_amounts(amounts: WorkDone) -> None:
    """Raise ``LedgerError`` unless every amount is a finite, non-negative number of its type."""
    counts = {
        "samples": amounts.samples,
        "epochs": amounts.epochs,
        "rounds": amounts.rounds,
        "bytes_sent": amounts.bytes_sent,
        "bytes_received": amounts.bytes_received,
    }
    for name, value in counts.items():
        # bool is an int subclass; True samples is a caller bug, not "one sample".
        if not isinstance(value, int) or isinstance(value, bool):
            raise LedgerError(f"contribution {name} must be a whole number, not {value!r}")
        if not 0 <= value <= _MAX_INT:
            raise LedgerError(f"contribution {name} must be between 0 and {_MAX_INT}, not {value}")
    seconds = amounts.compute_seconds
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise LedgerError(
            f"contribution compute_seconds must be a finite number >= 0, not {seconds!r}"
        )
