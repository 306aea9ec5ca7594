"""Whether a project's model can fit this computer's memory, judged from its manifest alone.

A manifest may describe any model its limits allow, up to a couple of hundred billion
parameters: far more than any volunteer's computer holds. Building it would only fail, after
minutes of allocation and with the computer's memory taken meanwhile (swapping, other programs
killed). So the model is measured first, from the manifest's numbers (``resource_use``'s
``training_state``: the weights in fp32 and the optimizer's state), against this computer's
memory (``core.worker.memory``):

- **Refused** when the estimate exceeds the largest memory here, the RAM or the GPU's, whichever
  is larger: no part of this computer can hold it. Attaching fails (nothing is written, the other
  projects and the settings stay as they were), a peer does not start, and the preview says so.
- **Warned** above ``WARN_FRACTION`` of the memory of what it would train on (the GPU's, else the
  RAM): training also needs the gradients, the activations and room for other programs, so it may
  run out of memory. It is said in the preview and logged, not refused: the estimate is rough.

The margin is deliberately loose: only what surely cannot fit is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.engine.errors import DoesNotFit
from core.engine.join.resource_use import hosted_experts, training_state
from core.project import DmoeManifest
from core.project.kinds import AnyManifest
from core.util.amounts import count_text, size_text
from core.worker.memory import MemoryHere

log = logging.getLogger(__name__)

WARN_FRACTION = 0.5
"""A model whose weights and optimizer state take more than this share of the memory it trains
in is warned about (the rest must hold the gradients, the activations and other programs)."""


@dataclass(frozen=True)
class Fit:
    """A project's model measured against this computer's memory."""

    project: str
    parameters: int
    needed_bytes: float
    """The weights and the optimizer's state, as the project estimates them."""
    memory: MemoryHere
    experts: int = 0
    """A dmoe project: how many experts this computer would host (``parameters`` are theirs);
    0: a collaborative project."""

    @property
    def fits(self) -> bool:
        """False when the estimate exceeds the largest memory here (unknown memory: it fits)."""
        largest = self.memory.largest
        return largest is None or self.needed_bytes <= largest

    @property
    def tight(self) -> bool:
        """It fits, but takes more than ``WARN_FRACTION`` of the memory it would train in."""
        training = self.memory.training
        return self.fits and training is not None and self.needed_bytes > WARN_FRACTION * training

    def figures(self) -> str:
        """ "172 billion parameters, whose weights and optimizer state need about 2.06 TB"."""
        hosted = f"the experts it would host ({self.experts}) have"
        what = hosted if self.experts else "its model has"
        per = self.needed_bytes / self.parameters if self.parameters else 0.0
        return (
            f"{what} {count_text(self.parameters)} parameters, whose weights and optimizer state need "
            f"about {size_text(self.needed_bytes)} ({per:g} bytes a parameter)"
        )

    def refusal(self) -> str:
        return (
            f"project {self.project!r} cannot train on this computer: {self.figures()}, more "
            f"than this computer's memory ({self.memory.describe()})"
        )

    def warning(self) -> str:
        return (
            f"{self.figures()}, more than {WARN_FRACTION:.0%} of this computer's memory "
            f"({self.memory.describe()}): training may run out of memory"
        )


def model_fit(manifest: AnyManifest, memory: MemoryHere, *, experts: int | None = None) -> Fit:
    """``experts``: how many experts a dmoe project's server hosts; None: the manifest's
    ``server.experts_per_server`` (``hosted_experts``)."""
    parameters, needed = training_state(manifest, experts)
    hosted = hosted_experts(manifest, experts) if isinstance(manifest, DmoeManifest) else 0
    return Fit(manifest.project.name, parameters, needed, memory, hosted)


def check_fit(
    manifest: AnyManifest, memory: MemoryHere, *, then: str = "", experts: int | None = None
) -> Fit:
    """The fit of ``manifest``'s model (of a dmoe project: of ``experts`` hosted experts, as
    ``model_fit``); ``DoesNotFit``, with the figures and ``then`` (what became of the command:
    "nothing was attached"), when it cannot fit. A tight fit is logged."""
    fit = model_fit(manifest, memory, experts=experts)
    if not fit.fits:
        raise DoesNotFit(fit.refusal() + (f"; {then}" if then else ""))
    if fit.tight:
        log.warning("project %s: %s", fit.project, fit.warning())
    return fit


def preview_note(fit: Fit) -> str | None:
    """The preview's note on memory: refused or tight; None when it fits with room."""
    if not fit.fits:
        return (
            f"memory: {fit.figures()}, more than this computer's memory "
            f"({fit.memory.describe()}): it cannot train here, and joining is refused"
        )
    if fit.tight:
        return f"memory: {fit.warning()}"
    return None
