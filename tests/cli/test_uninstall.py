"""``barnraise uninstall``: the login item goes and what is left is named; ``--purge`` removes the
folders and the saved logins too, never under a running engine, and only once confirmed. Run against
a temporary ``BARNRAISE_HOME``, a temporary ``XDG_CONFIG_HOME`` and a keyring in memory."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.errors
import pytest

from core.account.credentials import CredentialStore, service_name
from core.account.replies import SessionTokens
from core.cli import main as cli
from core.cli.uninstall import Uninstall, program_removal
from core.config.paths import UserDirs
from core.control.lock import InstanceLock
from core.engine.config import EngineConfig
from core.engine.projects import ProjectSlot
from core.engine.store import EngineFile, EngineMemory
from core.util.process.login_item import XdgAutostart
from tests.account.memory_keyring import MemoryKeyring

COORDINATOR = "https://coordinator.example.org"
MANIFEST = f"""
[project]
name = "open-test"
description = "an open project with a leaderboard"

[[data.sources]]
urls = ["shards/a.jsonl"]

[network]
coordinator_url = "{COORDINATOR}/"
"""


@pytest.fixture
def keys() -> Iterator[MemoryKeyring]:
    """The process's keyring replaced by one in memory (and put back)."""
    previous = keyring.get_keyring()
    memory = MemoryKeyring()
    keyring.set_keyring(memory)
    try:
        yield memory
    finally:
        keyring.set_keyring(previous)


@pytest.fixture
def installed(
    barnraise_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: MemoryKeyring
) -> UserDirs:
    """A user some weeks in: settings with an attached project whose coordinator they logged in
    to, an identity, a ledger, logs, and Barnraise starting at login."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    dirs = UserDirs.default()
    for folder in (dirs.config, dirs.data, dirs.cache, dirs.logs, dirs.runtime):
        dirs.ensure(folder)
    manifest = dirs.config / "projects" / "open-test.toml"
    manifest.parent.mkdir()
    manifest.write_text(MANIFEST)
    slot = ProjectSlot.from_manifest(manifest)
    EngineFile(EngineConfig(dirs).settings_file).save(EngineMemory(projects=[slot]))
    (dirs.data / "identity.key").write_bytes(b"key")
    (dirs.logs / "engine.log").write_text("a log\n")
    tokens = SessionTokens("ada", "session", "refresh", 1e12, "volunteer")
    CredentialStore(keys).save(COORDINATOR, tokens)
    XdgAutostart.default().write(["/usr/bin/barnraise", "app", "--hidden"])
    return dirs


def uninstall(dirs: UserDirs, keys: MemoryKeyring, answer: str | None = None) -> Uninstall:
    """The command's object with its output captured; ``answer``: what the user types (None: no
    terminal to ask on)."""
    answers = iter([answer or ""])
    return Uninstall(
        dirs,
        credentials=CredentialStore(keys),
        ask=lambda _: next(answers),
        interactive=answer is not None,
        out=io.StringIO(),
    )


def said(command: Uninstall) -> str:
    assert isinstance(command.out, io.StringIO)
    return command.out.getvalue()


def test_without_purge_the_login_item_goes_and_the_rest_is_named(
    installed: UserDirs, keys: MemoryKeyring
) -> None:
    command = uninstall(installed, keys, "y")
    assert command.run(purge=False, yes=False) == 0
    text = said(command)
    assert XdgAutostart.default().read() is None
    assert "This removes:\n  the login item " in text
    assert "Barnraise no longer starts at login" in text
    assert "Left on this computer (remove them with 'barnraise uninstall --purge'):" in text
    for folder in (installed.config, installed.data, installed.cache, installed.logs):
        assert folder.is_dir()
        assert str(folder) in text
    assert f"the saved login for {COORDINATOR} ({service_name(COORDINATOR)!r})" in text
    assert (service_name(COORDINATOR), "session") in keys.entries
    assert "To remove the program itself:" in text
    assert "pip uninstall barnraise" in text


def test_purge_removes_folders_saved_logins_and_the_home(
    installed: UserDirs, keys: MemoryKeyring, barnraise_home: Path
) -> None:
    command = uninstall(installed, keys)
    assert command.run(purge=True, yes=True) == 0
    text = said(command)
    assert not barnraise_home.exists()
    assert keys.entries == {}
    assert XdgAutostart.default().read() is None
    assert f"Removed the saved login for {COORDINATOR} from the keyring." in text
    assert f"Removed {installed.data} (data (identity key, contribution ledger))." in text
    assert "To remove the program itself:" in text


def test_purge_refuses_while_an_engine_runs(installed: UserDirs, keys: MemoryKeyring) -> None:
    lock = InstanceLock(EngineConfig(installed).lock_file)
    lock.acquire()  # what a running engine holds
    try:
        command = uninstall(installed, keys)
        assert command.run(purge=True, yes=True) == 1
    finally:
        lock.release()
    assert "an engine is running for this user: nothing was removed" in said(command)
    assert "barnraise ctl shutdown" in said(command)
    assert installed.data.is_dir()
    assert XdgAutostart.default().read() is not None
    assert keys.entries


def test_a_no_keeps_everything(installed: UserDirs, keys: MemoryKeyring) -> None:
    command = uninstall(installed, keys, "n")
    assert command.run(purge=True, yes=False) == 1
    text = said(command)
    assert f"  the saved login for {COORDINATOR} (keyring)" in text
    assert f"  settings: {installed.config}" in text
    assert text.rstrip().endswith("Nothing was removed.")
    assert installed.config.is_dir()
    assert XdgAutostart.default().read() is not None
    assert keys.entries


def test_without_a_terminal_it_needs_yes(installed: UserDirs, keys: MemoryKeyring) -> None:
    command = uninstall(installed, keys, None)
    assert command.run(purge=True, yes=False) == 1
    assert "add --yes to confirm without a terminal" in said(command)
    assert installed.data.is_dir()
    assert XdgAutostart.default().read() is not None


def test_a_keyring_that_cannot_be_used_is_reported_and_the_rest_goes(
    installed: UserDirs, keys: MemoryKeyring
) -> None:
    class Locked(MemoryKeyring):
        def delete_password(self, service: str, username: str) -> None:
            raise keyring.errors.KeyringLocked("locked")

    command = uninstall(installed, keys)
    command.credentials = CredentialStore(Locked())
    assert command.run(purge=True, yes=True) == 1
    assert "the keyring is locked" in said(command)
    assert not installed.data.exists()


def test_nothing_to_do_says_so(
    barnraise_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: MemoryKeyring
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    command = uninstall(UserDirs.default(), keys, None)
    assert command.run(purge=False, yes=False) == 0
    assert "there is no login item to remove" in said(command)


def test_the_command_line_runs_it(
    installed: UserDirs, barnraise_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["uninstall", "--purge", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "Barnraise no longer starts at login" in out
    assert not barnraise_home.exists()


def test_how_the_program_itself_is_removed() -> None:
    assert program_removal(frozen=False, prefix="/home/ada/.local/pipx/venvs/barnraise") == (
        "pipx uninstall barnraise"
    )
    assert program_removal(frozen=False, prefix="/usr").endswith("-m pip uninstall barnraise")
    assert "Add or remove programs" in program_removal(frozen=True, platform="win32")
    assert program_removal(frozen=True, platform="darwin") == "move Barnraise.app to the Trash"
