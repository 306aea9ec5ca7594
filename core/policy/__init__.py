"""The scheduling rules, pure: what to do given the conditions, the user's preferences and the time,
and how that reads to the user. The engine and the fake engine (``core.api.testing``) both decide
with these, so a rule or its wording changes in one place.

- ``preferences``  ``Preferences``: the user's settings (when, how much), BOINC-like defaults, checked,
  each with its one-line description.
- ``errors``       ``PreferencesError``: a setting that cannot be used, naming the field.
- ``window``       ``DailyWindow``: the optional daily "HH:MM" to "HH:MM" hours, wrapping midnight.
- ``conditions``   ``Conditions``, ``GpuState``: what the sensors saw; ``None`` is "cannot tell".
- ``codes``        ``StateName`` and ``ReasonCode``: every engine state and reason code, as types.
- ``decide``       ``decide``: the run / throttle / pause ``Decision``, with a code and a reason.
- ``outcome``      ``outcome``: a decision and the peer's ``PeerStatus`` as the engine's state, code
  and reason.
- ``wording``      numbers and times in the reasons' plain words.

Nothing here does I/O or imports anything of ``core`` but ``core.util``: the engine, ``core.api``
and its fake import it, and the sensors that feed it live in ``core.scheduler``.
"""

from core.policy.codes import (
    UNKNOWN_CODE,
    WAITING_CODES,
    EngineCode,
    PolicyCode,
    ReasonCode,
    StateName,
)
from core.policy.conditions import Conditions, GpuState
from core.policy.decide import Action, Decision, decide
from core.policy.errors import PreferencesError
from core.policy.outcome import STARTING, Outcome, PeerStatus, RunnerState, outcome
from core.policy.preferences import CPU_WHEN_IN_USE, Preferences, PreferenceValue
from core.policy.window import DailyWindow
from core.policy.wording import local_time, moment_text, number_text

__all__ = [
    "CPU_WHEN_IN_USE",
    "STARTING",
    "UNKNOWN_CODE",
    "WAITING_CODES",
    "Action",
    "Conditions",
    "DailyWindow",
    "Decision",
    "EngineCode",
    "GpuState",
    "Outcome",
    "PeerStatus",
    "PolicyCode",
    "PreferenceValue",
    "Preferences",
    "PreferencesError",
    "ReasonCode",
    "RunnerState",
    "StateName",
    "decide",
    "local_time",
    "moment_text",
    "number_text",
    "outcome",
]
