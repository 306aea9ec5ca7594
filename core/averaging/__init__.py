"""Decentralized averaging (DeDLOC's communication layer); chunks travel encoded by ``core.codecs``.

A round is planned, carried out, and wrapped: ``round/`` plans and moves it, ``robust/`` is how a
reducer combines what it receives, ``verified/`` checks the reducers around the transfer.

- ``averager``        Averager and PendingRound: the API (average, or prepare then run).
- ``matchmaking``     forming groups through the DHT (leaders, followers, redirects, adaptive waiting).
- ``allreduce``       AllReduce: one member's round, composed from its plan, transfer and wrappers.
- ``round/``          the round's plan, the transfer that carries it out, reducers, tensors, load balancing.
- ``robust/``         screening and robust aggregation of one chunk (mean, CenteredClip).
- ``verified/``       verified reducers: commitments, seals, the verifier, rounds kept for verifiers
  (their settings and which parts a member checks: ``round/checks``).
- ``bans``            members this peer caught lying and does not group with, for a while.
- ``moshpit``         group rounds over a grid of keys, and choosing the group size.
- ``sharing/``        the full state for peers that catch up: donors, digests, who vouches for a state.
- ``registry``        rounds in progress by group id (those nobody starts are forgotten).
- ``result``          AveragingResult: what a round really averaged.
- ``messages``        wire messages; ``config``: AveragerConfig.
"""

from core.averaging.averager import Averager, PendingRound
from core.averaging.config import AveragerConfig
from core.averaging.matchmaking import MatchmakingError
from core.averaging.result import AveragingResult, Finding
from core.averaging.robust.alignment import Alignment
from core.averaging.round.columns import ColumnRequest

__all__ = [
    "Alignment",
    "Averager",
    "AveragerConfig",
    "AveragingResult",
    "ColumnRequest",
    "Finding",
    "MatchmakingError",
    "PendingRound",
]
