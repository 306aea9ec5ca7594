"""One training mode's spec: its name, what it promises people, the rules and costs the layers
below training need, and where its training code lives.

A ``ModeSpec`` is plain data plus pure functions over a manifest's numbers, so the manifest, the
engine's estimate, the coordinator's page, the command lines and the app read it without torch.
What the mode builds for a trainer and for the backbone is torch code in its own sub-package of
``core.training``; the spec names that module (``implementation``), as a package's entry point
does, and ``core.training.mode`` loads it when a peer starts. That keeps the table at the foot of
the stack, below everything that lists modes, while a new mode stays one sub-package and one row.

The hooks read the manifest through the protocols below, which say which knobs a mode may read:
a section of ``core.project`` satisfies them as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol


class TrainingKnobs(Protocol):
    """The ``[training]`` values a mode's rules, costs and description read."""

    @property
    def mode(self) -> str: ...
    @property
    def target_batch_size(self) -> int: ...
    @property
    def microbatch_size(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def inner_lr(self) -> float: ...
    @property
    def average_state_every(self) -> int: ...
    @property
    def delay_parameter_updates(self) -> bool: ...
    @property
    def round_seconds(self) -> float: ...
    @property
    def outer_momentum(self) -> float: ...
    @property
    def residual_decay(self) -> float: ...
    @property
    def work_checks(self) -> float: ...
    @property
    def overlap(self) -> bool: ...


class AveragingKnobs(Protocol):
    """The ``[averaging]`` values a mode's rules and costs read."""

    @property
    def codec(self) -> str: ...
    @property
    def sparse(self) -> bool:
        """The codec sends a few values of each block and keeps the rest for the next round."""
        ...

    @property
    def target_group_size(self) -> int: ...
    @property
    def matchmaking_time(self) -> float: ...


class CodecCost(Protocol):
    """What an estimate needs of a codec (``core.codecs.Codec`` is one)."""

    @property
    def bytes_per_value(self) -> float: ...

    def for_sum(self, contributions: int) -> CodecCost: ...


@dataclass(frozen=True)
class TrafficInputs:
    """What the engine knows before joining (``core.engine.join.resource_use``): the model's size
    and this computer's speed, worked out without torch, and the swarm it assumes."""

    training: TrainingKnobs
    averaging: AveragingKnobs
    parameters: int
    state_values: int
    """Values a state round moves: the parameters and the optimizer's moments."""
    samples_per_second: float
    """What one computer like this one trains, about."""
    peers: int
    """The swarm the estimate assumes: this many computers like this one."""
    codec: CodecCost
    """The codec rounds travel in, as the peer builds it (``topk`` at the manifest's density)."""
    min_round_seconds: float
    """A round of averaging never takes less than its matchmaking plus this."""


@dataclass(frozen=True)
class Traffic:
    bytes_per_hour: float
    """Sent and received together, while contributing."""
    note: str
    """The estimate in words, for the preview before joining (starts with "network:")."""


Problem = tuple[str, str]
"""A manifest key (``training.outer_momentum``) and why its value is refused."""


@dataclass(frozen=True, eq=False)
class ModeSpec:
    """A training mode: compared by identity, so a spec is the one in its table."""

    name: str
    """What ``[training] mode`` and ``--mode`` say: lower case."""
    summary: str
    """For organizers, one sentence: how the peers train together in this mode."""
    for_people: str
    """For volunteers, one sentence: what their computer does (the dashboard's round line)."""
    implementation: str
    """The module under ``core.training`` whose ``MODE`` builds a trainer's and the backbone's
    parts (``core.training.mode.Mode``); imported when a peer starts, with torch."""
    check: Callable[[TrainingKnobs, AveragingKnobs], Iterator[Problem]]
    """The manifest's values this mode refuses (beyond each key's own range)."""
    traffic: Callable[[TrafficInputs], Traffic]
    """A contributing peer's network use, estimated before joining."""
    describe: Callable[[TrainingKnobs], str]
    """How the model is trained, for the project page: the end of the sentence that begins
    "<the model>, trained together by its volunteers" (with its leading comma or space)."""
    epoch: Callable[[TrainingKnobs], str]
    """What one epoch is, for the exported model's card: the end of the sentence that begins
    "Each epoch is" (without its full stop)."""
    learning_rate: Callable[[TrainingKnobs], float] = lambda training: training.lr
    """The rate the peers' optimizer steps at: ``training.lr`` as given, unless the mode's step
    takes another batch than the ``target_batch_size`` that ``lr`` was chosen for."""
    clock_rounds: bool = False
    """Its rounds end together on the shared wall clock (``training.round_seconds``): the
    dashboard shows how far into the round it is and what the last exchange sent."""
    follows_rollbacks: bool = False
    """Its peers follow the moderators' rollback orders (a coordinator signs none otherwise)."""
    checks_work: Callable[[TrainingKnobs], bool] = lambda training: False
    """Whether its backbone checks the trainers' work by computing it again, with these values
    (``training.work_checks``): that needs a deterministic forward pass (no dropout)."""
    misbehaving_demo: bool = False
    """The demo's Byzantine peers (``barnraise swarm --byzantine``) can attack its rounds."""

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower() or not self.name.isidentifier():
            raise ValueError(f"a mode's name is a lower-case word, got {self.name!r}")
        if not all(part.isidentifier() for part in self.implementation.split(".")):
            raise ValueError(f"mode {self.name!r} names no module for its training code")

    def __repr__(self) -> str:
        return f"ModeSpec({self.name!r})"

    # compared by identity, so a copy (a deep-copied config) must be the spec itself
    def __copy__(self) -> ModeSpec:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> ModeSpec:
        return self
