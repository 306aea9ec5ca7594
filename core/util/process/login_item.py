"""Start at login: the platform's login item, which runs ``barnraise app --hidden`` (the app in the
tray, its window closed) each time the user logs in.

- Linux and the BSDs: an XDG autostart entry, ``$XDG_CONFIG_HOME/autostart/barnraise.desktop``
  (``~/.config/autostart`` without the variable), which desktops following freedesktop.org's
  autostart specification start at login; one the desktop marked ``Hidden`` or
  ``X-GNOME-Autostart-enabled=false`` counts as off.
- Windows: the value ``Barnraise`` of ``HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run``
  (no administrator needed); one Task Manager's Startup tab disabled (its ``StartupApproved`` mark)
  counts as off, and turning it on again clears that mark.
- macOS: a LaunchAgent, ``~/Library/LaunchAgents/org.barnraise.app.plist``, ``RunAtLoad``.

What is registered is the absolute path of this installation's ``barnraise`` program (the console
script pip or pipx made; in a frozen bundle, the bundle's program), never ``python -m``: the login
item must work without a shell, a PATH or an activated virtual environment. Enabling twice writes
the same item; disabling removes it; ``registered`` reads back what the platform holds, so a
setting shown to the user is what will happen at the next login.
"""

from __future__ import annotations

import configparser
import contextlib
import importlib
import os
import plistlib
import subprocess
import sys
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol
from xml.parsers.expat import ExpatError

from core.util.errors import BarnraiseError
from core.util.files.atomic import write_atomically
from core.util.process.launch import frozen as is_frozen

APP_ARGUMENTS = ("app", "--hidden")
"""What the login item asks of ``barnraise``: the desktop app, started in the tray."""
NAME = "Barnraise"
DESKTOP_FILE = "barnraise.desktop"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
APPROVED_KEY = r"Software\Microsoft\Windows\CurrentVersion\Explorer\StartupApproved\Run"
AGENT_LABEL = "org.barnraise.app"


class LoginItemError(BarnraiseError):
    """The login item cannot be read, written or removed, or there is no program to register."""


class LoginItem(Protocol):
    """One platform's login item."""

    @property
    def where(self) -> str:
        """Where it lives, for messages (a file, a registry value)."""
        ...

    def read(self) -> list[str] | None:
        """The command registered and switched on, or None."""
        ...

    def write(self, command: Sequence[str]) -> None: ...

    def remove(self) -> bool:
        """Remove it; whether there was one."""
        ...


# ---- the command -------------------------------------------------------------------------------


def login_command(
    *,
    frozen: bool | None = None,
    executable: str | None = None,
    script_folders: Sequence[Path] | None = None,
    platform: str = sys.platform,
) -> list[str]:
    """The absolute command that starts the app in the tray: ``<barnraise> app --hidden``.
    Raises ``LoginItemError`` when this installation has no ``barnraise`` program (a checkout run
    with ``python -m``, say)."""
    frozen = is_frozen() if frozen is None else frozen
    executable = executable or sys.executable
    windows = platform.startswith(("win32", "cygwin"))
    # Windows: a windowed program (the bundle's barnraisew.exe) opens no console at login
    names = ["barnraisew.exe", "barnraise.exe"] if windows else ["barnraise"]
    if frozen:
        program = Path(executable).absolute()
        windowed = program.with_name(names[0])
        return [str(windowed if windows and windowed.is_file() else program), *APP_ARGUMENTS]
    folders = list(script_folders) if script_folders is not None else _script_folders(executable)
    for folder in folders:
        for name in names:
            candidate = folder / name
            if candidate.is_file():
                return [str(candidate.absolute()), *APP_ARGUMENTS]
    name = names[-1]
    looked = ", ".join(str(f) for f in folders) or "nowhere"
    raise LoginItemError(
        f"this installation has no '{name}' program to start at login (looked in {looked}); "
        "install Barnraise with pip or pipx and start it from there"
    )


def _script_folders(executable: str) -> list[Path]:
    """Where this installation's console scripts are: the interpreter's scheme (a virtual
    environment's bin or Scripts, pipx's included), beside the interpreter, the user scheme."""
    folders: list[Path] = []
    candidates = [sysconfig.get_path("scripts"), str(Path(executable).parent)]
    with contextlib.suppress(KeyError, ValueError):  # no user scheme on this build
        candidates.append(sysconfig.get_path("scripts", sysconfig.get_preferred_scheme("user")))
    for candidate in candidates:
        if candidate and Path(candidate) not in folders:
            folders.append(Path(candidate))
    return folders


# ---- Linux: XDG autostart ------------------------------------------------------------------------


