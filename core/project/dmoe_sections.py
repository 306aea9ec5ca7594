"""The sections of a ``dmoe`` manifest: the expert grid, the experts, their servers, the trainers
that call them, and the data. Each is a frozen dataclass that validates itself (``FieldCheck``);
every number has an upper bound, written in its field's docstring.

This package sits below ``core.moe`` and never imports torch, so the choices repeated here (expert
kinds and optimizers, the grid prefix's spelling) are the ones ``core.moe.server.experts`` and
``core.moe.grid`` accept; a test keeps them equal.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

from core.project.validation import FieldCheck

GRID_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
"""As ``core.moe.grid``: no dots, which separate a uid's indices."""
EXPERT_KINDS = ("ffn", "linear")
EXPERT_OPTIMIZERS = ("adam", "sgd")
DATASETS = ("digits",)
"""``digits``: the 8x8 handwritten digits in ``resources/digits`` (64 features, 10 classes)."""

MAX_GRID_DEPTH = 4
MAX_GRID_WIDTH = 4096
"""Indices in one grid dimension."""
MAX_GRID_EXPERTS = 65536
"""Expert slots in a whole grid: what choosing free slots may look up, at most."""
MAX_EXPERT_WIDTH = 65536
MAX_BATCH = 65536
"""Samples in one expert call or one trainer batch."""
MAX_QUEUE = 2**20
"""Samples waiting for one expert and method."""
MAX_TTL = 86400.0
MAX_CHECKPOINT_INTERVAL = 86400.0
MAX_UPDATES = 10**9
MAX_KEPT = 1000
MAX_EXPERTS_PER_SERVER = 4096
MAX_K = 1024
"""Experts per input (``k``) and the beam's width."""
MAX_TIMEOUT = 3600.0
MAX_CONCURRENCY = 1024


