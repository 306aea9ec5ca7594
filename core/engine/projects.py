"""ProjectSlot and ProjectRunner: an attached project, and its peer running inside the engine.

The engine remembers attached projects as slots (the manifest's path and how to join). The runner of
the active one builds its peer the first time the scheduler says "run" (so an engine that was never
asked to contribute never loads torch), then only pauses and resumes it: the model, the data
position and the accumulated gradients stay in memory across pauses, as BOINC keeps a suspended task.
A peer that fails is reported and rebuilt after a back-off on the next "run".

In a moderated project the runner first asks the engine's ``Account`` for a pass keeper, and hands
its ``AccessGate`` to the peer; without a login the runner fails with a message saying how to log
in (``needs_login``), waits for one, and starts on the next "run" after it.

A ``local_swarm`` slot joins the demo swarm running on this computer (``barnraise swarm``): its
manifest, initial peers and data URL are read afresh from the swarm's record every time the peer
starts, because the swarm listens on new ports every run. When no such swarm runs, the start fails
with a message saying how to start one (``swarm_missing``), and is tried again as soon as one runs.

A ``dmoe`` project's peer is an expert server instead of a trainer (``hosting``): the volunteer
contributes by hosting experts, under the same scheduler, pauses and ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from core.account import AccountError, NotLoggedIn, PassKeeper
from core.config.ports import all_interfaces
from core.engine.account import Account
from core.engine.errors import DoesNotFit
from core.engine.hosting import RunningPeer, expert_host
from core.engine.join.memory_fit import check_fit
from core.net import Identity
from core.net.host.gate import AccessGate
from core.policy import PeerStatus, RunnerState
from core.project import AnyManifest, DmoeManifest, load_any_manifest
from core.swarm import LocalSwarm, LocalSwarms
from core.util.blocking import BlockingPool
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.accelerator import detect_accelerator
from core.worker.events import PeerEpoch, PeerEvent, PeerFailed, PeerNetwork, PeerReady
from core.worker.memory import MemoryHere, memory_here

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

LOGIN_RETRY = 1.0
"""Seconds between starts that fail for want of a login (or of the local swarm) while the account
says logged in (or the swarm's record is there)."""
SWARM_NOT_RUNNING = (
    "the local demo swarm is not running; start it with 'barnraise swarm' or from the app"
)
TORCH_MISSING = (
    "PyTorch is not here yet: the app fetches it on its first run (or run 'barnraise torch "
    "install'); training starts once it is in place"
)


def memory_now(device: str) -> MemoryHere:
    """This computer's memory for a project set to train on ``device``, looked at afresh
    (blocking: NVML and psutil, milliseconds)."""
    return memory_here(detect_accelerator(), device)


class LocalSwarmMissing(BarnraiseError):
    """A ``local_swarm`` project's swarm does not run on this computer."""


@dataclass(frozen=True)
class NetworkChoice:
    """The user's network settings that shape the peer: its port and whether it offers a relay."""

    listen_port: int = 0
    """0: the project's ``peer_port``, with another free port when it is taken."""
    offer_relay: bool = False

    def listen_settings(self, manifest: AnyManifest, *, local: bool) -> dict[str, Any]:
        """PeerSettings' listen fields: loopback for a demo swarm inside this computer, else every
        interface on the chosen port."""
        if local:
            return {"listen": ("/ip4/127.0.0.1/tcp/0",), "port_fallback": False}
        port = self.listen_port or manifest.network.peer_port
        return {
            "listen": tuple(all_interfaces(port)),
            "port_fallback": not self.listen_port,
            "offer_relay": self.offer_relay,
        }


@dataclass(frozen=True)
class ProjectSlot:
    name: str
    description: str
    manifest: Path
    initial_peers: tuple[str, ...] = ()
    data_base: str | None = None
    device: str = "auto"
    """auto (CUDA, else Apple's MPS, else the CPU: ``core.worker.device``), cpu, cuda:N, mps."""
    local_swarm: bool = False
    """Joins the demo swarm on this computer: where to join is read from its record, not kept."""
    source_url: str | None = None
    """Joined by this project URL (normalised): ``manifest`` is the engine's copy of what it
    serves, signed, and updates are looked for there. None: attached from a file."""
    project_key: str | None = None
    """The project key (PeerID) pinned when it was joined by URL: updates must be signed by it."""
    manifest_version: int | None = None
    """The version of the signed manifest the copy holds (joined by URL only)."""
    update_refused: str | None = None
    """Why the latest update served was refused, or None."""

    @classmethod
    def from_manifest(
        cls,
        path: Path,
        *,
        initial_peers: tuple[str, ...] = (),
        data_base: str | None = None,
        device: str = "auto",
        local_swarm: bool = False,
    ) -> ProjectSlot:
        """Validate the manifest now, so a bad file is refused when attached, not later."""
        manifest = load_any_manifest(path)
        return cls(
            manifest.project.name,
            manifest.project.description,
            path.expanduser().absolute(),
            () if local_swarm else initial_peers,  # a swarm's addresses last one run
            None if local_swarm else data_base,
            device,
            local_swarm,
        )

    def to_table(self) -> dict[str, Any]:
        table: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "manifest": str(self.manifest),
            "initial_peers": list(self.initial_peers),
            "device": self.device,
        }
        if self.data_base is not None:
            table["data_base"] = self.data_base
        if self.local_swarm:
            table["local_swarm"] = True
        for name in ("source_url", "project_key", "manifest_version", "update_refused"):
            value = getattr(self, name)
            if value is not None:
                table[name] = value
        return table

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> ProjectSlot:
        local_swarm = table.get("local_swarm", False)
        if not isinstance(local_swarm, bool):
            raise TypeError(f"projects.local_swarm must be true or false, not {local_swarm!r}")
        return cls(
            str(table["name"]),
            str(table.get("description", "")),
            Path(str(table["manifest"])),
            tuple(str(p) for p in table.get("initial_peers", ())),
            str(table["data_base"]) if "data_base" in table else None,
            str(table.get("device", "auto")),
            local_swarm,
            # absent from slots written before projects could be joined by URL: from a file
            _optional_text(table, "source_url"),
            _optional_text(table, "project_key"),
            _optional_version(table),
            _optional_text(table, "update_refused"),
        )


