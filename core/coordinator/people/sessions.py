"""Sessions: a short-lived session token for requests and a long-lived refresh token that rotates.

Both are 256-bit random strings handed to the client once; the table keeps only their SHA-256, so a
leaked database copy lets nobody in (the tokens are random, so an unsalted fast hash suffices). A
refresh replaces the whole row: the old refresh token and the old session stop working, and a
refresh token used twice (stolen and replayed, say) finds nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import sqlite3
from dataclasses import dataclass

from core.coordinator.schema import transaction

SESSION_LIFETIME = 24 * 3600.0
REFRESH_LIFETIME = 30 * 86400.0
MAX_TOKEN_CHARS = 256
MAX_SESSIONS_PER_USER = 50
"""Logging in once more ends the oldest session beyond this, so logins cannot grow the table."""


@dataclass(frozen=True, slots=True)
class Tokens:
    session: str
    refresh: str
    session_expires: float

    def __repr__(self) -> str:
        return f"Tokens(<hidden>, expires={self.session_expires})"


class Sessions:
    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        session_lifetime: float = SESSION_LIFETIME,
        refresh_lifetime: float = REFRESH_LIFETIME,
    ) -> None:
        self._conn = conn
        self.session_lifetime = session_lifetime
        self.refresh_lifetime = refresh_lifetime

    def create(self, user_key: str, now: float) -> Tokens:
        with transaction(self._conn):
            tokens = self._insert(user_key, now)
            self._conn.execute(
                "DELETE FROM sessions WHERE user_key = ? AND rowid NOT IN (SELECT rowid FROM "
                "sessions WHERE user_key = ? ORDER BY created DESC, rowid DESC LIMIT ?)",
                (user_key, user_key, MAX_SESSIONS_PER_USER),
            )
        return tokens

    def user_of(self, session: str, now: float) -> str | None:
        """The user key of a live session token, else None."""
        row = self._conn.execute(
            "SELECT user_key FROM sessions WHERE session_hash = ? AND session_expires > ?",
            (_digest(session), now),
        ).fetchone()
        return None if row is None else str(row[0])

    def owner_of_refresh(self, refresh: str, now: float) -> str | None:
        """The user key of a live refresh token, else None."""
        row = self._conn.execute(
            "SELECT user_key FROM sessions WHERE refresh_hash = ? AND refresh_expires > ?",
            (_digest(refresh), now),
        ).fetchone()
        return None if row is None else str(row[0])

    def rotate(self, refresh: str, now: float) -> tuple[str, Tokens] | None:
        """Trade a live refresh token for a new pair; None if it is unknown, used or expired."""
        with transaction(self._conn):
            row = self._conn.execute(
                "SELECT user_key FROM sessions WHERE refresh_hash = ? AND refresh_expires > ?",
                (_digest(refresh), now),
            ).fetchone()
            if row is None:
                return None
            self._conn.execute("DELETE FROM sessions WHERE refresh_hash = ?", (_digest(refresh),))
            return str(row[0]), self._insert(str(row[0]), now)

    def end(self, session: str) -> bool:
        with transaction(self._conn):
            ended = self._conn.execute(
                "DELETE FROM sessions WHERE session_hash = ?", (_digest(session),)
            ).rowcount
        return ended > 0

    def purge(self, now: float) -> int:
        """Forget sessions whose refresh token has expired."""
        with transaction(self._conn):
            return self._conn.execute(
                "DELETE FROM sessions WHERE refresh_expires <= ?", (now,)
            ).rowcount

    def _insert(self, user_key: str, now: float) -> Tokens:
        tokens = Tokens(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + self.session_lifetime
        )
        self._conn.execute(
            "INSERT INTO sessions (session_hash, refresh_hash, user_key, session_expires, "
            "refresh_expires, created) VALUES (?, ?, ?, ?, ?, ?)",
            (
                _digest(tokens.session),
                _digest(tokens.refresh),
                user_key,
                tokens.session_expires,
                now + self.refresh_lifetime,
                now,
            ),
        )
        return tokens


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
