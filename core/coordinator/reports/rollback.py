"""The moderators' rollback orders: stored in order, the latest served to every peer.

``barnraise coordinator rollback --to-epoch N`` signs an order with the project key
(``core.training.moderation.rollback``: {project, sequence, to_epoch, issued, reason}) and stores it here; the
service answers ``GET /rollback`` with the latest, which every moderated peer's pass keeper reads
with its revocations, once per refresh interval. The coordinator treats the signed text as opaque:
it never imports the training code, and it need not be trusted with anything but delivery, since
peers check the signature against the manifest's project key themselves.

Orders are numbered 1, 2, ... in one transaction with their signing (``issue``), so two moderators
issuing at once still get distinct numbers; peers apply each number once. Orders are never removed:
the table is the project's record of what the moderators did, and when.

What the coordinator can check is the epoch: it knows the epochs the backbone reported
(``epochs``), so a rollback to an epoch the collaboration never reached is refused. Whether the
backbone still holds that checkpoint it cannot know (the checkpoints live on the backbone's disk):
the command line checks a checkpoint folder when it is given one, and otherwise a peer that finds
no copy logs why and keeps training (``core.training.rollback_replica``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest
from core.coordinator.schema import transaction

MAX_REASON_CHARS = 500
"""The same bound as the signed order's (``core.training.moderation.rollback``)."""


@dataclass(frozen=True, slots=True)
class StoredOrder:
    sequence: int
    to_epoch: int
    reason: str
    issued: float
    text: str
    """The signed order as peers read it (``order_to_text``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "rollback": self.text,
            "sequence": self.sequence,
            "to_epoch": self.to_epoch,
            "reason": self.reason,
            "issued": self.issued,
        }


class RollbackOrders:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def check(self, to_epoch: int, reason: str) -> None:
        """``BadRequest`` for an order that cannot be right: a negative epoch, one beyond the
        newest the collaboration reported, or an over-long reason."""
        if to_epoch < 0:
            raise BadRequest(f"the epoch to roll back to must be 0 or more, not {to_epoch}")
        if len(reason) > MAX_REASON_CHARS:
            raise BadRequest(f"the reason is at most {MAX_REASON_CHARS} characters")
        newest = self.newest_reported_epoch()
        if newest is not None and to_epoch > newest + 1:
            # the epoch-N checkpoint is the state after N steps, written once epoch N - 1 ended
            raise BadRequest(
                f"the collaboration has reported epochs up to {newest}: there is no checkpoint "
                f"of epoch {to_epoch} to roll back to"
            )

    def issue(
        self, to_epoch: int, reason: str, issued: float, sign: Callable[[int], str]
    ) -> StoredOrder:
        """Check, number, sign (``sign(sequence)`` returns the signed order's text) and store a
        new order, all in one transaction."""
        self.check(to_epoch, reason)
        with transaction(self._conn):
            row = self._conn.execute("SELECT max(sequence) FROM rollbacks").fetchone()
            sequence = int(row[0] or 0) + 1
            text = sign(sequence)
            self._conn.execute(
                "INSERT INTO rollbacks (sequence, to_epoch, reason, issued, signed) "
                "VALUES (?, ?, ?, ?, ?)",
                (sequence, to_epoch, reason, issued, text),
            )
        return StoredOrder(sequence, to_epoch, reason, issued, text)

    def latest(self) -> StoredOrder | None:
        """The order peers must follow now (the highest number), or None."""
        row = self._conn.execute(
            "SELECT sequence, to_epoch, reason, issued, signed FROM rollbacks "
            "ORDER BY sequence DESC LIMIT 1"
        ).fetchone()
        return None if row is None else StoredOrder(*row)

    def all(self) -> list[StoredOrder]:
        """Every order issued, oldest first."""
        rows = self._conn.execute(
            "SELECT sequence, to_epoch, reason, issued, signed FROM rollbacks ORDER BY sequence"
        ).fetchall()
        return [StoredOrder(*row) for row in rows]

    def newest_reported_epoch(self) -> int | None:
        """The newest epoch the backbone reported (None: none reported, nothing known)."""
        row = self._conn.execute("SELECT max(epoch) FROM epochs").fetchone()
        return None if row[0] is None else int(row[0])
