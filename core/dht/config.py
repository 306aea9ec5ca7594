"""Settings of a DHT node, with the reason for each default."""

from __future__ import annotations

from dataclasses import dataclass

from core.util.errors import ConfigError

MiB = 1024 * 1024


@dataclass(frozen=True)
class DHTConfig:
    k: int = 20
    """Bucket size, and how many nearest nodes a lookup must have heard from before it stops."""
    alpha: int = 3
    """Requests a lookup keeps in flight per key."""
    replicas: int = 20
    """Nodes that keep a copy of each record (the k nearest), so losing many nodes loses no record."""
    store_quorum: int = 3
    """``store`` returns once this many nodes (at most ``replicas``) hold the record; the other copies
    are placed in the background (so the caller does not wait for the slowest of twenty connections)."""
    depth_modulo: int = 5
    """Buckets far from us may split at depths that are not multiples of this (shorter lookups)."""
    rpc_timeout: float = 3.0
    lookup_timeout: float = 20.0
    max_key_bytes: int = 4096
    max_value_bytes: int = 1 * MiB
    max_expiration_ahead: float = 24 * 3600.0
    """Records may live at most this long without being republished (limits squatting)."""
    storage_capacity: int = 100_000
    cache_capacity: int = 10_000
    storage_bytes: int = 256 * MiB
    """Memory for the records we keep for others: keys are capped above, but subkeys (10 000 a key)
    and values (up to ``max_value_bytes``) are not, so a stranger could fill far more without it."""
    cache_bytes: int = 64 * MiB
    """The same for values cached along lookup paths."""
    refresh_interval: float = 600.0
    """Buckets no lookup went through for this long get a lookup of a random id in their range."""
    republish_interval: float = 300.0
    """How often a node stores its own records again, so they survive the nodes that held them."""
    max_failures: int = 2
    """Consecutive unanswered requests after which a contact leaves the routing table."""
    ban_seconds: float = 60.0
    """How long a node that answered garbage is ignored (doubling for repeat offences, up to an hour)."""
    client_mode: bool = False
    """Query and store, but serve nothing and never enter anyone's routing table (peers behind NAT)."""

    def __post_init__(self) -> None:
        if self.k < 1 or self.alpha < 1 or self.replicas < 1:
            raise ConfigError("k, alpha and replicas must be at least 1")
        if self.store_quorum < 1:
            raise ConfigError("store_quorum must be at least 1")
        if self.depth_modulo < 1:
            raise ConfigError("depth_modulo must be at least 1")
        if self.storage_bytes < self.max_value_bytes or self.cache_bytes < self.max_value_bytes:
            raise ConfigError("storage_bytes and cache_bytes must hold at least one largest value")
        for name in ("rpc_timeout", "lookup_timeout", "max_expiration_ahead", "refresh_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
