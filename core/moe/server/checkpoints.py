"""Expert checkpoints, and taking an expert over from a server that left.

An expert lives on one volunteer's computer, and volunteers leave without notice. So a server
saves each hosted expert's state (``ExpertBackend.state_dict()``: parameters, optimizer state,
update count) now and then, and a server started later with the same uid and the same folder
(shared, or copied from the old one) loads the newest state that reads back whole and goes on from
it: the expert has lost at most the updates since that save, not everything it learned.

Layout: ``<folder>/<uid>/<updates:012>-<saved_ns:019>.pt``, so "newest" is read from the names (the
most updates, then the latest save) without opening a file; the same uid saved by two servers (a
takeover that overlapped) keeps both histories apart by their times. Files are written aside and
renamed into place (``core.util.files.atomic``), so a server killed mid-write never leaves a half file
under a checkpoint's name; a file damaged anyway (a disk error, a bad copy) is skipped with a log
line and the next older one is tried. Files are read with ``torch.load(weights_only=True)``, which
unpickles tensors and plain values only: a checkpoint from a shared folder cannot run code. A state
with NaN or infinite parameters is never written (it would only spread).

``ExpertCheckpoints`` is the folder; ``CheckpointSaver`` the policy (every ``interval`` seconds or
``updates`` updates, only experts that learned since their last save, and a last save at close).
Both read and write on the training thread (``TrainingBridge.run``), which is the only thread that
changes an expert, so a state is never saved half-updated.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from core.moe.server.backend import ExpertBackend
from core.util.clock import SYSTEM_CLOCK, Clock
from core.util.errors import BarnraiseError
from core.util.files.atomic import remove_old, write_atomically
from core.util.tasks import BackgroundTasks
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)

FORMAT = 1
_NAME = re.compile(r"(\d{12})-(\d{19})\.pt")
_UID = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,255}")
_TEMP_PREFIX = ".expert-"
STALE_TEMPORARY = 3600.0
"""Seconds after which a temporary left by an interrupted save is removed (a younger one may be
another server's save in progress, in a shared folder)."""


class ExpertCheckpointError(BarnraiseError):
    """A checkpoint that cannot be written (e.g. non-finite parameters)."""


class ExpertCheckpoints:
    """The checkpoints of experts in ``folder``, ``keep`` newest per expert."""

    def __init__(self, folder: Path, *, keep: int = 3) -> None:
        if keep < 1:
            raise ValueError(f"keep at least one checkpoint per expert, not {keep}")
        self.folder = folder
        self.keep = keep

    def uids(self) -> list[str]:
        """The experts that have at least one checkpoint here, sorted."""
        if not self.folder.is_dir():
            return []
        return sorted(
            entry.name
            for entry in self.folder.iterdir()
            if _UID.fullmatch(entry.name) and entry.is_dir() and self.files(entry.name)
        )

    def files(self, uid: str) -> list[Path]:
        """``uid``'s checkpoint files, newest first (most updates, then latest save)."""
        folder = self._uid_folder(uid)
        if not folder.is_dir():
            return []
        found = []
        for path in folder.iterdir():
            match = _NAME.fullmatch(path.name)
            if match:
                found.append(((int(match.group(1)), int(match.group(2))), path))
        return [path for _, path in sorted(found, reverse=True)]

    def save(self, backend: ExpertBackend) -> Path:
        """Write ``backend``'s state (on the training thread), then drop checkpoints past ``keep``."""
        state = backend.state_dict()
        bad = _non_finite(state["module"])
        if bad is not None:
            raise ExpertCheckpointError(
                f"expert {backend.uid} has non-finite values in {bad}: not checkpointed"
            )
        folder = self._uid_folder(backend.uid)
        folder.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temporaries(folder)
        target = folder / f"{backend.updates:012d}-{time.time_ns():019d}.pt"
        payload = {"format": FORMAT, **state, "saved_at": time.time()}
        write_atomically(target, lambda out: torch.save(payload, out), prefix=_TEMP_PREFIX)
        for old in self.files(backend.uid)[self.keep :]:
            remove_old(old, log, f"checkpoint of expert {backend.uid}")
        return target

    def restore(self, backend: ExpertBackend) -> Path | None:
        """Load ``backend``'s newest checkpoint that reads back whole (on the training thread);
        damaged ones are skipped with a log line. None: there is none, and it keeps its state."""
        for path in self.files(backend.uid):
            try:
                state = torch.load(path, map_location="cpu", weights_only=True)
                _check(state, backend.uid)
                _load(backend, state)
            except Exception as exc:  # any damage means "try the older one"
                said = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                log.warning(
                    "skipping damaged checkpoint %s of expert %s: %s",
                    path,
                    backend.uid,
                    said if len(said) <= 200 else said[:197] + "...",
                )
                continue
            log.info("expert %s restored from %s (%d updates)", backend.uid, path, backend.updates)
            return path
        return None

    def _uid_folder(self, uid: str) -> Path:
        if not _UID.fullmatch(uid) or ".." in uid:
            raise ValueError(f"{uid[:64]!r} cannot name a checkpoint folder")
        return self.folder / uid

    def _remove_stale_temporaries(self, folder: Path) -> None:
        now = time.time()
        for path in folder.glob(f"{_TEMP_PREFIX}*"):
            with contextlib.suppress(OSError):
                if now - path.stat().st_mtime > STALE_TEMPORARY:
                    path.unlink()


def _check(state: object, uid: str) -> None:
    if not isinstance(state, dict):
        raise ValueError(f"holds a {type(state).__name__}, not a checkpoint")
    if state.get("format") != FORMAT:
        raise ValueError(f"format {state.get('format')!r}, expected {FORMAT}")
    if state.get("uid") != uid:
        raise ValueError(f"holds expert {state.get('uid')!r}")
    for key in ("module", "optimizer"):
        if not isinstance(state.get(key), dict):
            raise ValueError(f"has no {key} state")


def _load(backend: ExpertBackend, state: Mapping[str, Any]) -> None:
    """Load ``state`` whole or not at all: a half-loaded expert (weights of one checkpoint,
    optimizer of none) would be worse than either."""
    before = copy.deepcopy(backend.state_dict())
    try:
        backend.load_state_dict(state)
    except BaseException:
        backend.load_state_dict(before)
        raise


def _non_finite(module_state: Mapping[str, Any]) -> str | None:
    for name, value in module_state.items():
        if (
            isinstance(value, torch.Tensor)
            and value.is_floating_point()
            and not bool(torch.isfinite(value).all())
        ):
            return name
    return None


class CheckpointSaver:
    """Saves hosted experts that learned: every ``interval`` seconds (0: not by time) or after
    ``updates`` updates (0: not by count), checked every ``tick`` seconds; ``close`` saves once
    more unless told not to."""

    def __init__(
        self,
        store: ExpertCheckpoints,
        bridge: TrainingBridge,
        backends: Sequence[ExpertBackend],
        *,
        interval: float,
        updates: int = 0,
        tick: float = 1.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if interval < 0 or updates < 0 or tick <= 0:
            raise ValueError("checkpoint interval and updates are at least 0, the tick above 0")
        self.store = store
        self.interval = interval
        self.updates = updates
        self.tick = min(tick, interval) if interval > 0 else tick
        self._bridge = bridge
        self._backends = list(backends)
        self._clock = clock
        now = clock.monotonic()
        self._saved = {b.uid: (b.updates, now) for b in self._backends}
        """Per uid: its update count at its last save (or when hosting began), and when."""
        self.saves = 0
        """Checkpoints written so far."""
        self._tasks = BackgroundTasks("expert-checkpoints")

    def start(self) -> None:
        if self.interval > 0 or self.updates > 0:
            self._tasks.spawn("saver", self._run())

    def due(self, backend: ExpertBackend, now: float) -> bool:
        updates, at = self._saved[backend.uid]
        learned = backend.updates - updates
        if learned <= 0:
            return False
        by_time = self.interval > 0 and now - at >= self.interval
        return by_time or (self.updates > 0 and learned >= self.updates)

    async def save_due(self, *, everything: bool = False) -> list[str]:
        """Save the experts that are due (``everything``: every one that learned); their uids."""
        saved = []
        for backend in self._backends:
            now = self._clock.monotonic()
            if not (self.due(backend, now) or (everything and self.due_at_all(backend))):
                continue
            try:
                updates = await self._bridge.run(self._save, backend)
            except (OSError, BarnraiseError) as exc:
                log.warning("could not checkpoint expert %s: %s", backend.uid, exc)
                continue
            self._saved[backend.uid] = (updates, now)
            self.saves += 1
            saved.append(backend.uid)
        return saved

    def _save(self, backend: ExpertBackend) -> int:
        """On the training thread: save, and say at how many updates (the next batch may run as
        soon as this returns)."""
        self.store.save(backend)
        return backend.updates

    def due_at_all(self, backend: ExpertBackend) -> bool:
        """It learned since its last save."""
        return backend.updates > self._saved[backend.uid][0]

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.tick)
            await self.save_due()

    async def close(self, *, save: bool = True) -> list[str]:
        """Stop saving by the clock; with ``save``, save every expert that learned since its last
        save (the training thread finishes the batch in flight first). Returns the uids saved."""
        await self._tasks.close()
        if not save:
            return []
        return await self.save_due(everything=True)