@dataclass(frozen=True)
class GridSection:
    KEY: ClassVar[str] = "grid"
    prefix: str
    """The grid's name, the first part of every uid (``ffn`` in ``ffn.3.17``): 1 to 64 letters,
    digits, '_' or '-', starting with a letter or '_'."""
    shape: tuple[int, ...]
    """Indices per dimension: 1 to 4 dimensions of 1 to 4096 each, at most 65536 experts."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.matches(
            "prefix",
            GRID_PREFIX,
            "1 to 64 letters, digits, '_' or '-', starting with a letter or '_'",
        )
        if not 1 <= len(self.shape) <= MAX_GRID_DEPTH:
            check.fail(
                "shape", f"must have 1 to {MAX_GRID_DEPTH} dimensions, got {len(self.shape)}"
            )
        for i, width in enumerate(self.shape):
            if not 1 <= width <= MAX_GRID_WIDTH:
                check.fail(f"shape[{i}]", f"must be in [1, {MAX_GRID_WIDTH}], got {width}")
        if self.size > MAX_GRID_EXPERTS:
            check.fail("shape", f"must hold at most {MAX_GRID_EXPERTS} experts, got {self.size}")

    @property
    def size(self) -> int:
        """How many expert slots the grid has."""
        return math.prod(self.shape)


@dataclass(frozen=True)
class ExpertSection:
    """What every expert of the grid is (``core.moe.server.experts.ExpertSpec``'s fields)."""

    KEY: ClassVar[str] = "expert"
    kind: str = "ffn"
    """``ffn`` (residual feed-forward block, hidden -> 4*hidden -> hidden) or ``linear``."""
    hidden: int = 64
    """Input and output width, 1 to 65536."""
    optimizer: str = "adam"
    """Each expert's own optimizer, stepped once per backward batch: ``adam`` or ``sgd``."""
    lr: float = 0.001
    """Above 0, at most 10."""
    max_batch: int = 256
    """Samples a server computes in one batch, 1 to 65536."""
    max_grad_norm: float = 1.0
    """The longest output gradient one sample of a call may bring (L2 norm), 0 to 1e6; longer
    rows are scaled down to it, so that one caller cannot move an expert that every trainer shares
    as far as many honest calls would. Trainers average their loss over the batch, which keeps an
    honest row far below 1. 0: no clipping."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("kind", EXPERT_KINDS)
        check.in_range("hidden", 1, MAX_EXPERT_WIDTH)
        check.one_of("optimizer", EXPERT_OPTIMIZERS)
        check.in_range("lr", 0.0, 10.0, low_open=True)
        check.in_range("max_batch", 1, MAX_BATCH)
        check.in_range("max_grad_norm", 0.0, 1e6)


@dataclass(frozen=True)
class ServerSection:
    """How expert servers run: announcements, batching, checkpoints, and how many experts each
    volunteer hosts."""

    KEY: ClassVar[str] = "server"
    announce_ttl: float = 30.0
    """Seconds an announcement lives (refreshed every third of it): 1 to 86400. A server that
    leaves is no longer found after this."""
    max_wait: float = 0.01
    """Seconds the oldest waiting call may wait for a fuller batch: 0 to 60."""
    max_queue: int = 1024
    """Samples waiting per expert and method before calls are answered "busy": 1 to 2**20, and
    at least ``expert.max_batch``."""
    checkpoint_interval: float = 60.0
    """Seconds between checkpoints of an expert that learned since its last one: 0 to 86400;
    0: only when the server stops (and by ``checkpoint_updates``)."""
    checkpoint_updates: int = 0
    """Also checkpoint an expert after this many updates since its last one: 0 to 10**9; 0: by
    time only."""
    keep_checkpoints: int = 3
    """Checkpoints kept per expert, newest first: 1 to 1000."""
    experts_per_server: int = 4
    """Experts a server hosts when none are named (the engine's, ``barnraise experts`` without
    ``--uids``): 1 to 4096, at most the grid's size."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("announce_ttl", 1.0, MAX_TTL)
        check.in_range("max_wait", 0.0, 60.0)
        check.in_range("max_queue", 1, MAX_QUEUE)
        check.in_range("checkpoint_interval", 0.0, MAX_CHECKPOINT_INTERVAL)
        check.in_range("checkpoint_updates", 0, MAX_UPDATES)
        check.in_range("keep_checkpoints", 1, MAX_KEPT)
        check.in_range("experts_per_server", 1, MAX_EXPERTS_PER_SERVER)


@dataclass(frozen=True)
class TrainerSection:
    """How trainers use the grid (Learning@home's DMoE layer)."""

    KEY: ClassVar[str] = "trainer"
    k: int = 4
    """Experts each input is sent to: 1 to 1024, at most the grid's size."""
    k_min: int = 1
    """Fewest experts that must answer for an input to count: 1 to ``k``."""
    beam_size: int = 4
    """Prefixes the beam search keeps per depth: ``k`` to 1024 (wider finds more live experts)."""
    forward_timeout: float = 5.0
    """Seconds a forward call may take before its expert is dropped: above 0, at most 3600."""
    backward_timeout: float = 10.0
    """The same for backward calls."""
    batch_size: int = 32
    """Samples per training step: 1 to 65536, at most ``expert.max_batch``."""
    concurrency: int = 4
    """Training steps in flight at once (asynchronous updates): 1 to 1024."""
    lr: float = 0.001
    """The trainer's own parameters' learning rate (gating and local layers): above 0, at most 10."""
    balancing: float = 0.01
    """Weight of the load-balancing loss added to the training loss (spreads inputs over the
    experts; 0: none): 0 to 100."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.in_range("k", 1, MAX_K)
        check.in_range("k_min", 1, MAX_K)
        if self.k_min > self.k:
            check.fail("k_min", f"must be at most trainer.k ({self.k}), got {self.k_min}")
        check.in_range("beam_size", 1, MAX_K)
        if self.beam_size < self.k:
            check.fail("beam_size", f"must be at least trainer.k ({self.k}), got {self.beam_size}")
        check.in_range("forward_timeout", 0.0, MAX_TIMEOUT, low_open=True)
        check.in_range("backward_timeout", 0.0, MAX_TIMEOUT, low_open=True)
        check.in_range("batch_size", 1, MAX_BATCH)
        check.in_range("concurrency", 1, MAX_CONCURRENCY)
        check.in_range("lr", 0.0, 10.0, low_open=True)
        check.in_range("balancing", 0.0, 100.0)


@dataclass(frozen=True)
class DmoeDataSection:
    KEY: ClassVar[str] = "data"
    dataset: str = "digits"
    """What trainers learn from: ``digits`` (shipped with Barnraise, ``resources/digits``)."""

    def __post_init__(self) -> None:
        check = FieldCheck(self, self.KEY)
        check.one_of("dataset", DATASETS)
