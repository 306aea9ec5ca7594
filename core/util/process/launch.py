"""The commands that start Barnraise again in a child process: ``barnraise ARGS`` or the desktop app.

Every child Barnraise starts (the app's engine and demo swarm, the local swarm's peers, ``barnraise
app`` handing over to the app) gets its command line here, so that one rule holds for all of them:

- From Python (a checkout or an installed wheel): ``python -P -m core.cli.main ARGS`` or ``python -P
  -m app FLAGS``. ``-P`` keeps the current folder off ``sys.path``, so a folder named ``core`` or
  ``app`` wherever the user happens to be cannot stand in for ours. ``PYTHONPATH`` still counts (a
  checkout run without installing, as the tests on a second Python do, relies on it); ``-I`` would
  drop it, and the user's site-packages with it.
- Frozen (a PyInstaller bundle, ``sys.frozen``): ``sys.executable`` is the bundle's program. Its
  entry script runs the command line with the arguments it is given, and answers ``-m app`` as
  Python would (``core`` may not import the app, so the bundle's entry does that dispatch). A
  bundle imports only from itself, never from the current folder: no ``-P`` there.

Standard library only: the app reaches these through ``core.api.program``.
"""

from __future__ import annotations

import sys


def frozen() -> bool:
    """Whether this is a bundled program (PyInstaller sets ``sys.frozen``), not Python running us."""
    return bool(getattr(sys, "frozen", False))


def barnraise_command(*args: str) -> list[str]:
    """The command line that runs ``barnraise ARGS``, with this interpreter or this bundle."""
    if frozen():
        return [sys.executable, *args]
    return [sys.executable, "-P", "-m", "core.cli.main", *args]


def app_command(*flags: str) -> list[str]:
    """The command line that opens the desktop app with ``FLAGS`` (``--demo``, ``--preview``…)."""
    if frozen():
        return [sys.executable, "-m", "app", *flags]
    return [sys.executable, "-P", "-m", "app", *flags]
