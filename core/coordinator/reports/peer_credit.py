"""What the coordinator credited to one peer key, epoch by epoch (``GET /credit/mine``).

A volunteer's engine keeps its own count of the epochs whose update its peer applied, and asks here
what the project made of them, to show the two side by side. The answer is for a key the asking
account proved it holds (``peer_keys``); the service refuses any other, so nobody reads which epochs
another volunteer's device took part in.

``PeerCredit`` is the answer: the key's samples over every epoch, its epochs from ``since`` on (at
most ``MAX_EPOCHS``, oldest first, so that a window starting at the engine's oldest kept epoch is
covered from its start), and the newest epoch reported by anyone, which tells the engine whether an
epoch it has but the coordinator lacks may simply not be reported yet. Where the backbone's work
checks credited the key less than it claimed in one of those epochs, or took the credit back, the
answer says what was claimed and why (``notes``).

The contributions table is keyed (epoch, peer): the epochs from ``since`` are a range of that key.
The total over every epoch reads each contribution row once (there is no index by peer).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any

from core.coordinator.errors import BadRequest
from core.trust.errors import PeerIdError
from core.trust.peer_id import PeerID

MAX_EPOCHS = 1000
"""Epochs one answer lists: as many as an engine's ledger keeps per project."""
MAX_EPOCH = 2**63 - 1
"""SQLite's largest integer: no epoch is larger."""
_PEER_CHARS = 200


@dataclass(frozen=True, slots=True)
class PeerCredit:
    peer: str
    samples: int
    """Samples credited to the key over every epoch."""
    epochs: list[tuple[int, int]] = field(default_factory=list)
    """(epoch, samples) from ``since`` on, oldest first, at most ``MAX_EPOCHS``."""
    newest_epoch: int | None = None
    """The newest epoch the coordinator has a report of (any peer's); None: none yet."""
    notes: list[tuple[int, int, str]] = field(default_factory=list)
    """(epoch, samples claimed, why less was credited) for the listed epochs whose share the work
    checks cut or withdrew."""

    def to_json(self) -> dict[str, Any]:
        return {
            "peer": self.peer,
            "samples": self.samples,
            "epochs": [[epoch, samples] for epoch, samples in self.epochs],
            "newest_epoch": self.newest_epoch,
            "notes": [[epoch, claimed, note] for epoch, claimed, note in self.notes],
        }


def parse_peer(text: str | None) -> PeerID:
    """The ``peer`` query parameter as a PeerID; ``BadRequest`` if absent or malformed."""
    if not text:
        raise BadRequest("peer is missing: give the PeerID whose credit you ask for")
    if len(text) > _PEER_CHARS:
        raise BadRequest("peer is not a PeerID: it is too long")
    try:
        return PeerID.from_string(text)
    except PeerIdError as exc:
        raise BadRequest(f"peer is not a PeerID: {exc}") from None


def parse_since(text: str | None) -> int:
    """The ``since`` query parameter (absent: 0); ``BadRequest`` unless a whole number >= 0."""
    if text is None:
        return 0
    # the length first: int() of thousands of digits is slow
    if not (len(text) <= len(str(MAX_EPOCH)) and text.isascii() and text.isdigit()):
        raise BadRequest("since must be a whole number of 0 or more (an epoch)")
    value = int(text)
    if value > MAX_EPOCH:
        raise BadRequest("since is larger than any epoch")
    return value


class PeerCredits:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def of(self, peer: str, since: int, limit: int = MAX_EPOCHS) -> PeerCredit:
        """What ``peer`` was credited: in all, and per epoch from ``since`` on (see the module)."""
        total = self._conn.execute(
            "SELECT COALESCE(sum(samples), 0) FROM contributions WHERE peer = ?", (peer,)
        ).fetchone()[0]
        rows = self._conn.execute(
            "SELECT epoch, samples, claimed, note FROM contributions WHERE epoch >= ? AND peer = ? "
            "ORDER BY epoch LIMIT ?",
            (since, peer, limit),
        ).fetchall()
        newest = self._conn.execute("SELECT max(epoch) FROM epochs").fetchone()[0]
        return PeerCredit(
            peer=peer,
            samples=int(total),
            epochs=[(int(epoch), int(samples)) for epoch, samples, _, _ in rows],
            newest_epoch=None if newest is None else int(newest),
            notes=[
                (int(epoch), int(claimed), str(note))
                for epoch, _, claimed, note in rows
                if claimed is not None and note is not None
            ],
        )
