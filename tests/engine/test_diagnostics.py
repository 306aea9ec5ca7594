"""Diagnostics for a bug report: versions, folders and the log's last lines, without secrets, and
without loading torch to say which version it is."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from core import __version__
from core.account import SessionTokens
from core.api import API_VERSION
from core.api.codec import encode
from core.engine.diagnostics import REDACTED, TAIL_BYTES, log_tail
from tests.support.engine import CtlRun, Running

ROOT = Path(__file__).resolve().parents[2]


async def test_diagnostics_over_the_api_hide_the_token(engine: Running) -> None:
    log = engine.dirs.logs / "engine.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    token = engine.endpoint.token
    with log.open("w", encoding="utf-8") as out:
        out.write("x" * (TAIL_BYTES + 5000) + "\n")  # an old, very long line: not read whole
        for i in range(300):
            out.write(f"2030-01-01 00:00:{i % 60:02d} INFO    core.engine: line {i}\n")
        out.write(f"2030-01-01 00:01:00 WARNING core.somewhere: oops, Bearer {token} leaked\n")
    before = "torch" in sys.modules

    answer = await engine.client.diagnostics()

    assert (answer.engine_version, answer.api_version, answer.pid) == (
        __version__,
        API_VERSION,
        os.getpid(),
    )
    assert answer.platform == platform.platform()
    assert answer.python == platform.python_version()
    assert answer.started == engine.daemon.engine.started
    home = engine.dirs.config.parent
    assert answer.paths == {
        "config": str(home / "config"),
        "data": str(home / "data"),
        "cache": str(home / "cache"),
        "logs": str(home / "logs"),
        "runtime": str(home / "run"),
        "settings": str(home / "config" / "engine.toml"),
        "ledger": str(home / "data" / "ledger.sqlite3"),
        "engine_log": str(log),
    }
    assert len(answer.log_tail) == 200
    assert answer.log_tail[0].endswith("line 101")
    assert answer.log_tail[-2].endswith("line 299")
    assert answer.log_tail[-1].endswith(f"oops, Bearer {REDACTED} leaked")
    assert token not in json.dumps(encode(answer))
    assert ("torch" in sys.modules) == before  # asking did not load it
    if before:
        assert answer.torch == sys.modules["torch"].__version__
    else:
        assert answer.torch is None


async def test_the_login_secrets_are_hidden_too(
    engine: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = SessionTokens("alice", "session-secret-123", "refresh-secret-456", 0.0)
    monkeypatch.setattr(engine.daemon.engine._account, "session", SimpleNamespace(tokens=tokens))
    log = engine.dirs.logs / "engine.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("a session-secret-123 and a refresh-secret-456\n", encoding="utf-8")
    answer = await engine.client.diagnostics()
    assert answer.log_tail == [f"a {REDACTED} and a {REDACTED}"]


async def test_ctl_diagnostics(engine: Running, ctl_run: CtlRun) -> None:
    out = await ctl_run("diagnostics")
    assert out.startswith(f"engine {__version__} (API {API_VERSION}), pid {os.getpid()}")
    assert f"  ledger: {engine.dirs.data / 'ledger.sqlite3'}" in out
    assert "the engine log's last 0 line(s):" in out  # no log file in this test
    assert engine.endpoint.token not in out


def test_the_log_tail_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "engine.log"
    assert log_tail(path) == []  # no log yet
    path.write_bytes(b"first\nsecond\n\xff\xfebroken utf-8\nlast")
    assert log_tail(path) == ["first", "second", "\ufffd\ufffdbroken utf-8", "last"]
    assert log_tail(path, lines=2) == ["\ufffd\ufffdbroken utf-8", "last"]
    # from the last 12 bytes, "utf-8\nlast" are whole lines but the first one is cut: dropped
    assert log_tail(path, max_bytes=12) == ["last"]
    assert log_tail(tmp_path) != []  # a folder in the way: one line saying so, no exception


def test_diagnostics_never_load_torch(tmp_path: Path) -> None:
    # in a fresh interpreter: in this one, other tests may have loaded torch already
    code = (
        "import asyncio, sys, pathlib\n"
        "from core.config.paths import UserDirs\n"
        "from core.engine import EngineConfig\n"
        "from core.engine.diagnostics import diagnostics\n"
        "config = EngineConfig(UserDirs.under(pathlib.Path(sys.argv[1])))\n"
        "from core.util.blocking import BlockingPool\n"
        "pool = BlockingPool('diagnostics')\n"
        "answer = asyncio.run(diagnostics(config, blocking=pool, started=0.0))\n"
        "print(answer.torch, 'torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "home")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False"]
