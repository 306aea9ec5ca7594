"""EngineDaemon: the ``barnraise engine`` process — one lock, one engine, one control server.

``await EngineDaemon.open(config)`` takes, in order, the per-user lock (a second engine stops here
and names the first), the engine (settings, ledger, sensors, scheduler, project), the control
server, and last the endpoint file that tells clients where to connect; if a step fails, what was
opened is closed again, so a daemon always has all its parts. ``stop`` runs the other way round, so
no client is ever pointed at a server that is not there, and the ledger and settings are written
before the lock is released; every part is stopped even if another fails, and
``ShutdownIncomplete`` then lists what failed (``barnraise engine`` says so and exits non-zero).
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
from core.engine import Closing, Engine, EngineConfig, ShutdownIncomplete
from core.scheduler import ConditionSampler
from core.util.errors import BarnraiseError

log = logging.getLogger(__name__)


class EngineAlreadyRunning(BarnraiseError):
    """A second engine was started for the same user."""


class EngineDaemon:
    """Made by ``EngineDaemon.open`` (the constructor takes parts already started)."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        lock: InstanceLock,
        engine: Engine,
        server: ControlServer,
        endpoint: Endpoint,
        shutdown_requested: asyncio.Event,
    ) -> None:
        self.config = config
        self.engine = engine
        self.server = server
        self.endpoint = endpoint
        self.shutdown_requested = shutdown_requested
        """Set when a client asks the engine to stop (``POST /v1/shutdown``)."""
        self._lock = lock
        self._stopped = False

    @classmethod
    async def open(
        cls,
        config: EngineConfig,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        sampler: ConditionSampler | None = None,
        credentials: CredentialStore | None = None,
    ) -> EngineDaemon:
        lock = InstanceLock(config.lock_file)
        try:
            lock.acquire()
        except AlreadyRunning:
            raise EngineAlreadyRunning(_describe_other(config)) from None
        engine: Engine | None = None
        server: ControlServer | None = None
        try:
            engine = await Engine.open(config, sampler=sampler, credentials=credentials)
            shutdown_requested = asyncio.Event()
            server = ControlServer(engine, host=host, port=port, on_shutdown=shutdown_requested.set)
            await server.start()
            endpoint = Endpoint(server.url, server.token, os.getpid(), API_VERSION)
            endpoint.write(_endpoint_file(config))
        except BaseException:
            # each failure to close is logged; the error that stopped the opening is the news
            closing = Closing()
            if server is not None:
                with closing.attempt("closing the control server"):
                    await server.close()
            if engine is not None:
                with contextlib.suppress(ShutdownIncomplete):  # its parts logged one by one
                    await engine.close()
            lock.release()
            raise
        log.info("engine ready at %s", server.url)
        return cls(
            config,
            lock=lock,
            engine=engine,
            server=server,
            endpoint=endpoint,
            shutdown_requested=shutdown_requested,
        )

    async def stop(self) -> None:
        """Stop in reverse order (once; a second call does nothing).

        Raises ``ShutdownIncomplete`` listing every part that failed, the engine's included."""
        if self._stopped:
            return
        self._stopped = True
        closing = Closing()
        with closing.attempt("removing the endpoint file"):
            _endpoint_file(self.config).unlink(missing_ok=True)
        with closing.attempt("closing the control server"):
            await self.server.close()
        try:
            await self.engine.close()
        except ShutdownIncomplete as exc:  # its parts were logged one by one
            closing.failures.extend(exc.failures)
        with closing.attempt("releasing the lock"):
            self._lock.release()
        closing.raise_if_failed()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` or a shutdown request, then stop."""
        try:
            waiters = {
                asyncio.create_task(stop.wait(), name="daemon/stop"),
                asyncio.create_task(self.shutdown_requested.wait(), name="daemon/shutdown"),
            }
            _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            log.info("stopping")
        finally:
            await self.stop()


def _endpoint_file(config: EngineConfig) -> Path:
    return endpoint_path(config.dirs)


def _describe_other(config: EngineConfig) -> str:
    try:
        other = Endpoint.read(_endpoint_file(config))
    except ApiError:
        return (
            f"another Barnraise engine is already running for this user (it holds "
            f"{config.lock_file}); use 'barnraise ctl status' or stop it first"
        )
    return (
        f"a Barnraise engine is already running for this user (pid {other.pid}, control API at "
        f"{other.url}); use 'barnraise ctl status', or stop it first"
    )
