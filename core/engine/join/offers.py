"""Project offers: what the user may pick on first run, or attach later.

First the demo swarms running on this computer (``barnraise swarm``), each with a one-line note
("2 trainers and a backbone on this computer since 14:02; needs an account"), then the projects
already attached. A running swarm whose project is attached already is offered once, as attached:
attaching it a second time could only be refused.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from pathlib import Path

from core.api.schema import ProjectKind, ProjectOffer
from core.engine.projects import ProjectSlot
from core.project import DmoeManifest, ManifestError, load_any_manifest
from core.swarm import LocalSwarm
from core.util.blocking import BlockingPool


async def project_offers(
    swarms: Sequence[LocalSwarm],
    slots: Sequence[ProjectSlot],
    active: str | None,
    *,
    now: float,
    blocking: BlockingPool,
) -> list[ProjectOffer]:
    attached = {slot.name for slot in slots}
    offers = [swarm_offer(s, now=now) for s in swarms if s.project not in attached]
    # the manifests say whether a project is moderated, and its kind; reading them is file work
    facts = await blocking.run(_manifest_facts, [slot.manifest for slot in slots])
    for slot, (moderated, kind, problem) in zip(slots, facts, strict=True):
        swarm = next((s for s in swarms if s.project == slot.name), None)
        offer = attached_offer(slot, slot.name == active, moderated, problem, swarm)
        offers.append(dataclasses.replace(offer, kind=kind))
    return offers


def swarm_offer(swarm: LocalSwarm, *, now: float) -> ProjectOffer:
    return ProjectOffer(
        name=swarm.project,
        description=swarm.description,
        manifest=str(swarm.manifest),
        source="local_swarm",
        initial_peers=list(swarm.initial_peers),
        data_base=swarm.data_base,
        note=swarm_note(swarm, now=now),
        moderated=swarm.moderated,
    )


def swarm_note(swarm: LocalSwarm, *, now: float) -> str:
    """'2 trainers and a backbone on this computer since 14:02; needs an account'."""
    if swarm.trainers == 0:
        who = "a backbone"
    else:
        who = f"{swarm.trainers} trainer{'s' if swarm.trainers != 1 else ''} and a backbone"
    note = f"{who} on this computer since {_moment(swarm.started, now)}"
    return note + ("; needs an account" if swarm.moderated else "")


def attached_offer(
    slot: ProjectSlot,
    active: bool,
    moderated: bool,
    problem: str | None,
    swarm: LocalSwarm | None,
) -> ProjectOffer:
    parts = ["attached" + (", contributing to it" if active else "")]
    if slot.local_swarm:
        parts.append(
            "joins the demo swarm on this computer"
            if swarm is not None
            else "its demo swarm is not running"
        )
    if problem is not None:
        parts.append(problem)
    elif moderated:
        parts.append("needs an account")
    joined = swarm if slot.local_swarm else None
    return ProjectOffer(
        name=slot.name,
        description=slot.description,
        manifest=str(slot.manifest),
        source="attached",
        initial_peers=list(joined.initial_peers if joined else slot.initial_peers),
        data_base=joined.data_base if joined else slot.data_base,
        note="; ".join(parts),
        moderated=moderated,
    )


def _manifest_facts(paths: Sequence[Path]) -> list[tuple[bool, ProjectKind | None, str | None]]:
    """(moderated, kind, why the manifest cannot be read) for each manifest."""
    out: list[tuple[bool, ProjectKind | None, str | None]] = []
    for path in paths:
        try:
            manifest = load_any_manifest(path)
        except ManifestError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            out.append((False, None, f"its manifest cannot be read: {first}"))
            continue
        kind: ProjectKind = "dmoe" if isinstance(manifest, DmoeManifest) else "collaborative"
        out.append((manifest.access.moderated, kind, None))
    return out


def _moment(when: float, now: float) -> str:
    """'14:02' today, '3 May 14:02' on another day (local time)."""
    moment = datetime.datetime.fromtimestamp(when)
    if moment.date() == datetime.datetime.fromtimestamp(now).date():
        return f"{moment:%H:%M}"
    return f"{moment.day} {moment:%b} {moment:%H:%M}"