class XdgAutostart:
    def __init__(self, folder: Path) -> None:
        self.path = folder / DESKTOP_FILE

    @classmethod
    def default(cls, environ: Mapping[str, str] = os.environ) -> XdgAutostart:
        config = environ.get("XDG_CONFIG_HOME") or ""
        base = Path(config) if Path(config).is_absolute() else Path.home() / ".config"
        return cls(base / "autostart")

    @property
    def where(self) -> str:
        return str(self.path)

    def read(self) -> list[str] | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise LoginItemError(f"cannot read the autostart entry {self.path}: {exc}") from None
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
        try:
            parser.read_string(text)
            entry = parser["Desktop Entry"]
        except (configparser.Error, KeyError):
            return None  # not an entry any desktop would start
        if entry.get("Hidden", "false").strip() == "true":
            return None
        if entry.get("X-GNOME-Autostart-enabled", "true").strip() == "false":
            return None
        command = split_exec(entry.get("Exec", ""))
        return command or None

    def write(self, command: Sequence[str]) -> None:
        program, *arguments = command
        exec_line = " ".join([quote_exec(program, always=True), *map(quote_exec, arguments)])
        text = (
            "[Desktop Entry]\n"
            "Type=Application\n"
            f"Name={NAME}\n"
            "Comment=Lend this computer's idle time to a deep-learning model; starts in the tray\n"
            f"Exec={exec_line}\n"
            "Icon=barnraise\n"
            "Terminal=false\n"
            "X-GNOME-Autostart-enabled=true\n"
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write(self.path, text.encode("utf-8"))
        except OSError as exc:
            raise LoginItemError(f"cannot write the autostart entry {self.path}: {exc}") from None

    def remove(self) -> bool:
        return _remove_file(self.path, "the autostart entry")


def _remove_file(path: Path, what: str) -> bool:
    """Remove a login item's file; False if there was none."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise LoginItemError(f"cannot remove {what} {path}: {exc}") from None
    return True


_EXEC_RESERVED = frozenset(" \t\n\"'\\><~|&;$*?#()`")
_EXEC_ESCAPED_IN_QUOTES = frozenset('"`$\\')


def quote_exec(argument: str, *, always: bool = False) -> str:
    """One argument of a desktop entry's ``Exec`` key: quoted when it holds a reserved character
    (or ``always``), ``"`$\\`` escaped inside the quotes, ``%`` doubled; then the string escape of
    every desktop entry value applied (a backslash is written twice)."""
    argument = argument.replace("%", "%%")
    if always or not argument or any(c in _EXEC_RESERVED for c in argument):
        inner = "".join(f"\\{c}" if c in _EXEC_ESCAPED_IN_QUOTES else c for c in argument)
        argument = f'"{inner}"'
    return argument.replace("\\", "\\\\")


def split_exec(value: str) -> list[str]:
    """The arguments of an ``Exec`` value (the inverse of ``quote_exec``; field codes such as
    ``%U`` are dropped, as a desktop does when it starts an entry without files)."""
    text = _unescape_value(value)
    arguments: list[str] = []
    current: list[str] = []
    started = quoted = False
    index = 0
    while index < len(text):
        char = text[index]
        if quoted:
            if char == "\\" and index + 1 < len(text):
                index += 1
                current.append(text[index])
            elif char == '"':
                quoted = False
            else:
                current.append(char)
        elif char == '"':
            quoted = started = True
        elif char in " \t":
            if started:
                arguments.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
        index += 1
    if started:
        arguments.append("".join(current))
    return [_field_codes(a) for a in arguments if not _is_field_code(a)]


def _unescape_value(value: str) -> str:
    escapes = {"s": " ", "n": "\n", "t": "\t", "r": "\r", "\\": "\\"}
    out: list[str] = []
    index = 0
    while index < len(value):
        char = value[index]
        if char == "\\" and index + 1 < len(value) and value[index + 1] in escapes:
            out.append(escapes[value[index + 1]])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _is_field_code(argument: str) -> bool:
    return len(argument) == 2 and argument[0] == "%" and argument[1] != "%"


def _field_codes(argument: str) -> str:
    return argument.replace("%%", "%")


# ---- Windows: the Run key ------------------------------------------------------------------------


class WindowsRunKey:
    """``winreg`` is passed in (a fake in tests: only Windows has the module)."""

    def __init__(self, winreg: Any = None) -> None:
        self._winreg = winreg

    @property
    def registry(self) -> Any:
        if self._winreg is None:
            self._winreg = importlib.import_module("winreg")
        return self._winreg

    @property
    def where(self) -> str:
        return f"HKEY_CURRENT_USER\\{RUN_KEY}\\{NAME}"

    def read(self) -> list[str] | None:
        reg = self.registry
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_READ) as key:
                value, _ = reg.QueryValueEx(key, NAME)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise LoginItemError(f"cannot read {self.where}: {exc}") from None
        if not isinstance(value, str) or self._disabled_by_user():
            return None
        return split_windows(value) or None

    def _disabled_by_user(self) -> bool:
        """Task Manager's Startup tab keeps its "disabled" beside the Run key: a binary value
        whose first byte is odd (3) when the user turned the item off there (even, 2 or 6, on)."""
        reg = self.registry
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, APPROVED_KEY, 0, reg.KEY_READ) as key:
                value, _ = reg.QueryValueEx(key, NAME)
        except OSError:
            return False
        return isinstance(value, bytes | bytearray) and len(value) > 0 and value[0] % 2 == 1

    def write(self, command: Sequence[str]) -> None:
        reg = self.registry
        try:
            with reg.CreateKeyEx(reg.HKEY_CURRENT_USER, RUN_KEY, 0, reg.KEY_SET_VALUE) as key:
                reg.SetValueEx(key, NAME, 0, reg.REG_SZ, subprocess.list2cmdline(list(command)))
        except OSError as exc:
            raise LoginItemError(f"cannot write {self.where}: {exc}") from None
        self._delete(APPROVED_KEY)  # turned on here: on, whatever Task Manager said before

    def remove(self) -> bool:
        try:
            removed = self._delete(RUN_KEY)
        except OSError as exc:
            raise LoginItemError(f"cannot remove {self.where}: {exc}") from None
        self._delete_quietly(APPROVED_KEY)
        return removed

    def _delete(self, key_path: str) -> bool:
        reg = self.registry
        try:
            with reg.OpenKey(reg.HKEY_CURRENT_USER, key_path, 0, reg.KEY_SET_VALUE) as key:
                reg.DeleteValue(key, NAME)
        except FileNotFoundError:
            return False
        return True

    def _delete_quietly(self, key_path: str) -> None:
        with contextlib.suppress(OSError):  # Task Manager's mark only; the item itself is gone
            self._delete(key_path)


def split_windows(line: str) -> list[str]:
    """A Windows command line as its arguments (the rules ``list2cmdline`` writes for: arguments
    apart by blanks, double quotes group, backslashes are literal unless they precede a quote)."""
    arguments: list[str] = []
    current: list[str] = []
    started = quoted = False
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            run = len(line[index:]) - len(line[index:].lstrip("\\"))
            index += run
            if index < len(line) and line[index] == '"':
                current.append("\\" * (run // 2))
                if run % 2:
                    current.append('"')
                    index += 1
            else:
                current.append("\\" * run)
            started = True
            continue
        if char == '"':
            quoted = not quoted
            started = True
        elif char in " \t" and not quoted:
            if started:
                arguments.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
        index += 1
    if started:
        arguments.append("".join(current))
    return arguments


# ---- macOS: a LaunchAgent ------------------------------------------------------------------------


class LaunchAgent:
    def __init__(self, folder: Path) -> None:
        self.path = folder / f"{AGENT_LABEL}.plist"

    @classmethod
    def default(cls) -> LaunchAgent:
        return cls(Path.home() / "Library" / "LaunchAgents")

    @property
    def where(self) -> str:
        return str(self.path)

    def read(self) -> list[str] | None:
        try:
            with self.path.open("rb") as file:
                agent = plistlib.load(file)
        except FileNotFoundError:
            return None
        except (OSError, plistlib.InvalidFileException, ValueError, ExpatError) as exc:
            raise LoginItemError(f"cannot read the launch agent {self.path}: {exc}") from None
        if not isinstance(agent, dict) or agent.get("Disabled") is True:
            return None
        arguments = agent.get("ProgramArguments")
        if not isinstance(arguments, list) or not all(isinstance(a, str) for a in arguments):
            return None
        return list(arguments) or None

    def write(self, command: Sequence[str]) -> None:
        agent = {
            "Label": AGENT_LABEL,
            "ProgramArguments": list(command),
            "RunAtLoad": True,
            "ProcessType": "Interactive",
            "LimitLoadToSessionType": "Aqua",  # the user's graphical session, not an ssh login
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _write(self.path, plistlib.dumps(agent))
        except OSError as exc:
            raise LoginItemError(f"cannot write the launch agent {self.path}: {exc}") from None

    def remove(self) -> bool:
        return _remove_file(self.path, "the launch agent")


# ---- this platform's -----------------------------------------------------------------------------


def login_item(platform: str = sys.platform) -> LoginItem:
    """The login item of this platform."""
    if platform.startswith(("win32", "cygwin")):
        return WindowsRunKey()
    if platform == "darwin":
        return LaunchAgent.default()
    return XdgAutostart.default()


def enable(item: LoginItem | None = None, command: Sequence[str] | None = None) -> list[str]:
    """Register ``command`` (``login_command()`` by default) and return what now is registered."""
    item = item or login_item()
    item.write(list(command) if command is not None else login_command())
    registered = item.read()
    if registered is None:
        raise LoginItemError(f"the login item was written to {item.where} but does not read back")
    return registered


def disable(item: LoginItem | None = None) -> bool:
    """Remove the login item; whether there was one."""
    return (item or login_item()).remove()


def _write(path: Path, data: bytes) -> None:
    def write(out: BinaryIO) -> None:
        out.write(data)

    write_atomically(path, write, prefix=f".{path.name}.", mode=0o644)
