"""Training modes: how the peers of a project train one model together, one spec per mode in one
table that every list of modes derives from.

A mode's spec (``ModeSpec``) holds its name, a sentence for organizers and one for volunteers, the
manifest's values it refuses, its network estimate, its sentence on the project page, whether its
rounds end on the shared clock, whether it follows rollback orders and hosts the demo's Byzantine
peers, and the module of ``core.training`` that builds its trainer and its backbone. ``MODES`` is
the built-in table. The manifest's allowed modes and their rules (``core.project``), ``--mode``
(``core.cli``), the engine's estimate and dashboard (``core.engine``), the app's round line
(through ``core.api``), the project page (``core.coordinator.page``) and the peer's training
(``core.training.mode``) all read it: adding a mode is adding one row and one sub-package of
``core.training``.

Why a package at the foot of the stack: the app reads it through ``core.api``, which may import
nothing above ``util``, ``config`` and ``policy`` (and this); the manifest reads it too. So it
imports only ``core.util``, reads manifests through protocols, and names its training code rather
than importing it. The table in force works as the codecs' does (``core.codecs.active``).

- ``spec``     ``ModeSpec``, the knobs its hooks read (``TrainingKnobs``, ``AveragingKnobs``,
               ``CodecCost``), ``TrafficInputs`` and ``Traffic``.
- ``table``    ``ModeTable``: immutable, by name; ``with_mode``.
- ``builtin``  the shipped modes (``DEDLOC``, ``DILOCO``), their rules, estimates and sentences,
               and ``MODES``.
- ``active``   the table in force: ``active_modes``, ``using_modes``.
- ``clock``    ``RoundClock``: rounds on the wall clock every peer shares, so nobody waits for the
               slowest (the rounds of a mode with ``clock_rounds``).
"""

from core.modes.active import active_modes, using_modes
from core.modes.builtin import DEDLOC, DILOCO, MODES, RESIDUAL_DECAY, WORK_CHECKS
from core.modes.spec import ModeSpec, Traffic, TrafficInputs
from core.modes.table import ModeTable

__all__ = [
    "DEDLOC",
    "DILOCO",
    "MODES",
    "RESIDUAL_DECAY",
    "WORK_CHECKS",
    "ModeSpec",
    "ModeTable",
    "Traffic",
    "TrafficInputs",
    "active_modes",
    "using_modes",
]
