"""EngineDaemon: the ``barnraise engine`` process — one lock, one engine, one control server.

Start order: the per-user lock (a second engine stops here and names the first), the engine (settings,
ledger, sensors, scheduler, project), the control server, and last the endpoint file that tells
clients where to connect. Stop runs the other way round, so no client is ever pointed at a server
that is not there, and the ledger and settings are written before the lock is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

from core.account import CredentialStore
from core.api.endpoint import Endpoint, endpoint_path
from core.api.errors import ApiError
from core.api.schema import API_VERSION
from core.control.lock import AlreadyRunning, InstanceLock
from core.control.server import ControlServer
from core.engine import Engine, EngineConfig
from core.scheduler import ConditionSampler
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)


class EngineAlreadyRunning(BarnraiseError):
    """A second engine was started for the same user."""


class EngineDaemon:
    def __init__(
        self,
        config: EngineConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        sampler: ConditionSampler | None = None,
        credentials: CredentialStore | None = None,
    ) -> None:
        self.config = config
        self.engine = Engine(config, sampler=sampler, credentials=credentials)
        self.shutdown_requested = asyncio.Event()
        self.server = ControlServer(
            self.engine, host=host, port=port, on_shutdown=self.shutdown_requested.set
        )
        self._lock = InstanceLock(config.lock_file)
        self._endpoint_file: Path = endpoint_path(config.dirs)
        self._started: list[str] = []

    async def start(self) -> Endpoint:
        try:
            self._lock.acquire()
        except AlreadyRunning:
            raise EngineAlreadyRunning(self._describe_other()) from None
        self._started.append("lock")
        try:
            await self.engine.start()
            self._started.append("engine")
            await self.server.start()
            self._started.append("server")
            endpoint = Endpoint(self.server.url, self.server.token, os.getpid(), API_VERSION)
            endpoint.write(self._endpoint_file)
            self._started.append("endpoint")
        except BaseException:
            await self.stop()
            raise
        log.info("engine ready at %s", self.server.url)
        return endpoint

    async def stop(self) -> None:
        while self._started:
            part = self._started.pop()
            try:
                if part == "endpoint":
                    with contextlib.suppress(FileNotFoundError):
                        self._endpoint_file.unlink()
                elif part == "server":
                    await self.server.close()
                elif part == "engine":
                    await self.engine.close()
                else:
                    self._lock.release()
            except Exception:  # one part failing to stop must not keep the others running
                log.exception("stopping the %s failed", part)

    async def run(self, stop: asyncio.Event) -> None:
        """Start, serve until ``stop`` or a shutdown request, then stop."""
        await self.start()
        try:
            waiters = {
                asyncio.create_task(stop.wait(), name="daemon/stop"),
                asyncio.create_task(self.shutdown_requested.wait(), name="daemon/shutdown"),
            }
            _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
        finally:
            await self.stop()

    def _describe_other(self) -> str:
        try:
            other = Endpoint.read(self._endpoint_file)
        except ApiError:
            return (
                f"another Barnraise engine is already running for this user (it holds "
                f"{self.config.lock_file}); use 'barnraise ctl status' or stop it first"
            )
        return (
            f"a Barnraise engine is already running for this user (pid {other.pid}, control API at "
            f"{other.url}); use 'barnraise ctl status', or stop it first"
        )
