"""Signed manifest updates of projects joined by URL: which are taken, which refused, and the poll.

An organizer changes the manifest file; the coordinator serves it as the next version, signed
(``core.coordinator.manifest_route``). Every project an engine joined by URL is looked at again
every ``poll_interval`` (jittered, so that volunteers do not all ask at once), and on demand
(``EngineApi.check_project``). What comes back is judged by
``core.project.compatibility`` (``refusal``) and the version rules here:

- **not taken**: a version not above the one held (older: the coordinator went back; the same
  number with another text: it is not the manifest the number named), a manifest signed by
  another key than the pinned one or with a bad signature (``remote_manifest``), of another
  project or kind, or one that would break training: a collaborative project's ``[model]``,
  ``data.seq_len``, the tokenizer (``data.tokenizer``: a peer keeps the copy it fetched once,
  and another tokenizer would give the token ids other meanings) and its vocabulary size, or the
  optimizer and its state's format (``training.optimizer``, ``training.optimizer_states``: the
  averaged state's shape); a dmoe
  project's ``[grid]`` and its experts' kind, width and optimizer. The old manifest stays; the
  reason names the field ("the update changes model.hidden_size from 128 to 256, which would
  break training; the project's organizer must start a new project").
- **taken**: anything else (new initial peers, data sources, coordinator, training numbers; the
  sections' own checks bound every number), written as the engine's copy.

Whether the running peer must start again for it (``needs_restart``): not for a change of the
initial peers, the description or the published checkpoint's URL alone, which matter to a peer
only when it joins (it takes them at its next start); for anything else (data, training and
averaging numbers, the coordinator, access) yes, and the engine restarts it at once (``following``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

from core.engine.projects import ProjectSlot
from core.project.kinds import AnyManifest
from core.util.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

OPEN_POLL = 15 * 60.0
"""Seconds between looks at an open project's manifest."""
MIN_POLL = 60.0
"""A moderated project's peers ask its coordinator every ``access.refresh_interval``; its
manifest is looked at as often, but never more than once a minute nor less than every 15."""
JITTER = 0.2
"""Each wait is drawn within this fraction of the interval, either side."""
FIRST_LOOK = 60.0
"""A project is first looked at within this many seconds of the engine seeing it."""
_JOIN_ONLY = {"project.description", "network.initial_peers", "network.checkpoint_url"}
"""Changes that matter to a peer only when it joins the swarm."""


def poll_interval(manifest: AnyManifest) -> float:
    """Seconds between looks at the manifest of a project joined by URL (before the jitter)."""
    if manifest.access.moderated:
        return min(max(manifest.access.refresh_interval, MIN_POLL), OPEN_POLL)
    return OPEN_POLL


def needs_restart(changed: Sequence[str]) -> bool:
    """Whether a running peer must start again to follow these changes (see the module)."""
    return any(key not in _JOIN_ONLY for key in changed)


class ManifestPoll:
    """The engine's named background task that looks at each URL-joined project in turn.

    ``check(slot)`` looks at one project and returns the seconds until its next look
    (``poll_interval`` of its manifest); each wait is jittered. A project is first looked at
    within ``FIRST_LOOK`` seconds of being seen (an engine that was off for a week catches up
    soon after it starts)."""

    def __init__(
        self,
        slots: Callable[[], Sequence[ProjectSlot]],
        check: Callable[[ProjectSlot], Awaitable[float]],
        *,
        rng: random.Random | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._slots = slots
        self._check = check
        self._rng = rng or random.Random()
        self._clock = clock
        self._due: dict[str, float] = {}
        self._wake = asyncio.Event()

    def wake(self) -> None:
        """Look at the list of projects again now (one was attached or detached)."""
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()  # before reading the list: a wake from here on is not lost
            now = self._clock.monotonic()
            slots = [s for s in self._slots() if s.source_url is not None]
            self._due = {s.name: self._due[s.name] for s in slots if s.name in self._due}
            for slot in slots:
                due = self._due.setdefault(slot.name, now + self._rng.uniform(0, FIRST_LOOK))
                if due > now:
                    continue
                try:
                    interval = await self._check(slot)
                except Exception as exc:  # one project's trouble must not stop the others'
                    log.warning("looking for an update of %s failed: %s", slot.name, exc)
                    interval = OPEN_POLL
                jitter = self._rng.uniform(1 - JITTER, 1 + JITTER)
                self._due[slot.name] = self._clock.monotonic() + interval * jitter
            pause = min(self._due.values(), default=now + OPEN_POLL) - self._clock.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(pause, 0.0)):
                    await self._wake.wait()