def _optional_text(table: dict[str, Any], name: str) -> str | None:
    value = table.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"projects.{name} must be text, not {value!r}")
    return value


def _optional_version(table: dict[str, Any]) -> int | None:
    value = table.get("manifest_version")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise TypeError(f"projects.manifest_version must be a whole number from 1, not {value!r}")
    return value


class ProjectRunner:
    """The peer of one project inside the engine (trainer or client role)."""

    def __init__(
        self,
        slot: ProjectSlot,
        *,
        work_dir: Path,
        identity: Identity,
        on_event: Callable[[PeerEvent], None],
        account: Account | None = None,
        swarms: LocalSwarms | None = None,
        blocking: BlockingPool | None = None,
        retry_after: float = 30.0,
        network: Callable[[], NetworkChoice] | None = None,
    ) -> None:
        self.slot = slot
        self.network_choice = network or NetworkChoice
        self.account = account
        self.swarms = swarms
        self.blocking = blocking
        """Where the manifest is read (the engine's pool); without one, a default thread."""
        self.work_dir = work_dir
        self.identity = identity
        self.on_event = on_event
        self.retry_after = retry_after
        self.peer: RunningPeer | None = None
        self.state: RunnerState = "stopped"
        self.error: str | None = None
        self.needs_login = False
        """The last start failed for want of a login at the project's coordinator."""
        self.swarm_missing = False
        """The last start of a ``local_swarm`` slot found no swarm running."""
        self.swarm: LocalSwarm | None = None
        """The run of the local swarm the peer was started against (``local_swarm`` slots)."""
        self.manifest: AnyManifest | None = None
        """The manifest the peer was last built from; None before its first start."""
        self.last_epoch: PeerEpoch | None = None
        """The peer's latest ``PeerEpoch`` (its last exchange, in diloco mode)."""
        self._failed_at = 0.0
        self._stop = asyncio.Event()
        self._tasks = BackgroundTasks(f"project/{slot.name}")
        self.threads = 0
        """The CPU threads the scheduler last gave the peer (0: none yet)."""
        self._paused = True
        self._duty = 1.0
        self._task: asyncio.Task[None] | None = None

    def status(self) -> PeerStatus:
        """How the peer is, for the engine's state (``core.policy.outcome``)."""
        waiting = self.peer.waiting_for if self.peer is not None and self.state == "ready" else None
        return PeerStatus(self.state, self.error, self.needs_login, waiting)

    @property
    def computing(self) -> bool:
        """The peer exists, has its trainer, and is not paused."""
        return self.state == "ready" and not self._paused

    def ensure_started(self) -> None:
        """Build and start the peer in the background unless it runs (or failed moments ago)."""
        if self.state in ("starting", "ready"):
            return
        if self.state == "failed":
            waited = time.monotonic() - self._failed_at
            if self.needs_login:  # nothing changes until a login; then start (almost) at once
                logged_in = self.account is not None and self.account.info().logged_in
                if not logged_in or waited < LOGIN_RETRY:
                    return
            elif self.swarm_missing:  # start as soon as the swarm's record shows up
                seen = self.swarms is not None and self.swarms.find(self.slot.name) is not None
                if not (seen and waited >= LOGIN_RETRY) and waited < self.retry_after:
                    return
            elif waited < self.retry_after:
                return
        if importlib.util.find_spec("torch") is None:  # a light bundle before its first-run fetch
            self._failed(TORCH_MISSING)  # looked for again after retry_after: found once fetched
            return
        self.state = "starting"
        self.error = None
        self.needs_login = False
        self.swarm_missing = False
        self.swarm = None
        self._stop = asyncio.Event()
        self._task = self._tasks.spawn("peer", self._run_peer())

    async def _run_peer(self) -> None:
        peer: RunningPeer | None = None
        keeper: PassKeeper | None = None
        try:
            path, initial_peers, data_base = await self._where_to_join()
            manifest = await self._run_blocking(load_any_manifest, path)
            if manifest.project.name != self.slot.name:
                raise BarnraiseError(
                    f"{path} is now the manifest of {manifest.project.name!r}, not of "
                    f"{self.slot.name!r}: detach the project and attach it again"
                )
            # before the login and the model: one that cannot fit would only fail after
            # minutes of allocation, with the computer's memory taken meanwhile
            check_fit(manifest, await self._run_blocking(memory_now, self.slot.device))
            self.manifest = manifest
            if manifest.access.moderated:
                if self.account is None:
                    raise BarnraiseError(f"{self.slot.name} is moderated: it needs an account")
                if self.slot.local_swarm and self.account.url != manifest.network.coordinator_url:
                    # a demo swarm's coordinator listens on a new port every run
                    await self.account.select(path)
                keeper = await self.account.open_access(
                    manifest, self.identity.peer_id, self.identity.sign
                )
            peer = self.peer = self._build_peer(
                manifest, initial_peers, data_base, keeper.gate if keeper is not None else None
            )
            if not self._paused:
                await peer.resume(self._duty)
            await peer.run(self._stop)
            if not self._stop.is_set():
                raise BarnraiseError("the peer stopped by itself (its data ran out?)")
            self.state = "stopped"
        except asyncio.CancelledError:
            self.state = "stopped"
            raise
        except (AccountError, LocalSwarmMissing, DoesNotFit) as exc:  # expected: no trace
            log.warning("the peer of %s cannot start: %s", self.slot.name, exc)
            self.needs_login = isinstance(exc, NotLoggedIn)
            self.swarm_missing = isinstance(exc, LocalSwarmMissing)
            self._failed(str(exc))
        except Exception as exc:  # any failure of the peer is reported, never silent
            log.exception("the peer of %s failed", self.slot.name)
            self._failed(f"{type(exc).__name__}: {exc}" if not str(exc).strip() else str(exc))
        finally:
            if peer is not None:
                with contextlib.suppress(Exception):
                    await peer.close()
            self.peer = None
            if keeper is not None and self.account is not None:
                await self.account.close_access(keeper)

    async def _run_blocking(self, call: Callable[[T], R], argument: T) -> R:
        """``call(argument)`` on the engine's pool; without one, a default thread."""
        if self.blocking is not None:
            return await self.blocking.run(call, argument)
        return await asyncio.to_thread(call, argument)

    def _build_peer(
        self,
        manifest: AnyManifest,
        initial_peers: tuple[str, ...],
        data_base: str | None,
        gate: AccessGate | None,
    ) -> RunningPeer:
        """A trainer for a collaborative project, an expert server for a dmoe one; started paused."""
        listen = self.network_choice().listen_settings(manifest, local=self.slot.local_swarm)
        if isinstance(manifest, DmoeManifest):
            return expert_host(
                manifest,
                work_dir=self.work_dir,
                identity=self.identity,
                device=self.slot.device,
                listen=listen,
                initial_peers=initial_peers,
                access=gate,
                on_event=self._on_peer_event,
            )
        from core.training.peer.project_peer import (  # noqa: PLC0415 - torch loads only when training starts
            PeerSettings,
            ProjectPeer,
        )

        settings = PeerSettings(
            manifest,
            work_dir=self.work_dir,
            role="trainer",
            **listen,
            initial_peers=initial_peers,
            data_base=data_base,
            data_seed=secrets.randbelow(2**31),
            device=self.slot.device,
            identity=self.identity,
            start_paused=True,
            access=gate,
        )
        return ProjectPeer(settings, self._on_peer_event)

    async def _where_to_join(self) -> tuple[Path, tuple[str, ...], str | None]:
        """The manifest, initial peers and data URL: the slot's, or the local swarm's run now."""
        if not self.slot.local_swarm:
            return self.slot.manifest, self.slot.initial_peers, self.slot.data_base
        swarm = await self.swarms.find_fresh(self.slot.name) if self.swarms is not None else None
        if swarm is None:
            raise LocalSwarmMissing(SWARM_NOT_RUNNING)
        self.swarm = swarm
        return swarm.manifest, swarm.initial_peers, swarm.data_base

    def _failed(self, message: str) -> None:
        self.state = "failed"
        self._failed_at = time.monotonic()
        self.error = message
        self.on_event(PeerFailed(message))

    def _on_peer_event(self, event: PeerEvent) -> None:
        if isinstance(event, PeerReady):
            self.state = "ready"
        elif isinstance(event, PeerEpoch):
            self.last_epoch = event
        self.on_event(event)

    async def pause(self) -> None:
        self._paused = True
        if self.peer is not None:
            await self.peer.pause()

    async def resume(self, duty: float) -> None:
        self._paused = False
        self._duty = duty
        if self.peer is not None:
            await self.peer.resume(duty)

    async def set_threads(self, threads: int) -> None:
        if self.peer is not None:
            await self.peer.set_threads(threads)
        self.threads = threads

    def progress(self) -> dict[str, Any]:
        """The peer's running totals and where training stands (empty before it exists)."""
        return self.peer.progress() if self.peer is not None else {}

    def network(self) -> PeerNetwork | None:
        """How others reach the peer (None before it exists)."""
        return self.peer.network() if self.peer is not None else None

    def network_diagnostics(self) -> dict[str, Any] | None:
        """The reachability check's details, when the peer checks its reachability."""
        peer = self.peer
        if peer is None or peer.reachability is None:
            return None
        return peer.reachability.diagnostics()

    async def stop(self, timeout: float = 4.0) -> None:
        """Stop the peer: drop the current microbatch, leave the swarm, free everything."""
        self._stop.set()
        if self.peer is not None:
            self.peer.control.close()  # drops the microbatch in flight and wakes a paused loop
        if self._task is not None and not self._task.done():
            # a peer still joining the swarm, or mid-round, is cancelled after the grace
            await asyncio.wait({self._task}, timeout=timeout)
        await self._tasks.close()
        self.state = "stopped"
