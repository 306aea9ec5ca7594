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
    """Memory for the records we keep for others: keys are capped above, but values (up to
    ``max_value_bytes``, ``max_values_per_key`` a key) are not, so strangers could fill far more."""
    cache_bytes: int = 64 * MiB
    """The same for values cached along lookup paths."""
    max_values_per_key: int = 4096
    """Subkeys one key may hold (a plain value is one). The widest expert grid's prefix record has one
    subkey per index (``MAX_GRID_WIDTH``, 4096), and a progress key one per peer; without a bound one
    stranger could make a key's every find answer as large as the store. When a key is full, a new
    subkey pushes out a value of the network that holds the most of that key's values (refused if
    that is its own), so filling a key locks nobody else out of it."""
    peer_quota_bytes: int = 8 * MiB
    """Bytes one peer may make us keep (storage and cache each; a value counts with its key). A swarm
    peer writes a few KiB to a node: a progress record, declarations and state announcements of a few
    hundred bytes each, and an expert server hosting N experts about 2N entries of ~100 bytes, spread
    over the nodes nearest each key. This is 1,000 times that and 8 of the largest values, while one
    peer alone can hold no more than 1/32 of ``storage_bytes`` (beyond it, its soonest-expiring
    values make room for its new ones)."""
    peer_quota_values: int = 4096
    """Values one peer may make us keep: a server announcing an expert under every index of the widest
    grid writes 4,096 subkeys into one prefix record, far more than any swarm peer writes to one node.
    Tiny values cost ``ENTRY_OVERHEAD`` each, so this bounds them as the bytes bound large ones."""
    network_quota_bytes: int = 32 * MiB
    """Bytes the peers of one network (a /24, or a /48 for IPv6) may make us keep together. Identities
    are free and addresses are not: this is what bounds a flood of fresh PeerIDs. Four peers' quotas,
    so a home or an office with several volunteers behind one address never meets it, while eight
    networks at most could fill ``storage_bytes``, and then the one holding the most gives way."""
    network_quota_values: int = 16384
    """Values the peers of one network may make us keep together (four peers' worth, as above)."""
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
        # a value is charged with its key and subkey, a signature and some overhead
        largest_record = self.max_value_bytes + 2 * self.max_key_bytes + 4096
        if min(self.peer_quota_bytes, self.network_quota_bytes) < largest_record:
            raise ConfigError("each storage quota must hold at least one largest record")
        if self.peer_quota_bytes > self.network_quota_bytes:
            raise ConfigError("peer_quota_bytes cannot exceed network_quota_bytes")
        if self.peer_quota_values > self.network_quota_values:
            raise ConfigError("peer_quota_values cannot exceed network_quota_values")
        if min(self.max_values_per_key, self.peer_quota_values) < 1:
            raise ConfigError("max_values_per_key and peer_quota_values must be at least 1")
        for name in ("rpc_timeout", "lookup_timeout", "max_expiration_ahead", "refresh_interval"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")
