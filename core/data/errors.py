"""The one error type of the data pipeline."""

from __future__ import annotations

from core.util.errors import BarnraiseError


class DataError(BarnraiseError):
    """Training data cannot be found, read or used as configured; the message names what and where."""
