"""What a replica of the state needs to follow the moderators' rollback orders.

The order itself (``core.trust.rollback``) is signed by the project key; the coordinator serves the
latest, and each moderated peer's pass keeper leaves its text on the ``AccessGate``. This module
reads that text for a replica (``OrderReader``: verified against the manifest's project key, each
bad or stale text logged once, then ignored) and defines what every replica carries to apply each
order once: the sequence of the last order applied, kept in ``TrainingState.rollback`` and in the
metadata of state snapshots and checkpoints (``METADATA_KEY``), so that a peer that restarts, or
downloads an already rolled-back state, does not roll back again, and an old order served again
(replayed) is ignored. ``rollback_replica`` does the loading.

Peers on different sides of a rollback must never average together (a straggler that has not yet
heard of it would mix the bad state back in): ``round_key`` puts the rollback count into the names
of averaging rounds.

This module does not import torch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from core.trust.peer_id import PeerID
from core.trust.rollback import RollbackOrder, RollbackRefused, order_from_text
from core.util.errors import WireFormatError

log = logging.getLogger(__name__)

METADATA_KEY = "rollback"
"""Where state snapshots and checkpoints keep the sequence of the last order applied to them."""


def applied_of(metadata: object) -> int:
    """The last order applied to a state, from its snapshot's or checkpoint's metadata (0: none,
    also for metadata from before rollbacks existed or that says something odd)."""
    value = metadata.get(METADATA_KEY, 0) if isinstance(metadata, dict) else 0
    whole = isinstance(value, int) and not isinstance(value, bool)
    return value if whole and value >= 0 else 0


def round_key(kind: str, epoch: int, applied: int) -> str:
    """The name of an averaging round: peers that applied different rollbacks never meet.

    Without any rollback the names are those of peers that predate rollbacks (``grads.12``);
    after rollback 2, ``grads.r2.12`` (the epoch stays last, where evidence reads it)."""
    return f"{kind}.{epoch}" if applied == 0 else f"{kind}.r{applied}.{epoch}"


class OrderReader:
    """Which order, if any, a replica still has to apply: the latest text its source holds,
    checked against the project key; each bad or stale text is logged once, then ignored."""

    def __init__(self, source: Callable[[], str | None], project: str, project_key: PeerID) -> None:
        self._source = source
        self.project = project
        self.project_key = project_key
        self._text: str | None = None
        self._order: RollbackOrder | None = None
        """The verified order in ``_text`` (None: there is none, or it was refused)."""
        self._stale_logged = 0

    def pending(self, applied: int) -> RollbackOrder | None:
        """The verified order newer than ``applied`` (the replica's last), or None. Cheap: the
        text is parsed and checked only when it changes."""
        text = self._source()
        if text != self._text:
            self._text = text
            self._order = self._read(text)
        order = self._order
        if order is None:
            return None
        if order.sequence <= applied:
            if order.sequence < applied and self._stale_logged != order.sequence:
                self._stale_logged = order.sequence
                log.warning(
                    "ignored %s: this replica already applied rollback #%d (an old order replayed)",
                    order.describe(),
                    applied,
                )
            return None
        return order

    def _read(self, text: str | None) -> RollbackOrder | None:
        if text is None:
            return None
        try:
            order = order_from_text(text)
            order.check(self.project, self.project_key)
        except (WireFormatError, RollbackRefused) as exc:
            log.warning("ignored a rollback order: %s", exc)
            return None
        return order
