"""Joining a project: by its URL (the preview, the attach, each look for a signed update), or from
a manifest file.

The engine's commands call these (``Engine.preview_project``, ``attach``, ``check_project`` and the
update poll); they fetch and check (``remote_manifest``), judge updates (``manifest_updates``), and
write the engine's copy of the manifest, while the engine keeps its slots, events and peer
(``attached``, ``following``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core.api.project_url import ProjectUrl
from core.api.schema import AttachRequest, ProjectPreview
from core.engine.device import DeviceChoice
from core.engine.errors import AlreadyAttached, InvalidArgument
from core.engine.join.manifest_updates import OPEN_POLL, poll_interval
from core.engine.join.memory_fit import check_fit, model_fit, preview_note
from core.engine.join.remote_manifest import (
    FetchedManifest,
    ManifestRefused,
    data_problem,
    fetch_manifest,
    save_copy,
)
from core.engine.join.resource_use import resource_use
from core.engine.projects import ProjectSlot
from core.project import DmoeManifest, ManifestError, load_any_manifest
from core.project.compatibility import changed_keys, refusal
from core.project.reading import read_manifest_text
from core.util.blocking import BlockingPool
from core.worker.memory import memory_here

log = logging.getLogger(__name__)


def pinned_for(url: ProjectUrl, slots: Sequence[ProjectSlot]) -> ProjectSlot | None:
    """The attached project joined by ``url``, whose slot pinned its key."""
    return next((s for s in slots if s.source_url == url.url), None)


async def preview(text: str, slots: Sequence[ProjectSlot], device: DeviceChoice) -> ProjectPreview:
    """What the project at URL ``text`` is, checked, and what it would use here."""
    url = ProjectUrl.parse(text)
    attached = pinned_for(url, slots)
    fetched = await fetch_manifest(url, pinned=attached.project_key if attached else None)
    manifest = fetched.manifest
    found = device.view(None)
    kind, name = (found.kind, found.name) if found is not None else ("cpu", "CPU")
    uses = resource_use(manifest, kind, name)
    memory = preview_note(model_fit(manifest, memory_here(device.found, None)))
    if memory is not None:
        uses.notes.append(memory)
    problem = data_problem(manifest, None)
    if problem is not None:
        uses.notes.append(f"this computer cannot join it as served: {problem}")
    access = manifest.access
    return ProjectPreview(
        url=url.url,
        name=manifest.project.name,
        description=manifest.project.description,
        kind="dmoe" if isinstance(manifest, DmoeManifest) else "collaborative",
        mode="moderated" if access.moderated else "open",
        allow_signup=access.allow_signup,
        project_key=fetched.project_key,
        key_source=fetched.key_source,
        coordinator_url=manifest.network.coordinator_url,
        version=fetched.signed.version,
        uses=uses,
    )


async def slot_for(
    request: AttachRequest,
    slots: Sequence[ProjectSlot],
    copy_of: Callable[[str], Path],
    blocking: BlockingPool,
    device: DeviceChoice,
) -> ProjectSlot:
    """The slot of the project ``request`` names: by its URL (``attach_slot``), or from a
    manifest file, read now so that a file that cannot be used is refused (``ManifestError``)
    when attached, not later, as is a model that cannot fit this computer (``DoesNotFit``)."""
    if request.is_url:  # fetched, checked, pinned and copied; or refused saying why
        return await attach_slot(request, slots, copy_of, blocking, device)
    if not request.manifest.strip():
        raise InvalidArgument("the manifest path is empty")
    slot = await blocking.run(
        ProjectSlot.from_manifest,
        Path(request.manifest),
        initial_peers=tuple(request.initial_peers),
        data_base=request.data_base,
        device=request.device,
        local_swarm=request.local_swarm,
    )
    manifest = await blocking.run(load_any_manifest, slot.manifest)
    check_fit(manifest, memory_here(device.found, request.device), then="nothing was attached")
    return slot


async def attach_slot(
    request: AttachRequest,
    slots: Sequence[ProjectSlot],
    copy_of: Callable[[str], Path],
    blocking: BlockingPool,
    device: DeviceChoice,
) -> ProjectSlot:
    """The slot of the project at the URL ``request.manifest``: fetched, checked against the key
    the URL or ``request.pinned_key`` names (else pinned now), its model measured against this
    computer's memory (``DoesNotFit``), written as the engine's copy."""
    url = ProjectUrl.parse(request.manifest)
    attached = pinned_for(url, slots)
    if attached is not None:
        raise AlreadyAttached(
            f"{url.url} is attached already, as {attached.name!r}; detach it first"
        )
    fetched = await fetch_manifest(url, pinned=request.pinned_key)
    name = fetched.manifest.project.name
    if any(s.name == name for s in slots):
        raise AlreadyAttached(f"project {name!r} is already attached; detach it first")
    problem = data_problem(fetched.manifest, request.data_base)
    if problem is not None:
        raise ManifestRefused(f"the project at {url.url} cannot be joined from here: {problem}")
    memory = memory_here(device.found, request.device)
    check_fit(fetched.manifest, memory, then="nothing was attached")  # before anything is written
    path = copy_of(name)
    await blocking.run(save_copy, path, fetched.signed.text)
    slot = await blocking.run(  # validates the copy as every attached manifest is
        ProjectSlot.from_manifest,
        path,
        initial_peers=tuple(request.initial_peers),
        data_base=request.data_base,
        device=request.device,
    )
    log.info(
        "joined %s by %s, version %d, project key %s (%s)",
        name,
        url.url,
        fetched.signed.version,
        fetched.project_key,
        fetched.key_source,
    )
    return dataclasses.replace(
        slot,
        source_url=url.url,
        project_key=fetched.project_key,
        manifest_version=fetched.signed.version,
    )


Outcome = Literal["same", "applied", "refused"]


@dataclass(frozen=True)
class Verdict:
    """What one look at a project's URL found, and what became of it."""

    outcome: Outcome
    """``same``: nothing new; ``applied``: the engine's copy is the new version now;
    ``refused``: the copy stays as it was, for ``reason``."""
    version: int
    """The version served (the held one when the answer could not be read)."""
    reason: str = ""
    """What changed (applied) or why it was refused."""
    changed: tuple[str, ...] = ()
    """The dotted keys the applied version changed."""
    fetched: FetchedManifest | None = None

    @property
    def interval(self) -> float:
        """Seconds until the next look (``manifest_updates.poll_interval``)."""
        return poll_interval(self.fetched.manifest) if self.fetched is not None else OPEN_POLL


