"""DilocoOptimizer: DiLoCo rounds (arXiv 2311.08105) behind the interface the Trainer drives.

Each trainer calls ``await opt.step(batch_size, loss)`` after every backward pass; that is one
inner step of the manifest's optimizer on this peer alone. Rounds end on the shared wall clock
(``RoundClock``); at a round's end the peer measures how far its inner steps went (the
pseudo-gradient, ``DilocoState.end_round``) and averages it with the peers of its epoch,
weighted by the samples each computed, in the codec of the project (with error feedback for a
sparse one); every member then takes the same outer Nesterov step from the same anchor.

Overlap: with ``overlap`` (the default) the exchange runs in the background while the next
round's inner steps compute, and its outer step lands one round late, on top of the work done
meanwhile (``DilocoState.land``). We took this over Streaming DiLoCo's staggered fragments
because it needs one exchange per round and no schedule of fragments, and its cost is what
Streaming DiLoCo's overlap also pays: the outer step uses a pseudo-gradient one round old. Only
when one exchange takes longer than a round does the next round's end wait for it. Where rounds
are checked (``keep_rounds``), each round starts at the anchor (``DilocoState.anchored``), and
the receipts note where the round before landed in it (``checks.RoundLedger.moved``).

A round lands with whoever made it: every member whose group averaged takes the mean where it
was averaged, and what of its own the mean lacks (a range whose reducer failed, data the reducer
left out, what a sparse codec or the mean dropped) stays as its residual and goes out with a later
round, never twice. A member screened out, missing, late or in another group stops nobody. A round
in which this peer found no group while others train lands nothing here: its work waits for the
next round, and when the others landed meanwhile, the peer takes their newer anchor and keeps its
work on top of it (``DilocoState.rebase``): no rollback, and nothing computed is dropped. Late work
counts at its full sample weight in the round that lands it (the samples it took, as Decoupled
DiLoCo merges late learners by tokens); each report says how many rounds late it landed. A peer
alone applies its own pseudo-gradient. A paused peer takes no part in exchanges; on resume it takes
the newest anchor the same way, and its half-done round goes out at the next round's end.

The backbone runs this class too (``role="backbone"``): it computes nothing, joins every round
with weight 0, receives the average, takes the same outer step, and serves the outer state; it
observes each round it took part in through ``on_landed`` (its metrics and scores, ``backbone``).
Catching up and repair, where a peer takes the outer state others hold, are ``mend``.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.averaging import AveragingResult, ColumnRequest
from core.averaging.sharing.state import PackedState
from core.codecs import Codec
from core.config.roles import BACKBONE, CLIENT, ROLES
from core.modes.clock import RoundClock
from core.training.diloco.checks import RoundLedger, Start
from core.training.diloco.checks.replayer import RoundReplayer
from core.training.diloco.groups import Groups, bucket_key, plan_groups
from core.training.diloco.groups import Member as GroupMember
from core.training.diloco.late import Carried
from core.training.diloco.mend import Mending
from core.training.diloco.state import DilocoState
from core.training.diloco.unsent import UnsentFile, UnsentWork
from core.training.links import PeerLinks
from core.training.moderation.rollback import round_key
from core.training.participation import Participation, TakingPart
from core.training.progress import KEEPALIVE, RECORD_TTL, CollaborationView, PeerProgress
from core.trust.peer_id import PeerID
from core.util.errors import BarnraiseError
from core.util.tasks import BackgroundTasks
from core.worker.events import PeerEpoch
from core.worker.gate import Gate

log = logging.getLogger(__name__)

REPORTS_KEPT = 1000
PUBLISH_EVERY = 2 * KEEPALIVE
"""Seconds between two of our records: a record lives ``RECORD_TTL`` (10 s), so one lost store
still leaves it alive. Each record is signed anew and every reader checks every record it
reads (n squared checks in a swarm of n), for figures (samples, speed) that diloco needs only at
a round's end, where it publishes anyway."""
LAST_CHANCE = 0.5
"""Seconds a member that reaches matchmaking after the round's window still looks for a group
(a group closing just then may take it)."""
GATE_LEAD = 1.0
"""Seconds before a round's end that the exchange gate is held (``DilocoOptimizer.gate``): the
unit of background work in flight then (a replay's inner step) ends before matchmaking opens."""


