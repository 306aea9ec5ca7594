"""Settings of an averager, with the reason for each default: the averager's own, and those of its
verified reducers (``VerificationConfig``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.averaging.robust.aggregation import AggregationConfig
from core.codecs import NONE, Codec
from core.util.errors import ConfigError


@dataclass(frozen=True)
class VerificationConfig:
    enabled: bool = False
    """Commit, seal and verify in every round. Off by default: it keeps a copy of what this peer sent
    for ``timeout`` seconds after the round (memory as large as the averaged tensors) and hashes
    every chunk twice (docs/benchmarks/robust.md has the figures). Every member of a group must agree."""
    parts: float = 1.0
    """How many parts the group checks per round, on average; n * (n - 1) or more (for n members):
    every member checks every part it received."""
    chunks: int = 1
    """How many chunks of a checked part are recomputed (0: all). A verifier downloads each sender's
    copy of those chunks, so checking a whole part costs it about as much as the round itself; one
    chunk catches a reducer that lies in every chunk, a lie in one chunk of c is caught 1/c of the
    time."""
    timeout: float = 10.0
    """How long a verifier waits for each member's inputs, and members keep theirs for verifiers
    after the round."""
    tolerance: float = 1e-5
    """Allowed difference from the recomputed aggregate, relative to the chunk's largest value (plus
    one step of a lossy codec): summation order and BLAS kernels differ between machines."""
    ban_seconds: float = 3600.0
    """How long this peer refuses to group with a member it caught lying."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.parts) and self.parts >= 0):
            raise ConfigError(f"verification parts must be 0 or more, got {self.parts}")
        if isinstance(self.chunks, bool) or self.chunks < 0:
            raise ConfigError(f"verification chunks must be 0 (all) or more, got {self.chunks}")
        if not (math.isfinite(self.timeout) and self.timeout > 0):
            raise ConfigError(f"verification timeout must be positive, got {self.timeout}")
        if not (math.isfinite(self.tolerance) and 0 <= self.tolerance < 1):
            raise ConfigError(f"verification tolerance must be in [0, 1), got {self.tolerance}")
        if not (math.isfinite(self.ban_seconds) and self.ban_seconds >= 0):
            raise ConfigError(f"ban_seconds must be 0 or more, got {self.ban_seconds}")


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
    reduce_only: bool = False
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
        if self.client_mode and self.reduce_only:
            raise ConfigError("a reduce-only member must accept connections (it reduces)")
        if self.reducer_timeout <= self.sender_timeout:
            raise ConfigError("reducer_timeout must exceed sender_timeout")
