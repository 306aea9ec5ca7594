"""EngineParts: what the engine opens before it runs, opened together and closed together.

``open`` starts the engine's ``BlockingPool`` (``core.util.blocking``: every blocking call the engine
makes, file reads and the keyring, runs there, never on the loop's default executor), makes the
folders, reads the settings file, loads (or creates) the peer identity, reads
the local swarms' records, and opens the ledger (with the metering and the loss curve built on it)
and the condition sampler last, since they hold resources; should a step fail, what was opened is
closed again, so an ``Engine`` is only ever made of parts that exist. ``close`` writes what the
parts hold (the meters, the settings) and closes each part even if another fails, through
``Closing``: every failure is logged with its traceback and listed in the ``ShutdownIncomplete``
that the engine raises once everything is stopped; the pool is closed last, abandoning any call
stuck in a thread (its daemon threads never hold the process).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from core.engine.config import EngineConfig
from core.engine.errors import PartFailure, ShutdownIncomplete
from core.engine.history import History
from core.engine.metering import Metering
from core.engine.store import EngineFile, EngineMemory
from core.net import Identity
from core.scheduler import ConditionSampler, GpuSensor, SystemSensor, default_idle_sensor
from core.stats import Ledger
from core.swarm import LocalSwarms
from core.util.blocking import BlockingPool
from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

BLOCKING_WORKERS = 4
"""Threads for the engine's blocking calls: manifests, swarm records, the log, the keyring."""
BLOCKING_BACKLOG = 64
"""Calls that may wait for one of them; more are refused at once (``PoolBusy``)."""


class Closing:
    """Failures met while stopping: each step runs in ``attempt``, and the next runs anyway."""

    def __init__(self) -> None:
        self.failures: list[PartFailure] = []

    @contextlib.contextmanager
    def attempt(self, part: str) -> Iterator[None]:
        """Run a step; an ``Exception`` is logged with its traceback and recorded, not raised."""
        try:
            yield
        except Exception as exc:
            log.error("stopping the engine: %s failed", part, exc_info=exc)
            self.failures.append(PartFailure(part, exc))

    def raise_if_failed(self) -> None:
        if self.failures:
            raise ShutdownIncomplete(self.failures)


@dataclass(frozen=True)
class EngineParts:
    file: EngineFile
    memory: EngineMemory
    """The user's choices and attached projects, as read; the engine changes it in place."""
    identity: Identity
    swarms: LocalSwarms
    ledger: Ledger
    metering: Metering
    curve: History
    sampler: ConditionSampler
    blocking: BlockingPool
    """Where the engine's blocking calls run (files, the keyring): bounded, and never waited for."""

    @classmethod
    async def open(
        cls,
        config: EngineConfig,
        *,
        sampler: ConditionSampler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        on_ledger_error: Callable[[str], None] | None = None,
    ) -> EngineParts:
        """Open every part; a ``sampler`` given is owned from here on (closed on failure too)."""
        ledger: Ledger | None = None
        blocking = BlockingPool(
            "engine-blocking", workers=BLOCKING_WORKERS, backlog=BLOCKING_BACKLOG
        )
        try:
            dirs = config.dirs
            for folder in (dirs.config, dirs.data, dirs.cache, dirs.runtime):
                dirs.ensure(folder)
            file = EngineFile(config.settings_file)
            memory = file.load()
            identity = Identity.load_or_create(dirs.identity_file)
            swarms = LocalSwarms(dirs, pool=blocking)
            await swarms.refresh()
            ledger = Ledger(config.ledger_file)
            if sampler is None:
                # a demo swarm on this computer is the collaboration we join, not a program to yield to
                system = SystemSensor(exclude=swarms.pids, exclude_every=config.swarm_interval)
                sampler = ConditionSampler(
                    default_idle_sensor(), system, GpuSensor(), headless=config.headless
                )
        except BaseException:
            if ledger is not None:
                ledger.close()
            if sampler is not None:
                sampler.close()
            blocking.close()
            raise
        return cls(
            file=file,
            memory=memory,
            identity=identity,
            swarms=swarms,
            ledger=ledger,
            metering=Metering(ledger, clock=clock),
            curve=History(ledger, on_error=on_ledger_error),
            sampler=sampler,
            blocking=blocking,
        )

    def close(self, closing: Closing) -> None:
        """Write the meters and the settings, close the ledger and the sensors (each attempted)."""
        with closing.attempt("writing the last contribution to the ledger"):
            self.metering.flush_all()
        with closing.attempt("closing the ledger"):
            self.ledger.close()
        with closing.attempt("closing the sensors"):
            self.sampler.close()
        with closing.attempt("saving the settings"):
            self.file.save(self.memory)
        with closing.attempt("closing the blocking calls' threads"):
            self.blocking.close()
