"""PeerEvents: what the engine does with the events of its project's peer.

``PeerEpoch``: one step of our own, counted in the ledger (an averaging round joined when the group
was more than us), kept as a landed epoch (``credit``: the engine's own count, epoch by epoch, to
compare with the coordinator's credit) and published. ``PeerMetrics``: a completed epoch of the
whole collaboration, kept as a point of the loss curve and published. ``PeerEvaluation``: the
backbone's held-out evaluation, kept beside the curve and published. ``PeerFailed`` and
``PeerReady``: published or acted on at once (the scheduler loop is woken, so the engine's state
follows without waiting for the next tick). ``PeerWaiting``: the peer started or stopped waiting for
the collaboration; the loop is woken so that the engine's state says so at once. ``PeerNetwork``:
the reachability check's new verdict, published. ``PeerRolledBack``: the moderators' rollback
reached our replica; published, for the event log to say so.
"""

from __future__ import annotations

import asyncio

from core.api.events import (
    CollaborationEpoch,
    ErrorRaised,
    HeldOutMeasured,
    NetworkChanged,
    RolledBack,
)
from core.engine.credit import LandedEpochs
from core.engine.events import EventBus
from core.engine.history import History, held_out_from_event, point_from_event
from core.engine.metering import Metering
from core.engine.views import epoch_finished, network_view
from core.stats import WorkDone
from core.worker.events import (
    PeerEpoch,
    PeerEvaluation,
    PeerEvent,
    PeerFailed,
    PeerMetrics,
    PeerNetwork,
    PeerReady,
    PeerRolledBack,
    PeerStopped,
    PeerWaiting,
)


class PeerEvents:
    def __init__(
        self,
        events: EventBus,
        wake: asyncio.Event,
        metering: Metering,
        curve: History,
        landed: LandedEpochs,
    ) -> None:
        self._events = events
        self._wake = wake
        self._metering = metering
        self._curve = curve
        self._landed = landed

    def handle(self, project: str, event: PeerEvent) -> None:
        if isinstance(event, PeerEpoch):
            rounds = 1 if event.group_size > 1 else 0
            self._metering.count(project, WorkDone(epochs=1, rounds=rounds))
            self._landed.record(project, event)
            self._events.publish(epoch_finished(project, event))
        elif isinstance(event, PeerMetrics):
            point = point_from_event(event)
            if point is not None and self._curve.record(project, point):
                self._events.publish(CollaborationEpoch(project, point))
        elif isinstance(event, PeerEvaluation):
            held_out = held_out_from_event(event)
            if held_out is not None and self._curve.record_held_out(project, held_out):
                self._events.publish(HeldOutMeasured(project, held_out))
        elif isinstance(event, PeerFailed):
            self._events.publish(ErrorRaised(f"project {project}", event.message))
            self._wake.set()
        elif isinstance(event, PeerReady | PeerWaiting):
            self._wake.set()  # the trainer exists now: apply the decision (threads, state)
        elif isinstance(event, PeerNetwork):
            self._events.publish(NetworkChanged(project, network_view(event)))
        elif isinstance(event, PeerRolledBack):
            self._events.publish(RolledBack(project, event.to_epoch, event.epoch, event.reason))
        elif isinstance(event, PeerStopped):
            pass  # the runner stopped it, and knows
