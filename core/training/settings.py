"""PeerSettings: what one peer of a project is (its role, where it listens, its data and hooks);
``Misbehaving``, the seam through which the demo makes a trainer misbehave on purpose.

``ProjectPeer`` (``core.training.peer``) is built from these, and each mode builds its parts from
them (``core.training.mode``); the CLI and the engine fill them from their options.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from core.averaging import Averager
from core.config.roles import ROLES
from core.net import Identity
from core.net.host.gate import AccessGate
from core.project import Manifest
from core.training.credit.metrics import EpochMetrics
from core.training.publish.checkpoint import CheckpointPublishing
from core.trust.evidence import Evidence
from core.worker.errors import TrainingError
from core.worker.events import PeerEvaluation


class Tamperable(Protocol):
    """An optimizer whose mean gradient (dedloc) or pseudo-gradient (diloco) a misbehaving peer
    may change before it is averaged (the modes whose spec hosts the demo, ``misbehaving_demo``)."""

    tamper: Callable[[list[torch.Tensor]], None] | None
    claim: float
    """What the peer multiplies its samples by where it claims them: the weight it averages
    with and the samples of the epochs its records say landed (1 for an honest peer)."""


class Misbehaving(Protocol):
    """A trainer made to misbehave on purpose, to show the defences (``core.swarm.byzantine``).

    Training only offers the hooks; what a bad peer does lives with the demo that starts one."""

    def describe(self) -> str:
        """What it does, in words (for the log)."""
        ...

    def install(self, optimizer: Tamperable, averager: Averager) -> None:
        """Put itself in place: the optimizer's ``tamper`` and ``claim``, or the averager's
        ``round_hook``."""
        ...


@dataclass(frozen=True)
class PeerSettings:
    manifest: Manifest
    work_dir: Path
    """Tokenizer copies, checkpoints and metrics unless placed elsewhere."""
    role: str = "trainer"
    initial_peers: tuple[str, ...] = ()
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    """Where to listen: loopback here (a swarm in one computer, the tests); the CLI and the engine
    pass every interface on the role's port (``core.config.ports``)."""
    port_fallback: bool = False
    """Take another free port when the one asked for is taken (the default ports only)."""
    offer_relay: bool = False
    """Relay for volunteers behind routers while others can dial us (on for backbones)."""
    data_base: str | None = None
    """Where the manifest's relative data URLs point (e.g. a local shard server)."""
    data_seed: int = 0
    """This peer's order over the shards (different on every peer)."""
    device: str = "cpu"
    """cpu, cuda, cuda:N, mps, or auto: the best this computer has (``core.worker.device``)."""
    checkpoint_every: int = 0
    keep_checkpoints: int = 3
    start_from: Path | None = None
    """A checkpoint to start from (any peer can)."""
    until_epoch: int | None = None
    misbehaviour: Misbehaving | None = None
    """A trainer that misbehaves on purpose (the demo swarm's ``--byzantine``); None for real use."""
    identity: Identity | None = None
    start_paused: bool = False
    """Build everything but wait for ``resume`` before the first microbatch (the engine's way)."""
    access: AccessGate | None = None
    """The gate holding this peer's pass (kept fresh by its owner); required in moderated projects."""
    on_metrics: Callable[[EpochMetrics], None] | None = None
    """A backbone's hook for each completed epoch (e.g. reporting to the coordinator)."""
    on_evidence: Callable[[list[Evidence]], None] | None = None
    """A backbone's hook for the members' new signed accusations (reported likewise)."""
    on_evaluation: Callable[[PeerEvaluation], None] | None = None
    """A backbone's hook for each held-out evaluation of its replica (reported likewise)."""
    publishing: CheckpointPublishing | None = None
    """Where a backbone also publishes its checkpoints (signed), for newcomers."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise TrainingError(f"role must be one of {', '.join(ROLES)}, not {self.role!r}")

    @property
    def project(self) -> str:
        return self.manifest.project.name
