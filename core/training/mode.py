"""Mode: what a training mode builds for a peer, the torch half of its spec (``core.modes``).

A mode's spec names a module (``ModeSpec.implementation``, one sub-package of ``core.training``
per mode: ``dedloc``, ``diloco``) whose ``MODE`` satisfies ``Mode``: how long its rounds may wait
for a group, how reducers screen its chunks, the optimizer a trainer drives (``ModeOptimizer``)
and what the backbone runs (``Backbone``). The project peer (``core.training.peer``) asks
``mode_of`` for the manifest's mode and builds whatever it returns: it never names a mode itself,
so a new mode is its sub-package and one row of the table.

Both kinds of part take what they need from ``PeerParts`` (the backbone's from
``BackboneParts``): the peer's settings, its state, its links to the collaboration and where its
events go. What every mode's optimizer shares of taking part (records, pause, waits, the state
offer) is ``core.training.participation``.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.averaging.robust.aggregation import AggregationConfig
from core.modes import ModeSpec, active_modes
from core.project import Manifest
from core.training.checkpoints import CheckpointStore
from core.training.credit.checks import CheckRecord, Recorder
from core.training.credit.metrics import EpochMetrics
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.progress import CollaborationView
from core.training.settings import PeerSettings
from core.training.state import TrainingState
from core.training.trainer import LossFn
from core.util.errors import ConfigError
from core.worker.events import PeerEpoch, PeerEvent


class ModeOptimizer(Protocol):
    """What the trainer's loop (``Trainer``), its role and the engine drive, in any mode."""

    on_waiting: Callable[[str | None], None] | None
    """Told the reason whenever the peer starts or stops waiting for the collaboration."""

    @property
    def epoch(self) -> int: ...

    @property
    def speed(self) -> float:
        """Our recent samples per second."""
        ...

    @property
    def waiting_for(self) -> str | None:
        """Why we cannot contribute now, or None."""
        ...

    @property
    def paused(self) -> bool: ...

    @property
    def offloadable(self) -> LocalWork | None:
        """What a pause moves off the device besides the model (None: nothing)."""
        ...

    def tryout_weights(self) -> Mapping[str, np.ndarray] | None:
        """What "Try the model" answers from, where the model's own parameters are not ``epoch``'s:
        the parameters by name (``named_parameters``; flat arrays will do), read on the training
        thread, where the copy is taken (they may be live arrays). None: the model's own."""
        ...

    async def start(self) -> None: ...

    async def step(self, batch_size: int, loss: float | None = None) -> PeerEpoch | None:
        """One microbatch whose gradients are in ``.grad``; a finished epoch's report, or None."""
        ...

    def keep_receipts(self, precision: str) -> Recorder | None:
        """Keep (and serve) a receipt of each microbatch computed in ``precision`` for the
        backbone's work checks; what the training loop calls after each backward pass, or None
        where the mode's work is not checked."""
        ...

    def fresh(self, batch: Any) -> bool:
        """On the training thread, before the forward pass: False for a batch this peer already
        computed at the same parameters in the open epoch (its receipts would count it twice; the
        training loop draws another), True where no receipts are kept."""
        ...

    def view(self) -> CollaborationView: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    def interrupt(self) -> None:
        """Give up any wait at once: the peer is stopping."""
        ...

    async def close(self) -> None: ...


class Backbone(Protocol):
    """The backbone's work in a mode: keep, serve and checkpoint the model, report epochs."""

    async def run(self, stop: asyncio.Event) -> None: ...


@dataclass(frozen=True)
class Matchmaking:
    """How long a round's leader waits for a group: at least ``least`` (unless everyone it
    expects is in), at most ``most`` seconds."""

    least: float
    most: float


@dataclass(frozen=True)
class PeerParts:
    """What a mode builds a peer's part from."""

    settings: PeerSettings
    state: TrainingState
    """The model and its optimizer, on the training device (the backbone's: on the CPU)."""
    links: PeerLinks
    on_event: Callable[[PeerEvent], None]
    loss: LossFn | None = None
    """The loss of one batch, for a mode whose peers compute others' work again (the backbone's
    checks; a trainer replaying rounds for it)."""
    replica: Callable[[], TrainingState] | None = None
    """A new training state built like a trainer's, for a mode whose peers compute others' work
    again on a model of their own."""

    @property
    def manifest(self) -> Manifest:
        return self.settings.manifest


@dataclass(frozen=True, kw_only=True)
class BackboneParts(PeerParts):
    checkpoints: CheckpointStore | None
    """Where the backbone keeps its checkpoints (None: it writes none)."""
    report: Callable[[EpochMetrics], None]
    """Each completed epoch's metrics (logged, told, reported, evaluated)."""
    on_check: Callable[[CheckRecord], None] | None = None
    """Each work check the backbone makes (logged for the audit)."""


@runtime_checkable
class Mode(Protocol):
    def matchmaking(self, manifest: Manifest) -> Matchmaking: ...

    def aggregation(self, base: AggregationConfig) -> AggregationConfig:
        """How reducers treat this mode's chunks: the manifest's ``base`` with whatever the mode's
        updates call for (``AggregationConfig.opposed_from``: only updates over many steps agree in
        direction across honest members)."""
        ...

    def trainer(self, parts: PeerParts) -> ModeOptimizer:
        """The optimizer of a trainer or client (``parts.settings.role``)."""
        ...

    def backbone(self, parts: BackboneParts) -> Backbone: ...


def mode_of(manifest: Manifest) -> Mode:
    """The training code of the manifest's mode (in the table in force), imported now."""
    return load_mode(active_modes().parse(manifest.training.mode))


def load_mode(spec: ModeSpec) -> Mode:
    """``spec``'s ``MODE``; ``ConfigError`` when its module is missing or has none."""
    try:
        module = importlib.import_module(spec.implementation)
    except ImportError as exc:
        raise ConfigError(
            f"training mode {spec.name!r}: its code ({spec.implementation}) cannot be loaded: {exc}"
        ) from exc
    mode = getattr(module, "MODE", None)
    if not isinstance(mode, Mode):
        raise ConfigError(
            f"training mode {spec.name!r}: {spec.implementation} has no MODE that builds a "
            "trainer and a backbone"
        )
    return mode
