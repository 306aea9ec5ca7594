"""UnsentWork: what a peer computed and has not landed yet, kept in a file across a restart.

A trainer that stops between two round ends holds work nobody has: the inner steps since its
last round end, and the residual (what of earlier rounds has not landed: a sparse codec's
leftovers, a range whose reducer failed). On a clean stop the optimizer measures all of it as one
pseudo-gradient (``DilocoState.unsent``) and writes it here with its samples; the next start of
the same work folder reads it back as the residual and the carried samples, so it goes out, and
is credited, with the first round after the restart (on top of whatever outer state the peer
downloads then). A file that does not fit the model is left alone and said, never applied.

A crash writes nothing, so ``UnsentFile`` also writes the residual now and then after a landing
(at most once a ``every`` seconds, from a copy, in the background), and takes the file back at the
next round's end, before the residual goes out: a crash in between loses only the rounds' own
work, and a copy of a residual that went out is never applied again.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.optim.outer import F32
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnsentWork:
    arrays: list[F32]
    samples: int
    epoch: int
    """The outer epoch the work was measured from (for the log)."""

    def save(self, path: Path) -> None:
        """Atomically: a crash mid-write leaves the previous file or none."""
        partial = path.with_name(path.name + ".partial")
        # a peer whose tokenizer and data are local files has written nothing there yet
        path.parent.mkdir(parents=True, exist_ok=True)
        with partial.open("wb") as f:
            # the tensors in order, then (samples, epoch): arr_0 ... arr_n
            np.savez(f, *self.arrays, np.array([self.samples, self.epoch], dtype=np.int64))
            f.flush()
            os.fsync(f.fileno())
        partial.replace(path)

    @staticmethod
    def load(path: Path, shapes: list[tuple[int, ...]]) -> UnsentWork | None:
        """The saved work, or None (no file, or one that does not fit ``shapes``: said)."""
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                count = len(shapes)
                if len(data.files) != count + 1:
                    log.warning("%s holds %d tensors, this model %d: it does not fit; left "
                                "alone", path, len(data.files) - 1, count)  # fmt: skip
                    return None
                arrays = [np.asarray(data[f"arr_{i}"], dtype=np.float32) for i in range(count)]
                samples, epoch = (int(v) for v in data[f"arr_{count}"])
        except (OSError, ValueError, KeyError) as exc:
            log.warning("%s: not this peer's unsent work (%s); left alone", path, exc)
            return None
        if [a.shape for a in arrays] != shapes or samples < 0:
            log.warning("%s does not fit this model's parameters; left alone", path)
            return None
        return UnsentWork(arrays, samples, epoch)


class UnsentFile:
    """The file a trainer keeps its unsent work in (see the module's docstring)."""

    def __init__(self, path: Path, *, every: float, tasks: BackgroundTasks) -> None:
        self.path = path
        self.every = every
        self._tasks = tasks
        self._kept_at = -math.inf
        self._writing: asyncio.Task[None] | None = None
        self._residual_kept = False
        """A copy of the residual is (or is being) written there."""

    async def take(self, shapes: list[tuple[int, ...]]) -> UnsentWork | None:
        """The work kept there, if it fits ``shapes``; the file is gone afterwards (a crash from
        then on must not apply it a second time)."""
        work = await asyncio.to_thread(UnsentWork.load, self.path, shapes)
        if work is not None:
            await asyncio.to_thread(self.path.unlink, missing_ok=True)
        return work

    async def keep(self, work: UnsentWork) -> None:
        """A clean stop: all of the work, or no file when there is none."""
        await self.settle()
        if work.samples == 0 and not any(np.any(a) for a in work.arrays):
            await asyncio.to_thread(self.path.unlink, missing_ok=True)
            return
        await asyncio.to_thread(work.save, self.path)

    def keep_soon(self, copy: Callable[[], Awaitable[UnsentWork | None]]) -> None:
        """After a landing: write what ``copy`` gives (the residual), unless a write is under way
        or the last was less than ``every`` seconds ago."""
        if self._writing is not None or time.monotonic() - self._kept_at < self.every:
            return
        self._kept_at = time.monotonic()
        self._residual_kept = True
        self._writing = self._tasks.spawn("keep-residual", self._write(copy))

    async def void(self) -> None:
        """The residual is about to go out: the copy written of it must not come back."""
        if not self._residual_kept:
            return
        await self.settle()
        await asyncio.to_thread(self.path.unlink, missing_ok=True)
        self._residual_kept = False

    async def settle(self) -> None:
        """Until a write under way has ended."""
        writing, self._writing = self._writing, None
        if writing is not None:
            await asyncio.gather(writing, return_exceptions=True)

    async def _write(self, copy: Callable[[], Awaitable[UnsentWork | None]]) -> None:
        work = await copy()
        if work is None:
            return
        try:
            await asyncio.to_thread(work.save, self.path)
        except OSError as exc:
            log.warning("the residual could not be kept in %s: %s", self.path, exc)