async def look_for_update(slot: ProjectSlot, blocking: BlockingPool) -> Verdict:
    """Fetch what ``slot``'s URL serves now and take it if it is a newer version that keeps
    training compatible (``manifest_updates``); ``ManifestUnreachable`` if it does not answer."""
    assert slot.source_url is not None
    url = ProjectUrl.parse(slot.source_url)
    held = slot.manifest_version or 0
    try:
        fetched = await fetch_manifest(url, pinned=slot.project_key)
    except ManifestRefused as exc:
        return Verdict("refused", held, f"an update was refused: {exc}")
    signed = fetched.signed
    try:
        held_text: str | None = await blocking.run(read_manifest_text, slot.manifest)
    except ManifestError:
        held_text = None  # the engine's copy is gone or damaged: a newer version restores it
    if signed.version == held and signed.text == held_text:
        return Verdict("same", held, fetched=fetched)
    if signed.version <= held:
        said = (
            f"version {held} again, with other content"
            if signed.version == held
            else f"version {signed.version}, older than version {held} held here"
        )
        reason = (
            f"the coordinator at {url.url} serves {said}; it was refused (the coordinator's "
            "database may have been replaced: its organizer should look)"
        )
        return Verdict("refused", signed.version, reason, fetched=fetched)
    old = None
    if held_text is not None:
        try:
            old = await blocking.run(load_any_manifest, slot.manifest)
        except ManifestError:
            old = None
    why = refusal(old, fetched.manifest) if old is not None else None
    if why is None and fetched.manifest.project.name != slot.name:
        why = f"the update is the manifest of project {fetched.manifest.project.name!r}"
    why = why or data_problem(fetched.manifest, slot.data_base)
    if why is not None:
        return Verdict("refused", signed.version, why, fetched=fetched)
    changed = tuple(changed_keys(old, fetched.manifest)) if old is not None else ()
    await blocking.run(save_copy, slot.manifest, signed.text)
    said = ", ".join(changed) if changed else "nothing that matters to training"
    return Verdict(
        "applied", signed.version, f"version {signed.version} changes {said}", changed, fetched
    )
