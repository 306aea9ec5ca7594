"""A schema-1 coordinator database opened by this version: data kept, legacy names log in, and pass
rows nobody proved can no longer revoke or credit anyone's key."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.coordinator import CoordinatorStore, Password, ScryptParams, Username
from core.coordinator.errors import Conflict, StoreError
from core.coordinator.people.passwords import hash_password
from core.coordinator.schema import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION
from core.net import Identity
from core.util.files.sqlite_file import SqliteFile

FAST = ScryptParams(n=2**10)
VICTIM_PEER = str(Identity.generate().peer_id)


def schema_1_file(path: Path) -> None:
    """A file as the coordinator of schema 1 left it, with legacy rows."""
    old = SqliteFile("coordinator database", APPLICATION_ID, _MIGRATIONS[:1], StoreError)
    conn = old.open(path)
    hashed = hash_password(Password.parse("correct horse battery"), FAST)
    rows = [
        # key (NFC + case fold, as schema 1 made it), name
        ("ｂob", "Ｂob"),  # fullwidth: schema 2 folds it to "bob"
        ("bоb", "bоb"),  # Cyrillic o: a look-alike of "bob" stored before the check
        ("mallory", "mallory"),
        ("victim", "victim"),
    ]
    with conn:  # the file is in autocommit mode: each statement is stored at once
        for key, name in rows:
            conn.execute(
                "INSERT INTO users (key, name, password, allowlisted, created) "
                "VALUES (?, ?, ?, 1, 1.0)",
                (key, name, hashed),
            )
        # mallory once got a pass for the victim's key, without holding it
        conn.execute(
            "INSERT INTO passes (user_key, peer, first_issued, expires) VALUES (?, ?, ?, ?)",
            ("mallory", VICTIM_PEER, 1.0, 10_000_000_000.0),
        )
    conn.close()


def test_a_schema_1_file_is_migrated_and_its_legacy_rows_are_harmless(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    schema_1_file(path)
    with CoordinatorStore(path) as store:
        version = store._conn.execute("PRAGMA user_version").fetchone()[0]
        assert version == SCHEMA_VERSION
        assert sorted(u.name for u in store.users()) == ["bоb", "mallory", "victim", "Ｂob"]
        # legacy names are found under their stored keys, however they are typed
        fullwidth = store.accounts.find(Username.parse("Ｂob"))
        assert fullwidth is not None
        assert fullwidth.key == "ｂob"
        # both legacy look-alikes stay; a new one of either is refused
        skeletons = dict(store._conn.execute("SELECT key, skeleton FROM users").fetchall())
        assert skeletons["ｂob"] == skeletons["bоb"] == "bob"
        assert store.accounts.find(Username.parse("bob")) is None
        with pytest.raises(Conflict, match="looks too much like"):
            store.add_user("BOB")
        # mallory's legacy pass row for the victim's key: banning her revokes nothing of his,
        # counts no device for her, and the victim may still prove the key as his own
        store.ban("mallory")
        assert store.passes.revoked(2.0) == []
        assert store.passes.devices(["mallory"]) == {}
        store.peer_keys.claim("victim", VICTIM_PEER, 3.0)
        assert store.peer_keys.owner(VICTIM_PEER) == "victim"
        assert store.passes.revoked(4.0) == []
