"""Settings of an averager, with the reason for each default."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.averaging.robust.aggregation import AggregationConfig
from core.averaging.verification import VerificationConfig
from core.codecs import NONE, Codec
from core.util.errors import ConfigError


@dataclass(frozen=True)
class AveragerConfig:
    target_group_size: int | None = None
    """Members per group; None lets the leader wait its whole matchmaking time for as many as come."""
    min_group_size: int = 2
    min_matchmaking_time: float = 0.5
    max_matchmaking_time: float = 15.0
    """How long a leader waits for followers adapts between these two, from how long groups took."""
    codec: Codec = NONE
    chunk_bytes: int = 1 << 20
    """Raw bytes per chunk: reducing one chunk overlaps receiving the next."""
    sender_timeout: float = 5.0
    """A sender that delivers nothing for the current chunk this long is left out of the average
    (time during which this peer's event loop was held up does not count: ``round.reducer``)."""
    reducer_timeout: float = 10.0
    """A reducer that returns nothing this long is given up on (its part keeps local values)."""
    allreduce_timeout: float = 60.0
    """The whole all-reduce, once the group is formed."""
    request_timeout: float = 3.0
    """Joining a leader, and waiting for a group's round to start on this side."""
    compute: float = 0.0
    """Samples per second this peer processes (for the load-balancing program)."""
    upload: float = 0.0
    download: float = 0.0
    """Bytes per second; 0 for both leaves the program out (every able member reduces an equal share)."""
    client_mode: bool = False
    """No incoming connections: this peer sends and receives but reduces nothing and never leads."""
    auxiliary: bool = False
    """No data of its own (weight 0): it helps to reduce and takes no result."""
    aggregation: AggregationConfig = field(default_factory=AggregationConfig)
    """How this peer, as a reducer, screens and aggregates its part (the plain mean by default; a
    project's manifest chooses, see ``core.training.peer.recipe.averager_config``)."""
    verification: VerificationConfig = field(default_factory=VerificationConfig)
    """Whether and how much reducers are verified (``verification``; off by default)."""

    def __post_init__(self) -> None:
        if self.target_group_size is not None and self.target_group_size < self.min_group_size:
            raise ConfigError("target_group_size must be at least min_group_size")
        if self.min_group_size < 1:
            raise ConfigError("min_group_size must be at least 1")
        if not 0 < self.min_matchmaking_time <= self.max_matchmaking_time:
            raise ConfigError("0 < min_matchmaking_time <= max_matchmaking_time")
        if self.chunk_bytes < 4096:
            raise ConfigError("chunk_bytes must be at least 4 KiB")
        if self.client_mode and self.auxiliary:
            raise ConfigError("an auxiliary peer must accept connections (it reduces)")
        if self.reducer_timeout <= self.sender_timeout:
            raise ConfigError("reducer_timeout must exceed sender_timeout")
