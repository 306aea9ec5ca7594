"""``barnraise torch``: fetch the torch build that suits this computer into the user's own folder.

    barnraise torch status                 which torch this program finds, and from where
    barnraise torch install [--json]       fetch it (what a light bundle's app does on first run)
        [--requirement REQ --index-url URL | --find-links DIR --no-index] [--force]

A light bundle carries no torch; this puts one in ``core.config.runtime_packages.folder()``, which
every process of the bundle has on its path. The build is chosen by ``packaging/torch_build.py``
(``pick``: the requirement, its index and why; ``BARNRAISE_TORCH`` overrides it), unless
``--requirement`` says. pip does the work, ``--isolated`` (the user's pip settings do not apply),
into a staging folder that is published whole when it succeeds. A computer that cannot reach the
index is told so in a sentence, before pip is started when the index is plainly unreachable.
``--json`` prints one ``core.api.torch_fetch.FetchProgress`` per line, for the app.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from core.api.torch_fetch import FetchProgress
from core.cli.pip_output import PipOutput, offline_reason, unreachable_words
from core.config import runtime_packages
from core.util.process.launch import frozen

PYPI = "https://pypi.org/simple"
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


def register(commands: Any) -> None:
    parser: argparse.ArgumentParser = commands.add_parser(
        "torch",
        help="fetch the torch build for this computer (bundles without torch)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["status", "install"])
    parser.add_argument("--json", action="store_true", help="progress as JSON lines")
    parser.add_argument("--requirement", help="pip requirement instead of the chosen build")
    parser.add_argument("--index-url", help="the index to fetch it from (with --requirement)")
    parser.add_argument("--find-links", action="append", default=[], help="also look here")
    parser.add_argument("--no-index", action="store_true", help="only --find-links")
    parser.add_argument("--force", action="store_true", help="fetch even if torch is found")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "status":
        return status()
    say = _json_printer if args.json else _TextPrinter()
    return install(
        say,
        requirement=args.requirement,
        index_url=args.index_url,
        find_links=args.find_links,
        no_index=args.no_index,
        force=args.force,
    )


def status() -> int:
    note = runtime_packages.installed()
    if importlib.util.find_spec("torch") is None:
        print("torch: not found; 'barnraise torch install' fetches it")
        return 1
    import torch  # noqa: PLC0415 - the point: this process can import it

    print(f"torch {torch.__version__} from {Path(torch.__file__).parent}")
    if note is not None:
        print(f"fetched: {note.requirement} ({note.reason})")
    return 0


def choice(requirement: str | None, index_url: str | None) -> tuple[str, str | None, str]:
    """(requirement, index URL or None, why): the options', else the picker's."""
    if requirement:
        return requirement, index_url, "asked for on the command line"
    picked = torch_build().pick()
    return str(picked.requirement), picked.index_url, str(picked.reason)


def torch_build() -> ModuleType:
    """The picker, ``packaging/torch_build.py``: a module of the bundle, or the checkout's file.

    (It lives in ``packaging/`` because the set-up runs it before anything is installed; the
    bundle's spec adds it as the top-level module ``torch_build``.)"""
    try:
        return importlib.import_module("torch_build")
    except ImportError:
        path = Path(__file__).resolve().parents[2] / "packaging" / "torch_build.py"
        spec = importlib.util.spec_from_file_location("torch_build", path)
        if spec is None or spec.loader is None or not path.is_file():
            raise
        module = importlib.util.module_from_spec(spec)
        sys.modules["torch_build"] = module
        spec.loader.exec_module(module)
        return module


def unreachable(index_url: str | None, timeout: float = 5.0) -> str | None:
    """Words when the index's host cannot be reached at all (None: reached, or cannot tell)."""
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None  # through a proxy: only pip can tell
    parts = urlsplit(index_url or PYPI)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError:
        return unreachable_words(index_url or PYPI)


def pip_command(
    requirement: str,
    index_url: str | None,
    target: Path,
    *,
    find_links: list[str] | None = None,
    no_index: bool = False,
) -> list[str]:
    # -u: lines as pip writes them (the bundle's entry makes -m's output line-buffered)
    python = [sys.executable] if frozen() else [sys.executable, "-u"]
    command = [
        *python,
        "-m",
        "pip",
        "install",
        "--isolated",
        "--target",
        str(target),
        "--only-binary=:all:",
        "--progress-bar",
        "raw",
        "--no-input",
        "--no-compile",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        "--retries",
        "2",
        "--timeout",
        "30",
    ]
    if no_index:
        command.append("--no-index")
    else:
        command += ["--index-url", index_url or PYPI]
    for place in find_links or []:
        command += ["--find-links", place]
    return [*command, requirement]


def install(
    say: Callable[[FetchProgress], None],
    *,
    requirement: str | None = None,
    index_url: str | None = None,
    find_links: list[str] | None = None,
    no_index: bool = False,
    force: bool = False,
) -> int:
    if importlib.util.find_spec("torch") is not None and not force:
        say(FetchProgress("done", "torch is already here"))
        return 0
    say(FetchProgress("choosing", "Choosing the torch build for this computer"))
    requirement, index_url, reason = choice(requirement, index_url)
    say(FetchProgress("checking", f"{requirement}: {reason}", "torch"))
    if not no_index and (why := unreachable(index_url)):
        say(FetchProgress("failed", why, offline=True))
        return 3
    staging = runtime_packages.staging()
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    output = PipOutput()
    command = pip_command(requirement, index_url, staging, find_links=find_links, no_index=no_index)
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        errors="replace",
    ) as pip:
        assert pip.stdout is not None
        for line in pip.stdout:
            if (progress := output.feed(line)) is not None:
                say(progress)
    if pip.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        offline = offline_reason(output.lines, index_url)
        say(FetchProgress("failed", offline or output.last_error(), offline=offline is not None))
        return 3 if offline else 1
    say(FetchProgress("installing", "Putting it in place"))
    runtime_packages.publish(staging, requirement, index_url, reason)
    importlib.invalidate_caches()
    say(FetchProgress("done", f"{requirement} is ready"))
    return 0


def _json_printer(progress: FetchProgress) -> None:
    print(progress.to_json(), flush=True)


class _TextPrinter:
    """Progress for a terminal: each stage's words, and every tenth of a download."""

    def __init__(self) -> None:
        self.tenths = -1

    def __call__(self, progress: FetchProgress) -> None:
        if progress.stage == "downloading" and progress.total:
            tenths = progress.done * 10 // progress.total
            if tenths != self.tenths:
                self.tenths = tenths
                mib = progress.total / 2**20
                print(f"  {progress.package}: {tenths * 10}% of {mib:.0f} MiB", flush=True)
            return
        self.tenths = -1
        stream = sys.stderr if progress.stage == "failed" else sys.stdout
        print(("barnraise: " if progress.stage == "failed" else "") + progress.text, file=stream)
