"""PeerLinks: what a training peer uses to reach the collaboration, built once per peer; the round
and the leaving that trainers and the backbone do alike."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from core.averaging import Averager, AveragingResult, ColumnRequest, MatchmakingError
from core.averaging.sharing.state import StateSharing
from core.codecs import Codec
from core.training.progress import PeerProgress, ProgressBoard
from core.util.errors import BarnraiseError
from core.worker.bridge import TrainingBridge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PeerLinks:
    averager: Averager
    """Gradient and parameter rounds (and through it the Host and DHT node)."""
    sharing: StateSharing
    """Serving our state to peers that fell behind, and downloading theirs."""
    board: ProgressBoard
    """Everyone's progress records."""
    bridge: TrainingBridge
    """The training thread."""

    @classmethod
    def create(
        cls, averager: Averager, bridge: TrainingBridge, confirmers: Collection[str] = frozenset()
    ) -> PeerLinks:
        """Links under the averager's prefix (the project's name), on its Host and DHT node; in a
        moderated project (the Host has an access gate) progress records carry passes.
        ``confirmers``: the keys whose word confirms the collaboration's epoch and state
        (``AccessSection.confirmers``)."""
        prefix = averager.prefix
        return cls(
            averager,
            StateSharing(averager.host, averager.dht, prefix, refuse=averager.bans.__contains__),
            ProgressBoard(
                averager.dht,
                prefix,
                access=averager.host.access,
                ignored=averager.bans.names,
                confirmers=confirmers,
            ),
            bridge,
        )

    async def round(
        self,
        tensors: Sequence[Any],
        *,
        weight: float,
        round_key: str,
        timeout: float,
        expected: int,
        enough: float | None = None,
        codec: Codec | None = None,
        feedback: Sequence[Any] | None = None,
        columns: ColumnRequest | None = None,
        rank: int | None = None,
    ) -> AveragingResult | None:
        """Average ``tensors`` in place with whoever joins ``round_key``; None when no group formed
        (said at INFO: a round without a group is part of a small collaboration's life). With
        ``enough`` (a step's target batch), a group short of that weight waits for the
        ``expected`` members until ``timeout`` instead of closing at its patience. ``columns``:
        the round may form several groups, which then average across groups. ``rank``: our place
        in the group the caller planned (0: its leader)."""
        try:
            return await self.averager.average(
                tensors,
                weight=weight,
                round_key=round_key,
                timeout=timeout,
                target_size=expected,
                enough=enough,
                codec=codec,
                feedback=feedback,
                columns=columns,
                rank=rank,
            )
        except MatchmakingError as exc:
            log.info("%s: %s", round_key, exc)
            return None

    async def withdraw(self, last: PeerProgress) -> None:
        """Leave at once: our progress record and our state announcement withdrawn (best effort:
        both expire on their own anyway)."""
        try:
            await asyncio.gather(self.board.withdraw(last), self.sharing.withdraw())
        except BarnraiseError as exc:
            log.debug("withdrawing our records failed: %s", exc)
