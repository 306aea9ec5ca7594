"""ReplicaRollback: applying a verified rollback order to one replica of the state.

Trainers and the backbone each hold a replica of the collaboration's state; every one of them must
end on checkpoint N's state, and the collaboration must go on numbering its epochs upwards (progress
records, the ledger and the leaderboard count epochs and never go back). An order therefore means
"checkpoint N's tensors, at a new epoch": a replica that applies it first takes checkpoint N and
continues at one past the newest epoch it knows of; the others take that rolled-back state from it.

How a replica gets there, in order (one ``apply`` call tries each once):

1. a peer already holds a state that applied this order (or a later one): it is downloaded through
   the ordinary state sharing, refusing any other, and kept at the higher of its epoch and ours;
2. checkpoint N is in this peer's own store (the backbone, which writes the checkpoints): loaded;
3. the organizers' published checkpoint (``network.checkpoint_url``) is checkpoint N: loaded (tried
   once per order, since only the latest published checkpoint is there, and it is rarely N).

Otherwise the order waits: a trainer stops contributing (``waiting_for`` says why) and retries with
backoff, the backbone keeps following the trainers. A replica that cannot apply an order within
``patience`` gives it up with a warning and trains on; a rolled-back state that shows up later still
reaches it through the ordinary catch-up (a newer epoch), and it refuses states from before any
order it applied. If no backbone holds checkpoint N the order changes nothing: the moderators see the
warning in the backbone's log and can order a checkpoint that exists.

Only a replica whose state was past checkpoint N was rolled back, and only its owner hears of it
(``on_applied``: the event log); a newcomer that takes the rolled-back state while catching up was
not, and applies the order silently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from core.averaging.sharing.state import StateDownloadError
from core.averaging.sharing.vouching import Vouching
from core.net.host.gate import AccessGate
from core.training.checkpoints import Checkpoint, CheckpointStore
from core.training.links import PeerLinks
from core.training.local import LocalWork
from core.training.moderation.rollback import OrderReader, applied_of
from core.trust.rollback import RollbackOrder
from core.util.errors import BarnraiseError
from core.worker.events import PeerRolledBack

log = logging.getLogger(__name__)

PATIENCE = 600.0
"""Seconds a replica waits for a way to apply an order before it gives the order up."""


@dataclass(frozen=True)
class RolledBack:
    """One order applied to this replica: what the owner's event log says."""

    order: RollbackOrder
    epoch: int
    """The epoch training goes on at (above every epoch before: numbered on, not back)."""
    source: str
    """Where checkpoint N's state came from, in words."""

    def event(self) -> PeerRolledBack:
        """The event that tells the replica's owner."""
        order = self.order
        return PeerRolledBack(order.to_epoch, self.epoch, order.sequence, order.reason, self.source)

    def describe(self) -> str:
        reason = f": {self.order.reason}" if self.order.reason else ""
        return (
            f"Rolled back to the checkpoint of epoch {self.order.to_epoch} by the moderators"
            f"{reason} (from {self.source}; training goes on at epoch {self.epoch})"
        )


