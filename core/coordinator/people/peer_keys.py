"""PeerKeys: which account proved it holds each peer key, in the ``peer_keys`` table.

A key is claimed by the first account that signs a pass challenge with it (``challenges``), and
belongs to that account from then on, banned or not: a second account asking for a pass for it is
refused with a ``Conflict``, so nobody can get another volunteer's key revoked with their own ban
or count it as their own device. Revocations, device counts and contribution credits read keys
through this table only (see ``records`` and ``reports``).
"""

from __future__ import annotations

import sqlite3

from core.coordinator.errors import Conflict
from core.coordinator.schema import transaction

TAKEN = (
    "this peer key belongs to another account here: a device's key serves one account "
    "(log the device in to that account, or give it a new identity)"
)


class PeerKeys:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def owner(self, peer: str) -> str | None:
        """The key of the account that proved it holds ``peer``, if any did."""
        row = self._conn.execute(
            "SELECT user_key FROM peer_keys WHERE peer = ?", (peer,)
        ).fetchone()
        return None if row is None else str(row[0])

    def check_free_for(self, user_key: str, peer: str) -> None:
        """``Conflict`` if another account proved ``peer`` first."""
        owner = self.owner(peer)
        if owner is not None and owner != user_key:
            raise Conflict(TAKEN)

    def claim(self, user_key: str, peer: str, now: float) -> None:
        """Record that ``user_key`` proved it holds ``peer``; ``Conflict`` if another one did."""
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO peer_keys (peer, user_key, proved) VALUES (?, ?, ?) "
                "ON CONFLICT (peer) DO NOTHING",
                (peer, user_key, now),
            )
        self.check_free_for(user_key, peer)
