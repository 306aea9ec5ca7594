"""The program of the bundles ``packaging/bundle.py`` builds: ``barnraise`` and its commands.

PyInstaller freezes this script into the bundle's executables (``barnraise``; on Windows also the
windowed ``barnraisew.exe``). In a bundle ``sys.executable`` is that executable, so every process
Barnraise starts with ``sys.executable`` (the app, the engine, the swarm's peers, pip for the
first-run torch download) comes back here. Before anything else it

- gives a windowed process streams that go nowhere when it was started without any (a windowed
  Windows program has no ``sys.stdout``; started by the app, its output is a file or a pipe),
- puts the torch that the light bundle fetched on first run on ``sys.path``
  (``core.config.runtime_packages``), so the engine and its peers find it as the app does,
- answers ``-m MODULE …`` for the few modules started that way, as ``python -m`` would.

Everything else is the ``barnraise`` command line (``core.cli.main``).
"""

from __future__ import annotations

import io
import os
import runpy
import sys

MODULES = frozenset({"app", "core", "core.cli.main", "pip"})
"""What ``-m`` may run in a bundle: the app, the command line, and pip (the torch download)."""


def _streams() -> None:
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
    if sys.stdin is None:
        sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115


def main() -> int:
    _streams()
    from core.config.runtime_packages import activate  # noqa: PLC0415

    activate()
    if len(sys.argv) >= 3 and sys.argv[1] == "-m":
        module = sys.argv[2]
        if module not in MODULES:
            print(f"barnraise: cannot run -m {module} in this bundle", file=sys.stderr)
            return 2
        sys.argv = [sys.argv[0], *sys.argv[3:]]
        for stream in (sys.stdout, sys.stderr):  # as python -u: pip's progress line by line
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        return 0
    from core.cli.main import main as barnraise  # noqa: PLC0415

    return barnraise()


if __name__ == "__main__":
    sys.exit(main())
