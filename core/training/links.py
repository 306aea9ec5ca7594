"""PeerLinks: what a training peer uses to reach the collaboration, built once per peer."""

from __future__ import annotations

from dataclasses import dataclass

from core.averaging import Averager
from core.averaging.state import StateSharing
from core.training.bridge import TrainingBridge
from core.training.progress import ProgressBoard


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
    def create(cls, averager: Averager, bridge: TrainingBridge) -> PeerLinks:
        """Links under the averager's prefix (the project's name), on its Host and DHT node; in a
        moderated project (the Host has an access gate) progress records carry passes."""
        prefix = averager.prefix
        return cls(
            averager,
            StateSharing(averager.host, averager.dht, prefix),
            ProgressBoard(averager.dht, prefix, access=averager.host.access),
            bridge,
        )
