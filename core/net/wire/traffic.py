"""Traffic: bytes a Host's connections sent and received, for the contribution ledger.

Counted at the frame layer (headers included, TLS record overhead not), on the loop thread only, so
plain integers suffice. The engine reads the totals now and then and stores the differences.
"""

from __future__ import annotations


class Traffic:
    """Running totals shared by all connections of one Host."""

    __slots__ = ("received", "sent")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0

    def snapshot(self) -> tuple[int, int]:
        """(sent, received) so far."""
        return self.sent, self.received
