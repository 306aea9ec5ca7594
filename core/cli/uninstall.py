"""``barnraise uninstall``: take Barnraise off this computer's logins, and say what is left.

    barnraise uninstall [--purge] [--yes]

Without ``--purge`` it removes the login item (start at login, ``core.util.process.login_item``) and lists
what it leaves: the settings, data, cache and log folders, the saved logins in the OS keyring, and
how to remove the program itself. With ``--purge`` it removes those too — but never while an engine
runs for this user (it holds the engine's lock, which ``--purge`` takes for itself while it works,
so none can start meanwhile). It asks before it changes anything unless ``--yes`` is given; without
a terminal to ask on, it needs ``--yes``.

The keyring cannot list its entries: the saved logins removed are those of the coordinators of the
projects the engine has attached (one entry per coordinator, ``barnraise coordinator <URL>``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from core.account.credentials import CredentialStore, service_name
from core.config.paths import APP_NAME, HOME_ENV, UserDirs
from core.control.lock import AlreadyRunning, InstanceLock
from core.engine.config import EngineConfig
from core.engine.store import EngineFile
from core.project import load_any_manifest
from core.util.errors import BarnraiseError
from core.util.process.launch import frozen as is_frozen
from core.util.process.login_item import LoginItem, LoginItemError, login_item


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "uninstall",
        help="remove the login item (and with --purge all of Barnraise's data)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--purge",
        action="store_true",
        help="also remove the settings, data, cache and logs, and the saved logins in the keyring",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return Uninstall(UserDirs.default()).run(purge=args.purge, yes=args.yes)


@dataclass
class Uninstall:
    dirs: UserDirs
    item: LoginItem = field(default_factory=login_item)
    credentials: CredentialStore = field(default_factory=CredentialStore)
    ask: Callable[[str], str] = input
    interactive: bool = field(default_factory=lambda: sys.stdin is not None and sys.stdin.isatty())
    out: TextIO = field(default_factory=lambda: sys.stdout)

    def run(self, *, purge: bool, yes: bool) -> int:
        registered = self._registered()
        folders = self.folders()
        coordinators, unknown = self.coordinators()
        lock = InstanceLock(EngineConfig(self.dirs).lock_file)
        if purge:
            try:
                lock.acquire()
            except AlreadyRunning:
                self._say(
                    "barnraise: an engine is running for this user: nothing was removed. Quit the "
                    "desktop app (File > Quit Barnraise) or run 'barnraise ctl shutdown', then try "
                    "again."
                )
                return 1
        try:
            if not self._confirmed(purge, yes, registered, folders, coordinators):
                return 1
            failed = self._remove_login_item(registered)
            if purge:
                failed |= self._forget_logins(coordinators)
                for label, path in folders:
                    if path != self.dirs.runtime:
                        failed |= self._remove_folder(label, path)
        finally:
            lock.release()
        if purge:  # the lock's folder last, the lock released (Windows keeps an open file)
            if self.dirs.runtime.exists():
                failed |= self._remove_folder("runtime", self.dirs.runtime)
            self._remove_empty_parents()
            if unknown:
                self._say(f"Saved logins may remain in the keyring: {unknown}")
        else:
            self._left_behind(folders, coordinators, unknown)
        self._say(f"To remove the program itself: {program_removal()}")
        return 1 if failed else 0

    # ---- what there is -------------------------------------------------------------------------

    def _registered(self) -> list[str] | None:
        try:
            return self.item.read()
        except LoginItemError as exc:
            self._say(f"Cannot tell whether Barnraise starts at login: {exc}")
            return None

    def folders(self) -> list[tuple[str, Path]]:
        """Barnraise's folders that exist, each with what it holds."""
        data = "data (identity key, contribution ledger)"
        if (self.dirs.data / "coordinator").is_dir():
            data = "data (identity key, contribution ledger, your coordinators' databases)"
        named = [
            ("settings", self.dirs.config),
            (data, self.dirs.data),
            ("cache (projects' work, checkpoints)", self.dirs.cache),
            ("logs", self.dirs.logs),
            ("runtime", self.dirs.runtime),
        ]
        seen: set[Path] = set()
        found = []
        for label, path in named:
            if path.exists() and path not in seen and not _inside_any(path, seen):
                seen.add(path)
                found.append((label, path))
        return found

    def coordinators(self) -> tuple[list[str], str]:
        """The coordinator URLs of the attached projects (whose logins the keyring may hold), and
        why some may be missing ("" when none are)."""
        settings = EngineConfig(self.dirs).settings_file
        try:
            memory = EngineFile(settings).load()
        except BarnraiseError as exc:
            return [], f"the engine's settings could not be read ({exc})"
        urls: list[str] = []
        unreadable: list[str] = []
        for slot in memory.projects:
            try:
                url = load_any_manifest(slot.manifest).network.coordinator_url
            except BarnraiseError:
                unreadable.append(str(slot.manifest))
                continue
            if url and url.rstrip("/") not in urls:
                urls.append(url.rstrip("/"))
        why = f"the manifests {', '.join(unreadable)} could not be read" if unreadable else ""
        return urls, why

    # ---- asking --------------------------------------------------------------------------------

    def _confirmed(
        self,
        purge: bool,
        yes: bool,
        registered: list[str] | None,
        folders: list[tuple[str, Path]],
        coordinators: list[str],
    ) -> bool:
        plan = []
        if registered is not None:
            plan.append(f"the login item {self.item.where}")
        if purge:
            plan += [f"{label}: {path}" for label, path in folders]
            plan += [f"the saved login for {url} (keyring)" for url in coordinators]
        if not plan:
            self._say("Barnraise does not start at login: there is no login item to remove.")
            return True
        if yes:
            return True
        if not self.interactive:
            self._say("barnraise: nothing was removed: add --yes to confirm without a terminal.")
            return False
        self._say("This removes:")
        for line in plan:
            self._say(f"  {line}")
        try:
            answer = self.ask("Go on? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            self._say("Nothing was removed.")
            return False
        return True

    # ---- removing --------------------------------------------------------------------------------

    def _remove_login_item(self, registered: list[str] | None) -> bool:
        """Whether it failed."""
        try:
            removed = self.item.remove()
        except LoginItemError as exc:
            self._say(f"barnraise: {exc}")
            return True
        if removed or registered is not None:
            self._say(
                f"Removed the login item {self.item.where}: Barnraise no longer starts at login."
            )
        return False

    def _forget_logins(self, coordinators: list[str]) -> bool:
        failed = False
        for url in coordinators:
            try:
                self.credentials.delete(url)
            except BarnraiseError as exc:
                self._say(f"barnraise: {exc}")
                failed = True
            else:
                self._say(f"Removed the saved login for {url} from the keyring.")
        return failed

    def _remove_folder(self, label: str, path: Path) -> bool:
        why = _unsafe(path)
        if why:
            self._say(f"barnraise: left {path} alone: {why}")
            return True
        try:
            shutil.rmtree(path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._say(f"barnraise: could not remove {path} ({label}): {exc}")
            return True
        self._say(f"Removed {path} ({label}).")
        return False

    def _remove_empty_parents(self) -> None:
        """The folders platformdirs made only to hold ours (``~/.local/state/barnraise`` around
        ``log``), and ``BARNRAISE_HOME`` itself, once empty."""
        dirs = self.dirs
        parents = {p.parent for p in (dirs.config, dirs.data, dirs.cache, dirs.logs, dirs.runtime)}
        for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            ours = parent.name.lower() == APP_NAME or _is_home_root(parent, dirs)
            if ours and not _unsafe(parent):
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    continue

    # ---- telling ----------------------------------------------------------------------------

    def _left_behind(
        self, folders: list[tuple[str, Path]], coordinators: list[str], unknown: str
    ) -> None:
        if folders or coordinators or unknown:
            self._say("Left on this computer (remove them with 'barnraise uninstall --purge'):")
        for label, path in folders:
            self._say(f"  {label}: {path}")
        for url in coordinators:
            self._say(f"  keyring: the saved login for {url} ({service_name(url)!r})")
        if unknown:
            self._say(f"  keyring: perhaps saved logins named 'barnraise coordinator …': {unknown}")

    def _say(self, line: str) -> None:
        print(line, file=self.out, flush=True)


def program_removal(
    *, frozen: bool | None = None, prefix: str | None = None, platform: str = sys.platform
) -> str:
    """How this installation of the program is removed."""
    frozen = is_frozen() if frozen is None else frozen
    if frozen:
        if platform.startswith("win"):
            return (
                "use Settings > Apps (or Add or remove programs) for Barnraise, or delete the "
                f"folder {Path(sys.executable).parent} if you unpacked it yourself"
            )
        if platform == "darwin":
            return "move Barnraise.app to the Trash"
        return f"delete the folder {Path(sys.executable).parent}"
    prefix = prefix if prefix is not None else sys.prefix
    if "pipx" in Path(prefix).parts:
        return "pipx uninstall barnraise"
    return f"{sys.executable} -m pip uninstall barnraise"


def _inside_any(path: Path, folders: set[Path]) -> bool:
    return any(path.is_relative_to(folder) for folder in folders)


def _is_home_root(path: Path, dirs: UserDirs) -> bool:
    """``BARNRAISE_HOME``: the folder all five live in, as ``UserDirs.under`` places them."""
    home = os.environ.get(HOME_ENV)
    if not home:
        return False
    return UserDirs.under(Path(home)) == dirs and path == dirs.config.parent


def _unsafe(path: Path) -> str:
    """Why ``path`` must not be removed whole ("" if it may): a root, the home folder or above."""
    resolved = path.resolve()
    if len(resolved.parts) < 3:
        return "it is too close to the root of the file system"
    if Path.home().resolve().is_relative_to(resolved):
        return "it holds the home folder"
    return ""