class ReplicaRollback:
    @classmethod
    def following(
        cls,
        gate: AccessGate | None,
        local: LocalWork,
        links: PeerLinks,
        *,
        checkpoints: CheckpointStore | None = None,
        published: Callable[[int], Awaitable[Path | None]] | None = None,
        on_applied: Callable[[RolledBack], None] | None = None,
    ) -> ReplicaRollback | None:
        """Following the moderators' rollback orders, which the pass keeper leaves on ``gate``,
        verified with the project key (None in an open project: no key signs any)."""
        if gate is None:
            return None
        orders = OrderReader(lambda: gate.rollback_order, gate.project, gate.project_key)
        return cls(
            orders,
            local,
            links,
            checkpoints=checkpoints,
            published=published,
            on_applied=on_applied,
        )

    def __init__(
        self,
        orders: OrderReader,
        local: LocalWork,
        links: PeerLinks,
        *,
        checkpoints: CheckpointStore | None = None,
        published: Callable[[int], Awaitable[Path | None]] | None = None,
        on_applied: Callable[[RolledBack], None] | None = None,
        state_timeout: float = 60.0,
        patience: float = PATIENCE,
    ) -> None:
        self.orders = orders
        self.local = local
        """The replica's torch work: loading drops a trainer's accumulated gradients too."""
        self.state = local.state
        self.links = links
        self.checkpoints = checkpoints
        self.published = published
        self.on_applied = on_applied
        self.state_timeout = state_timeout
        self.patience = patience
        self.applied: list[RolledBack] = []
        self._first_seen: dict[int, float] = {}
        self._given_up = 0
        self._published_tried = 0

    def pending(self) -> RollbackOrder | None:
        """The order this replica has yet to apply (verified), or None."""
        order = self.orders.pending(self.state.rollback)
        if order is None or order.sequence <= self._given_up:
            return None
        if order.sequence not in self._first_seen:
            self._first_seen[order.sequence] = time.monotonic()
            log.info("received %s", order.describe())
        return order

    async def apply(self, order: RollbackOrder, newest: int) -> RolledBack | str:
        """Try once to put this replica on ``order``'s checkpoint; ``newest``: the newest epoch
        this peer knows the collaboration to be at. Returns what was done, or why not yet."""
        wanted, previous = order.sequence, self.state.epoch
        try:
            # the donors that applied the order hold the checkpoint it names: taken when every
            # one of them that answers agrees (the organizers' own file is the fallback below)
            got = await self.links.sharing.download(
                timeout=self.state_timeout,
                accept=lambda meta: applied_of(meta) >= wanted,
                vouching=Vouching(settled=lambda _: True),
            )
        except (StateDownloadError, TimeoutError) as exc:
            from_peers = str(exc) or "timed out"
        else:
            epoch = max(got.version, self.state.epoch)
            try:
                await self.links.bridge.run(self.local.load, epoch, got.tensors)
            except ValueError as exc:
                from_peers = f"the rolled-back state does not fit this model: {exc}"
            else:
                self.state.rollback = applied_of(got.metadata)
                donors = ", ".join(p.short() for p in got.donors)
                return await self._done(order, f"peer(s) {donors}", previous)
        checkpoint, why = await self._checkpoint(order)
        if checkpoint is None:
            return f"waiting for {order.describe()}: no peer has it yet ({from_peers}); {why}"
        epoch = max(newest, self.state.epoch) + 1
        try:
            await self.links.bridge.run(self._take, checkpoint, epoch, wanted)
        except (RuntimeError, KeyError, ValueError) as exc:  # torch's words for "does not fit"
            return f"waiting for {order.describe()}: {why} does not fit this model: {exc}"
        return await self._done(order, why, previous)

    def give_up_if_late(self, order: RollbackOrder, reason: str) -> bool:
        """True (and a warning) once ``order`` has waited longer than ``patience``."""
        since = self._first_seen.get(order.sequence, time.monotonic())
        if time.monotonic() - since < self.patience:
            return False
        self._given_up = max(self._given_up, order.sequence)
        log.warning(
            "gave up %s after %.0f s, training goes on without it: %s",
            order.describe(),
            self.patience,
            reason,
        )
        return True

    async def _checkpoint(self, order: RollbackOrder) -> tuple[Checkpoint | None, str]:
        """Checkpoint N from our store or the published URL, with where it came from (or why
        neither has it)."""
        wanted = order.to_epoch
        why = f"this peer keeps no checkpoint of epoch {wanted}"
        store = self.checkpoints
        if store is not None:
            path = store.path_for(wanted)
            if path.is_file():
                try:
                    checkpoint = await self.links.bridge.run(CheckpointStore.load, path)
                except BarnraiseError as exc:
                    why = str(exc)
                else:
                    if checkpoint.epoch == wanted:
                        return checkpoint, f"this backbone's checkpoint {path.name}"
                    why = f"{path} holds epoch {checkpoint.epoch}, not {wanted}"
            else:
                why = f"{store.directory} holds no checkpoint of epoch {wanted}"
        if self.published is None or self._published_tried >= order.sequence:
            return None, why
        self._published_tried = order.sequence
        try:
            fetched = await self.published(wanted - 1)
            if fetched is None:
                return None, f"{why}, and the published checkpoint is older than epoch {wanted}"
            checkpoint = await self.links.bridge.run(CheckpointStore.load, fetched)
        except BarnraiseError as exc:
            return None, f"{why}, and the published checkpoint cannot be used: {exc}"
        if checkpoint.epoch != wanted:
            return None, f"{why}, and the published checkpoint is of epoch {checkpoint.epoch}"
        return checkpoint, "the published checkpoint"

    def _take(self, checkpoint: Checkpoint, epoch: int, applied: int) -> None:
        """On the training thread: checkpoint N's tensors, at the new epoch, marked as rolled
        back."""
        self.state.restore(checkpoint)
        self.local.drop()
        self.state.epoch = epoch
        self.state.rollback = applied
        self.state.set_learning_rate()

    async def _done(self, order: RollbackOrder, source: str, previous: int) -> RolledBack:
        """Tell it, unless our state was no further than checkpoint N: a newcomer catching up
        with the rolled-back collaboration was not rolled back, and its owner hears nothing."""
        done = RolledBack(order, self.state.epoch, source)
        if previous <= order.to_epoch:
            log.info("caught up with the state of %s at epoch %d", order.describe(), done.epoch)
            return done
        self.applied.append(done)
        log.warning("%s", done.describe())
        if self.on_applied is not None:
            self.on_applied(done)
        return done
