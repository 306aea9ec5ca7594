"""The engine's state names and reason codes: one type each, for the policy, the engine, the API and
its clients, so that a misspelt code is a type error wherever it is written.

A code is machine-readable; the reason that travels with it says the same in plain words. A client
built before a newer engine added a code reads that code as ``UNKNOWN_CODE`` (``core.api.codec``
decodes it so) and shows the engine's reason, which still says what it is.
"""

from __future__ import annotations

from typing import Final, Literal

StateName = Literal["idle", "paused", "waiting", "starting", "running", "throttled", "error"]
"""idle: no project; paused: by the user, a snooze, the battery or the network cap; waiting: for the
user to leave, for other programs, memory or the time window; starting: joining the swarm;
running / throttled: computing (throttled: part of the time); error: the project's peer failed."""

PolicyCode = Literal[
    "running",
    "throttled",
    "user_active",
    "no_project",
    "not_opted_in",
    "user_paused",
    "snoozed",
    "on_battery",
    "outside_window",
    "network_cap",
    "low_memory",
    "gpu_hot",
    "busy",
]
"""The codes of ``decide``'s decisions."""

EngineCode = Literal["starting", "login_required", "peer_failed", "collaboration"]
"""The codes the engine adds: before its first decision, when the project's peer cannot run, and
when it runs but waits for the collaboration (the state cannot be loaded)."""

ReasonCode = Literal[PolicyCode, EngineCode, "unknown"]
"""Every code an engine state carries; ``"unknown"`` only ever on the client's side (see above)."""

UNKNOWN_CODE: Final = "unknown"

WAITING_CODES: Final[frozenset[PolicyCode]] = frozenset(
    {"user_active", "busy", "low_memory", "gpu_hot", "outside_window"}
)
"""Pauses that end when the computer or the clock changes (state ``waiting``), not by the user's
hand (state ``paused``)."""
