"""Start at login on each platform: the XDG autostart entry for real (under a temporary
``XDG_CONFIG_HOME``), the Windows Run key against a fake ``winreg``, the macOS LaunchAgent under a
temporary home; and the command registered (the installed program, or the bundle's)."""

from __future__ import annotations

import os
import plistlib
import subprocess
import sysconfig
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core.util.process import login_item
from core.util.process.login_item import (
    APPROVED_KEY,
    RUN_KEY,
    LaunchAgent,
    LoginItemError,
    WindowsRunKey,
    XdgAutostart,
    login_command,
    quote_exec,
    split_exec,
    split_windows,
)

COMMAND = ["/opt/Bärn raise/bin/barnraise", "app", "--hidden"]


# ---- Linux -------------------------------------------------------------------------------------


@pytest.fixture
def xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    config = tmp_path / "xdg-config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    return config


def test_xdg_autostart_entry_is_written_read_back_and_removed(xdg: Path) -> None:
    item = login_item.login_item("linux")
    assert isinstance(item, XdgAutostart)
    entry = xdg / "autostart" / "barnraise.desktop"
    assert item.where == str(entry)
    assert item.read() is None
    assert login_item.enable(item, COMMAND) == COMMAND
    text = entry.read_text()
    assert text.startswith("[Desktop Entry]\nType=Application\n")
    assert 'Exec="/opt/Bärn raise/bin/barnraise" app --hidden\n' in text
    assert list((xdg / "autostart").iterdir()) == [entry]  # no temporaries left behind
    login_item.enable(item, COMMAND)  # twice: the same entry, still one
    assert entry.read_text() == text
    assert list((xdg / "autostart").iterdir()) == [entry]
    assert login_item.disable(item) is True
    assert not entry.exists()
    assert item.read() is None
    assert login_item.disable(item) is False  # nothing left to remove


@pytest.mark.parametrize(
    "flag", ["Hidden=true", "X-GNOME-Autostart-enabled=false"], ids=["hidden", "gnome-off"]
)
def test_an_entry_the_desktop_switched_off_reads_as_off(xdg: Path, flag: str) -> None:
    item = XdgAutostart.default()
    item.write(COMMAND)
    entry = Path(item.where)
    text = entry.read_text().replace("X-GNOME-Autostart-enabled=true\n", "")
    entry.write_text(text + flag + "\n")
    assert item.read() is None
    item.write(COMMAND)  # turning it on again rewrites it switched on
    assert item.read() == COMMAND


def test_a_damaged_entry_reads_as_off(xdg: Path) -> None:
    item = XdgAutostart.default()
    (xdg / "autostart").mkdir(parents=True)
    Path(item.where).write_text("this is not a desktop entry")
    assert item.read() is None


def test_without_xdg_config_home_the_entry_is_under_dot_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert XdgAutostart.default().where == str(tmp_path / ".config/autostart/barnraise.desktop")
    # a relative XDG_CONFIG_HOME is invalid (the specification says to ignore it)
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")
    assert XdgAutostart.default().where == str(tmp_path / ".config/autostart/barnraise.desktop")


@pytest.mark.parametrize(
    "argument",
    ["plain", "with space", 'a "quote"', "back\\slash", "100%", "$HOME", "`tick`", ""],
)
def test_exec_arguments_round_trip(argument: str) -> None:
    line = " ".join(quote_exec(a) for a in ["/usr/bin/barnraise", argument, "--hidden"])
    assert split_exec(line) == ["/usr/bin/barnraise", argument, "--hidden"]


def test_exec_field_codes_are_dropped() -> None:
    assert split_exec("barnraise app %U --hidden") == ["barnraise", "app", "--hidden"]


# ---- the command -------------------------------------------------------------------------------


def test_the_command_is_the_installed_program_not_python(tmp_path: Path) -> None:
    scripts = tmp_path / "venv" / "bin"
    scripts.mkdir(parents=True)
    (scripts / "barnraise").write_text("#!/bin/sh\n")
    command = login_command(frozen=False, script_folders=[tmp_path / "elsewhere", scripts])
    assert command == [str(scripts / "barnraise"), "app", "--hidden"]
    assert Path(command[0]).is_absolute()


