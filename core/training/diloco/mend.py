"""Mending: how a diloco peer takes the outer state other peers hold, when its own is not theirs.

Two cases, one download and one rebase (``DilocoState.rebase``: the work done since the old anchor
is kept on top of the new one, nothing computed is dropped):

- **Catching up.** The collaboration is at a later epoch than this peer (it started late, was
  paused, or its round found no group while the others landed): it downloads the newest outer
  state a donor gives, retried with backoff while the collaboration stays ahead.
- **Repair.** Two groups whose columns never met land different means, and the records' digests
  show it: the smaller side takes the larger side's outer parameters (a tie goes to the side the
  backbone is on, then to the smaller digest, so that everyone picks the same side). What the
  smaller side's round did is lost; a log line says so. A peer repairs between round ends, as soon
  as it reads the majority, rather than at its next round's end: there the download would hold
  back its exchange, and with it its group and its columns, so that a round landed apart tends to
  make the next one land apart too. Not in a round's first half, though: the others' landings of
  the last round may not be in their records yet, and a peer that landed early would follow
  whoever else had.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from core.averaging.sharing.state import DownloadedState, StateDownloadError
from core.config.roles import BACKBONE
from core.training.diloco.state import DIGEST_KEY, SCHEDULE_KEY, DilocoState
from core.training.participation import Participation
from core.training.progress import CollaborationView

log = logging.getLogger(__name__)


def mend_due(*, until_end: float, round_seconds: float, idle: bool, fresh: bool) -> bool:
    """Whether a peer may look for a majority to follow now: in the round's second half
    (``until_end`` seconds left of ``round_seconds``), ``idle`` (no exchange of its own in flight,
    whose landing moves it; not paused, not stopping, not repairing), with outer parameters it
    has not tried to mend yet (``fresh``)."""
    return idle and fresh and until_end <= round_seconds / 2


class Mending:
    def __init__(
        self,
        diloco: DilocoState,
        part: Participation,
        lock: asyncio.Lock,
        *,
        state_timeout: float,
        view: Callable[[], CollaborationView],
        refresh: Callable[[], Awaitable[None]],
        moved: Callable[[], Awaitable[None]],
        stopping: Callable[[], bool],
    ) -> None:
        """``lock``: the optimizer's, held for any torch work on the model; ``view``: where the
        collaboration stands as last read, and ``refresh`` reads it again; ``moved``: told once
        the outer parameters moved (the optimizer publishes its record, announces its state);
        ``stopping``: the peer is stopping (no more attempts)."""
        self.diloco = diloco
        self.part = part
        self._lock = lock
        self._timeout = state_timeout
        self._view = view
        self._refresh = refresh
        self._moved = moved
        self._stopping = stopping
        self.held = (diloco.epoch, diloco.digest)
        """(epoch, digest of the outer parameters) as of their last move, read together: what
        our record says we hold."""
        self.task: asyncio.Task[None] | None = None
        """The repair started between round ends, if any: a round's end waits for it."""
        self.tried: tuple[int, str] = (-1, "")
        """The (epoch, digest) this peer held when it last started a repair: once per landing."""
        self.repairs = 0
        """Times this peer took the outer parameters most peers at its epoch held instead of
        its own (a round it landed apart from them)."""

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()

    def mark(self) -> None:
        """The outer parameters moved (a landing, a download): what our record says we hold."""
        self.held = (self.diloco.epoch, self.diloco.digest)

    # ---- catching up -----------------------------------------------------------------------------

    def behind(self) -> bool:
        return self._view().epoch > self.diloco.epoch

    async def catch_up(self, limit: float | None = None) -> bool:
        """Take the confirmed outer state (our work since our anchor kept on top); retried with
        backoff while the collaboration is ahead and we are not stopping, for at most ``limit``
        seconds (None: ``state_timeout``). Whether we caught up: when no donor gives the
        confirmed state in time, the peer goes on taking part from the state it has (a round
        end must not wait for a state nobody serves)."""
        part = self.part
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self._timeout if limit is None else limit)
        caught = True
        while not self._stopping() and not part.paused and self.behind():
            left = deadline - loop.time()
            if left <= 0:
                caught = False
                log.warning("gave up catching up with epoch %d for now: this peer goes on from "
                            "its own state at epoch %d", self._view().epoch,
                            self.diloco.epoch)  # fmt: skip
                break
            reason = await self._download(min(self._timeout, left))
            if reason is None:
                break
            part.set_waiting(reason)
            await asyncio.sleep(min(part.failed(reason), max(0.0, deadline - loop.time())))
            await self._refresh()
        part.set_waiting(None)
        return caught

    async def _download(self, timeout: float) -> str | None:
        epoch = self.diloco.epoch
        try:
            got = await self.part.download(epoch, timeout, exact=True)
        except (StateDownloadError, TimeoutError) as exc:
            why = str(exc) or "timed out"
            return f"no peer could give the state of epoch {self._view().epoch}: {why}"
        if got.version <= epoch:
            return None
        reason = await self._take(got)
        if reason is None:
            log.info("took the outer state of epoch %d from %d peer(s)", got.version,
                     len(got.donors))  # fmt: skip
        return reason

    # ---- repair ----------------------------------------------------------------------------------

    def majority(self) -> str | None:
        """The digest confirmed for our epoch, or in a project that confirms nothing the one
        most peers at it hold, when it is not ours (None otherwise)."""
        epoch, mine = self.held
        if epoch != self.diloco.epoch or not mine:
            return None
        view = self._view()
        if self.part.links.board.confirmers:
            # records are free to write: only what is confirmed says which side is the right one
            confirmed = view.confirmed.digest_at(epoch)
            return confirmed if confirmed is not None and confirmed != mine else None
        at = [p for p in view.peers if p.epoch == epoch and p.anchor]
        counts = Counter(p.anchor for p in at)
        if not counts:
            return None
        backed = {p.anchor for p in at if p.role == BACKBONE}
        best = max(counts, key=lambda d: (counts[d], d in backed, [-ord(c) for c in d]))
        return None if best == mine else best

    def due(self, *, until_end: float, round_seconds: float, idle: bool) -> str | None:
        """The digest to take now, between round ends (``mend_due``), when most peers at our
        epoch hold other outer parameters than ours; None: not now."""
        due = mend_due(
            until_end=until_end,
            round_seconds=round_seconds,
            idle=idle and not self.busy,
            fresh=self.tried != self.held,
        )
        held = self.majority() if due else None
        if held is not None:
            self.tried = self.held
        return held

    async def repair(self, digest: str) -> None:
        """Take the outer parameters of ``digest`` (or any newer epoch's) from a peer."""
        epoch = self.diloco.epoch
        log.warning("this peer's outer parameters at epoch %d differ from those most peers at "
                    "it hold: it takes theirs, and the round it landed apart is lost", epoch)  # fmt: skip

        def theirs(metadata: dict[str, Any]) -> bool:
            newer = isinstance(metadata.get("epoch"), int) and metadata["epoch"] > epoch
            return newer or metadata.get(DIGEST_KEY) == digest

        try:
            got = await self.part.download(epoch - 1, self._timeout, accept=theirs, exact=True)
        except (StateDownloadError, TimeoutError) as exc:
            log.info("no peer gave the outer parameters most peers hold: %s", exc or "timed out")
            return
        if got.version < epoch:
            return
        # where our last round averaged nothing, the others' mean holds our data
        reason = await self._take(got, drop_missing=True)
        if reason is not None:
            log.warning("the outer parameters most peers hold cannot be taken: %s", reason)
            return
        self.repairs += 1

    # ---- both ------------------------------------------------------------------------------------

    async def _take(self, got: DownloadedState, *, drop_missing: bool = False) -> str | None:
        """Rebase on a downloaded outer state; why not (None: taken)."""
        if got.metadata.get("mode") != "diloco":
            return "the peers' state is not a diloco state (do they run another mode?)"
        schedule = got.metadata.get(SCHEDULE_KEY)
        clock = float(schedule) if isinstance(schedule, int | float) else None
        diloco, bridge = self.diloco, self.part.links.bridge
        async with self._lock:
            try:
                await bridge.run(diloco.rebase, got.version, got.tensors, clock)
            except ValueError as exc:
                return f"the state peers give does not fit this model: {exc}"
            if drop_missing:
                await bridge.run(diloco.drop_missing)
            self.mark()
        await self._moved()
        return None
