"""DemoSwarm: the local demo collaboration, started by the app (``--demo`` or the first-run button).

``barnraise swarm --peers 2 --moderated --keep-accounts``: a backbone, two trainers and a coordinator
on this computer, which announces itself so the engine offers it on first run. The app owns it: it
stops it (politely, then firmly) when the app quits. Its output goes to a file beside the engine's.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

DEMO_COMMAND = (
    sys.executable,
    "-m",
    "core.cli.main",
    "swarm",
    "--peers",
    "2",
    "--moderated",
    "--keep-accounts",
)
_STOP_SIGNAL = getattr(signal, "CTRL_BREAK_EVENT", signal.SIGTERM)


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
        self.output_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._offset = self.output_file.stat().st_size if self.output_file.exists() else 0
        with self.output_file.open("ab") as output:
            output.write(f"--- demo swarm started by the app at {time.ctime()}\n".encode())
            output.flush()
            self.process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=os.name != "nt",
                creationflags=getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0),
            )

    def failure(self) -> str | None:
        """Why it ended by itself, if it did (the last lines it printed)."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        try:
            with self.output_file.open("rb") as f:
                f.seek(self._offset)
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
            process.send_signal(_STOP_SIGNAL)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                if os.name != "nt":
                    os.killpg(process.pid, signal.SIGKILL)  # its peers share its session
                else:
                    process.kill()
            process.wait()
