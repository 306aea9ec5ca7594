"""The one exception the contribution ledger raises on purpose."""

from __future__ import annotations

from core.util.errors import BarnraiseError


class LedgerError(BarnraiseError):
    """The ledger file cannot be used, or an amount or name given to it is invalid.

    Messages name the file where one is involved, so the person reading them knows what to look at.
    """
