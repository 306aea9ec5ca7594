"""Accounts: users, their roles, the allowlist and bans, in the ``users`` table.

A row without a password is an invitation: a moderator allowlisted the name, and whoever signs up
under it first sets the password. ``allowlisted`` means a moderator vouched for the name; people who
signed up by themselves (when the project allows it) are not allowlisted, and may log in only while
sign-up stays open. A ban keeps the row (and its contributions) but refuses logins, sessions and
passes; the peers that hold the user's passes are published as revoked.

A new name (sign-up, or a moderator adding one) is refused when its skeleton (``confusables``)
is that of a name already stored, or, on a sign-up, of a reserved name (``RESERVED``: words that
would pass for the project's staff or the service itself). Rows stored before schema 2 get their
skeleton when the store opens; legacy names that share one are all kept (see ``schema``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from core.coordinator.errors import BadRequest, Conflict, Forbidden, NotFound
from core.coordinator.people.confusables import Confusables
from core.coordinator.people.names import Username, fold
from core.coordinator.schema import transaction

VOLUNTEER = "volunteer"
MODERATOR = "moderator"
_COLUMNS = "key, name, role, allowlisted, banned, ban_reason, banned_at, created, password"
RESERVED = frozenset(
    {
        "admin",
        "administrator",
        "anonymous",
        "barnraise",
        "coordinator",
        "everyone",
        "me",
        "moderator",
        "null",
        "official",
        "organizer",
        "root",
        "staff",
        "support",
        "system",
    }
)
"""Names nobody may sign up under (moderators may still add them); look-alikes are refused too."""


@dataclass(frozen=True, slots=True)
class User:
    key: str
    name: str
    role: str
    allowlisted: bool
    banned: bool
    ban_reason: str
    banned_at: float | None
    created: float
    has_password: bool

    @property
    def moderator(self) -> bool:
        return self.role == MODERATOR

    def to_json(self) -> dict[str, Any]:
        return {
            "username": self.name,
            "role": self.role,
            "allowlisted": self.allowlisted,
            "signed_up": self.has_password,
            "banned": self.banned,
            "ban_reason": self.ban_reason,
            "banned_at": self.banned_at,
            "created": self.created,
        }

    def check_standing(self, *, allow_signup: bool) -> None:
        """Raise ``Forbidden`` if this user may not take part now (banned, or not allowlisted
        while sign-up is closed)."""
        if self.banned:
            reason = f": {self.ban_reason}" if self.ban_reason else ""
            raise Forbidden(f"the account {self.name!r} is banned from this project{reason}")
        if not (self.allowlisted or allow_signup):
            raise Forbidden(
                f"the account {self.name!r} is not on this project's allowlist; "
                "ask a moderator to add it"
            )


class Accounts:
    def __init__(self, conn: sqlite3.Connection, confusables: Confusables) -> None:
        self._conn = conn
        self._confusables = confusables
        self._reserved = frozenset(confusables.skeleton(fold(name)) for name in RESERVED)

    def get(self, key: str) -> User | None:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM users WHERE key = ?", (key,)).fetchone()
        return None if row is None else _user(row)

    def find(self, username: Username) -> User | None:
        """The account of ``username``: under its key, or the key it had before schema 2."""
        user = self.get(username.key)
        if user is None and username.legacy_key != username.key:
            user = self.get(username.legacy_key)
        return user

    def stored_key(self, username: Username) -> str:
        """The key ``username`` is stored under (its own key when it has no account yet)."""
        user = self.find(username)
        return username.key if user is None else user.key

    def require(self, username: Username) -> User:
        user = self.find(username)
        if user is None:
            raise NotFound(f"there is no user {username.name!r}")
        return user

    def check_new(self, username: Username, *, signup: bool) -> None:
        """Refuse ``username`` as a new account's name: malformed for a new name, reserved (on a
        sign-up), or looking like a stored name."""
        username.check_new()
        skeleton = self._confusables.skeleton(username.key)
        if signup and skeleton in self._reserved:
            raise BadRequest(f"the name {username.name!r} is reserved; choose another")
        row = self._conn.execute(
            "SELECT name FROM users WHERE skeleton = ? LIMIT 1", (skeleton,)
        ).fetchone()
        if row is not None:
            raise Conflict(
                f"the name {username.name!r} looks too much like the taken name {row[0]!r}; "
                "choose another"
            )

    def fill_skeletons(self) -> int:
        """Give rows stored before schema 2 their skeleton; returns how many were filled."""
        rows = self._conn.execute("SELECT key FROM users WHERE skeleton IS NULL").fetchall()
        with transaction(self._conn):
            for (key,) in rows:
                self._conn.execute(
                    "UPDATE users SET skeleton = ? WHERE key = ?",
                    (self._confusables.skeleton(fold(key)), key),
                )
        return len(rows)

    def password_hash(self, key: str) -> str | None:
        row = self._conn.execute("SELECT password FROM users WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def all(self) -> list[User]:
        rows = self._conn.execute(f"SELECT {_COLUMNS} FROM users ORDER BY key").fetchall()
        return [_user(row) for row in rows]

    def create(
        self, username: Username, password_hash: str | None, now: float, *, allowlisted: bool
    ) -> User:
        """A new account; ``Conflict`` if the name (in any case) is taken. The caller has
        checked the name with ``check_new``."""
        try:
            with transaction(self._conn):
                self._conn.execute(
                    "INSERT INTO users (key, name, password, allowlisted, created, skeleton) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        username.key,
                        username.name,
                        password_hash,
                        int(allowlisted),
                        now,
                        self._confusables.skeleton(username.key),
                    ),
                )
        except sqlite3.IntegrityError:
            raise Conflict(f"the name {username.name!r} is taken") from None
        return self.require(username)

    def claim_invitation(self, username: Username, password_hash: str) -> User:
        """Set the password of an invited name (one without a password yet)."""
        with transaction(self._conn):
            claimed = self._conn.execute(
                "UPDATE users SET password = ?, name = ? WHERE key = ? AND password IS NULL",
                (password_hash, username.name, self.stored_key(username)),
            ).rowcount
        if not claimed:
            raise Conflict(f"the name {username.name!r} is taken")
        return self.require(username)

    def allowlist(
        self,
        username: Username,
        now: float,
        *,
        moderator: bool = False,
        password_hash: str | None = None,
    ) -> User:
        """Add ``username`` to the allowlist, creating it if needed; ``moderator`` promotes it and a
        ``password_hash`` replaces its password (an existing role is never lowered here). A new
        name must not look like a stored one."""
        key = self.stored_key(username)
        if self.get(key) is None:
            self.check_new(username, signup=False)
        with transaction(self._conn):
            self._conn.execute(
                "INSERT INTO users (key, name, created, skeleton) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (key) DO NOTHING",
                (key, username.name, now, self._confusables.skeleton(username.key)),
            )
            self._conn.execute("UPDATE users SET allowlisted = 1 WHERE key = ?", (key,))
            if moderator:
                self._conn.execute("UPDATE users SET role = ? WHERE key = ?", (MODERATOR, key))
            if password_hash is not None:
                self._conn.execute(
                    "UPDATE users SET password = ? WHERE key = ?", (password_hash, key)
                )
        return self.require(username)

    def set_password_hash(self, key: str, password_hash: str) -> None:
        with transaction(self._conn):
            self._conn.execute("UPDATE users SET password = ? WHERE key = ?", (password_hash, key))

    def ban(self, username: Username, reason: str, now: float) -> User:
        key = self.require(username).key
        with transaction(self._conn):
            self._conn.execute(
                "UPDATE users SET banned = 1, ban_reason = ?, banned_at = ? WHERE key = ?",
                (reason, now, key),
            )
        return self.require(username)

    def unban(self, username: Username) -> User:
        key = self.require(username).key
        with transaction(self._conn):
            self._conn.execute(
                "UPDATE users SET banned = 0, ban_reason = '', banned_at = NULL WHERE key = ?",
                (key,),
            )
        return self.require(username)


def _user(row: tuple[Any, ...]) -> User:
    key, name, role, allowlisted, banned, reason, banned_at, created, password = row
    return User(
        key=key,
        name=name,
        role=role,
        allowlisted=bool(allowlisted),
        banned=bool(banned),
        ban_reason=reason,
        banned_at=banned_at,
        created=created,
        has_password=password is not None,
    )
