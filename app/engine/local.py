"""LocalEngines: this user's engine on this computer — found through its endpoint file, or started
as ``barnraise engine`` in a process of its own.

The engine is started detached (``core.api.detached``): its own session (POSIX) or process group
(Windows), so closing the app, or the app crashing, never takes the engine down with it; its output
goes to a file in the log folder, so a crash that happens before its own log is open (an import
error, a segfault) is still recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from pathlib import Path

from app.engine.supervisor import EngineStartFailed
from core.api.detached import start_detached
from core.api.endpoint import Endpoint, endpoint_path, engine_output_path
from core.api.errors import ApiError, EngineUnavailable
from core.api.program import barnraise_command
from core.api.protocol import EngineApi

ENGINE_COMMAND = tuple(barnraise_command("engine"))


class LocalEngines:
    def __init__(
        self,
        *,
        command: tuple[str, ...] = ENGINE_COMMAND,
        start_timeout: float = 60.0,
        endpoint_file: Path | None = None,
        output_file: Path | None = None,
    ) -> None:
        self.command = command
        self.start_timeout = start_timeout
        self.endpoint_file = endpoint_file or endpoint_path()
        self.output_file = output_file or engine_output_path()
        self.process: subprocess.Popen[bytes] | None = None

    async def find(self) -> EngineApi | None:
        try:
            endpoint = Endpoint.read(self.endpoint_file)
        except EngineUnavailable:
            return None
        client = _client(endpoint)  # VersionMismatch goes to the supervisor
        try:
            await client.state()
        except ApiError:  # a stale file from an engine that died
            await client.close()
            return None
        return client

    async def launch(self) -> EngineApi:
        offset = self.output_file.stat().st_size if self.output_file.exists() else 0
        # no console window of its own on Windows: the app has its window
        self.process = process = start_detached(
            self.command,
            output=self.output_file,
            header=f"--- engine started by the app at {time.ctime()}",
            no_window=True,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            status = process.poll()
            if status is not None:
                tail = _tail(self.output_file, offset)
                raise EngineStartFailed(
                    f"it exited at once with status {status}: {tail or 'no output'}",
                    another_running="already running" in tail,
                )
            client = await self._answering(process.pid)
            if client is not None:
                return client
            await asyncio.sleep(0.1)
        process.kill()
        await asyncio.to_thread(process.wait)
        raise EngineStartFailed(
            f"it did not answer within {self.start_timeout:.0f} s; see {self.output_file}"
        )

    async def _answering(self, pid: int) -> EngineApi | None:
        try:
            endpoint = Endpoint.read(self.endpoint_file)
        except EngineUnavailable:
            return None
        if endpoint.pid != pid:
            return None  # an older file, not yet replaced by our engine
        client = _client(endpoint)
        try:
            await client.state()
        except ApiError:
            await client.close()
            return None
        return client

    async def exit_status(self) -> int | None:
        process = self.process
        if process is None:
            return None
        try:  # a process that just closed its sockets may take a moment to be reaped
            status = await asyncio.to_thread(process.wait, 3.0)
        except subprocess.TimeoutExpired:
            return None
        self.process = None
        return status

    def describe_logs(self) -> str:
        return f"the engine's output is in {self.output_file} and its log beside it"

    def forget(self) -> None:
        """Stop watching our child without stopping it (the app quits, the engine stays)."""
        self.process = None

    def stop_child(self, grace: float = 6.0) -> None:
        """Make sure an engine we started is gone (after asking it to shut down)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()


def _client(endpoint: Endpoint) -> EngineApi:
    # imported here, on the bridge's thread: aiohttp takes a third of a second to load, which the
    # window need not wait for
    from core.api.client import EngineClient  # noqa: PLC0415

    return EngineClient(endpoint, timeout=5.0)


def _tail(path: Path, offset: int, limit: int = 600) -> str:
    """The last words the engine printed since ``offset``, on one line."""
    try:
        with path.open("rb") as f:
            # shorter than before: rotated as the engine started (core.util.process.logfiles), all new
            f.seek(offset if offset <= path.stat().st_size else 0)
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("---")]
    return " | ".join(lines)[-limit:]