def test_this_environment_registers_its_own_console_script() -> None:
    """The set-up installs Barnraise into its environment, so its console script is what gets
    registered; the second Python's test leg imports the checkout without installing it, and there
    the same call must say there is nothing to register rather than guess."""
    own = Path(sysconfig.get_path("scripts")) / (
        "barnraise.exe" if os.name == "nt" else "barnraise"
    )
    if not own.exists():
        with pytest.raises(LoginItemError, match="no 'barnraise' program"):
            login_command(frozen=False, script_folders=[own.parent])
        return
    command = login_command(frozen=False)
    assert command[0] == str(own)
    assert "-m" not in command
    assert command[1:] == ["app", "--hidden"]


def test_on_windows_the_windowed_program_is_preferred(tmp_path: Path) -> None:
    for name in ("barnraise.exe", "barnraisew.exe"):
        (tmp_path / name).write_text("")
    command = login_command(frozen=False, script_folders=[tmp_path], platform="win32")
    assert command[0] == str(tmp_path / "barnraisew.exe")


def test_a_frozen_bundle_registers_its_own_program(tmp_path: Path) -> None:
    program = tmp_path / "Barnraise" / "barnraise"
    assert login_command(frozen=True, executable=str(program)) == [str(program), "app", "--hidden"]
    windowed = program.with_name("barnraisew.exe")
    windowed.parent.mkdir()
    windowed.write_text("")
    exe = str(program.with_name("barnraise.exe"))
    assert login_command(frozen=True, executable=exe, platform="win32")[0] == str(windowed)


def test_without_a_program_there_is_nothing_to_register(tmp_path: Path) -> None:
    with pytest.raises(LoginItemError, match="no 'barnraise' program"):
        login_command(frozen=False, script_folders=[tmp_path])


# ---- Windows -----------------------------------------------------------------------------------


class FakeKey:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __enter__(self) -> FakeKey:
        return self

    def __exit__(self, *_: object) -> None:
        pass


class FakeWinreg:
    """The part of ``winreg`` the Run key uses, over a dictionary of keys."""

    HKEY_CURRENT_USER = "HKCU"
    KEY_READ = 1
    KEY_SET_VALUE = 2
    REG_SZ = 1
    REG_BINARY = 3

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}

    def OpenKey(self, root: str, path: str, reserved: int, access: int) -> FakeKey:
        assert root == self.HKEY_CURRENT_USER
        if path not in self.keys:
            raise FileNotFoundError(path)
        return FakeKey(self.keys[path])

    def CreateKeyEx(self, root: str, path: str, reserved: int, access: int) -> FakeKey:
        assert root == self.HKEY_CURRENT_USER
        return FakeKey(self.keys.setdefault(path, {}))

    def QueryValueEx(self, key: FakeKey, name: str) -> tuple[Any, int]:
        if name not in key.values:
            raise FileNotFoundError(name)
        return key.values[name], self.REG_SZ

    def SetValueEx(self, key: FakeKey, name: str, reserved: int, kind: int, value: Any) -> None:
        assert kind == self.REG_SZ
        key.values[name] = value

    def DeleteValue(self, key: FakeKey, name: str) -> None:
        if name not in key.values:
            raise FileNotFoundError(name)
        del key.values[name]


WINDOWS_COMMAND = [r"C:\Users\Ada Lovelace\AppData\Local\Programs\barnraise.exe", "app", "--hidden"]


def test_windows_run_key_is_written_read_back_and_removed() -> None:
    registry = FakeWinreg()
    item = WindowsRunKey(registry)
    assert item.where == rf"HKEY_CURRENT_USER\{RUN_KEY}\Barnraise"
    assert item.read() is None
    assert login_item.enable(item, WINDOWS_COMMAND) == WINDOWS_COMMAND
    assert registry.keys[RUN_KEY]["Barnraise"] == (
        r'"C:\Users\Ada Lovelace\AppData\Local\Programs\barnraise.exe" app --hidden'
    )
    login_item.enable(item, WINDOWS_COMMAND)  # twice: still one value
    assert registry.keys[RUN_KEY] == {"Barnraise": subprocess.list2cmdline(WINDOWS_COMMAND)}
    assert login_item.disable(item) is True
    assert registry.keys[RUN_KEY] == {}
    assert item.read() is None
    assert login_item.disable(item) is False


