"""The events a real engine keeps after a morning of work, for ``FakeEngine``'s event log.

Its state changes are the real policy's (``core.policy``): decided from the sample conditions of
each moment and worded as the engine words them, so the log never shows a reason the engine would
not give.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt

from core.api.events import (
    CollaborationEpoch,
    EpochFinished,
    ErrorRaised,
    EventData,
    PeersSeen,
    StateChanged,
)
from core.api.schema import EpochPoint
from core.api.testing.sample_data import CALM
from core.policy import STARTING, Conditions, PeerStatus, Preferences, decide, outcome


def morning(project: str, history: list[EpochPoint], now: float) -> list[tuple[float, EventData]]:
    """(time, event) pairs, oldest first: joining the swarm 90 minutes ago, a stretch at the
    computer (a GPU project waits), the peers seen, a lost averaging part, the last epochs."""
    at_work = dataclasses.replace(CALM, uses_gpu=True)
    moments: list[tuple[float, Conditions, PeerStatus]] = [
        (5400, at_work, PeerStatus("starting")),
        (5390, at_work, PeerStatus("ready")),
        (3600, dataclasses.replace(at_work, idle_seconds=20.0), PeerStatus("ready")),
        (2400, at_work, PeerStatus("ready")),
    ]
    steps: list[tuple[float, EventData]] = []
    before = STARTING
    for ago, conditions, peer in moments:
        when = _dt.datetime.fromtimestamp(now - ago).astimezone()
        state = outcome(decide(conditions, Preferences(contribute=True), when), peer)
        steps.append((now - ago, StateChanged(state.state, before.state, state.code, state.reason)))
        before = state
    steps += [
        (now - 5000, PeersSeen(project, 4)),
        (now - 1800, PeersSeen(project, 5)),
        (
            now - 900,
            ErrorRaised(
                f"project {project}", "averaging round 146 lost 1 of 5 parts (a peer left)"
            ),
        ),
    ]
    for point in history[-6:]:
        steps.append((point.time, CollaborationEpoch(project, point)))
        steps.append(
            (point.time + 1, EpochFinished(project, point.epoch, 1024, point.peers, True, 3.2))
        )
    return sorted(steps, key=lambda step: step[0])
