"""DemoSwarm: the local demo collaboration, started by the app (``--demo`` or the first-run button).

``barnraise swarm --peers 2 --moderated --keep-accounts``: a backbone, two trainers and a coordinator
on this computer, which announces itself so the engine offers it on first run. The app owns it: it
stops it (politely, then firmly) when the app quits. Its output goes to a file beside the engine's.

The swarm itself is ``core.swarm``, which the app cannot import (it reaches ``core`` only through
``core.api``): the app starts it through the command line, detached (``core.api.detached``), and
asks it to stop with ``STOP_SIGNAL``, on which the swarm stops its peers itself. The command is
``core.api.program``'s, immune to the folder the app was started in.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from pathlib import Path

from core.api.detached import STOP_SIGNAL, kill_detached, start_detached
from core.api.program import barnraise_command

DEMO_COMMAND = tuple(barnraise_command("swarm", "--peers", "2", "--moderated", "--keep-accounts"))


class DemoSwarm:
    def __init__(self, output_file: Path, *, command: tuple[str, ...] = DEMO_COMMAND) -> None:
        self.output_file = output_file
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        self._offset = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start it unless it runs (``OSError`` if it cannot be started at all)."""
        if self.running:
            return
        self._offset = self.output_file.stat().st_size if self.output_file.exists() else 0
        self.process = start_detached(
            self.command,
            output=self.output_file,
            header=f"--- demo swarm started by the app at {time.ctime()}",
        )

    def failure(self) -> str | None:
        """Why it ended by itself, if it did (the last lines it printed)."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        try:
            with self.output_file.open("rb") as f:
                # shorter than before: rotated as the swarm started (core.util.process.logfiles), all new
                size = self.output_file.stat().st_size
                f.seek(self._offset if self._offset <= size else 0)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            text = ""
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith("---")]
        return f"exit status {process.returncode}: " + " | ".join(lines[-3:])

    def stop(self, grace: float = 20.0) -> None:
        """Stop it and its peers (the swarm stops its children itself on SIGTERM)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(STOP_SIGNAL)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            kill_detached(process)  # and what it started in its session
            process.wait()
