"""``barnraise engine``'s files as the app starts it: stderr sent to a file gets errors only (the
rotating ``engine.log`` has the rest), and the crash file is ready beside them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING)\b")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM is POSIX")
def test_an_engine_whose_stderr_is_a_file_writes_its_log_to_the_rotating_one(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    output = home / "logs" / "engine-output.log"
    output.parent.mkdir(parents=True)
    with output.open("ab") as stderr:
        engine = subprocess.Popen(
            [sys.executable, "-m", "core.cli.main", "--log-level", "info", "engine", "--headless"],
            cwd=ROOT,
            env=os.environ | {"BARNRAISE_HOME": str(home)},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert engine.stdout is not None
        assert engine.stdout.readline().startswith("engine ready at http://127.0.0.1:")
        engine.send_signal(signal.SIGTERM)
        assert engine.wait(10) == 0
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
        if engine.stdout is not None:
            engine.stdout.close()
    log = (home / "logs" / "engine.log").read_text()
    assert re.search(r" INFO +core\.", log), log  # the rotating log has the INFO lines...
    chatter = [line for line in output.read_text().splitlines() if LOG_LINE.match(line)]
    assert chatter == []  # ...and the redirected stderr none of them, though --log-level info
    assert (home / "logs" / "engine-crash.log").exists()
