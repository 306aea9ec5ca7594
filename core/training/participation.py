"""Participation: what every mode's peer does to take part in the collaboration, whatever its
rounds look like.

Both optimizers (``dedloc``'s and ``diloco``'s, the latter also as the diloco backbone) compose
one: it holds this peer's side of the progress records (the tally of its work since the last report
point, the epochs whose work landed, the totals of its last finished epoch, the record it
publishes and the records it last read), whether it is paused, why it waits (the catch-up's
backoff and the reason told to its owner), and its state offer (the snapshot it serves, announced
with its epoch) and downloads. What differs between modes, when to read, when to publish, when to
catch up and what a downloaded state does to the model, stays with the mode. ``TakingPart`` is
what an optimizer says of it (its speed, whether it is paused, why it waits), for the role and the
engine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from core.averaging.sharing.state import DownloadedState, PackedProvider, StateDownloadError
from core.averaging.sharing.vouching import Vouching
from core.config.roles import CLIENT, TRAINER
from core.training.links import PeerLinks
from core.training.moderation.evidence import EvidenceBoard
from core.training.progress import LEFT, PAUSED, LandedLog, PeerProgress, StepTally
from core.training.progress.confirmed import Confirmed
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.retry import Retry
from core.util.tasks import BackgroundTasks

log = logging.getLogger(__name__)

Snapshot = tuple[int, dict[str, Any], list[Any]]
"""What a peer serves of its state: its epoch, the metadata, the flat arrays."""
Finished = tuple[int, float, int, int]
"""The last epoch this peer finished: its number, loss sum, mini-steps and samples."""
NONE_FINISHED: Finished = (-1, 0.0, 0, 0)
STATE_MISMATCH = "state_mismatch"
"""The statistic of an accusation against a donor caught serving another state than it claims."""
UNCONFIRMED_EPOCH = "unconfirmed_epoch"
"""The statistic of an accusation against a peer whose records keep announcing epochs nothing
confirms (``core.training.progress.confirmed.Strikes``)."""


class Participation:
    def __init__(
        self,
        links: PeerLinks,
        role: str,
        *,
        snapshot: Snapshot | None,
        retry_cap: float,
        tasks: BackgroundTasks,
    ) -> None:
        """``role``: what the record says while the peer is active (trainer, client or backbone);
        ``tasks``: its owner's, where the announcement is kept alive."""
        self.links = links
        self.role = role
        self.peer = str(links.averager.host.peer_id)
        self.tally = StepTally()
        self.landed = LandedLog()
        """Epochs whose work landed, with their samples: what our record asks credit for."""
        self.last: Finished = NONE_FINISHED
        self.records: list[PeerProgress] = []
        """The others' records as last read (the owner decides how a read updates them)."""
        self.snapshot = snapshot
        """What peers that fell behind download from us; replaced whenever the state moves (None
        for a mode that packs its state when asked: ``offer_packed``)."""
        self.on_waiting: Callable[[str | None], None] | None = None
        """Told the reason whenever we start or stop waiting for the collaboration."""
        self._active = asyncio.Event()
        self._active.set()
        self._catching_up = Retry("could not load the state", log, cap=retry_cap)
        self._tasks = tasks
        self.evidence = EvidenceBoard.of(links.averager)
        """Where this peer signs and publishes what it found against others: its rounds' findings
        and donors caught serving another state than they claimed (one board: it holds every
        accusation the peer's record carries)."""
        links.board.on_struck = self._struck

    # ---- paused or taking part -------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return not self._active.is_set()

    async def wait_active(self) -> None:
        await self._active.wait()

    def step_aside(self) -> bool:
        """Paused from now on: no speed, and records say so. False if it already was."""
        if self.paused:
            return False
        self._active.clear()
        self.tally.stop()
        return True

    def come_back(self) -> bool:
        """Active again. False if it already was."""
        if not self.paused:
            return False
        self._active.set()
        return True

    # ---- why we wait -----------------------------------------------------------------------------

    @property
    def waiting_for(self) -> str | None:
        """Why we cannot contribute now (the state cannot be loaded), or None."""
        return self._catching_up.reason

    def failed(self, reason: str) -> float:
        """Another attempt to catch up failed: the seconds to wait before the next."""
        return self._catching_up.failed(reason)

    def set_waiting(self, reason: str | None) -> None:
        """We wait for ``reason`` (None: no longer); the owner hears of every change."""
        before = self._catching_up.reason
        if reason is None:
            self._catching_up.succeeded()
        if reason != before and self.on_waiting is not None:
            self.on_waiting(reason)

    # ---- our record and theirs -------------------------------------------------------------------

    @property
    def record_role(self) -> str:
        """What our record says we are: "paused" while paused; a trainer that others cannot dial
        (its averager went client, ``PeerStack``) says "client", so that nobody plans a group for
        it to lead (diloco's ``plan_groups``): a group of two such members never forms."""
        if self.paused:
            return PAUSED
        if self.role == TRAINER and self.links.averager.config.client_mode:
            return CLIENT
        return self.role

    def record(self, epoch: int, samples: int, anchor: str = "") -> PeerProgress:
        """Our progress record: at ``epoch`` with ``samples`` towards it, our speed and loss
        totals, our last finished epoch, the epochs that landed, the digest of what we hold at
        ``epoch`` (``anchor``, diloco); "paused" while paused."""
        last_epoch, last_loss, last_mini, last_samples = self.last
        return PeerProgress(
            self.peer,
            epoch,
            samples,
            self.tally.speed,
            time.time(),
            self.record_role,
            self.tally.loss_sum,
            self.tally.mini_steps,
            last_epoch,
            last_loss,
            last_mini,
            last_samples,
            landed=self.landed.items(),
            anchor=anchor,
        )

    async def publish(self, record: PeerProgress) -> None:
        try:
            await self.links.board.publish(record)
        except BarnraiseError as exc:
            log.debug("publishing progress failed: %s", exc)

    async def read(self) -> list[PeerProgress] | None:
        """Everyone's records now, or None when the read failed (a busy DHT: try again later)."""
        try:
            return await self.links.board.fetch()
        except BarnraiseError as exc:
            log.debug("reading progress failed: %s", exc)
            return None

    # ---- our state for others, theirs for us -----------------------------------------------------

    async def offer(self, epoch: Callable[[], int]) -> None:
        """Serve our snapshot to peers that fell behind, announced with our epoch from now on."""
        snapshot = self.snapshot
        if snapshot is None:
            raise BarnraiseError("no snapshot to offer")
        sharing = self.links.sharing
        sharing.serve(lambda: self.snapshot or snapshot)
        await self._announce_from_now_on(epoch)

    async def offer_packed(self, epoch: Callable[[], int], pack: PackedProvider) -> None:
        """Serve our state as ``pack`` makes it when a peer that fell behind first asks for an
        epoch (a large state, packed off the event loop), announced with our epoch from now on."""
        self.links.sharing.serve_packed(epoch, pack)
        await self._announce_from_now_on(epoch)

    async def _announce_from_now_on(self, epoch: Callable[[], int]) -> None:
        sharing = self.links.sharing
        await sharing.announce(epoch())
        self._tasks.spawn("announce", sharing.keep_announced(epoch))

    async def announce(self, epoch: int) -> None:
        """Our state moved to ``epoch``: say so now rather than at the next keep-alive."""
        try:
            await self.links.sharing.announce(epoch)
        except BarnraiseError as exc:
            log.debug("announcing the state failed: %s", exc)

    async def download(
        self,
        newer_than: int,
        timeout: float,
        accept: Callable[[dict[str, Any]], bool] | None = None,
        *,
        exact: bool = False,
    ) -> DownloadedState:
        """The newest state newer than ``newer_than`` (and that ``accept`` takes) that donors
        vouch for (``core.averaging.sharing.vouching``): donors of two networks offering the same
        bytes, or every donor agreeing at the epoch most fresh records are at. ``exact``: the
        mode's honest donors of an epoch hold the same bytes for the same anchor (diloco).
        ``StateDownloadError`` or ``TimeoutError`` when nobody can; donors caught serving another
        state than they claim are accused either way (signed evidence, published)."""
        board = self.links.board
        vouching = Vouching(
            settled=self._settled,
            exact=exact,
            confirmed=self._confirmed if board.confirmers else None,
            trusted=lambda donor: str(donor) in board.confirmers,
        )
        try:
            got = await self.links.sharing.download(
                newer_than=newer_than, timeout=timeout, accept=accept, vouching=vouching
            )
        except StateDownloadError as exc:
            self._accuse(exc.refused.accused)
            raise
        self._accuse(got.refused.accused)
        return got

    def _confirmed(self, epoch: int) -> str | None:
        """The digest confirmed for ``epoch``'s state ("": the epoch only), None: not confirmed
        (as of the last read)."""
        confirmed = self.links.board.confirmed(self.records)
        if epoch != confirmed.epoch:
            return None
        return confirmed.digest

    def _struck(self, record: PeerProgress, confirmed: Confirmed) -> None:
        """A peer kept announcing an epoch nothing confirms: its records are left out from now
        on, and the accusation is signed and published (evidence in a moderated project)."""
        reason = (
            f"its records kept announcing epoch {record.epoch} while epoch {confirmed.epoch} is "
            "the confirmed one"
        )
        log.warning("peer %s: %s", record.peer, reason)
        evidence = self.evidence.accuse(
            PeerID.from_string(record.peer),
            round_key="progress",
            group=b"",
            chunk=-1,
            statistic=UNCONFIRMED_EPOCH,
            value=float(record.epoch),
            reason=reason,
        )
        if evidence is not None:
            self._tasks.spawn(
                f"evidence-progress-{record.peer[:8]}",
                self.evidence.publish_signed([evidence], "progress"),
            )

    def _settled(self, epoch: int) -> bool:
        """At least half of the others' fresh records (the last read) are at ``epoch`` or past
        it: a lone peer announcing an epoch ahead of everyone is not where the swarm is."""
        others = [r for r in self.records if r.peer != self.peer and r.role != LEFT]
        return bool(others) and 2 * sum(r.epoch >= epoch for r in others) >= len(others)

    def _accuse(self, accused: dict[PeerID, str]) -> None:
        signed = []
        for peer, reason in accused.items():
            log.warning("state donor %s: %s", peer, reason)
            evidence = self.evidence.accuse(
                peer,
                round_key="state",
                group=b"",
                chunk=-1,
                statistic=STATE_MISMATCH,
                value=0.0,
                reason=reason,
            )
            if evidence is not None:
                signed.append(evidence)
        if signed:
            self._tasks.spawn("evidence-state", self.evidence.publish_signed(signed, "state"))

    async def leave(self, record: PeerProgress) -> None:
        """Stop serving, and tell the others at once: our record and our offer withdrawn."""
        self.links.sharing.stop_serving()
        await self.links.withdraw(record)


class TakingPart:
    """What every mode's optimizer says of its part in the collaboration: read from ``part``."""

    part: Participation

    @property
    def landed(self) -> LandedLog:
        """Epochs whose work landed, with their samples: what our record asks credit for."""
        return self.part.landed

    @property
    def on_waiting(self) -> Callable[[str | None], None] | None:
        """Told the reason whenever we start or stop waiting for the collaboration."""
        return self.part.on_waiting

    @on_waiting.setter
    def on_waiting(self, told: Callable[[str | None], None] | None) -> None:
        self.part.on_waiting = told

    @property
    def speed(self) -> float:
        """Our recent samples per second."""
        return self.part.tally.speed

    @property
    def waiting_for(self) -> str | None:
        """Why we cannot contribute now (the state cannot be loaded), or None."""
        return self.part.waiting_for

    @property
    def paused(self) -> bool:
        return self.part.paused
