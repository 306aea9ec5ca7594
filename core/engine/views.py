"""The engine's answers built from its parts: pure functions from what the engine holds to the
API's dataclasses (statistics from the ledger, progress from the peer's totals, a diloco project's
rounds, a project's info, a finished epoch's event). The settings' answer is ``core.api.settings``,
shared with the fake."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any, Literal

from core.api.events import EpochFinished
from core.api.schema import (
    Amounts,
    DayAmounts,
    Network,
    Progress,
    ProjectInfo,
    Rounds,
    Statistics,
)
from core.engine.projects import ProjectSlot
from core.modes import active_modes
from core.modes.clock import RoundClock
from core.project import TrainingSection
from core.stats import Ledger, WorkDone
from core.swarm import LocalSwarm
from core.worker.events import PeerEpoch, PeerNetwork


def statistics_view(ledger: Ledger, project: str | None, days: int, *, now: float) -> Statistics:
    """Totals, today, this month's traffic and ``days`` days, in the user's local days."""
    offset = time.localtime(now).tm_gmtoff
    days_amounts = ledger.daily(project, days, now=now, utc_offset_seconds=offset)
    return Statistics(
        project=project,
        totals=_amounts(ledger.totals(project)),
        today=_amounts(days_amounts[-1][1]),
        month_bytes=ledger.month_bytes(now=now, utc_offset_seconds=offset),
        days=[DayAmounts(day, _amounts(c)) for day, c in days_amounts],
    )


def progress_view(totals: Mapping[str, Any], session_samples: int) -> Progress:
    """Where the peer and its collaboration stand, from the peer's ``progress()``."""
    return Progress(
        epoch=totals.get("epoch"),
        collaboration_epoch=totals.get("collaboration_epoch"),
        samples_per_second=round(float(totals.get("samples_per_second", 0.0)), 3),
        collaboration_samples_per_second=round(
            float(totals.get("collaboration_samples_per_second", 0.0)), 3
        ),
        peers=int(totals.get("peers", 0)),
        session_samples=session_samples,
    )


def rounds_view(training: TrainingSection, last: PeerEpoch | None, *, now: float) -> Rounds:
    """The project's mode; in a mode whose rounds end on the shared clock (``RoundClock``), how
    far into its round Unix time ``now`` is and what the peer's last exchange sent."""
    mode = active_modes().parse(training.mode)
    if not mode.clock_rounds:
        return Rounds(mode.name)
    clock = RoundClock(training.round_seconds)
    return Rounds(
        mode.name,
        round_seconds=clock.seconds,
        round_elapsed=clock.seconds - clock.until_end(now),
        last_exchange_bytes=last.bytes_sent if last is not None else None,
        work_late=last.late if last is not None else None,
    )


def project_info(slot: ProjectSlot, *, active: bool, swarm: LocalSwarm | None) -> ProjectInfo:
    """An attached project; a ``local_swarm`` one shows where its swarm listens this run."""
    joined = swarm if slot.local_swarm else None
    return ProjectInfo(
        name=slot.name,
        description=slot.description,
        manifest=str(slot.manifest),
        initial_peers=list(joined.initial_peers if joined else slot.initial_peers),
        data_base=joined.data_base if joined else slot.data_base,
        device=slot.device,
        active=active,
        local_swarm=slot.local_swarm,
        source_url=slot.source_url,
        project_key=slot.project_key,
        manifest_version=slot.manifest_version,
        update_refused=slot.update_refused,
    )


def epoch_finished(project: str, event: PeerEpoch) -> EpochFinished:
    """The peer's ``PeerEpoch`` (one step of its own) as the API's event."""
    return EpochFinished(
        project, event.epoch, event.samples, event.group_size, event.averaged, event.seconds
    )


def network_view(network: PeerNetwork) -> Network:
    """The peer's ``PeerNetwork`` as the API's ``Network`` (an unknown verdict reads "unknown")."""
    verdicts: dict[str, Literal["public", "private"]] = {"public": "public", "private": "private"}
    return Network(
        reachability=verdicts.get(network.reachability, "unknown"),
        public_address=network.public_address,
        checked_at=network.checked_at,
        peers=network.peers,
        direct=network.direct,
        punched=network.punched,
        relayed=network.relayed,
    )


def network_lines(details: Mapping[str, Any]) -> list[str]:
    """The reachability check's details (``ReachabilityMonitor.diagnostics``), one fact a line."""
    lines = [
        f"reachability: {details.get('state')} (public address: {details.get('public_address')})",
        (
            f"checks: {details.get('checks')}, last at {details.get('checked_at')}; "
            f"dial-back peers connected: {details.get('dialback_peers')}, "
            f"agreeing answers needed: {details.get('needed')}"
        ),
    ]
    for seen in details.get("observed", ()):
        lines.append(
            f"observed at {seen['ip']} by {seen['observers']} network(s), {seen['peers']} peer(s)"
        )
    for answer in details.get("answers", ()):
        verdict = "reached" if answer["reachable"] else "could not reach"
        lines.append(f"{answer['peer']} {verdict} {answer['address']} ({answer['age_s']:g} s ago)")
    lines.extend(f"last check: {reason}" for reason in details.get("reasons", ()))
    return lines


def _amounts(c: WorkDone) -> Amounts:
    return Amounts(**dataclasses.asdict(c))
