"""The engine's tests: the engine daemon (``tests/conftest.py``'s ``engine``, made by
``tests.support.engine``) with stand-in peers, and ``barnraise ctl`` against it."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from typing import Any

import pytest

from core.cli.ctl import command as ctl
from core.cli.main import build_parser
from tests.engine.standin import StandInPeer
from tests.support.engine import CtlRun, Running


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> list[StandInPeer]:
    """Every peer the engine builds is a ``StandInPeer``, listed here in order."""
    from core.training.peer import project_peer as runtime

    made: list[StandInPeer] = []

    def make(settings: runtime.PeerSettings, on_event: Callable[[Any], None]) -> StandInPeer:
        made.append(StandInPeer(settings, on_event))
        return made[-1]

    monkeypatch.setattr(runtime, "ProjectPeer", make)
    return made


@pytest.fixture
def ctl_run(
    engine: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CtlRun:
    """``barnraise ctl ARGS`` against the test's engine (stdin as given); returns what it printed."""
    monkeypatch.setenv("BARNRAISE_HOME", str(engine.dirs.config.parent))

    async def run(*argv: str, stdin: str = "") -> str:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        assert await ctl._run(build_parser().parse_args(["ctl", *argv])) == 0
        return str(capsys.readouterr().out)

    return run
