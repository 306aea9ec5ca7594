"""CoordinatorStore on a real file: accounts survive, SQL text stays SQL, foreign files are left alone."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path

import pytest

from core.coordinator import CoordinatorStore, Password, ScryptParams, StoreError
from core.coordinator.errors import BadRequest, NotFound
from core.coordinator.people.passwords import verify_password
from core.coordinator.people.sessions import MAX_SESSIONS_PER_USER

FAST = ScryptParams(n=2**10)


def test_accounts_persist_and_the_file_is_private(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "coordinator.db"
    with CoordinatorStore(path) as store:
        store.add_user("alice", "a password!", params=FAST, now=100.0)
        store.add_user("Zoë", None)  # an invitation
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with CoordinatorStore(path) as store:
        users = {user.name: user for user in store.users()}
        assert set(users) == {"alice", "Zoë"}
        assert users["alice"].has_password
        assert users["alice"].allowlisted
        assert users["alice"].created == 100.0
        assert not users["Zoë"].has_password
        stored = store.accounts.password_hash("alice")
        assert stored is not None
        assert verify_password(Password("a password!"), stored)


def test_add_promotes_and_resets_but_never_demotes(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        assert store.add_user("mod", "first password", moderator=True, params=FAST).moderator
        again = store.add_user("MOD", "second password", params=FAST)  # the same account
        assert again.moderator
        assert again.name == "mod"
        stored = store.accounts.password_hash("mod")
        assert stored is not None
        assert verify_password(Password("second password"), stored)
        assert len(store.users()) == 1


def test_hostile_text_is_stored_as_text(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        # names cannot carry SQL metacharacters; reasons and passwords can, and stay data
        reason = "'); DROP TABLE users; -- \x00 ☠ " + "x" * 10_000
        store.add_user("robert", "'); DROP TABLE users; --", params=FAST)
        banned = store.ban("Robert", reason)
        assert banned.ban_reason == reason
        assert [user.name for user in store.users()] == ["robert"]
        for hostile in ["robert'; --", "", "x" * 10_000, "\x00", "a\nb", "☠"]:
            with pytest.raises(BadRequest):
                store.add_user(hostile, None)
            with pytest.raises(BadRequest):
                store.ban(hostile)
        with pytest.raises(NotFound, match="no user 'nobody'"):
            store.ban("nobody")
        with pytest.raises(NotFound):
            store.unban("nobody")
        with pytest.raises(BadRequest, match="8 to 1024"):
            store.add_user("shorty", "short")
        assert [user.name for user in store.users()] == ["robert"]


def test_unicode_names_are_one_account_per_case_folded_form(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        store.add_user("Straße", None)
        store.add_user("STRASSE", None)
        store.add_user("Jose\u0301", None)
        store.add_user("JOSÉ", None)
        assert sorted(user.name for user in store.users()) == ["José", "Straße"]


def test_a_file_that_is_not_ours_is_refused_and_left_alone(tmp_path: Path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("my notes")
    with pytest.raises(StoreError, match="not a SQLite database"):
        CoordinatorStore(text)
    assert text.read_text() == "my notes"
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE mine (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="another program"):
        CoordinatorStore(other)
    newer = tmp_path / "newer.db"
    CoordinatorStore(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer Barnraise"):
        CoordinatorStore(newer)


def test_sessions_per_user_are_bounded_and_tokens_stored_only_as_hashes(tmp_path: Path) -> None:
    with CoordinatorStore(tmp_path / "c.db") as store:
        store.add_user("alice", None)
        store.add_user("bob", None)
        bob = store.sessions.create("bob", 0.0)
        made = [store.sessions.create("alice", float(i)) for i in range(MAX_SESSIONS_PER_USER + 2)]
        assert store.sessions.user_of(made[0].session, 10.0) is None  # the oldest ended
        assert store.sessions.user_of(made[1].session, 10.0) is None
        assert store.sessions.user_of(made[2].session, 10.0) == "alice"
        assert store.sessions.user_of(made[-1].session, 10.0) == "alice"
        assert store.sessions.user_of(bob.session, 10.0) == "bob"  # other users are untouched
        assert "<hidden>" in repr(bob)
        assert bob.session not in repr(bob)
        raw = (tmp_path / "c.db").read_bytes() + (tmp_path / "c.db-wal").read_bytes()
    for tokens in (bob, made[-1]):
        assert tokens.session.encode() not in raw
        assert tokens.refresh.encode() not in raw