def reads_every(round_seconds: float) -> float:
    """Seconds between two reads of the others' records: twice a round, and no more often than
    every 5 s. Each round's end reads them anyway (what the round's groups are planned from),
    and the read in its second half is what a peer apart from most mends by (``mend``); every
    read brings every peer's record, so in a swarm of n the peers holding the records serve n
    times n of them each time."""
    return max(5.0, round_seconds / 2)


@dataclass(frozen=True)
class Landing:
    """A round this peer averaged with a group (``DilocoOptimizer.on_landed``)."""

    epoch: int
    result: AveragingResult
    landed: bool
    """The round moved this peer's outer parameters (else its work waits for a later one)."""
    members: frozenset[str] = frozenset()
    """Everyone the round's plan dealt into its groups, this peer and the other groups too."""


@dataclass(frozen=True)
class DilocoConfig:
    round_seconds: float
    role: str = "trainer"
    """trainer, client (no incoming connections) or backbone (computes nothing)."""
    matchmaking_time: float = 5.0
    refresh_interval: float = 5.0
    """How often the others' progress is read between round ends (``reads_every`` for a round's
    length)."""
    state_timeout: float = 120.0
    retry_cap: float = 15.0
    unsent_file: Path | None = None
    """Where a trainer keeps its unsent work across a restart (None: it is lost on a stop)."""
    unsent_every: float = 60.0
    """Seconds between two writes of the residual to ``unsent_file`` after a landing (a crash
    then loses at most the work since: the rounds' own, not what waits in the residual)."""
    keep_rounds: bool = False
    """A trainer keeps receipts of its last rounds and serves them to checkers
    (``checks.RoundLedger``; the state must then start every round afresh:
    ``DilocoState(fresh_moments=True)``)."""
    steps_per_round: float | None = None
    """The collaboration's inner steps per round, where rounds are ended by their count rather
    than the clock (``end_round`` called after so many steps: a benchmark's, a test's); None:
    estimated from the trainers' speeds over ``round_seconds``."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        if not self.round_seconds > 0:
            raise ValueError("round_seconds must be above 0")
        if self.steps_per_round is not None and not self.steps_per_round > 0:
            raise ValueError("steps_per_round must be above 0")


class DilocoOptimizer(TakingPart):
    rounds_kept: RoundLedger | None = None
    """Our round receipts, once the training loop keeps them (``keep_receipts``)."""
    fallback: Callable[[int], Awaitable[Path | None]] | None = None
    """Unused by diloco (its checkpoints hold the outer state in another layout); kept for the
    roles' interface."""

    def __init__(
        self,
        state: DilocoState,
        links: PeerLinks,
        config: DilocoConfig,
        *,
        codec: Codec | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``codec``: what pseudo-gradients travel in (None: the averager's); ``clock``: Unix
        time, where rounds end (a test's fake clock)."""
        self.diloco = state
        self.state = state.state
        self.links = links
        # the last confirmed round's typical claim bounds each round's medians, so that no swarm of
        # tiny identities drags them down nor half of the senders' inflated claims lift them
        links.averager.confirmed_claim = links.board.confirmed_claim
        self.bridge, self.board = links.bridge, links.board
        self.config = config
        self.codec = codec if codec is not None else links.averager.config.codec
        self.rounds = RoundClock(config.round_seconds)
        self._now = clock
        self.reports: deque[PeerEpoch] = deque(maxlen=REPORTS_KEPT)
        self._tasks = BackgroundTasks(f"diloco/{links.averager.host.peer_id.short()}")
        self.part = Participation(
            links, config.role, snapshot=None, retry_cap=config.retry_cap, tasks=self._tasks
        )
        """Our records, our pause, our waits and our state offer (shared with dedloc)."""
        self.last_bytes_sent = self.last_bytes_received = 0
        """Chunk bytes this peer sent and received in its last exchange (the dashboard's
        figures)."""
        self.bytes_sent = self.bytes_received = 0
        self.exchange_seconds, self.rounds_missed = 0.0, 0
        """Time spent in exchanges, all of them (overlapped or not), and the rounds whose
        exchange did not land."""
        self._peer = self.part.peer
        # held for any torch work on the model: an inner step, a round's end, a landing
        self._lock = asyncio.Lock()
        self._stopping = self._said_slow = False
        self.mending = Mending(
            state,
            self.part,
            self._lock,
            state_timeout=config.state_timeout,
            view=self.view,
            refresh=self._refresh,
            moved=self._taken,
            stopping=lambda: self._stopping,
        )
        """Catching up with the collaboration, and repair (``mend``)."""
        self._tally = self.part.tally
        """Samples since the last round's end (their work is in the model, not yet sent)."""
        self._carried = Carried()
        """Samples whose work did not land yet: it goes out with a later round."""
        self._batch = 0
        """The last inner step's samples (what a round's steps are counted in)."""
        path = config.unsent_file
        self.unsent = (
            UnsentFile(path, every=config.unsent_every, tasks=self._tasks)
            if path is not None
            else None
        )
        """Where this trainer keeps its unsent work across a restart (None: nowhere)."""
        self.tamper: Callable[[list[torch.Tensor]], None] | None = None
        """Changes the pseudo-gradient before it goes out: only a peer that misbehaves on
        purpose has one (``core.swarm.byzantine``: the demo, the tests, the benchmark)."""
        self.claim = 1.0
        """Samples claimed per sample computed: above 1 only in a peer misbehaving on purpose."""
        # only a free rider on purpose has one (core.swarm.byzantine); asked before each inner
        # step with the epoch of its parameters, True drops the step's gradient and counts it
        self.rides: Callable[[int], bool] | None = None
        self.evidence = self.part.evidence
        """Where what our rounds found against others is signed and published."""
        self.on_landed: Callable[[Landing], None] | None = None
        """Told of every round this peer averaged with a group, landed or not (the backbone's
        metrics and scores observe them)."""
        self.on_taken: Callable[[], None] | None = None
        """Told when the outer parameters moved by a download (a catch-up or a repair), once our
        record says so (a backbone with round checks keeps the anchor it took)."""
        # replays members' rounds when the backbone asks (``replay_for_backbone``)
        self.replayer: RoundReplayer | None = None
        self._exchange: asyncio.Task[None] | None = None
        self.gate = Gate()
        """Held from just before each round's end until its exchange lands or fails: background
        torch work in this process that would slow the exchange waits at it (a backbone's
        replays of its members' rounds)."""
        self._pending_reports: deque[PeerEpoch] = deque(maxlen=REPORTS_KEPT)
        """Landed rounds' reports until ``step`` hands them to the training loop."""

    @property
    def epoch(self) -> int:
        return self.diloco.epoch

    @property
    def waiting_samples(self) -> int:
        """Samples computed here whose work has not landed yet (credited when it does)."""
        return self._carried.samples + self._tally.samples

    @property
    def offloadable(self) -> None:
        """Nothing of ours moves with a pause: the round's work lives in the model itself."""
        return None

    @property
    def exchanging(self) -> bool:
        return self._exchange is not None and not self._exchange.done()

    @property
    def repairs(self) -> int:
        """Times this peer took the outer parameters most peers at its epoch held (``mend``)."""
        return self.mending.repairs

    async def settle(self) -> None:
        """Wait for the exchange in flight, if any, to land (or to fail)."""
        if self._exchange is not None:
            await asyncio.gather(self._exchange, return_exceptions=True)

    # ---- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve our outer state, report, catch up if the collaboration is ahead, start the
        round clock."""
        self.mending.mark()  # the backbone resumed from a checkpoint before this
        await self.part.offer_packed(lambda: self.epoch, self._pack)
        await self._publish()
        await self._refresh()
        if self.mending.behind():
            await self.mending.catch_up()
        await self._take_unsent()
        self._tasks.spawn("publish", self._publish_loop())
        self._tasks.spawn("rounds", self._round_loop())

    async def pause(self) -> None:
        """Step aside: no more exchanges until resumed; the round's work so far stays."""
        if self.part.step_aside():
            await self._publish()

    async def resume(self) -> None:
        if not self.part.come_back():
            return
        await self._refresh()
        await self._publish()
        if self.mending.behind():
            await self.mending.catch_up()

    def interrupt(self) -> None:
        self._stopping = True

    async def close(self) -> None:
        await self.settle()
        if self.unsent is not None:
            await self.unsent.settle()
        await self._tasks.close()
        if self.replayer is not None:
            await self.replayer.bridge.aclose()
        if self.rounds_kept is not None:
            await self.rounds_kept.linger.settle()  # a replay's calls may be on their way
            self.rounds_kept.leave()  # the host answers until it closes: a check then is not refused
        await self.part.leave(self._progress())
        if self.unsent is not None:
            async with self._lock:
                delta = await self.bridge.run(self.diloco.unsent)
                samples = self._tally.take()[0] + self._carried.take()
            await self.unsent.keep(UnsentWork(delta, samples, self.epoch))
            if samples:
                log.info("kept %d samples' unsent work in %s for the next start", samples,
                         self.unsent.path)  # fmt: skip

    async def _copy_residual(self) -> UnsentWork | None:
        """What has not landed yet, copied on the training thread (None when nothing)."""
        residual = await self.bridge.run(lambda: [r.copy() for r in self.diloco.residual or []])
        if not any(np.any(r) for r in residual):
            return None
        return UnsentWork(residual, self._carried.samples, self.epoch)

    async def _take_unsent(self) -> None:
        if self.unsent is None:
            return
        work = await self.unsent.take([a.shape for a in self.diloco.anchor])
        if work is None:
            return
        async with self._lock:
            await self.bridge.run(self.diloco.carry, work.arrays)
            self._carried.add(work.samples, self.epoch)
        log.info("%d samples' unsent work from before the restart (epoch %d) go out with the "
                 "next round", work.samples, work.epoch)  # fmt: skip

    # ---- the training loop's side ----------------------------------------------------------------

    async def step(self, batch_size: int, loss: float | None = None) -> PeerEpoch | None:
        """One inner step with the gradients in ``.grad``; returns a landed round's report."""
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if self.config.role == BACKBONE:
            raise BarnraiseError("the backbone computes no inner steps")
        while True:
            if self._landing_ahead():
                # without overlap the round lands on theta itself: an inner step taken meanwhile
                # would be overwritten, so the device waits for the exchange
                await self.settle()
                self._tally.last_step_at = None  # the wait is not this device's speed
            async with self._lock:
                if self._landing_ahead():
                    continue  # a round ended while this step waited for the lock: it lands first
                await self._inner_step(batch_size, loss)
                break
        if self._pending_reports:
            return self._pending_reports.popleft()
        return None

    def _landing_ahead(self) -> bool:
        """Without overlap, an exchange is in flight: its landing moves theta to the anchor."""
        return not self.diloco.overlap and self.exchanging

    async def _inner_step(self, batch_size: int, loss: float | None) -> None:
        """Under the lock: the inner step, or the gradient left out (round receipts)."""
        kept = self.rounds_kept
        if kept is not None and not kept.started:
            kept.begin(self._round_start())
        if kept is not None and kept.stale:
            # computed at other parameters than this round's (the last round's, as it ended): no
            # replay from its anchor gives its step, so it is left out (about one microbatch a
            # round)
            await self.bridge.run(self.diloco.drop_gradients)
            kept.discard()
            return
        if self.rides is not None and self.rides(self.epoch):
            await self.bridge.run(self.diloco.drop_gradients)  # a step of nothing, counted
        stepped = await self.bridge.run(self.diloco.inner_step)
        if kept is not None:
            kept.stepped(stepped)
        if stepped:
            self._count(batch_size, loss)

    def view(self) -> CollaborationView:
        return self.board.view(self.part.records, self._progress(), 1)

    # ---- rounds ----------------------------------------------------------------------------------

    async def _round_loop(self) -> None:
        while not self._stopping:
            now = self._now()
            ends = now + self.rounds.until_end(now)
            await asyncio.sleep(max(0.0, ends - GATE_LEAD - now))
            with self.gate.held():  # the exchange holds it too, from its start to its landing
                await asyncio.sleep(max(0.0, ends - self._now()))
                if self.paused:
                    continue  # a paused peer keeps its work for after the pause
                try:
                    await self.end_round(ended=ends)
                except BarnraiseError as exc:
                    log.warning("diloco round at epoch %d: %s", self.epoch, exc)

    async def end_round(self, ended: float | None = None) -> None:
        """End the round now: the pseudo-gradient goes out (in the background with overlap).

        ``ended``: when the round ended on the shared clock (None: now). Every member's
        matchmaking window closes ``matchmaking_time`` after it, so that a member that reached it
        late (a busy machine, a download first) closes its group when the others stop waiting,
        not a whole window after them."""
        now = self._now()
        since = 0.0 if ended is None else now - ended
        until = asyncio.get_running_loop().time() + self.config.matchmaking_time - since
        await self.settle()  # one exchange in flight at most
        if self.mending.task is not None:
            await asyncio.gather(self.mending.task, return_exceptions=True)
        began = self.epoch  # the anchor this round's work was computed on
        if self.unsent is not None:
            await self.unsent.void()  # the residual goes out now: a copy kept must not return
        await self._refresh()
        if self.mending.behind():
            await self.mending.catch_up()  # others landed a round we missed: their anchor first
        elif (held := self.mending.majority()) is not None:
            await self.mending.repair(held)  # most peers at our epoch took another mean than ours
        async with self._lock:
            computed, loss_sum, mini_steps = self._tally.take()
            # a round that computed nothing keeps its residual whole (no new work to decay it by)
            # beside the microbatch in flight: a slow device's round ends at the round's time,
            # and that microbatch's step (which waits for our lock) counts in the next round
            read = self.bridge.run_beside if self.diloco.on_cpu else self.bridge.run
            if self.rounds_kept is not None:  # filed before its exchange: before any draw
                await read(self._seal_round)
            delta = await read(lambda: self.diloco.end_round(decay=computed > 0))
            if self.tamper is not None:
                await read(self.tamper, [torch.from_numpy(d) for d in delta])
            if computed:
                self._carried.add(computed, began)
            samples = self._carried.samples
            epoch = self.epoch
            self.part.last = (epoch, loss_sum, mini_steps, samples)
            self._exchange = self._tasks.spawn(
                f"exchange-{epoch}", self._run_exchange(delta, samples, epoch, until), awaited=True
            )
            if self.diloco.anchored:
                # the next round starts where every peer stands; on the training thread, behind
                # the microbatch in flight, so only once the exchange is on its way: a slow device
                # waiting for it first would reach matchmaking late and miss its group
                await self.bridge.run(self.diloco.restart_at_anchor)
                self._moved()
        await self._publish()
        if not self.diloco.overlap:
            await self.settle()

    async def _run_exchange(self, delta: list[Any], samples: int, epoch: int, until: float) -> None:
        """Average ``delta`` with this round's group and land it; ``until``: the event loop's time
        when the round's matchmaking window closes (its columns' a window later)."""
        with self.gate.held():
            await self._exchange_and_land(delta, samples, epoch, until)

    async def _exchange_and_land(
        self, delta: list[Any], samples: int, epoch: int, until: float
    ) -> None:
        started = time.monotonic()
        view = self.view()
        others = [p for p in view.peers if p.peer != self._peer and p.training]
        groups = self._groups(view, epoch)
        key = round_key("diloco", epoch, self.state.rollback)
        # beside a microbatch in flight, as the round's end reads the parameters: behind it, a
        # slow device would reach matchmaking a whole microbatch late, after its group formed
        beside = self.bridge.run_beside if self.diloco.on_cpu else self.bridge.run
        left = await beside(self.diloco.feedback)
        result: AveragingResult | None = await self.links.round(
            delta,
            weight=samples * self.claim,
            round_key=bucket_key(key, groups, self._peer),
            timeout=max(LAST_CHANCE, until - asyncio.get_running_loop().time()),
            expected=groups.size_of(self._peer),
            codec=self.codec,
            feedback=left,
            columns=self._columns(key, groups, until + self.config.matchmaking_time),
            rank=groups.ranks.get(self._peer),
        )
        seconds = time.monotonic() - started
        self.exchange_seconds += seconds
        if result is not None:
            self.last_bytes_sent = result.bytes_sent
            self.bytes_sent += result.bytes_sent
            self.last_bytes_received = result.bytes_received
            self.bytes_received += result.bytes_received
        if result is not None and result.findings:  # in the background: nobody waits for it
            key = round_key("diloco", epoch, self.state.rollback)
            self._tasks.spawn(f"evidence-{epoch}", self.evidence.publish(result, key))
        per_round = self._steps_per_round(view)
        landed, summary, group = await self._outcome(
            result, delta, left, others=others, epoch=epoch, per_round=per_round
        )
        if result is not None and self.on_landed is not None:
            self.on_landed(Landing(epoch, result, landed, frozenset(groups.of)))
        # most of our work landed (all of it alone): its samples are credited now, and what of it
        # the mean lacks goes out with a later round (without new samples)
        credits = landed and (
            result is None or result.included_elements * 2 >= result.total_elements
        )
        if self.tamper is not None:
            # what of its attack did not land, a misbehaving peer does not send again (it would
            # compound its own attack), nor claim the samples of it: otherwise honest, it would
            # go out with every screened round's samples added up, and CenteredClip weighs by them
            await self.bridge.run(self.diloco.forget_residual)
            if not credits:
                self._carried.take()
        if not landed:
            self.rounds_missed += 1
            if samples:
                log.warning("round at epoch %d: %s; this peer's %d samples of it go out with a "
                            "later round", epoch, summary, samples)  # fmt: skip
            return
        credited, late = self._carried.land(epoch) if credits else (0, 0)
        if credited:
            self.landed.add(epoch, round(credited * self.claim), self._began(epoch))
        weight = result.group_weight if result is not None else float(samples)
        sent = result.bytes_sent if result is not None else 0
        anchor = self.diloco.digest
        report = PeerEpoch(
            epoch, credited, group, result is not None, summary, seconds, weight, sent, anchor,
            late,
        )  # fmt: skip
        self.reports.append(report)
        self._pending_reports.append(report)
        if self.unsent is not None:
            self.unsent.keep_soon(self._copy_residual)
        if result is not None and self.config.role == BACKBONE:
            # what the backbone's confirmation lists: who may confirm while it is away, or a
            # round the other groups landed without it
            counted = {str(p): result.capped.get(p, w) for p, w in result.weights.items()}
            self.board.landed_with(epoch, counted, {p.peer for p in self.view().peers})
            self.board.rollback = self.state.rollback
        await self._announce()

    async def _outcome(
        self,
        result: AveragingResult | None,
        delta: list[Any],
        left: list[Any],
        *,
        others: list[PeerProgress],
        epoch: int,
        per_round: float,
    ) -> tuple[bool, str, int]:
        """Land the round, or keep its work for a later one: (landed, what happened, group size)."""
        diloco = self.diloco
        async with self._lock:
            if self.epoch != epoch:
                # a newer anchor was taken meanwhile: it holds what landed of ours, if anything
                if result is not None and result.averaged_elements:
                    missing = result.missing
                    await self.bridge.run(lambda: diloco.landed_elsewhere(delta, left, missing))
                else:
                    await self.bridge.run(diloco.missed, delta)
                return False, f"the collaboration moved on to epoch {self.epoch}", 0
            if result is None:
                if others or not self._carried.samples:
                    await self.bridge.run(diloco.missed, delta)
                    return False, "no group formed", 0
                await self.bridge.run(diloco.land_alone, delta, per_round)
                self.state.epoch = epoch + 1
                self._moved()
                self.mending.mark()
                return True, "no group: this peer's own pseudo-gradient", 1
            if result.averaged_elements == 0 or result.group_weight <= 0:
                await self.bridge.run(diloco.missed, delta)
                return False, result.summary(), 0
            if len(result.members) == 1 and result.column_groups < 2 and others:
                # a group of one that met no other group, while others train, is no round: its
                # work waits for one with them (min_group_size 1 lets such groups form). Its
                # "mean" is its own values as sent; with what they left out, all of its work
                await self.bridge.run(lambda: diloco.missed(delta, left))
                return False, "no group formed", 0
            # whatever a reducer failed or left out: the members that averaged a range share its
            # mean, and each keeps what of its own it lacks (members of other groups, and the
            # late, carry theirs to a later round)
            missing = result.missing
            await self.bridge.run(lambda: diloco.land(delta, left, missing, per_round))
            self.state.epoch = epoch + 1
            self._moved()
            self.mending.mark()
            return True, result.summary(), len(result.members)

    def _groups(self, view: CollaborationView, epoch: int) -> Groups:
        """The round's groups (``groups``): everyone fresh at its epoch or one behind (who catches
        up first), the backbone too; one group when reducers are verified (a verified reducer's
        mean must hold its own group's values only, so groups cannot average across)."""
        config = self.links.averager.config
        members = [
            GroupMember(p.peer, p.role != CLIENT)
            for p in view.peers
            if (p.training or p.role == BACKBONE) and epoch - 1 <= p.epoch <= epoch
        ]
        # a trainer nobody can dial averages as a client: it cannot lead, whatever its role
        leads = self.config.role != CLIENT and not config.client_mode
        members.append(GroupMember(self._peer, leads))
        size = None if config.verification.enabled else config.target_group_size
        return plan_groups(members, epoch, size)

    def _columns(self, key: str, groups: Groups, until: float) -> ColumnRequest | None:
        """A round of several groups: each slot's reducers average it across them
        (``core.averaging.round.columns``), one model. A column may wait for the slowest group
        to form as well as for its own: until a window after the groups' (``until``, the event
        loop's time). Its reducers gather at the first planned group's."""
        size = self.links.averager.config.target_group_size
        if groups.count < 2 or size is None:
            return None
        timeout = 2 * self.config.matchmaking_time
        return ColumnRequest(
            key, size, groups.count, timeout, until=until, rank=groups.of[self._peer]
        )

    def _steps_per_round(self, view: CollaborationView) -> float:
        """The collaboration's inner steps per round: as configured, else the median of what the
        trainers' speeds make of a round (this peer's own steps when no speed is known)."""
        if self.config.steps_per_round is not None:
            return self.config.steps_per_round
        speeds = [p.samples_per_second for p in view.peers if p.training]
        speeds = [speed for speed in speeds if speed > 0]
        if not speeds or self._batch <= 0:
            return float(self.diloco.last_round_steps)
        return statistics.median(speeds) * self.config.round_seconds / self._batch

    async def _pack(self) -> PackedState:
        """Our outer state, packed for a downloader on the training thread (the landing that
        moves it runs there too)."""
        rollback = self.state.rollback
        async with self._lock:
            return await self.bridge.run(lambda: self.diloco.packed(rollback))

    # ---- progress records ------------------------------------------------------------------------

    def _count(self, batch_size: int, loss: float | None) -> None:
        self._batch = batch_size
        gap = self._tally.count(batch_size, loss)
        if gap is not None and gap > self.config.round_seconds and not self._said_slow:
            self._said_slow = True
            log.warning("an inner step takes %.1f s here, longer than a round "
                        "([training] round_seconds = %g): rounds end before this device "
                        "computes a batch, so its work arrives rounds late; the project's "
                        "organizers should make rounds longer", gap,
                        self.config.round_seconds)  # fmt: skip

    def _progress(self) -> PeerProgress:
        epoch, digest = self.mending.held
        return self.part.record(
            self.epoch, self._tally.samples, digest if epoch == self.epoch else ""
        )

    async def _publish(self) -> None:
        await self.part.publish(self._progress())

    async def _announce(self) -> None:
        """The outer parameters moved: our record and our state's announcement say so now."""
        await self._publish()
        await self.part.announce(self.epoch)

    async def _taken(self) -> None:
        self._keep_anchor()
        await self._announce()
        if self.on_taken is not None:
            self.on_taken()

    async def _refresh(self) -> None:
        """Read the others' records, keeping for each peer the newest one seen: a read that
        finds fewer records than there are (a DHT lookup that timed out under load) must not
        make this peer think it is alone and land a round by itself. Records age out of the view
        by their time (``ProgressBoard.view``), and out of memory after ``RECORD_TTL``."""
        fetched = await self.part.read()
        if fetched is None:
            return
        now = time.time()
        newest = {r.peer: r for r in self.part.records if now - r.time <= RECORD_TTL}
        for record in fetched:
            if record.peer not in newest or record.time >= newest[record.peer].time:
                newest[record.peer] = record
        self.part.records = list(newest.values())

    async def _publish_loop(self) -> None:
        """Our record every ``PUBLISH_EVERY`` (and at each round's end: what a round needs of
        it, the epoch and the digest, is fresh then), theirs every ``refresh_interval``."""
        published_at = read_at = time.monotonic()
        while True:
            due_publish = published_at + PUBLISH_EVERY
            due_read = read_at + self.config.refresh_interval
            await asyncio.sleep(max(0.0, min(due_publish, due_read) - time.monotonic()))
            now = time.monotonic()
            if self.paused:
                published_at = read_at = now
                continue
            steps: list[Awaitable[None]] = []
            if now >= due_publish:
                published_at = now
                steps.append(self._publish())
            if now >= due_read:
                read_at = now
                steps.append(self._refresh())
            await asyncio.gather(*steps)
            if now < due_read:
                continue
            held = self.mending.due(
                until_end=self.rounds.until_end(self._now()),
                round_seconds=self.config.round_seconds,
                idle=not (self.exchanging or self.paused or self._stopping),
            )
            if held is not None:
                mending = self.mending
                mending.task = self._tasks.spawn(f"mend-{self.epoch}", mending.repair(held))

    def keep_receipts(self, precision: str) -> Callable[[Any, float], None] | None:
        """Start keeping receipts of our rounds, computed in ``precision``, and serving them
        (``checks.RoundLedger``); what the training loop calls after each backward pass (None:
        this project replays no rounds, and its backbone scores their updates instead,
        ``core.training.credit.scores``)."""
        if not self.config.keep_rounds or self.config.role == BACKBONE:
            return None
        self.rounds_kept = ledger = RoundLedger(precision)
        ledger.serve(self.links.averager.host)
        return ledger.witness

    def _round_start(self) -> Start:
        d = self.diloco
        return Start(self.epoch, d.digest, d.schedule, d.per_round, d.at_anchor, d.moves)

    def _moved(self) -> None:
        """Under the lock: the parameters moved as a replay moves them too (a landing; with
        overlap, a round's start at the anchor): the receipts note where, and a replayer keeps
        the anchor."""
        if self.rounds_kept is not None:
            self.rounds_kept.moved(self._round_start())
        self._keep_anchor()

    def replay_for_backbone(self, replayer: RoundReplayer) -> None:
        """Replay members' rounds when the backbone asks (``checks.replayer``), from the anchors
        this trainer's own rounds begin at."""
        if self.config.role == BACKBONE:
            raise ValueError("the backbone replays rounds itself")
        self.replayer = replayer
        replayer.give_way = partial(self.gate.wait, self.config.round_seconds)
        replayer.asks = self._is_backbone
        replayer.serve()
        self._keep_anchor()

    def _is_backbone(self, peer: PeerID) -> bool:
        """Whether ``peer``'s record says it is the backbone, and in a project whose manifest
        names the keys that confirm its epoch, it holds one of them (anyone can publish a record
        that says "backbone")."""
        name = str(peer)
        confirmers = self.board.confirmers
        if confirmers and name not in confirmers:
            return False
        return any(p.peer == name and p.role == BACKBONE for p in self.view().reports)

    def _keep_anchor(self) -> None:
        replayer, diloco = self.replayer, self.diloco
        if replayer is None:
            return
        epoch, digest = self.epoch, diloco.digest
        kept = replayer.anchors.get(epoch)
        if kept is not None and kept.state == digest:
            return  # a round's start at the anchor it kept already (overlap)
        # read on the training thread, where the anchor moves: the epoch, digest and arrays of
        # one anchor (a replay from a mixed one would make an honest replayer look a liar)
        self._tasks.spawn(
            f"replay-anchor-{epoch}",
            self.bridge.run(lambda: replayer.began(diloco.epoch, diloco.digest, diloco.anchor)),
        )

    def _began(self, epoch: int) -> str | None:
        """Where the round of ``epoch`` began, for the records, if a checker can replay it (what
        its receipt says: a record that said otherwise would be caught)."""
        sealed = None if self.rounds_kept is None else self.rounds_kept.sealed(epoch)
        if sealed is None or not sealed.receipt.replayable:
            return None
        return sealed.receipt.state

    def _seal_round(self) -> None:
        """On the training thread, as the round ends: file its receipt with its work."""
        assert self.rounds_kept is not None
        d = self.diloco
        carried = self._carried
        self.rounds_kept.seal(
            d.round_work(), d.digest, self.epoch, carried.samples, carried.since,
            now=self._round_start(),
        )  # fmt: skip

    def fresh(self, batch: Any) -> bool:
        """Every batch is new: a replay takes each inner step's batch as it comes, and one met
        twice in a round is two steps at different parameters. Called on the training thread
        before the batch's forward pass: the round receipts note which parameters it is
        computed at (``RoundLedger.computing``)."""
        if self.rounds_kept is not None:
            self.rounds_kept.computing(self.diloco.moves)
        return True

    def tryout_weights(self) -> dict[str, np.ndarray]:
        """On the training thread: the outer parameters by name (the live anchor), what "Try the
        model" answers from. They are ``epoch``'s, where the model's own move with every inner
        step and hold this peer's work that no round has averaged yet."""
        trainable = (name for name, p in self.state.model.named_parameters() if p.requires_grad)
        return dict(zip(trainable, self.diloco.anchor, strict=True))
