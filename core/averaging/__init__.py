"""Decentralized averaging (DeDLOC's communication layer); chunks travel encoded by ``core.codecs``.

- ``averager``        Averager and PendingRound: the API (average, or prepare then run).
- ``matchmaking``     forming groups through the DHT (leaders, followers, redirects, adaptive waiting).
- ``allreduce``       one member's side of a load-balanced butterfly all-reduce.
- ``reducer``         PartReducer: aggregating one part chunk by chunk, excluding senders that fail
                      or that the checks screen out, and recording findings.
- ``aggregation``     one chunk from its senders' chunks: screening, then the mean or CenteredClip.
- ``screening``       the cheap checks before aggregating: NaN/infinity, norm far above the group's.
- ``centered_clip``   CenteredClip from the medoid, iterated on the offsets' Gram matrix.
- ``verification``    verified reducers: VerificationConfig, and which parts a member checks.
- ``commitments``     senders' signed chunk hashes, reducers' signed seals of their parts (and their shape).
- ``verifier``        checking one reducer's part: fetch committed inputs, recompute, compare.
- ``verified_round``  one member's side of a verified round (commit, seal, check, serve).
- ``retained``        rounds whose inputs verifiers may still fetch, for a while after they end.
- ``bans``            members this peer caught lying and does not group with, for a while.
- ``load_balancing``  the DeDLOC linear program and whole-element part sizes.
- ``tensors``         TensorSet (in-place float32 views) and the chunk layout.
- ``moshpit``         group rounds over a grid of keys, and choosing the group size.
- ``state``           sharing and downloading the full state from several donors.
- ``registry``        rounds in progress by group id (those nobody starts are forgotten).
- ``result``          AveragingResult: what a round really averaged.
- ``messages``        wire messages; ``config``: AveragerConfig.
"""

from core.averaging.averager import Averager, PendingRound
from core.averaging.config import AveragerConfig
from core.averaging.matchmaking import MatchmakingError
from core.averaging.result import AveragingResult, Finding

__all__ = [
    "Averager",
    "AveragerConfig",
    "AveragingResult",
    "Finding",
    "MatchmakingError",
    "PendingRound",
]