def test_windows_task_manager_can_switch_it_off_and_turning_it_on_clears_that() -> None:
    registry = FakeWinreg()
    item = WindowsRunKey(registry)
    item.write(WINDOWS_COMMAND)
    registry.keys[APPROVED_KEY] = {"Barnraise": bytes([3]) + bytes(11)}  # disabled in Task Manager
    assert item.read() is None
    registry.keys[APPROVED_KEY]["Barnraise"] = bytes([2]) + bytes(11)  # enabled there
    assert item.read() == WINDOWS_COMMAND
    registry.keys[APPROVED_KEY]["Barnraise"] = bytes([3]) + bytes(11)
    item.write(WINDOWS_COMMAND)
    assert "Barnraise" not in registry.keys[APPROVED_KEY]
    assert item.read() == WINDOWS_COMMAND


def test_the_windows_login_item_is_the_run_key(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = FakeWinreg()
    monkeypatch.setattr(login_item.importlib, "import_module", lambda name: registry)
    item = login_item.login_item("win32")
    assert isinstance(item, WindowsRunKey)
    item.write(WINDOWS_COMMAND)
    assert RUN_KEY in registry.keys


@pytest.mark.parametrize(
    "arguments",
    [
        ["C:\\Program Files\\Barnraise\\barnraise.exe", "app", "--hidden"],
        ["C:\\tools\\barnraise.exe", 'say "hi"', "trailing\\", "a\\\\b", ""],
    ],
)
def test_windows_command_lines_round_trip(arguments: list[str]) -> None:
    assert split_windows(subprocess.list2cmdline(arguments)) == arguments


def test_a_registry_that_refuses_is_a_login_item_error() -> None:
    def refuse(*_: object) -> None:
        raise PermissionError("access denied")

    registry = SimpleNamespace(
        HKEY_CURRENT_USER="HKCU", KEY_READ=1, KEY_SET_VALUE=2, REG_SZ=1, OpenKey=refuse,
        CreateKeyEx=refuse,
    )  # fmt: skip
    item = WindowsRunKey(registry)
    with pytest.raises(LoginItemError, match="access denied"):
        item.read()
    with pytest.raises(LoginItemError, match="access denied"):
        item.write(WINDOWS_COMMAND)
    with pytest.raises(LoginItemError, match="access denied"):
        item.remove()


# ---- macOS -------------------------------------------------------------------------------------


def test_macos_launch_agent_is_written_read_back_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    item = login_item.login_item("darwin")
    assert isinstance(item, LaunchAgent)
    agent = tmp_path / "Library" / "LaunchAgents" / "org.barnraise.app.plist"
    assert item.where == str(agent)
    assert item.read() is None
    command = ["/Applications/Barnraise.app/Contents/MacOS/barnraise", "app", "--hidden"]
    assert login_item.enable(item, command) == command
    with agent.open("rb") as file:
        written = plistlib.load(file)
    assert written["Label"] == "org.barnraise.app"
    assert written["ProgramArguments"] == command
    assert written["RunAtLoad"] is True
    login_item.enable(item, command)
    assert [p.name for p in agent.parent.iterdir()] == [agent.name]
    written["Disabled"] = True
    agent.write_bytes(plistlib.dumps(written))
    assert item.read() is None  # switched off by someone else: off
    assert login_item.disable(item) is True
    assert not agent.exists()
    assert login_item.disable(item) is False


def test_a_damaged_launch_agent_is_a_login_item_error(tmp_path: Path) -> None:
    item = LaunchAgent(tmp_path)
    Path(item.where).write_bytes(b"<?xml not a plist")
    with pytest.raises(LoginItemError, match="cannot read the launch agent"):
        item.read()
    item.write(COMMAND)
    assert item.read() == COMMAND
