"""ManifestVersions: every distinct manifest text the coordinator served, numbered from 1.

Each row keeps the text, its SHA-256 and the envelope exactly as it was served (signed by the
project key, ``core.project.signed``). Numbers are given in one transaction with the signing
(``add``), one more than the highest so far, so they only grow, across restarts too: an engine
that holds version 7 never meets a 6 that is newer. A text that comes back (the organizer undid a
change) gets a new number: what counts is what is served now. Rows are never removed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from core.coordinator.schema import transaction
from core.project.signed import SignedManifest, parse_envelope


@dataclass(frozen=True, slots=True)
class StoredManifest:
    version: int
    sha256: str
    envelope: bytes
    """The signed envelope's JSON, as ``GET /manifest`` answers it."""

    @property
    def signed(self) -> SignedManifest:
        return parse_envelope(self.envelope)


class ManifestVersions:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def latest(self) -> StoredManifest | None:
        """The version served now (the highest number), or None before the first."""
        row = self._conn.execute(
            "SELECT version, sha256, envelope FROM manifests ORDER BY version DESC LIMIT 1"
        ).fetchone()
        return None if row is None else StoredManifest(int(row[0]), str(row[1]), bytes(row[2]))

    def add(self, text: str, sha256: str, sign: Callable[[int], SignedManifest]) -> StoredManifest:
        """Number ``text`` one above the latest, sign it (``sign(version)``) and store it."""
        with transaction(self._conn):
            row = self._conn.execute("SELECT max(version) FROM manifests").fetchone()
            version = int(row[0] or 0) + 1
            signed = sign(version)
            envelope = signed.to_bytes()
            self._conn.execute(
                "INSERT INTO manifests (version, sha256, text, issued, envelope) "
                "VALUES (?, ?, ?, ?, ?)",
                (version, sha256, text, signed.issued, envelope),
            )
        return StoredManifest(version, sha256, envelope)

    def count(self) -> int:
        row = self._conn.execute("SELECT count(*) FROM manifests").fetchone()
        return int(row[0])
