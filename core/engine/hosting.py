"""What the engine's runner runs for a project: a trainer (``ProjectPeer``) for a collaborative
project, an expert server (``ExpertHost``) for a ``dmoe`` one; ``RunningPeer`` is what it needs of
either.

For a dmoe project the volunteer contributes by hosting experts: the runner builds an
``ExpertHost`` with the manifest's ``server.experts_per_server`` free slots (slots this computer
checkpointed before come first, so a volunteer who comes back takes its experts over again), its
checkpoints in the project's work folder (``experts/``), on the project's device, started paused
like a trainer. The scheduler then pauses and resumes it as it would a trainer (``ExpertHost``
says what a pause does to callers and announcements). Its ``ready`` becomes the peer's
``PeerReady`` (role ``experts``) and its ``stopped`` a ``PeerStopped``; what it served reaches the
ledger through ``progress()``, as a trainer's samples do (``Metering``): ``samples`` counts expert
samples served, forward and backward together. Calls it refuses for poisoned tensors become
signed evidence against their callers in the DHT (``core.training.moderation.call_evidence``).

Torch loads only here, inside the function, when the scheduler first says "run".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from core.net import Identity
from core.net.host.gate import AccessGate
from core.net.reach.monitor import ReachabilityMonitor
from core.project import DmoeManifest
from core.worker.events import PeerEvent, PeerNetwork, PeerReady, PeerStopped

EXPERT_CHECKPOINTS = "experts"
"""The folder of a dmoe project's expert checkpoints, inside its work folder."""


class Steering(Protocol):
    def close(self) -> None: ...


class RunningPeer(Protocol):
    """What the runner and the engine use of a project's peer (trainer or expert server)."""

    @property
    def control(self) -> Steering: ...

    @property
    def waiting_for(self) -> str | None: ...

    @property
    def reachability(self) -> ReachabilityMonitor | None: ...

    async def run(self, stop: asyncio.Event) -> None: ...

    async def pause(self) -> None: ...

    async def resume(self, duty: float = 1.0) -> None: ...

    async def set_threads(self, threads: int) -> None: ...

    def progress(self) -> dict[str, Any]: ...

    def network(self) -> PeerNetwork: ...

    async def close(self) -> None: ...


def expert_host(
    manifest: DmoeManifest,
    *,
    work_dir: Path,
    identity: Identity,
    device: str,
    listen: dict[str, Any],
    initial_peers: tuple[str, ...],
    access: AccessGate | None,
    on_event: Callable[[PeerEvent], None],
) -> RunningPeer:
    """The engine's expert server for ``manifest``, started paused; ``listen``: the listen fields
    (``NetworkChoice.listen_settings``). It hosts ``server.experts_per_server`` experts, the number
    whose fit the runner measured (``check_fit``) before calling this: experts that cannot fit
    this computer's memory never reach it."""
    from core.moe.server.events import ExpertsEvent, ExpertsReady, ExpertsStopped  # noqa: PLC0415
    from core.moe.server.runtime import ExpertHost, ExpertHostSettings  # noqa: PLC0415 - torch
    from core.training.moderation.call_evidence import evidence_of_refusals  # noqa: PLC0415

    def forward(event: ExpertsEvent) -> None:
        if isinstance(event, ExpertsReady):
            on_event(PeerReady(event.address, event.role))
        elif isinstance(event, ExpertsStopped):
            on_event(PeerStopped())

    settings = ExpertHostSettings(
        manifest,
        listen=listen.get("listen", ExpertHostSettings.listen),
        port_fallback=listen.get("port_fallback", False),
        initial_peers=initial_peers,
        checkpoints=work_dir / EXPERT_CHECKPOINTS,
        device=device,
        identity=identity,
        access=access,
        start_paused=True,
        evidence=evidence_of_refusals(manifest.project.name),
    )
    return ExpertHost(settings, forward)
